"""specbook.tree: parents -> depths, masks, position ids, paths; choice lists; the toy's tree forward."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from specbook.toy import MarkovLM, random_transitions
from specbook.tree import chain_parents, check_parents, children, depths, max_path_length
from specbook.tree_attention import attention_mask, position_ids, tree_mask
from specbook.tree_paths import ChoiceTree, ancestors, from_paths, leaf_paths, path_table, path_to, topological_order

SETTINGS = settings(derandomize=True, max_examples=100, deadline=None)

#        root
#       /    \
#      0      1
#     / \     |
#    2   3    4
#    |
#    5
PARENTS = torch.tensor([-1, -1, 0, 0, 1, 2])


@st.composite
def trees(draw, max_nodes=9):
    n = draw(st.integers(0, max_nodes))
    return torch.tensor([draw(st.integers(-1, i - 1)) for i in range(n)], dtype=torch.long)


def test_small_tree_by_hand():
    assert depths(PARENTS).tolist() == [0, 0, 1, 1, 1, 2]
    assert max_path_length(PARENTS) == 3 and max_path_length(torch.zeros(0, dtype=torch.long)) == 0
    assert children(PARENTS) == [[2, 3], [4], [5], [], [], [], [0, 1]]
    assert ancestors(PARENTS, 5) == [0, 2] and path_to(PARENTS, 5) == [0, 2, 5]
    assert leaf_paths(PARENTS) == [[0, 3], [1, 4], [0, 2, 5]]
    assert path_table(PARENTS).tolist() == [[0, 3, -1], [1, 4, -1], [0, 2, 5]]
    expected = torch.tensor([
        [1, 0, 0, 0, 0, 0],
        [0, 1, 0, 0, 0, 0],
        [1, 0, 1, 0, 0, 0],
        [1, 0, 0, 1, 0, 0],
        [0, 1, 0, 0, 1, 0],
        [1, 0, 1, 0, 0, 1]], dtype=torch.bool)
    assert torch.equal(tree_mask(PARENTS), expected)
    full = attention_mask(PARENTS, context_length=3)
    assert full.shape == (6, 9) and full[:, :3].all() and torch.equal(full[:, 3:], expected)
    assert position_ids(PARENTS, 10).tolist() == [10, 10, 11, 11, 11, 12]
    assert position_ids(PARENTS, torch.tensor([0, 7])).tolist() == [[0, 0, 1, 1, 1, 2], [7, 7, 8, 8, 8, 9]]


def test_chain_is_a_tree_with_one_path():
    parents = chain_parents(4)
    assert parents.tolist() == [-1, 0, 1, 2]
    assert torch.equal(tree_mask(parents), torch.ones(4, 4, dtype=torch.bool).tril())
    assert leaf_paths(parents) == [[0, 1, 2, 3]] and depths(parents).tolist() == [0, 1, 2, 3]


@SETTINGS
@given(trees())
def test_mask_depth_paths_agree(parents):
    mask, d = tree_mask(parents), depths(parents)
    for i in range(len(parents)):
        path = path_to(parents, i)
        assert mask[i].nonzero().flatten().tolist() == path  # exactly the ancestors and itself
        assert d[i] == len(path) - 1
    leaves = [p[-1] for p in leaf_paths(parents)]
    assert leaves == [i for i in range(len(parents)) if not children(parents)[i]]
    table = path_table(parents)
    assert table.shape == (len(leaves), max_path_length(parents))
    assert attention_mask(parents, 2).sum(-1).tolist() == (d + 3).tolist()


@SETTINGS
@given(trees(), st.randoms(use_true_random=False))
def test_topological_order_renumbers_any_labelling(parents, rnd):
    n = len(parents)
    perm = list(range(n))
    rnd.shuffle(perm)  # old node perm[k] gets label k
    label = {old: k for k, old in enumerate(perm)}
    shuffled = [-1 if parents[perm[k]] < 0 else label[int(parents[perm[k]])] for k in range(n)]
    order, new_parents = topological_order(shuffled)
    check_parents(new_parents)  # parents first
    assert sorted(order.tolist()) == list(range(n))
    for k in range(n):  # same tree: new node k is shuffled node order[k]
        par = shuffled[int(order[k])]
        assert (new_parents[k] == -1) if par < 0 else (int(order[new_parents[k]]) == par)
    assert sorted(depths(new_parents).tolist()) == sorted(depths(parents).tolist())
    assert depths(new_parents).tolist() == sorted(depths(new_parents).tolist())  # breadth first


def test_topological_order_rejects_cycles():
    for bad in ([1, 0], [0], [-1, 5], [1, 2, 0], [-1, -2]):
        with pytest.raises(ValueError, match="not a tree"):
            topological_order(bad)


def test_check_parents_rejects_bad_links():
    for bad in ([0], [-1, 1], [-2], [-1, 0, 3]):
        with pytest.raises(ValueError, match="parents"):
            check_parents(torch.tensor(bad))
    with pytest.raises(ValueError, match="integer"):
        check_parents(torch.tensor([-1.0, 0.0]))
    with pytest.raises(ValueError, match="1-D"):
        check_parents(torch.tensor([[-1, 0]]))


# --- choice lists (Medusa's medusa_choices) ------------------------------------------------------
def test_from_paths_medusa_style():
    tree = from_paths([[1], [0], [0, 0], [0, 1], [1, 0], [0, 0, 0], [2]])
    assert isinstance(tree, ChoiceTree)
    assert tree.choices == ((0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0))  # (length, path) order
    assert tree.parents.tolist() == [-1, -1, -1, 0, 0, 1, 3]
    assert tree.depth.tolist() == [0, 0, 0, 1, 1, 1, 2]
    assert tree.rank.tolist() == [0, 1, 2, 0, 1, 0, 0]
    assert tree.num_nodes == 7 and tree.max_rank == 3
    assert torch.equal(tree.depth, depths(tree.parents))
    for i, choice in enumerate(tree.choices):  # each node's path spells its choice
        assert tuple(tree.rank[path_to(tree.parents, i)].tolist()) == choice


def test_from_paths_chain_and_errors():
    assert from_paths([[0], [0, 0], [0, 0, 0]]).parents.tolist() == chain_parents(3).tolist()
    with pytest.raises(ValueError, match="prefix"):
        from_paths([[0], [1, 0]])
    with pytest.raises(ValueError, match="twice"):
        from_paths([[0], [0]])
    for bad in ([[]], [[-1]], [[0.5]], [[True]]):
        with pytest.raises(ValueError, match="choices"):
            from_paths(bad)


# --- the toy target: a tree-masked forward equals per-path sequential forwards -------------------
@pytest.mark.parametrize("order", [1, 2, 3])
def test_toy_tree_forward_equals_each_path_and_keep_compacts(order):
    V = 4
    lm = MarkovLM(random_transitions(V, order, generator=torch.Generator().manual_seed(order)), order)
    g = torch.Generator().manual_seed(7)
    context = torch.randint(V, (3, 5), generator=g)
    nodes = torch.randint(V, (3, len(PARENTS)), generator=g)
    lm.reset(3)
    lm.forward(context)
    tree_logits = lm.forward(nodes, parents=PARENTS)  # (3, N, V)
    for i in range(len(PARENTS)):
        path = path_to(PARENTS, i)
        ref = MarkovLM(lm.transitions, order)
        ref.reset(3)
        chain_logits = ref.forward(torch.cat([context, nodes[:, path]], 1))[:, -1]
        assert torch.equal(tree_logits[:, i], chain_logits)
    # keep a different accepted path per row; the cache must then read as context + that path
    keep = [path_to(PARENTS, 5), path_to(PARENTS, 4), []]
    lm.keep(keep)
    assert lm.cache_lengths.tolist() == [8, 7, 5]
    nxt = torch.randint(V, (3, 1), generator=g)
    after = lm.forward(nxt)[:, 0]
    for b in range(3):
        seq = context[b].tolist() + nodes[b, keep[b]].tolist() + nxt[b].tolist()
        assert torch.equal(after[b], lm.next_logits(seq))
