"""Broken submissions to 09_prompt_lookup: each must lose the points of the named cells, and only those."""
from . import mutated

NAME = "09_prompt_lookup"

LOOKUP_BY_THE_LIBRARY = '''from specbook.drafters.ngram import NGramDrafter


def prompt_lookup(context, gamma, max_ngram=3, min_ngram=1):
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 0:
        raise ValueError("gamma")
    if isinstance(context, torch.Tensor) and context.ndim != 1:
        raise ValueError("context")
    return NGramDrafter(max_ngram, min_ngram, prefer="latest", overlap=False).lookup([int(t) for t in context], gamma)
'''

LOOKUP_EARLIEST = mutated(NAME, "prompt_lookup",
                          "for start in range(length - n - 1, -1, -1):  # latest first; the occurrence needs a token after it",
                          "for start in range(0, length - n):  # the first occurrence, as transformers does")

FIGURES_ALPHA_PER_PROPOSED = mutated(NAME, "acceptance_figures", "verified = sum(k if a == k else a + 1 for k, a in steps)",
                                     "verified = sum(k for k, _ in steps)  # every proposed draft")
ANSWERS_SYSTEM_PROMPT = mutated(NAME, "answers", "WHY = WHY_OPTIONS[1]\nCHAT_WHY = CHAT_WHY_OPTIONS[2]",
                                "WHY = WHY_OPTIONS[0]\nCHAT_WHY = CHAT_WHY_OPTIONS[0]")

# label -> (answers: grade_id -> code, cells that must lose all their points, words the feedback must show)
BROKEN = {
    'by the library': ({"prompt_lookup": LOOKUP_BY_THE_LIBRARY}, ("lookup_tests",), ["write it yourself"]),
    'earliest match': ({"prompt_lookup": LOOKUP_EARLIEST}, ("lookup_tests",), ["copy from the most recent"]),
    'alpha per proposed': ({"acceptance_figures": FIGURES_ALPHA_PER_PROPOSED}, ("figures_tests",),
                           ["verified one draft more than it accepted"]),
    'longer prompts': ({"answers": ANSWERS_SYSTEM_PROMPT}, ("answers_tests",), ["a match alone keeps nothing"]),
}
