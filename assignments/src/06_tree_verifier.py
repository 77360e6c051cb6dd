# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false}
# # Assignment 6: lossless tree verification
#
# Medusa and EAGLE propose a **tree** of candidates instead of one chain: several guesses for
# the next token, several continuations of each.  One target pass scores every node (a tree
# attention mask lets each node see only its ancestors; assignment 3).  The verifier then walks
# down from the root and, at each node, tries its children in order:
#
# * child c (token x, drawn from q_c) is accepted with probability min(1, p(x) / q_c(x));
#   then move to c, take the target's distribution after c, and start over with c's children;
# * if c is rejected, replace p by the residual max(0, p − q_c) / Σ max(0, p − q_c) and try
#   the next sibling **against that residual**;
# * when no child is accepted (or the node is a leaf), emit one token from the current p
#   (a residual if siblings were rejected, the node's own distribution otherwise) and stop.
#
# Each rejected sibling removes exactly the mass it could have supplied, so the emitted
# token is still distributed as p (SpecInfer, Miao et al. 2024, multi-step speculative sampling;
# the single-position proof of Leviathan et al. 2023 applied once per sibling).  With a chain
# (one child per node) this is assignment 2's verifier.
#
# **The assumption.** The rule is exact only when each sibling's token is an independent draw
# from the q row reported for it, or when the candidates are fixed in advance and passed as
# one-hot (`draft_probs=None`).  Medusa's and EAGLE's trees take their heads' top-k: distinct
# tokens that are not independent draws, so they must be verified as fixed candidates; reporting
# the heads' q beside a top-k list biases the output (lesson 5 computes by how much).
#
# Conventions (the same as `specbook.verify_tree`):
#
# * `parents` (N,) long, in topological order, `-1` = child of the root; siblings are tried in node order;
# * `target_probs` (N+1, V): row 0 is the target's distribution at the root, row i+1 the
#   distribution after node i (for node i's children, or the final token if i is a leaf);
# * `draft_probs` (N, V): row i is the distribution node i's token was drawn from; or `None`
#   for deterministic candidates (a top-k list, an n-gram guess): q is then one-hot on the token;
# * `draft_tokens` (N,) long.
#
# **Grading.** 10 points: properties (2); a hidden statistical test (3): the chain checker
# `specbook.grading.check_verifier` on your verifier given chains; and a hidden statistical test
# (5) of the whole block your verifier emits on several trees against the exact law
# (`specbook.tree_laws.tree_block_law`), chi-square on raw counts with Holm across trees.  Each
# statistical family that fails is run once more with a second seed before points are taken.
# Write the walk yourself: a verifier that calls `specbook`'s own verifiers (`verify_tree`,
# `verify_chain`, ...) scores nothing on the properties and the two statistical tests.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false}
import torch

from specbook import stats
from specbook.grading import check_verifier
from specbook.tree import chain_parents
from specbook.tree_laws import tree_block_law
from specbook.verify import residual


def children_of(parents: torch.Tensor, node: int) -> list[int]:
    """The children of `node` (-1 = the root), in node order."""
    return [i for i, par in enumerate(parents.tolist()) if par == node]


def tree_law_check(verifier, target_probs, draft_probs, parents, draft_tokens=None, n=3000, seed=0):
    """Chi-square test of the blocks `verifier` emits against the exact law (a GofResult).

    With draft_tokens=None, node i's token is drawn from draft_probs[i] before every call
    (siblings independently); otherwise the given tokens are verified every time.
    """
    law = tree_block_law(target_probs, draft_probs, parents, draft_tokens)  # {block: probability}
    blocks = list(law)
    index = {b: i for i, b in enumerate(blocks)}
    counts = [0] * (len(blocks) + 1)  # the last bin: blocks the law says are impossible
    g_fn, g_draft = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed + 1)
    for _ in range(n):
        tokens = (torch.multinomial(draft_probs, 1, generator=g_draft).squeeze(1) if draft_tokens is None
                  else torch.as_tensor(draft_tokens))
        out = verifier(target_probs, draft_probs, tokens, parents, g_fn)
        counts[index.get(tuple(int(t) for t in out), len(blocks))] += 1
    return stats.chisquare_gof(counts, [float(law[b]) for b in blocks] + [0.0])


def as_chain_verifier(verifier):
    """The checker's chain contract fn(target_probs, draft_probs, draft_tokens, generator), on a chain tree."""
    return lambda tp, dp, dt, g=None: verifier(tp, dp, dt, chain_parents(len(dt)), g)


