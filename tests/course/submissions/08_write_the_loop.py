"""Broken submissions to 08_write_the_loop: each must lose the points of the named cells, and only those."""
from . import mutated

NAME = "08_write_the_loop"

BY_THE_LIBRARY = '''from specbook.decode import speculative_generate


def speculative_decode(target, drafter, prompt, max_new_tokens, gamma=4, params=SamplingParams(), generator=None):
    result = speculative_generate(target, drafter, torch.tensor(prompt), max_new_tokens, params=params, gamma=gamma,
                                  generator=generator)
    return result.new_tokens[0].tolist()
'''

# Each broken loop below is the instructor's with one mistake put in.
NO_ROLLBACK = mutated(NAME, "speculative_decode",
                      "        target.rollback(torch.tensor([before + kept + 1]))  # the pending token and the kept drafts\n", "")
BONUS_FROM_THE_WRONG_ROW = mutated(NAME, "speculative_decode", "last = int(sample(p[len(drafts)], generator))",
                                   "last = int(sample(p[len(drafts) - 1], generator))")
# drafts past the budget, the tokens past it cut off the output: only the visible budget rule can catch it
PAST_THE_BUDGET = mutated(NAME, "speculative_decode", "k = min(gamma, max_new_tokens - len(out) - 1)", "k = gamma",
                          "    return out\n", "    return out[:max_new_tokens]\n")

# label -> (answers: grade_id -> code, cells that must lose all their points, words the feedback must show)
BROKEN = {
    "by the library": ({"speculative_decode": BY_THE_LIBRARY}, ("greedy_equality", "sampling_law"),
                       ["write it yourself", "speculative_generate"]),
    "no rollback": ({"speculative_decode": NO_ROLLBACK}, ("properties", "greedy_equality", "sampling_law"),
                    ["Roll the cache back", "What went wrong", "rejected draft"]),
    "bonus from the wrong row": ({"speculative_decode": BONUS_FROM_THE_WRONG_ROW}, ("greedy_equality", "sampling_law"),
                                 ["What went wrong", "bonus token"]),
    "drafts past the budget": ({"speculative_decode": PAST_THE_BUDGET}, ("properties",),
                               ["never draft past the budget"]),
}
