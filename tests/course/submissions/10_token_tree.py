"""Broken submissions to 10_token_tree: each must lose the points of the named cells, and only those."""
from . import mutated

NAME = "10_token_tree"

TREE_BY_THE_LIBRARY = '''import torch

from specbook.train.medusa import best_choices


def best_tree(acceptance, num_nodes):
    """Sample rank rows from the table (depths independent) and let the library search them."""
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 0:
        raise ValueError("num_nodes")
    top = len(acceptance[0])
    g = torch.Generator().manual_seed(0)
    columns = []
    for shares in acceptance:
        law = torch.tensor(list(shares) + [max(0.0, 1.0 - sum(shares))], dtype=torch.float64)
        columns.append(torch.multinomial(law, 4000, replacement=True, generator=g))
    return best_choices(torch.stack(columns, 1), num_nodes, top_s=top)
'''

# a node ranked by the share of its own depth, not by the product along its path
TREE_OWN_SHARE_ONLY = mutated(NAME, "best_tree", "best = max(frontier, key=value)",
                              "best = max(frontier, key=lambda p: acceptance[len(p) - 1][p[-1]])")
SPEEDUP_N_POSITIONS = mutated(NAME, "budget", "verify_cost[num_nodes + 1]", "verify_cost[num_nodes]")
ANSWERS_SIBLINGS = mutated(NAME, "answers", "ASSUMPTION = ASSUMPTION_OPTIONS[1]", "ASSUMPTION = ASSUMPTION_OPTIONS[0]")

# label -> (answers: grade_id -> code, cells that must lose all their points, words the feedback must show)
BROKEN = {
    'by the library': ({"best_tree": TREE_BY_THE_LIBRARY}, ("best_tests",), ["write it yourself"]),
    "own share only": ({"best_tree": TREE_OWN_SHARE_ONLY}, ("best_tests",), ["product along its path"]),
    'v(N) for N nodes': ({"budget": SPEEDUP_N_POSITIONS}, ("budget_tests",), ["a pass of v(2)"]),
    'siblings assumption': ({"answers": ANSWERS_SIBLINGS}, ("answers_tests",), ["Siblings never matter"]),
}