f64 = dict(dtype=torch.float64)
# Tree A: two sampled guesses at the root, drawn i.i.d. from one row, each with one continuation.
TREE_A = dict(parents=torch.tensor([-1, -1, 0, 1]),
              target_probs=torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.1, 0.1, 0.4, 0.4], [0.3, 0.3, 0.2, 0.2],
                                         [0.0, 0.5, 0.5, 0.0], [0.25, 0.25, 0.25, 0.25]], **f64),
              draft_probs=torch.tensor([[0.2, 0.6, 0.1, 0.1], [0.2, 0.6, 0.1, 0.1], [0.1, 0.2, 0.3, 0.4],
                                        [0.6, 0.2, 0.1, 0.1]], **f64))
# Tree B: deterministic candidates (a top-3 list at the root, one continuation of the first).
TREE_B = dict(parents=torch.tensor([-1, -1, -1, 0]), draft_tokens=[1, 0, 3, 2], draft_probs=None,
              target_probs=torch.tensor([[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1],
                                         [0.2, 0.2, 0.2, 0.4], [0.1, 0.6, 0.2, 0.1]], **f64))

# %% [markdown] nbgrader={"grade": false, "grade_id": "verify_text", "locked": true, "schema_version": 3, "solution": false}
# ## The verifier
#
# Write `verify_tree_row(target_probs, draft_probs, draft_tokens, parents, generator)` returning a
# 1-D `LongTensor`: the tokens of the accepted path, root side first, then the one final token.
# Use `children_of` to walk the tree and `residual` (imported: `specbook.verify.residual`) for
# the residual.  Draw every random number from `generator`, one fresh uniform per child tried.
# Do not modify the inputs.

# %% nbgrader={"grade": false, "grade_id": "verify_tree_row", "locked": false, "schema_version": 3, "solution": true}
def verify_tree_row(target_probs: torch.Tensor, draft_probs: torch.Tensor | None, draft_tokens: torch.Tensor,
                    parents: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Walk down the tree accepting at most one child per level; return the path's tokens + one final token."""
    ### BEGIN SOLUTION
    V = target_probs.shape[-1]
    emitted, node, law = [], -1, target_probs[0]
    while True:
        for child in children_of(parents, node):
            x = int(draft_tokens[child])
            q_c = torch.nn.functional.one_hot(torch.tensor(x), V).to(law.dtype) if draft_probs is None \
                else draft_probs[child].to(law.dtype)
            if torch.rand((), generator=generator, dtype=law.dtype) * q_c[x] < law[x]:
                emitted.append(x)
                node, law = child, target_probs[child + 1]
                break  # accepted: continue from this child
            law = residual(law, q_c)  # rejected: the next sibling is judged against what is left
        else:  # no child accepted, or a leaf
            emitted.append(int(torch.multinomial(law, 1, generator=generator)))
            return torch.tensor(emitted, dtype=torch.long)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "verify_properties", "locked": true, "points": 2, "schema_version": 3, "solution": false}
