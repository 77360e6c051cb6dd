"""Broken submissions to 09_prompt_lookup: each must lose the points of the named cells, and only those."""

LOOKUP_BY_THE_LIBRARY = '''from specbook.drafters.ngram import NGramDrafter


def prompt_lookup(context, gamma, max_ngram=3, min_ngram=1):
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 0:
        raise ValueError("gamma")
    if isinstance(context, torch.Tensor) and context.ndim != 1:
        raise ValueError("context")
    return NGramDrafter(max_ngram, min_ngram, prefer="latest", overlap=False).lookup([int(t) for t in context], gamma)
'''

LOOKUP_EARLIEST = '''def prompt_lookup(context, gamma, max_ngram=3, min_ngram=1):
    if isinstance(context, torch.Tensor) and context.ndim != 1:
        raise ValueError("context")
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 0:
        raise ValueError("gamma")
    if not (isinstance(min_ngram, int) and isinstance(max_ngram, int) and 1 <= min_ngram <= max_ngram):
        raise ValueError("n-gram sizes")
    tokens = [int(t) for t in context]
    for n in range(min(max_ngram, len(tokens) - 1), min_ngram - 1, -1):
        for start in range(0, len(tokens) - n):  # the first occurrence, as transformers does
            if tokens[start:start + n] == tokens[len(tokens) - n:]:
                return tokens[start + n:start + n + gamma]
    return []
'''

FIGURES_ALPHA_PER_PROPOSED = '''def acceptance_figures(steps, verify_cost):
    passes = len(steps)
    accepted = sum(a for _, a in steps)
    drafted = sum(k for k, _ in steps)
    cost = sum(verify_cost[k + 1] for k, _ in steps)
    return {"alpha": accepted / drafted if drafted else 0.0, "tau": (accepted + passes) / passes,
            "speedup": (accepted + passes) / cost}
'''

ANSWERS_SYSTEM_PROMPT = '''FIGURES = {}
for name, items in WORKLOADS.items():
    pooled = []
    for item in items:
        pooled += replay(item["prompt"], item["reply"], GAMMA, prompt_lookup)
    FIGURES[name] = acceptance_figures(pooled, VERIFY_COST)
PAYS_LEAST = min(FIGURES, key=lambda name: FIGURES[name]["speedup"])
WHY = WHY_OPTIONS[0]
CHAT_WHY = CHAT_WHY_OPTIONS[0]
'''

# label -> (answers: grade_id -> code, cells that must lose all their points, words the feedback must show)
BROKEN = {
    'by the library': ({"prompt_lookup": LOOKUP_BY_THE_LIBRARY}, ("lookup_tests",), ["write it yourself"]),
    'earliest match': ({"prompt_lookup": LOOKUP_EARLIEST}, ("lookup_tests",), ["copy from the most recent"]),
    'alpha per proposed': ({"acceptance_figures": FIGURES_ALPHA_PER_PROPOSED}, ("figures_tests",),
                           ["verified one draft more than it accepted"]),
    'longer prompts': ({"answers": ANSWERS_SYSTEM_PROMPT}, ("answers_tests",), ["a match alone keeps nothing"]),
}
