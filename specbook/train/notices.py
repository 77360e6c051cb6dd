"""Prompts that make the target quote its prompt: invented notices to summarise, query or turn into JSON.

The benchmark's summaries, retrieval answers and JSON extractions copy long stretches of their
prompts, and the head trained on ``heads_data`` saw only twelve passages of that kind.  This
module writes as many as asked, offline and seeded: short notices about invented places
(opening hours, fares, counts, events, product listings) built from facts that each carry the
question they answer, so a retrieval prompt asks something its context really says.

Every notice is new text from these tables (no benchmark prompt shares a 60-character stretch
with them: ``tests/train/test_notices.py``), and every prompt id is split by the same hash as
the other training prompts, so about 10 % are held out.

    python -m specbook.train.notices --base specbook/data/eagle_prompts.jsonl --count 1600 \\
        --out specbook/data/eagle_prompts_notices.jsonl     # the base set plus 1600 notice prompts
"""
from __future__ import annotations

import random

from .prompts import Prompt

FIRST = ["Ada", "Bram", "Celia", "Dev", "Edda", "Farid", "Greta", "Hugo", "Ines", "Joss", "Kofi", "Lena", "Milo",
         "Nadia", "Otto", "Priya", "Quinn", "Rosa", "Sami", "Tove", "Umar", "Vera", "Wim", "Yara", "Zeno"]
LAST = ["Abbott", "Brandt", "Carver", "Dimitrov", "Ekland", "Fisk", "Gallo", "Hale", "Ivers", "Jansen", "Kemp",
        "Lindqvist", "Moreau", "Nakamura", "Okafor", "Pryce", "Rahman", "Sorensen", "Thorne", "Varga"]
HEAD = ["Alder", "Bex", "Cobb", "Dray", "Elder", "Foss", "Gorse", "Holm", "Ivy", "Jarrow", "Kell", "Linden",
        "Moss", "Nettle", "Osier", "Pike", "Quill", "Rook", "Sedge", "Tarn", "Umber", "Vale", "Wren", "Yarrow"]
TAIL = ["ford", "bury", "wick", "field", "mere", "ton", "hollow", "dale", "haven", "brook", "gate", "moor", "stead"]
PLACES = ["swimming pool", "town museum", "night market", "community garden", "climbing centre", "sports hall",
          "observatory", "farm shop", "repair cafe", "bicycle workshop", "art gallery", "puppet theatre",
          "ice rink", "botanical garden", "record library", "youth club", "pottery studio", "city archive"]
