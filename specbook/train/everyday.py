"""Everyday prompts for the heads: advice questions, word problems and news reports with quotes.

The benchmark's chat, math and summary prompts are answered by the target in its own free
style, and the training mix held only a few hundred of each.  This module writes as many as
asked, offline and seeded, from tables of our own wording: questions a person asks a chat
assistant, arithmetic stories about invented people, and short reports about invented towns in
which someone is quoted (the summary prompts ask for that quote back).

Like :mod:`specbook.train.notices`, no prompt shares a 60-character stretch with either benchmark
prompt file (``tests/train/test_everyday.py``) and every id is split by the usual hash.

    python -m specbook.train.everyday --base specbook/data/eagle_prompts_notices.jsonl --count 1200 \\
        --out specbook/data/eagle_prompts_everyday.jsonl   # the notices set plus 1200 everyday prompts
"""
from __future__ import annotations

import random

from .notices import FIRST, HEAD, LAST, MONTHS, SUMMARY_TEMPLATES, TAIL, _notice
from .prompts import Prompt

OUTINGS = ["a day at the seaside", "a camping trip beside a lake", "a long train journey", "a picnic in the park",
           "my first day at a new job", "a winter walk in the forest", "a week at a music festival",
           "a cycling tour along a river", "a visit to my grandparents' farm", "a school trip to a museum",
           "a night of stargazing", "a ski weekend", "a boat trip to an island", "a city break in the rain"]
TASKS = ["keeping houseplants alive", "learning to play the guitar", "cooking rice that is not sticky",
         "saving money on groceries", "falling asleep faster", "running my first five kilometre race",
         "writing a thank-you card to a teacher", "staying focused while studying at home",
         "making new friends after moving to a new city", "teaching a puppy to sit", "packing a small suitcase",
         "keeping a kitchen tidy", "preparing for a job interview", "growing tomatoes on a balcony",
         "speaking in front of a class", "planning a birthday party for a six-year-old",
         "drinking more water during the day", "remembering new words in a foreign language",
         "fixing a flat bicycle tyre", "choosing a second-hand laptop"]
WHYS = ["do dogs wag their tails", "do birds sing early in the morning", "do leaves change colour in autumn",
        "do onions make people cry when they are cut", "does bread go stale", "do people yawn", "do owls hunt at night",
        "do ice cubes float in a glass of water", "do bees dance", "do stars twinkle",
        "do apples turn brown after they are cut", "do cats sleep so much", "do fish swim in schools",
        "do our ears pop on an aeroplane", "do metal spoons feel colder than wooden ones", "does the sea taste salty",
        "do plants grow towards a window", "does thunder come after lightning"]
CONCEPTS = ["how a rainbow forms", "what a household budget is", "how vaccines train the body", "what compound "
            "interest means", "how a bicycle gear works", "why the moon has phases", "what a recipe's 'fold "
            "in' means", "how bread dough rises", "what a web browser does", "how a fridge keeps food cold",
            "what photosynthesis is", "how tides work", "what an election manifesto is", "how a compass works"]
SUGGESTIONS = [("names", "a small bakery by the sea"), ("games", "a child's birthday party"),
               ("easy dinners", "a busy week"), ("books", "a ten-year-old who likes animals"),
               ("hobbies", "someone who works at a desk all day"), ("questions", "a first meeting with a new "
               "team"), ("gifts", "a friend who loves gardening"), ("day trips", "a family without a car"),
               ("songs", "a long car journey"), ("snacks", "a walk in the hills"), ("ways to relax", "a "
               "stressful exam week"), ("indoor activities", "a rainy afternoon with two children")]
PAIRS = [("weather", "climate"), ("a virus", "bacteria"), ("baking soda", "baking powder"), ("a lake", "a pond"),
         ("speed", "velocity"), ("a crocodile", "an alligator"), ("a loan", "a grant"), ("jam", "jelly"),
         ("a comet", "an asteroid"), ("a hill", "a mountain"), ("frost", "dew"), ("a novel", "a short story")]
ABOUT = ["", "", "", "I am a beginner. ", "Please keep it short. ", "I have never done this before. ",
         "Explain it as if I were twelve. ", "A friend asked me and I did not know. "]

ITEMS = ["apples", "pencils", "stickers", "marbles", "cupcakes", "stamps", "shells", "eggs", "books", "seeds"]
STEPS = ["Solve this step by step and give the final answer on its own line.",
         "Show your working one step at a time, then state the answer.",
         "Work through the problem carefully. End with 'Answer:' and the number.",
         "Explain each step of the calculation and finish with the result.",
         "Think it through step by step."]
