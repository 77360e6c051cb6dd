"""Broken submissions to 04_choose_gamma: each must lose the points of the named cells, and only those."""

ALPHA_PER_PROPOSED = '''def estimate_alpha(histogram, gamma):
    accepted = sum(k * n for k, n in enumerate(histogram))
    return accepted / (gamma * sum(histogram))
'''

VERIFY_COST_OFF_BY_ONE = '''def predicted_speedup(alpha, gamma, c, verify_cost):
    if gamma == 0:
        return 1.0
    return expected_tokens(alpha, gamma) / (gamma * c + verify_cost[gamma])
'''

PAPER_SPEEDUP_REPORTED = '''ALPHA = estimate_alpha(ACCEPTED_HISTOGRAM, RUN_GAMMA)
C = DRAFT_STEP_MS / TARGET_STEP_MS
on_curve = {g: predicted_speedup(ALPHA, g, C, VERIFY_COST) for g in range(1, 6)}
with_v1 = {g: predicted_speedup(ALPHA, g, C, {n: 1.0 for n in range(1, 7)}) for g in range(1, 6)}
BEST_GAMMA = max(on_curve, key=on_curve.get)
BEST_SPEEDUP = on_curve[BEST_GAMMA]
PAPER_GAMMA = max(with_v1, key=with_v1.get)
PAPER_GAMMA_SPEEDUP = with_v1[PAPER_GAMMA]
'''

# label -> (answers: grade_id -> code, cells that must lose all their points, words the feedback must show)
BROKEN = {
    'alpha per proposed': ({"estimate_alpha": ALPHA_PER_PROPOSED}, ("alpha_tests", "answers_tests"), ["verified one draft more than it accepted"]),
    'v(gamma)': ({"predicted_speedup": VERIFY_COST_OFF_BY_ONE}, ("speedup_tests", "answers_tests"), ["plus one pass over gamma + 1 positions"]),
    'paper speedup': ({"answers": PAPER_SPEEDUP_REPORTED}, ("answers_tests",), ["cannot lose to another choice"]),
}
