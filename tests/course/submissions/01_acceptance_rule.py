"""Broken submissions to 01_acceptance_rule: each must lose the points of the named cells, and only those."""
from . import mutated

RESAMPLE_FROM_P = mutated("01_acceptance_rule", "accept_token",
                          "torch.multinomial(residual(target_probs, draft_probs), 1", "torch.multinomial(target_probs, 1")

BY_THE_LIBRARY = '''def accept_token(target_probs, draft_probs, draft_token, generator=None):
    import specbook.verify as library
    return library.verify_token(target_probs, draft_probs, draft_token, generator)
'''

RESIDUAL_BY_THE_LIBRARY = '''def residual(target_probs, draft_probs):
    from specbook.verify import residual as library_residual
    return library_residual(target_probs, draft_probs)
'''

# label -> (answers: grade_id -> code, cells that must lose all their points, words the feedback must show)
BROKEN = {
    'resample from p': ({"accept_token": RESAMPLE_FROM_P}, ("rule_law",), ["What went wrong", "residual after a rejection", "Hint"]),
    "rule by the library": ({"accept_token": BY_THE_LIBRARY}, ("rule_law",), ["write it yourself"]),
    "residual by the library": ({"residual": RESIDUAL_BY_THE_LIBRARY}, ("residual_tests",), ["write it yourself"]),
}