ROLES = ["the mayor", "a local teacher", "the head of the council", "a volunteer", "the organiser",
         "a shop owner", "the project leader", "a spokesperson for the town"]
QUOTES = ["We did not expect so many people to care about it", "This is the best news the town has had in years",
          "It took longer than planned, but it was worth every hour", "Everyone who helped should be proud",
          "We hope that next year will be even better", "Nobody here remembers anything like it",
          "The money will be spent where it is needed most", "It shows what a small place can do"]


def _chat(rng: random.Random) -> str:
    kind = rng.randrange(7)
    if kind == 0:
        q = f"What should I take with me on {rng.choice(OUTINGS)}?"
    elif kind == 1:
        q = f"Can you give me {rng.choice(['some', 'three', 'five', 'a few'])} tips for {rng.choice(TASKS)}?"
    elif kind == 2:
        q = f"Why {rng.choice(WHYS)}?"
    elif kind == 3:
        q = f"Could you explain {rng.choice(CONCEPTS)} in simple words?"
    elif kind == 4:
        what, occasion = rng.choice(SUGGESTIONS)
        q = f"Please suggest {rng.choice(['some', 'four', 'six', 'a handful of'])} {what} for {occasion}."
    elif kind == 5:
        a, b = rng.sample(rng.choice(PAIRS), 2)
        q = f"What is the difference between {a} and {b}?"
    else:
        name, town = rng.choice(FIRST), rng.choice(HEAD) + rng.choice(TAIL)
        ask = rng.choice(["What could I give as a farewell present?", "How can we stay in touch?",
                          "What should I write in a goodbye card?"])
        q = f"My friend {name} is moving to {town} next {rng.choice(MONTHS)}. {ask}"
    return rng.choice(ABOUT) + q


def _word_problem(rng: random.Random) -> str:
    name, other = rng.sample(FIRST, 2)
    item = rng.choice(ITEMS)
    kind = rng.randrange(5)
    if kind == 0:
        a, b, c = rng.randint(3, 12), rng.randint(4, 24), rng.randint(2, 30)
        q = f"{name} buys {a} boxes of {item} with {b} in each box and gives {c} to {other}. How many are left?"
    elif kind == 1:
        d, h, h2 = rng.randint(2, 9) * 30, rng.randint(2, 6), rng.randint(2, 9)
        q = f"A cyclist rides {d} kilometres in {h} hours. At the same pace, how far does she ride in {h2} hours?"
    elif kind == 2:
        p, k, m = rng.randint(2, 15), rng.randint(2, 9), rng.choice([50, 100, 150, 200])
        q = f"One notebook costs {p} euros. {name} buys {k} notebooks and pays {m} euros. How much change is given?"
    elif kind == 3:
        n, parts = rng.randint(2, 9), rng.choice([3, 4, 5, 6])
        q = f"{name} shares {n * parts} {item} equally among {parts} friends. How many does each friend get?"
    else:
        w, l = rng.randint(3, 20), rng.randint(3, 20)
        q = f"A rectangular garden is {w} metres wide and {l} metres long. What is its area, and its perimeter?"
    return f"{rng.choice(STEPS)}\n\n{q}"


def _report(rng: random.Random) -> str:
    doc, _ = _notice(rng)
    person = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
    return f"{doc} \"{rng.choice(QUOTES)},\" said {person}, {rng.choice(ROLES)}."


def everyday_prompts(count: int, seed: int = 0) -> list[Prompt]:
    """``count`` prompts cycling chat, math and summary kinds (ids ``everyday/<kind>/<i>``, seeded,
    no two texts alike)."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    rng = random.Random(seed)
    out, seen = [], set()
    makers = {"chat": _chat, "math": _word_problem,
              "summarize_quote": lambda r: r.choice(SUMMARY_TEMPLATES).format(d=_report(r))}
    cycle = ("chat", "math", "chat", "summarize_quote", "chat")
    while len(out) < count:
        kind = cycle[len(out) % len(cycle)]
        text = makers[kind](rng)
        if text not in seen:
            seen.add(text)
            out.append(Prompt(f"everyday/{kind}/{len(out)}", kind, text))
    return out


def main(argv: list[str] | None = None) -> None:
    from .features import extend_prompt_set

    extend_prompt_set("specbook train everyday", __doc__, everyday_prompts, "everyday", argv)


if __name__ == "__main__":
    main()
