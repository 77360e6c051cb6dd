"""Broken submissions to 03_tree_mask: each must lose the points of the named cells, and only those.

A wrong mask costs the mask's points only: the tests of the positions and of the mask over the
cache use the library's mask while they run (one mistake, one deduction).
"""

from . import mutated

NO_VALIDATION = mutated("03_tree_mask", "tree_mask", '''        if not -1 <= par < i:
            raise ValueError(f"parents[{i}] = {par} must be -1 or an earlier node")
''', "")
DESCENDANTS = mutated("03_tree_mask", "tree_mask", "    return mask",
                      "    return mask.T  # node i sees its descendants instead of its ancestors")

BY_THE_LIBRARY = '''def tree_mask(parents):
    from specbook.tree_attention import tree_mask as library_mask
    return library_mask(parents)
'''

POSITIONS_BY_THE_LIBRARY = '''def tree_position_ids(parents, cache_length):
    import specbook.tree
    return cache_length + specbook.tree.depths(parents)
'''

NO_CACHE_COLUMNS = '''def attention_mask(parents, cache_length):
    return tree_mask(parents)
'''

# label -> (answers: grade_id -> code, cells that must lose all their points, words the feedback must show)
BROKEN = {
    "no validation": ({"tree_mask": NO_VALIDATION}, ("mask_tests",), ["should raise ValueError"]),
    "descendants (one mistake, one deduction)": ({"tree_mask": DESCENDANTS}, ("mask_tests",), ["AssertionError"]),
    "mask by the library": ({"tree_mask": BY_THE_LIBRARY}, ("mask_tests",), ["write it yourself"]),
    "positions by the library": ({"tree_position_ids": POSITIONS_BY_THE_LIBRARY}, ("pos_tests",), ["write it yourself"]),
    "no cache columns": ({"attention_mask": NO_CACHE_COLUMNS}, ("attn_tests",), ["attention_mask("]),
}