DAYS = ["Mondays", "Tuesdays", "Wednesdays", "Thursdays", "Fridays", "Saturdays", "Sundays"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
CREATURES = ["swallows", "hedgehogs", "otters", "bats", "barn owls", "frogs", "red squirrels", "dragonflies",
             "seals", "badgers", "kingfishers", "butterflies"]
SPOTS = ["old quarry", "river bank", "church", "school", "allotments"]
VEHICLES = ["ferry", "night bus", "tram", "river boat", "mountain railway", "shuttle bus"]
EVENTS = ["book fair", "cheese festival", "kite day", "jazz weekend", "craft market", "open-air cinema",
          "lantern parade", "chess tournament", "seed swap", "choir concert"]
GOODS = {  # category: (kinds of item, tags)
    "kitchen": (["teapot", "bread knife", "salad bowl", "coffee grinder", "baking tray"],
                ["ceramic", "steel", "dishwasher-safe", "handmade", "gift"]),
    "outdoor": (["tent", "rain jacket", "walking pole", "sleeping bag", "head torch"],
                ["waterproof", "lightweight", "camping", "hiking", "recycled"]),
    "office": (["desk lamp", "notebook", "stapler", "monitor stand", "pen set"],
               ["LED", "paper", "adjustable", "wooden", "refillable"]),
    "garden": (["watering can", "seed tray", "pruning shears", "bird feeder", "hose reel"],
               ["metal", "plastic-free", "compact", "wildlife", "frost-proof"]),
}

SUMMARY_TEMPLATES = [
    "Give a two-sentence summary of this notice, and copy its key sentence exactly inside quotation marks.\n\n{d}",
    "Summarise the text below in a few sentences. Include one sentence from it quoted word for word.\n\n{d}",
    "Read this announcement and sum it up briefly. Then quote the sentence that matters most, unchanged.\n\n{d}",
    "In two or three sentences, what does this report say? Quote one of its sentences verbatim.\n\n{d}",
    "Briefly summarise the following, quoting its most important line exactly as written.\n\n{d}",
]
QA_TEMPLATES = [
    "Using nothing but the context, answer the question. Reuse the context's wording.\n\nContext:\n{d}\n\n"
    "Question: {q}",
    "Context:\n{d}\n\nAnswer this from the context above, quoting it where you can: {q}",
    "Here is some information.\n\n{d}\n\nBased only on that information, {q_lower}",
    "Read the context and answer the question with words taken from it.\n\nContext:\n{d}\n\nQuestion: {q}",
]
JSON_TEMPLATES = [
    "Convert this product description to JSON: name and category as strings, price as a number, in_stock as "
    "true or false, tags as a list of strings. Output the JSON only.\n\n{d}",
    "Return a JSON object for the item described below, with keys \"name\", \"category\", \"price\", "
    "\"in_stock\", \"tags\". No other text.\n\n{d}",
    "Read the listing and write it as JSON: {{\"name\": ..., \"category\": ..., \"price\": ..., "
    "\"in_stock\": ..., \"tags\": [...]}}.\n\nListing:\n{d}",
]


def _time(rng: random.Random, lo: int, hi: int) -> str:
    return f"{rng.randint(lo, hi)}:{rng.choice(['00', '15', '30', '45'])}"


def _notice(rng: random.Random) -> tuple[str, list[tuple[str, str]]]:
    """(text, [(sentence, question it answers)]) of one invented notice, report or timetable."""
    town = rng.choice(HEAD) + rng.choice(TAIL)
    person = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
    kind = rng.randrange(4)
    if kind == 0:
        place = rng.choice(PLACES)
        d1, d2 = rng.sample(DAYS, 2)
        facts = [(f"The {town} {place} opens at {_time(rng, 6, 10)} and closes at {_time(rng, 16, 22)} from "
                  f"{d1} to {d2}.", f"When is the {place} open?"),
                 (f"Entry costs {rng.randint(3, 15)} euros for adults and {rng.randint(0, 6)} euros for children "
                  f"under {rng.randint(10, 16)}.", "How much does entry cost?"),
                 (f"From {rng.randint(1, 28)} {rng.choice(MONTHS)}, the {place} will be run by {person}, who "
                  f"takes over from the founder after {rng.randint(3, 30)} years.", "Who will run it, and from when?"),
                 (f"Groups of more than {rng.randint(6, 20)} people should book at least {rng.randint(2, 14)} days "
                  "ahead.", "What must large groups do?"),
                 (f"The {place} is closed on public holidays and during the last week of {rng.choice(MONTHS)}.",
                  "When is it closed?")]
    elif kind == 1:
        creature, n, m = rng.choice(CREATURES), rng.randint(40, 2400), rng.randint(30, 2400)
        facts = [(f"Volunteers in {town} counted {n} {creature} this year, against {m} the year before.",
                  f"How many {creature} were counted?"),
                 (f"The count ran from {rng.choice(MONTHS)} to {rng.choice(MONTHS)} and was led by {person}.",
                  "Who led the count, and when did it run?"),
                 (f"Most of the {creature} were found near the {rng.choice(SPOTS)}, where {rng.randint(2, 9)} new "
                  "shelters were built last spring.",
                  f"Where were most {creature} found?"),
                 (f"The group meets on {rng.choice(DAYS)} at {_time(rng, 7, 19)} and welcomes new helpers.",
                  "When does the group meet?")]
    elif kind == 2:
        v, every = rng.choice(VEHICLES), rng.choice([10, 15, 20, 30, 40, 60])
        other = rng.choice([h for h in HEAD if not town.startswith(h)]) + rng.choice(TAIL)
        facts = [(f"From {rng.randint(1, 28)} {rng.choice(MONTHS)}, the {v} between {town} and {other} will run "
                  f"every {every} minutes instead of every {every + rng.choice([5, 10, 20])}.",
                  f"How often will the {v} run?"),
                 (f"The first {v} leaves {town} at {_time(rng, 5, 8)} and the last one at {_time(rng, 20, 23)}.",
                  f"When do the first and last {v} leave?"),
                 (f"A single ticket costs {rng.randint(2, 9)}.{rng.choice(['00', '20', '50', '80'])} euros, and "
                  f"a weekly pass costs {rng.randint(12, 40)} euros.", "What do tickets cost?"),
                 (f"Dogs and bicycles travel free outside the rush hours, said {person} of the transport office.",
                  "Who can travel free, and when?")]
    else:
        event = rng.choice(EVENTS)
        facts = [(f"The {town} {event} takes place on {rng.randint(1, 28)} {rng.choice(MONTHS)} in the "
                  f"{rng.choice(['market square', 'town park', 'old harbour', 'school hall', 'castle yard'])}.",
                  f"When and where is the {event}?"),
                 (f"About {rng.randint(20, 300)} stalls are expected, and entry is "
                  f"{rng.choice(['free', 'two euros', 'five euros for adults and free for children'])}.",
                  "How much is entry?"),
                 (f"The organiser, {person}, asks visitors to come by bus because only {rng.randint(20, 150)} parking "
                  "spaces are available.", "Why should visitors come by bus?"),
                 (f"If it rains, the {event} moves indoors to the {rng.choice(PLACES)}.", "What happens if it rains?")]
    chosen = [facts[i] for i in sorted(rng.sample(range(len(facts)), rng.randint(3, len(facts))))]
    return " ".join(s for s, _ in chosen), chosen


def _listing(rng: random.Random) -> str:
    category = rng.choice(sorted(GOODS))
    kinds, tags = GOODS[category]
    brand = rng.choice(HEAD) + rng.choice(["ware", "craft", "works", "line", "co"])
    name = f"{brand} {rng.choice(kinds)} {rng.choice(['Mini', 'Pro', 'Classic', 'Lite', str(rng.randint(2, 9))])}"
    price = f"{rng.randint(3, 180)}.{rng.choice(['00', '49', '95', '99'])}"
    stock = rng.choice(["It is in stock and ships within two days.", "It is sold out until next month.",
                        "Only a few are left in the warehouse.", "It is currently not available."])
    picked = rng.sample(tags, rng.randint(2, 3))
    return (f"The {name} is a {picked[0]} {category} product made by {brand}. It costs {price} euros. {stock} "
            f"Customers describe it as {' and '.join(picked[1:])}.")


def notice_prompts(count: int, seed: int = 0) -> list[Prompt]:
    """``count`` prompts, cycling summary, question and JSON kinds (ids ``notice/<kind>/<i>``, seeded)."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    rng = random.Random(seed)
    out = []
    for i in range(count):
        kind = ("summarize_quote", "rag_qa", "rag_qa", "summarize_quote", "json_extract")[i % 5]
        if kind == "json_extract":
            text = rng.choice(JSON_TEMPLATES).format(d=_listing(rng))
        else:
            doc, facts = _notice(rng)
            if kind == "summarize_quote":
                text = rng.choice(SUMMARY_TEMPLATES).format(d=doc)
            else:
                q = rng.choice(facts)[1]
                text = rng.choice(QA_TEMPLATES).format(d=doc, q=q, q_lower=q[0].lower() + q[1:])
        out.append(Prompt(f"notice/{kind}/{i}", kind, text))
    return out


def main(argv: list[str] | None = None) -> None:
    from .features import extend_prompt_set

    extend_prompt_set("specbook train notices", __doc__, notice_prompts, "notices", argv)


if __name__ == "__main__":
    main()
