# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false}
# # Assignment 2: verifying a chain of drafts, with the bonus token
#
# The draft model proposes $K$ tokens $x_0, \dots, x_{K-1}$, drawn from its distributions
# $q_0, \dots, q_{K-1}$.  One forward pass of the target gives $p_0, \dots, p_K$: one distribution
# per draft position **plus one more** after the last draft.  The verifier walks the chain left to
# right:
#
# * draft $x_j$ is kept with probability $\min\left(1, \frac{p_j(x_j)}{q_j(x_j)}\right)$, with a
#   fresh uniform for each position;
# * at the first rejection it emits a token from the residual $\max(0, p_j - q_j)$ (normalised)
#   and **stops**;
# * if all $K$ drafts are kept, it emits a **bonus** token sampled from $p_K$, which the
#   verification pass computed for free.
#
# So every step emits between 1 and $K+1$ tokens, and their joint law is exactly that of $K+1$
# ordinary decoding steps, truncated where a rejection happened (Leviathan et al., 2023,
# Algorithm 1).  You may use `specbook.verify.residual` (imported below) for the residual.
#
# **Grading.** 10 points: properties (4) and a hidden statistical test (6) that runs
# `specbook.grading.check_verifier` on your function with a seed you do not know (and a second
# seed only if the first fails).  Write the loop yourself: a `verify_row` that calls `specbook`'s
# own verifiers (`verify_chain`, `verify_token`, ...) scores nothing.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false}
import torch

from specbook.grading import check_verifier
from specbook.verify import residual

# %% [markdown] nbgrader={"grade": false, "grade_id": "verify_text", "locked": true, "schema_version": 3, "solution": false}
# ## The verifier
#
# `verify_row(target_probs, draft_probs, draft_tokens, generator)` takes `target_probs` of shape
# `(K+1, V)`, `draft_probs` of shape `(K, V)` and `draft_tokens` of shape `(K,)` (a `LongTensor`),
# and returns a 1-D `LongTensor` of the emitted tokens: the kept drafts, then one corrected or
# bonus token.  Draw every random number from `generator`.  Do not modify the inputs.

# %% nbgrader={"grade": false, "grade_id": "verify_row", "locked": false, "schema_version": 3, "solution": true}
def verify_row(target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_tokens: torch.Tensor,
               generator: torch.Generator | None = None) -> torch.Tensor:
    """Verify K drafts left to right; return the kept prefix plus one corrected or bonus token."""
    ### BEGIN SOLUTION
    K = draft_tokens.shape[0]
    emitted = []
    for j in range(K):
        x = int(draft_tokens[j])
        u = torch.rand((), generator=generator, dtype=target_probs.dtype)
        if u * draft_probs[j, x] < target_probs[j, x]:
            emitted.append(x)
            continue
        emitted.append(int(torch.multinomial(residual(target_probs[j], draft_probs[j]), 1, generator=generator)))
        return torch.tensor(emitted, dtype=torch.long)
    emitted.append(int(torch.multinomial(target_probs[K], 1, generator=generator)))
    return torch.tensor(emitted, dtype=torch.long)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "verify_properties", "locked": true, "points": 4, "schema_version": 3, "solution": false}
g = torch.Generator().manual_seed(0)
p = torch.tensor([[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4], [0.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
drafts = torch.tensor([1, 2])
out = verify_row(p, p[:2].clone(), drafts, g)
assert isinstance(out, torch.Tensor) and out.dtype == torch.long and out.ndim == 1, out
assert out.tolist() == [1, 2, 3], f"p == q keeps both drafts, then the bonus comes from the last row: {out.tolist()}"
disjoint_q = torch.tensor([[0.0, 0.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
p2 = torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
for _ in range(20):
    out = verify_row(p2, disjoint_q, torch.tensor([3, 0]), g)
    assert len(out) == 1 and int(out[0]) in (0, 1), f"the first draft is always rejected here: {out.tolist()}"
### BEGIN HIDDEN TESTS
# %xmode Minimal
from specbook.grading.own_work import VERIFIERS, assert_own_work

assert_own_work(verify_row, forbidden=VERIFIERS, calls=[(p, p[:2].clone(), drafts, g), (p2, disjoint_q, torch.tensor([3, 0]), g)])
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "check_text", "locked": true, "schema_version": 3, "solution": false}
# ## Check your work
#
# The checker verifies position-dependent chains a few thousand times and tests the first token,
# the number of accepted drafts, the acceptance at each position, the corrected tokens, the bonus
# token and the joint law of the whole block.  A correct verifier passes with probability at least
# 0.999 for any seed; a failing report says which of these is off.

# %% nbgrader={"grade": false, "grade_id": "check_your_work", "locked": true, "schema_version": 3, "solution": false}
check_verifier(verify_row)

# %% nbgrader={"grade": true, "grade_id": "verify_law", "locked": true, "points": 6, "schema_version": 3, "solution": false}
# Hidden test: the statistical checker with another seed.
### BEGIN HIDDEN TESTS
# Short tracebacks: the feedback shows the checker's report, not this cell's source.
# %xmode Minimal
from specbook.grading import assert_verifier
from specbook.grading.own_work import VERIFIERS, assert_own_work

_p = torch.tensor([[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
_g = torch.Generator().manual_seed(1)
assert_own_work(verify_row, forbidden=VERIFIERS, calls=[(_p, _p[:2].flip(-1).clone(), torch.tensor([3, 1]), _g)] * 4)
# A second seed only if the first one fails: a correct verifier then loses these points with probability below 1e-6.
assert_verifier(verify_row, seed=7_340_021, retry_seed=7_340_023)
### END HIDDEN TESTS