g = torch.Generator().manual_seed(0)
one_hot = torch.eye(4, dtype=torch.float64)
# The root's p is one-hot on token 2; candidates 0 (impossible) then 2 (certain); after node 1, one-hot on 3.
rows = torch.stack([one_hot[2], one_hot[1], one_hot[3]])  # (N+1, V), N = 2
out = verify_tree_row(rows, None, torch.tensor([0, 2]), torch.tensor([-1, -1]), g)
assert isinstance(out, torch.Tensor) and out.dtype == torch.long and out.ndim == 1, out
assert out.tolist() == [2, 3], f"reject node 0, accept node 1, then the final token from row 1 + 1 = 2: {out.tolist()}"
chain = torch.tensor([[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4], [0.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
for _ in range(20):  # q == p on a chain: every draft kept, then the bonus from the last row
    assert verify_tree_row(chain, chain[:2].clone(), torch.tensor([1, 2]), torch.tensor([-1, 0]), g).tolist() == [1, 2, 3]
### BEGIN HIDDEN TESTS
# %xmode Minimal
from specbook.grading.own_work import VERIFIERS, assert_own_work

_chain = torch.tensor([[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4], [0.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
_OWN = dict(forbidden=VERIFIERS + ("specbook.verify_tree.child_table",),
            calls=[(_chain, _chain[:2].flip(-1).clone(), torch.tensor([1, 2]), torch.tensor([-1, -1]),
                    torch.Generator().manual_seed(s)) for s in range(4)])
assert_own_work(verify_tree_row, **_OWN)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "check_text", "locked": true, "schema_version": 3, "solution": false}
# ## Check your work
#
# First the chain checker (your verifier on chains, where it must agree with assignment 2), then
# the exact tree law on trees A and B.  A correct verifier passes the checker with probability at
# least 0.999 and each tree test with probability 0.999 (we reject at p < 0.001).

# %% nbgrader={"grade": false, "grade_id": "check_your_work", "locked": true, "schema_version": 3, "solution": false}
print(check_verifier(as_chain_verifier(verify_tree_row)))
for name, tree in {"A (sampled)": TREE_A, "B (deterministic)": TREE_B}.items():
    res = tree_law_check(verify_tree_row, **tree, seed=3)
    print(f"tree {name}: X^2 = {res.statistic:.1f} on {res.dof} dof, p = {res.pvalue:.3g}"
          + (f", {res.impossible} impossible blocks" if res.impossible else ""))

# %% nbgrader={"grade": true, "grade_id": "chain_law", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# Hidden test: the chain checker with another seed.
### BEGIN HIDDEN TESTS
# Short tracebacks: the feedback shows the checker's report, not this cell's source.
# %xmode Minimal
from specbook.grading import assert_verifier
from specbook.grading.own_work import VERIFIERS, assert_own_work

_chain = torch.tensor([[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4], [0.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
_OWN = dict(forbidden=VERIFIERS + ("specbook.verify_tree.child_table",),
            calls=[(_chain, _chain[:2].flip(-1).clone(), torch.tensor([1, 2]), torch.tensor([-1, -1]),
                    torch.Generator().manual_seed(s)) for s in range(4)])
assert_own_work(verify_tree_row, **_OWN)
# A second seed only if the first one fails: a correct verifier then loses these points with probability below 1e-6.
assert_verifier(as_chain_verifier(verify_tree_row), seed=60_317_029, retry_seed=60_317_031)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "tree_law", "locked": true, "points": 5, "schema_version": 3, "solution": false}
# Hidden test: the whole emitted block against the exact law, on three trees, Holm across them.
### BEGIN HIDDEN TESTS
# %xmode Minimal
TREE_C = dict(parents=torch.tensor([-1, -1, 1, 1]),  # siblings drawn from different rows, then two under node 1
              target_probs=torch.tensor([[0.3, 0.3, 0.4, 0.0], [0.2, 0.2, 0.3, 0.3], [0.5, 0.1, 0.1, 0.3],
                                         [0.1, 0.1, 0.1, 0.7], [0.4, 0.4, 0.1, 0.1]], dtype=torch.float64),
              draft_probs=torch.tensor([[0.7, 0.1, 0.1, 0.1], [0.1, 0.1, 0.2, 0.6], [0.1, 0.8, 0.05, 0.05],
                                        [0.1, 0.8, 0.05, 0.05]], dtype=torch.float64))
from specbook.grading.own_work import VERIFIERS, assert_own_work

_chain = torch.tensor([[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4], [0.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
_OWN = dict(forbidden=VERIFIERS + ("specbook.verify_tree.child_table",),
            calls=[(_chain, _chain[:2].flip(-1).clone(), torch.tensor([1, 2]), torch.tensor([-1, -1]),
                    torch.Generator().manual_seed(s)) for s in range(4)])
assert_own_work(verify_tree_row, **_OWN)
for _seeds in ((71, 72, 73), (81, 82, 83)):  # the second seeds only if the family fails with the first
    _results = {name: tree_law_check(verify_tree_row, **tree, n=4000, seed=seed)
                for (name, tree), seed in zip({"A": TREE_A, "B": TREE_B, "C": TREE_C}.items(), _seeds)}
    _family = stats.run_family({name: r.pvalue for name, r in _results.items()}, 1e-3)
    if _family.passed:
        break
print(_family)
assert _family.passed, (
    f"What went wrong: the blocks emitted on tree(s) {', '.join(_family.rejected)} do not follow the exact law. "
    "Hint: after a rejected child, the next sibling must be judged against the residual, and the final token "
    "comes from row (node + 1) of the node you stopped at (row 0 at the root).")
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "closing", "locked": true, "schema_version": 3, "solution": false}
# `specbook.verify_tree.verify_tree` is the library's version of the same rule, batched over
# rows; `specbook.tree_laws` computes the exact laws used above, and checks that the block,
# followed by ordinary sampling, gives the target's law for every length.
