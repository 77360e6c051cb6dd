"""Broken submissions to 04_choose_gamma: each must lose the points of the named cells, and only those.

Parts 3 and 4 are graded with reference versions of the earlier parts, so a wrong alpha or a wrong
speedup formula costs its own part's points only.
"""

ALPHA_PER_PROPOSED = '''def estimate_alpha(histogram, gamma):
    accepted = sum(k * n for k, n in enumerate(histogram))
    return accepted / (gamma * sum(histogram))
'''

VERIFY_COST_OFF_BY_ONE = '''def predicted_speedup(alpha, gamma, c, verify_cost):
    if gamma == 0:
        return 1.0
    return expected_tokens(alpha, gamma) / (gamma * c + verify_cost[gamma])
'''

SPEEDUP_BY_THE_LIBRARY = '''def predicted_speedup(alpha, gamma, c, verify_cost):
    from specbook import theory
    return float(theory.speedup(alpha, gamma, c, lambda g: verify_cost[g + 1]))
'''

PAPER_SPEEDUP_REPORTED = '''def decide(alpha, c, verify_cost, max_gamma=5):
    gammas = range(1, max_gamma + 1)
    measured = {g: predicted_speedup(alpha, g, c, verify_cost) for g in gammas}
    best = max(measured, key=lambda g: (measured[g], -g))
    flat = {n: 1.0 for n in verify_cost}
    paper = {g: predicted_speedup(alpha, g, c, flat) for g in gammas}
    chosen = max(paper, key=lambda g: (paper[g], -g))
    return best, measured[best], chosen, paper[chosen]  # the paper's own figure, not what it gives here


C = DRAFT_STEP_MS / TARGET_STEP_MS
'''

# label -> (answers: grade_id -> code, cells that must lose all their points, words the feedback must show)
BROKEN = {
    "alpha per proposed": ({"estimate_alpha": ALPHA_PER_PROPOSED}, ("alpha_tests",),
                           ["verified one draft more than it accepted"]),
    "v(gamma)": ({"predicted_speedup": VERIFY_COST_OFF_BY_ONE}, ("speedup_tests",),
                 ["plus one pass over gamma + 1 positions"]),
    "speedup by the library": ({"predicted_speedup": SPEEDUP_BY_THE_LIBRARY}, ("speedup_tests",), ["write it yourself"]),
    "paper speedup": ({"answers": PAPER_SPEEDUP_REPORTED}, ("answers_tests",), ["cannot lose to another choice"]),
}
