# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false}
# # Assignment 3: tree attention
#
# Tree drafters (SpecInfer, Medusa, EAGLE) propose several candidate continuations at once and
# verify all of them in **one** forward pass.  The tree is flattened into a sequence of $N$ nodes
# given by `parents`: `parents[i]` is the index of node $i$'s parent, or $-1$ when the node hangs
# directly off the cached context.  Nodes come in topological order (a parent before its children),
# so a plain chain of $K$ drafts is `parents = [-1, 0, 1, ..., K-2]`.
#
# For the single pass to compute, at every node, exactly what a plain causal pass over that node's
# own root-to-node path would compute, two things must hold (Miao et al., SpecInfer, 2024;
# Cai et al., Medusa, 2024, sec. 2.1.2):
#
# * node $i$ attends to the cached context, to its ancestors and to itself, and to nothing else
#   (siblings and cousins are alternatives, not history);
# * node $i$ sits at position `cache_length + depth(i)`, so siblings share a position.
#
# **Grading.** 10 points: the mask (4, with hidden tests), the positions (2, with hidden tests), and
# a hidden test (4) that runs attention through your mask and compares every node with plain causal
# attention over its own path.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false}
import torch

# %% [markdown] nbgrader={"grade": false, "grade_id": "mask_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 1: the mask
#
# `tree_mask(parents)` returns an `(N, N)` boolean tensor with `mask[i, j]` True iff node $j$ is
# node $i$ or one of its ancestors.  Raise `ValueError` if some `parents[i]` is not $-1$ or an
# earlier node.

# %% nbgrader={"grade": false, "grade_id": "tree_mask", "locked": false, "schema_version": 3, "solution": true}
def tree_mask(parents: torch.Tensor) -> torch.Tensor:
    """(N, N) bool: mask[i, j] iff node j is node i or one of its ancestors."""
    ### BEGIN SOLUTION
    N = len(parents)
    mask = torch.eye(N, dtype=torch.bool)
    for i, par in enumerate(parents.tolist()):
        if not -1 <= par < i:
            raise ValueError(f"parents[{i}] = {par} must be -1 or an earlier node")
        if par >= 0:
            mask[i] |= mask[par]
    return mask
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "mask_tests", "locked": true, "points": 4, "schema_version": 3, "solution": false}
chain = torch.tensor([-1, 0, 1, 2])
assert torch.equal(tree_mask(chain), torch.ones(4, 4, dtype=torch.bool).tril()), "a chain is causal"
tree = torch.tensor([-1, -1, 0, 0, 1])  # two roots; node 0 has children 2 and 3
expected = torch.tensor([[1, 0, 0, 0, 0],
                         [0, 1, 0, 0, 0],
                         [1, 0, 1, 0, 0],
                         [1, 0, 0, 1, 0],
                         [0, 1, 0, 0, 1]], dtype=torch.bool)
assert torch.equal(tree_mask(tree), expected), tree_mask(tree)
### BEGIN HIDDEN TESTS
# Short tracebacks: the feedback shows the failure, not this cell's source.
# %xmode Minimal
import specbook.tree_attention

g = torch.Generator().manual_seed(3)
for n in range(1, 30):
    parents = torch.tensor([int(torch.randint(-1, i, (), generator=g)) for i in range(n)])
    assert torch.equal(tree_mask(parents), specbook.tree_attention.tree_mask(parents)), parents
for bad in ([0], [-1, 1], [-1, 0, 5], [-2]):
    try:
        tree_mask(torch.tensor(bad))
    except ValueError:
        pass
    else:
        raise AssertionError(f"parents={bad} should raise ValueError")
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "pos_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 2: positions
#
# `tree_position_ids(parents, cache_length)` returns the `(N,)` long tensor
# `cache_length + depth(i)`, where roots have depth 0.

# %% nbgrader={"grade": false, "grade_id": "tree_position_ids", "locked": false, "schema_version": 3, "solution": true}
def tree_position_ids(parents: torch.Tensor, cache_length: int) -> torch.Tensor:
    """(N,) long: cache_length + depth of each node."""
    ### BEGIN SOLUTION
    return cache_length + tree_mask(parents).sum(-1) - 1
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "pos_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert tree_position_ids(torch.tensor([-1, 0, 1]), 10).tolist() == [10, 11, 12]
assert tree_position_ids(torch.tensor([-1, -1, 0, 0, 1]), 7).tolist() == [7, 7, 8, 8, 8]
### BEGIN HIDDEN TESTS
g = torch.Generator().manual_seed(4)
for n in range(1, 30):
    parents = torch.tensor([int(torch.randint(-1, i, (), generator=g)) for i in range(n)])
    assert torch.equal(tree_position_ids(parents, 5).long(), specbook.tree_attention.position_ids(parents, 5)), parents
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "attn_text", "locked": true, "schema_version": 3, "solution": false}
# ## Check your work: one pass over the tree equals one causal pass per path
#
# The cell below builds a toy attention layer whose queries, keys and values depend on the token
# and on its position, runs it once over a whole tree with your mask and positions, and compares
# every node with a plain causal pass over that node's own path.  The hidden test does the same on
# random trees.

# %% nbgrader={"grade": false, "grade_id": "attn_helpers", "locked": true, "schema_version": 3, "solution": false}
def toy_attention(tokens, positions, mask, dim=8, seed=0):
    """Single-head attention: (N,) tokens at (N,) positions, (N, N) bool mask -> (N, dim)."""
    g = torch.Generator().manual_seed(seed)
    embed = torch.randn(50, dim, generator=g, dtype=torch.float64)
    pos = torch.randn(200, dim, generator=g, dtype=torch.float64)
    wq, wk, wv = (torch.randn(dim, dim, generator=g, dtype=torch.float64) for _ in range(3))
    h = embed[tokens] + pos[positions]
    scores = (h @ wq) @ (h @ wk).T / dim**0.5
    return scores.masked_fill(~mask, float("-inf")).softmax(-1) @ (h @ wv)


def paths_agree(parents, tokens, cache_length=3):
    out = toy_attention(tokens, tree_position_ids(parents, cache_length), tree_mask(parents))
    for i in range(len(parents)):
        path = [i]
        while parents[path[-1]] >= 0:
            path.append(int(parents[path[-1]]))
        path = path[::-1]
        n = len(path)
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        ref = toy_attention(tokens[path], torch.arange(n) + cache_length, causal)
        if not torch.allclose(out[i], ref[-1]):
            return False
    return True


print("tree pass == path passes:", paths_agree(torch.tensor([-1, -1, 0, 0, 1, 2]), torch.tensor([5, 6, 7, 8, 9, 10])))

# %% nbgrader={"grade": true, "grade_id": "attn_tests", "locked": true, "points": 4, "schema_version": 3, "solution": false}
# Hidden test: random trees through the toy attention.
### BEGIN HIDDEN TESTS
g = torch.Generator().manual_seed(5)
for n in range(1, 16):
    parents = torch.tensor([int(torch.randint(-1, i, (), generator=g)) for i in range(n)])
    tokens = torch.randint(0, 50, (n,), generator=g)
    assert paths_agree(parents, tokens), f"the tree pass differs from the path passes for parents={parents.tolist()}"
### END HIDDEN TESTS
