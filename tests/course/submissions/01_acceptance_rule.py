"""Broken submissions to 01_acceptance_rule: each must lose the points of the named cells, and only those."""

RESAMPLE_FROM_P = '''def accept_token(target_probs, draft_probs, draft_token, generator=None):
    u = torch.rand((), generator=generator, dtype=target_probs.dtype)
    if u * draft_probs[draft_token] < target_probs[draft_token]:
        return draft_token
    return int(torch.multinomial(target_probs, 1, generator=generator))
'''

# label -> (answers: grade_id -> code, cells that must lose all their points, words the feedback must show)
BROKEN = {
    'resample from p': ({"accept_token": RESAMPLE_FROM_P}, ("rule_law",), ["What went wrong", "residual after a rejection", "Hint"]),
}
