"""Offline training prompts for the Medusa and EAGLE heads, with a held-out split.

Self-distillation (Cai et al., Medusa, 2024, sec. 2.3.2; Li et al., EAGLE, 2024, sec. 4.3):
heads learn to predict *the target's own* continuations, so the training text is the
target's greedy replies to a set of prompts, not human text.  This module writes those
prompts, deterministically and without any download: templates crossed with hand-picked
subjects, arithmetic word problems with seeded numbers, and short passages to summarise or
rewrite, written out here in full.

Every prompt carries a stable id; the split is a hash of the id (about 10 % held out), so
adding prompts never moves an old one between splits.  Held-out prompts are used only to
report acceptance after training, never for a gradient step or for choosing a tree.

    python -m specbook.train.heads_data            # counts per category and split, three samples
"""
from __future__ import annotations

import functools
import random

from .prompts import Prompt, is_heldout, split

SUBJECTS = [
    "photosynthesis", "black holes", "the water cycle", "volcanoes", "the human heart", "vaccines",
    "plate tectonics", "the Roman Empire", "the printing press", "the Industrial Revolution",
    "electric cars", "solar panels", "wind turbines", "the internet", "compilers", "databases",
    "hash tables", "binary search", "recursion", "public-key cryptography", "neural networks",
    "the stock market", "inflation", "supply and demand", "honeybees", "coral reefs", "rainforests",
    "deserts", "the Moon", "Mars", "comets", "rainbows", "thunderstorms", "earthquakes", "glaciers",
    "the immune system", "sleep", "coffee", "tea", "bread baking", "chess", "football", "jazz",
    "the violin", "origami", "gardening", "recycling", "bicycles", "trains", "airplanes",
    "submarines", "lighthouses", "castles", "the pyramids of Egypt", "the Great Wall of China",
    "libraries", "museums", "maps", "clocks", "batteries", "magnets", "sound waves", "gravity",
    "friction", "the periodic table", "DNA", "evolution", "dinosaurs", "whales", "octopuses",
    "penguins", "wolves", "owls", "mushrooms", "cacti", "time management", "public speaking",
    "learning a new language", "saving money", "healthy breakfasts", "running a marathon",
    "version control", "unit testing", "spreadsheets", "email etiquette", "remote work",
]

TEMPLATES = {
    "explain": [
        "Explain {s} to a ten-year-old.",
        "How does {s} work? Give a clear explanation.",
        "What are the most important things to know about {s}?",
        "Describe the history of {s} in a few paragraphs.",
    ],
    "write": [
        "Write a short poem about {s}.",
        "Write a short story in which {s} plays an important role.",
        "Write a friendly blog post introduction about {s}.",
        "Write a persuasive paragraph about why people should care about {s}.",
    ],
    "list": [
        "List five interesting facts about {s}.",
        "Give me three tips related to {s}, with a sentence of explanation each.",
        "What are the advantages and disadvantages of {s}?",
        "Write a step-by-step guide for a beginner who wants to learn about {s}.",
    ],
    "qa": [
        "Why is {s} important?",
        "What is a common misconception about {s}?",
        "Compare {s} with something similar and explain the differences.",
        "Write three quiz questions about {s} and give the answers.",
    ],
}

CODE_TASKS = [
    "reverses a string", "checks whether a number is prime", "computes the factorial of n",
    "returns the n-th Fibonacci number", "counts the vowels in a string", "merges two sorted lists",
    "finds the largest element of a list", "removes duplicates from a list while keeping order",
    "checks whether a string is a palindrome", "converts Celsius to Fahrenheit",
    "computes the average of a list of numbers", "sorts a list of dictionaries by a key",
    "counts how often each word appears in a text", "flattens a nested list",
    "returns the greatest common divisor of two integers", "checks whether two strings are anagrams",
    "reads a text file and returns its number of lines", "transposes a matrix given as a list of lists",
    "implements binary search on a sorted list", "validates a simple email address",
    "computes the sum of the digits of an integer", "generates all subsets of a list",
    "implements a stack class with push and pop", "implements a queue using two stacks",
    "rotates a list by k positions", "capitalizes the first letter of every word",
    "computes the dot product of two vectors", "returns the second largest number in a list",
    "checks whether a year is a leap year", "converts a Roman numeral to an integer",
]
CODE_TEMPLATES = [
    "Write a Python function that {t}.",
    "Write a Python function that {t}, and explain how it works.",
    "Write a JavaScript function that {t}.",
    "Show how to write a function that {t} in Python, with a short docstring and an example.",
]

