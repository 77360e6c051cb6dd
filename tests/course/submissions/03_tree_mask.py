"""Broken submissions to 03_tree_mask: each must lose the points of the named cells, and only those."""

NO_VALIDATION = '''def tree_mask(parents):
    N = len(parents)
    mask = torch.eye(N, dtype=torch.bool)
    for i, par in enumerate(parents.tolist()):
        if par >= 0:
            mask[i] |= mask[par]
    return mask
'''

# label -> (answers: grade_id -> code, cells that must lose all their points, words the feedback must show)
BROKEN = {
    'no validation': ({"tree_mask": NO_VALIDATION}, ("mask_tests",), ["should raise ValueError"]),
}
