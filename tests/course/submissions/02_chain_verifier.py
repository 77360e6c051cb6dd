"""Broken submissions to 02_chain_verifier: each must lose the points of the named cells, and only those."""
from . import mutated

GREEDY_BONUS = mutated("02_chain_verifier", "verify_row", "int(torch.multinomial(target_probs[K], 1, generator=generator))",
                       "int(target_probs[K].argmax())")  # the bonus token by argmax, not drawn

BY_THE_LIBRARY = '''def verify_row(target_probs, draft_probs, draft_tokens, generator=None):
    from specbook.verify import verify_chain
    tokens, n = verify_chain(target_probs[None], draft_probs[None], draft_tokens[None], generator)
    return tokens[0, : int(n[0])]
'''

# label -> (answers: grade_id -> code, cells that must lose all their points, words the feedback must show)
BROKEN = {
    'greedy bonus': ({"verify_row": GREEDY_BONUS}, ("verify_law",), ["What went wrong", "bonus token", "last row"]),
    "by the library": ({"verify_row": BY_THE_LIBRARY}, ("verify_properties", "verify_law"), ["write it yourself"]),
}