PASSAGES = [
    "The city council met on Tuesday to discuss the new bicycle lanes planned for the downtown area. "
    "Supporters argued that the lanes would reduce traffic and pollution, while some shop owners worried "
    "that losing parking spaces would hurt their business. The council decided to run a six-month trial "
    "on two streets before making a final decision.",
    "Honeybees communicate the location of food through a movement known as the waggle dance. A forager "
    "that has found flowers returns to the hive and walks in a figure-eight pattern. The angle of the "
    "straight part of the dance tells other bees the direction of the food relative to the sun, and the "
    "length of the waggle tells them how far away it is.",
    "A budget is a plan for how you will spend your money. To make one, first write down your monthly "
    "income. Then list your fixed costs, such as rent and bills, and your variable costs, such as food "
    "and entertainment. Subtract your costs from your income; if the result is negative, look for "
    "expenses you can reduce.",
    "The library will be closed for renovation from the first of June until the end of August. During "
    "this time, books can be returned at the community centre, and a small selection of popular titles "
    "will be available to borrow there. Online services, including e-books and audiobooks, will remain "
    "available as usual.",
    "Glaciers form where more snow falls in winter than melts in summer. Over many years the snow is "
    "compressed into dense ice, which slowly flows downhill under its own weight. As glaciers move, they "
    "carve valleys, carry rocks over long distances and leave behind ridges of debris called moraines.",
    "Our team has finished the first version of the mobile app. Users can now create an account, browse "
    "the catalogue and save items to a wish list. Payments are not supported yet; we plan to add them in "
    "the next release, together with push notifications and a dark mode.",
    "Regular physical activity has many benefits. It strengthens the heart and lungs, helps control "
    "body weight and improves sleep. Studies also show that exercise can reduce stress and improve mood. "
    "Experts recommend at least 150 minutes of moderate activity each week for adults.",
    "The train from the capital to the coast now takes two hours instead of three, thanks to a new "
    "tunnel that opened this spring. The railway company expects passenger numbers to grow by a quarter "
    "over the next year and has ordered ten additional carriages to cope with demand.",
    "Sourdough bread is made with a starter, a mixture of flour and water in which wild yeast and "
    "bacteria live. The starter is fed regularly with fresh flour and water. When it is added to a dough, "
    "it makes the bread rise slowly and gives it a slightly sour taste and a chewy texture.",
    "The museum's new exhibition presents tools, jewellery and pottery found at a Bronze Age village "
    "near the river. Visitors can see how people cooked, farmed and traded more than three thousand years "
    "ago. Guided tours take place every Saturday morning and are free for children under twelve.",
    "Version control systems record changes to files over time so that you can recall specific versions "
    "later. They let several people work on the same project, show who changed what and when, and make it "
    "possible to undo mistakes by returning to an earlier state of the code.",
    "The weather service expects heavy rain across the northern region on Friday, with up to fifty "
    "millimetres in some places. Drivers are advised to take extra care, and residents near rivers should "
    "follow local news in case flood warnings are issued over the weekend.",
]
PASSAGE_TEMPLATES = [
    "Summarize the following text in two sentences:\n\n{p}",
    "Rewrite the following text in simpler words:\n\n{p}",
    "What is the main idea of this passage?\n\n{p}",
    "Write three questions that can be answered from this text:\n\n{p}",
    "Turn the following text into a bulleted list of key points:\n\n{p}",
    "Read the text and answer using its own words: what happens, and why?\n\n{p}",
    "Extract the facts of this text as a JSON object with the keys \"topic\", \"who\", \"what\" and "
    "\"when\" (use null when the text does not say):\n\n{p}",
    "Quote the most important sentence of this text exactly, then explain why it matters:\n\n{p}",
]

ITEMS = ["apples", "books", "pencils", "stickers", "marbles", "cookies", "tickets", "stamps"]
NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivan", "Jun"]


def _math_prompts(n: int) -> list[Prompt]:
    rng = random.Random(1234)
    out = []
    for i in range(n):
        a, b, c = rng.randint(3, 40), rng.randint(2, 15), rng.randint(2, 9)
        who, other = rng.sample(NAMES, 2)
        item = rng.choice(ITEMS)
        kind = i % 3
        if kind == 0:
            text = (f"{who} has {a} {item}. {other} gives {who} {b} more, and then {who} shares them equally "
                    f"among {c} friends. How many {item} does each friend get, and how many are left over? "
                    "Explain step by step.")
        elif kind == 1:
            text = f"What is {a} times {b} plus {c}? Show your working."
        else:
            text = (f"A shop sells {item} for {c} dollars each. {who} buys {b} of them and pays with a "
                    f"{10 * (b * c // 10 + 1)} dollar note. How much change does {who} get?")
        out.append(Prompt(f"math/{kind}/{i}", "math", text))
    return out


def all_prompts() -> list[Prompt]:
    """Every prompt, in a fixed order: (id, category, text)."""
    return list(_all_prompts())


