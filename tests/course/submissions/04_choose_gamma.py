"""Broken submissions to 04_choose_gamma: each must lose the points of the named cells, and only those.

Parts 3 and 4 are graded with reference versions of the earlier parts, so a wrong alpha or a wrong
speedup formula costs its own part's points only.
"""

from . import mutated

# alpha over every proposed draft, not over the verified ones
ALPHA_PER_PROPOSED = mutated("04_choose_gamma", "estimate_alpha", "min(k + 1, gamma) * n", "gamma * n")
VERIFY_COST_OFF_BY_ONE = mutated("04_choose_gamma", "predicted_speedup", "verify_cost[gamma + 1]", "verify_cost[gamma]")

SPEEDUP_BY_THE_LIBRARY = '''def predicted_speedup(alpha, gamma, c, verify_cost):
    from specbook import theory
    return float(theory.speedup(alpha, gamma, c, lambda g: verify_cost[g + 1]))
'''

PAPER_SPEEDUP_REPORTED = mutated("04_choose_gamma", "answers", "chosen, measured[chosen]",
                                 "chosen, paper[chosen]  # the paper's own figure, not what it gives here")

# label -> (answers: grade_id -> code, cells that must lose all their points, words the feedback must show)
BROKEN = {
    "alpha per proposed": ({"estimate_alpha": ALPHA_PER_PROPOSED}, ("alpha_tests",),
                           ["verified one draft more than it accepted"]),
    "v(gamma)": ({"predicted_speedup": VERIFY_COST_OFF_BY_ONE}, ("speedup_tests",),
                 ["plus one pass over gamma + 1 positions"]),
    "speedup by the library": ({"predicted_speedup": SPEEDUP_BY_THE_LIBRARY}, ("speedup_tests",), ["write it yourself"]),
    "paper speedup": ({"answers": PAPER_SPEEDUP_REPORTED}, ("answers_tests",), ["cannot lose to another choice"]),
}
