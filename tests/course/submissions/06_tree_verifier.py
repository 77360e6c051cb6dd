"""Broken submissions to 06_tree_verifier: each must lose the points of the named cells, and only those."""
from . import mutated

SIBLINGS_WITHOUT_RESIDUAL = mutated(
    "06_tree_verifier", "verify_tree_row",
    "            law = residual(law, q_c)  # rejected: the next sibling is judged against what is left\n", "")
PARENT_ROW = mutated("06_tree_verifier", "verify_tree_row", "target_probs[child + 1]", "target_probs[child]")

BY_THE_LIBRARY = '''def verify_tree_row(target_probs, draft_probs, draft_tokens, parents, generator=None):
    from specbook import verify_tree
    tokens, n, _ = verify_tree.verify_tree(target_probs[None], None if draft_probs is None else draft_probs[None],
                                           draft_tokens[None], parents, generator)
    return tokens[0, : int(n[0])]
'''

# label -> (answers: grade_id -> code, cells that must lose all their points, words the feedback must show)
BROKEN = {
    'siblings without residual': ({"verify_tree_row": SIBLINGS_WITHOUT_RESIDUAL}, ("chain_law", "tree_law"), ["What went wrong", "residual"]),
    "parent's row": ({"verify_tree_row": PARENT_ROW}, ("verify_properties", "chain_law", "tree_law"), ["What went wrong", "row (node + 1)"]),
    "by the library": ({"verify_tree_row": BY_THE_LIBRARY}, ("verify_properties", "chain_law", "tree_law"), ["write it yourself"]),
}