@functools.lru_cache(maxsize=1)
def _all_prompts() -> tuple[Prompt, ...]:
    out: list[Prompt] = []
    for cat, templates in TEMPLATES.items():
        for ti, tpl in enumerate(templates):
            for si, subject in enumerate(SUBJECTS):
                out.append(Prompt(f"{cat}/{ti}/{si}", cat, tpl.format(s=subject)))
    for ti, tpl in enumerate(CODE_TEMPLATES):
        for si, task in enumerate(CODE_TASKS):
            out.append(Prompt(f"code/{ti}/{si}", "code", tpl.format(t=task)))
    for ti, tpl in enumerate(PASSAGE_TEMPLATES):
        for pi, passage in enumerate(PASSAGES):
            out.append(Prompt(f"passage/{ti}/{pi}", "passage", tpl.format(p=passage)))
    out.extend(_math_prompts(60))
    return tuple(out)


# Share of each category in the training mix, chosen to resemble what the heads will draft:
# edits and summaries that copy their source, answers and JSON taken from a passage,
# explanations, arithmetic.  Categories of :mod:`specbook.train.data` (the drafters' shared
# offline text: standard-library code and docstrings) join when that module is present.
MIX = {"code-edit": 0.20, "summarize": 0.10, "doc-qa": 0.10, "code-json": 0.10, "passage": 0.15,
       "arithmetic": 0.08, "math": 0.07, "chat": 0.06, "explain": 0.03, "qa": 0.03, "list": 0.02,
       "write": 0.02, "code-explain": 0.02, "code": 0.02}
SHARED_PER_CATEGORY = 150  # prompts asked of each category of specbook.train.data


@functools.lru_cache(maxsize=4)
def _shared_prompts(per_category: int = SHARED_PER_CATEGORY) -> tuple:
    try:
        from . import data
    except ImportError:
        return ()
    return tuple(data.all_prompts(per_category=per_category))


def training_mix(n: int, heldout: bool = False, seed: int = 0, shared_per_category: int = SHARED_PER_CATEGORY) -> list:
    """``n`` prompts of one split drawn by the weights in ``MIX`` (seeded; stable under growth of n:
    a larger n keeps every prompt of a smaller one, so cached replies are reused).
    ``shared_per_category``: prompts asked of each category of :mod:`specbook.train.data` (a
    larger pool; changing it reshuffles the draw)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if shared_per_category < 0:
        raise ValueError(f"shared_per_category must be >= 0, got {shared_per_category}")
    pool = [p for p in all_prompts() + list(_shared_prompts(shared_per_category))
            if is_heldout(p.id) == heldout and p.category in MIX]
    by_cat: dict[str, list] = {}
    for p in pool:
        by_cat.setdefault(p.category, []).append(p)
    rng = random.Random(seed)
    for c in sorted(by_cat):
        rng.shuffle(by_cat[c])
    weights = {c: MIX[c] for c in by_cat}
    total = sum(weights.values())
    taken = {c: 0 for c in by_cat}
    out = []
    while len(out) < min(n, len(pool)):
        # the category furthest below its share goes next (deterministic, prefix-stable)
        c = min((c for c in by_cat if taken[c] < len(by_cat[c])),
                key=lambda c: ((taken[c] + 1) / (weights[c] / total), c))
        out.append(by_cat[c][taken[c]])
        taken[c] += 1
    return out


@functools.lru_cache(maxsize=4)
def _spans(texts: tuple[str, ...], span: int) -> frozenset:
    seen = set()
    for text in texts:
        t = " ".join(text.split())
        seen.update(t[i : i + span] for i in range(0, max(1, len(t) - span + 1)))
    return frozenset(seen)


def overlaps(texts: list[str], prompts: list | None = None, span: int = 60) -> list[tuple[int, str]]:
    """(index, shared piece) for each text that shares a ``span``-character stretch with a prompt
    (whitespace normalised; a prompt shorter than ``span`` must appear whole): evaluation
    prompts must be disjoint from the training prompts."""
    prompts = all_prompts() + list(_shared_prompts()) if prompts is None else prompts
    seen = _spans(tuple(p.text for p in prompts), span)
    short = [" ".join(p.text.split()) for p in prompts if len(" ".join(p.text.split())) < span]
    found = []
    for j, text in enumerate(texts):
        t = " ".join(text.split())
        hit = next((t[i : i + span] for i in range(0, max(1, len(t) - span + 1)) if t[i : i + span] in seen), None)
        hit = hit or next((s for s in short if s in t), None)
        if hit is not None:
            found.append((j, hit))
    return found


def main() -> None:
    train, held = split(all_prompts())
    cats = sorted({p.category for p in train + held})
    print(f"{len(train) + len(held)} prompts: {len(train)} train, {len(held)} held out")
    for c in cats:
        print(f"  {c:8s} train {sum(p.category == c for p in train):4d}   held out {sum(p.category == c for p in held):3d}")
    mix = training_mix(300)
    print("training mix of 300:", {c: sum(p.category == c for p in mix) for c in MIX})
    for p in mix[:4]:
        print(f"- [{p.id}] {p.text[:100]!r}")


if __name__ == "__main__":
    main()
