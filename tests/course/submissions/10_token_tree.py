"""Broken submissions to 10_token_tree: each must lose the points of the named cells, and only those."""

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

TREE_OWN_SHARE_ONLY = '''def best_tree(acceptance, num_nodes):
    """Rank nodes by the share of their own depth, parents first."""
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 0:
        raise ValueError("num_nodes")
    chosen, frontier = [], [(r,) for r in range(len(acceptance[0]))]
    while frontier and len(chosen) < num_nodes:
        best = max(frontier, key=lambda p: acceptance[len(p) - 1][p[-1]])
        frontier.remove(best)
        chosen.append(list(best))
        if len(best) < len(acceptance):
            frontier += [best + (r,) for r in range(len(acceptance[len(best)]))]
    return chosen
'''

SPEEDUP_N_POSITIONS = '''def tree_speedup(accepted, num_nodes, verify_cost, draft_cost):
    return (1 + accepted) / (draft_cost + verify_cost[num_nodes])


def best_budget(acceptance, verify_cost, draft_cost, budgets):
    scores = {n: tree_speedup(expected_accepted(best_tree(acceptance, n), acceptance), n, verify_cost, draft_cost)
              for n in budgets}
    best = max(scores, key=lambda n: (scores[n], -n))
    return best, scores[best]
'''

ANSWERS_SIBLINGS = '''BEST_BUDGET, BEST_SPEEDUP = best_budget(ACCEPTANCE, VERIFY_COST, DRAFT_COST, BUDGETS)
FLAT_BUDGET, _ = best_budget(ACCEPTANCE, {n: 1.0 for n in VERIFY_COST}, DRAFT_COST, BUDGETS)
FLAT_BUDGET_SPEEDUP = tree_speedup(expected_accepted(best_tree(ACCEPTANCE, FLAT_BUDGET), ACCEPTANCE), FLAT_BUDGET,
                                   VERIFY_COST, DRAFT_COST)
ASSUMPTION = ASSUMPTION_OPTIONS[0]
'''

# label -> (answers: grade_id -> code, cells that must lose all their points, words the feedback must show)
BROKEN = {
    'by the library': ({"best_tree": TREE_BY_THE_LIBRARY}, ("best_tests",), ["write it yourself"]),
    "own share only": ({"best_tree": TREE_OWN_SHARE_ONLY}, ("best_tests",), ["product along its path"]),
    'v(N) for N nodes': ({"budget": SPEEDUP_N_POSITIONS}, ("budget_tests",), ["a pass of v(2)"]),
    'siblings assumption': ({"answers": ANSWERS_SIBLINGS}, ("answers_tests",), ["Siblings never matter"]),
}
