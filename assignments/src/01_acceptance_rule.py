# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false}
# # Assignment 1: the acceptance rule and its residual
#
# Speculative decoding is lossless because of one small rule.  A cheap draft model proposes a
# token $x$ drawn from its distribution $q$; the target model's distribution at the same position
# is $p$.  The verifier
#
# 1. keeps $x$ with probability $\min\left(1, \frac{p(x)}{q(x)}\right)$, and
# 2. otherwise emits a token drawn from the **residual**
#    $r(z) = \frac{\max(0,\ p(z) - q(z))}{\sum_w \max(0,\ p(w) - q(w))}$.
#
# Then the emitted token is distributed exactly as $p$, whatever $q$ is (Leviathan et al., 2023,
# Algorithm 1 and Appendix A.1).  You will implement both steps.  Conventions used by `specbook`:
# `target_probs` is $p$, `draft_probs` is $q$, both 1-D `torch` tensors over the vocabulary;
# every random draw comes from the `generator` argument (`torch.rand(..., generator=generator)`,
# `torch.multinomial(..., generator=generator)`), never from a global seed.
#
# **Grading.** 10 points: the residual (2), basic properties of your rule (2), and a hidden
# statistical test (6) that runs `specbook.grading.check_token_rule` on your function with a seed
# you do not know (and a second seed only if the first fails).  Write the rule yourself: a
# function that calls `specbook`'s own verifiers or residual scores nothing on that part.
# Run the *check your work* cell below: it runs the same checker and explains what is wrong, if
# anything.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false}
import torch

from specbook.grading import check_token_rule

# %% [markdown] nbgrader={"grade": false, "grade_id": "residual_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 1: the residual
#
# Write `residual(target_probs, draft_probs)` returning $\max(0, p - q)$ normalised to sum to 1.
# When $p = q$ the residual has no mass; a rejection is then impossible, so the value does not
# matter, but it must not be NaN: return `target_probs` in that case.

# %% nbgrader={"grade": false, "grade_id": "residual", "locked": false, "schema_version": 3, "solution": true}
def residual(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """max(0, p - q) normalised over the vocabulary; target_probs itself when it has no mass."""
    ### BEGIN SOLUTION
    diff = (target_probs - draft_probs).clamp(min=0)
    mass = diff.sum()
    if mass > 0:
        return diff / mass
    return target_probs.clone()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "residual_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
p = torch.tensor([0.5, 0.3, 0.2, 0.0], dtype=torch.float64)
q = torch.tensor([0.2, 0.5, 0.2, 0.1], dtype=torch.float64)
assert torch.allclose(residual(p, q), torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64))
assert torch.equal(residual(p, p), p), "when p == q, return target_probs (no NaN)"
### BEGIN HIDDEN TESTS
# %xmode Minimal
import specbook.verify
from specbook.grading.own_work import VERIFIERS, assert_own_work

assert_own_work(residual, forbidden=("specbook.verify.residual", "specbook.verify.last_law") + VERIFIERS,
                calls=[(p, q), (p, p.clone())])
g = torch.Generator().manual_seed(11)
for _ in range(50):
    a = torch.rand(7, generator=g, dtype=torch.float64) * (torch.rand(7, generator=g) > 0.3)
    b = torch.rand(7, generator=g, dtype=torch.float64) * (torch.rand(7, generator=g) > 0.3)
    a, b = (a + 1e-3) / (a + 1e-3).sum(), b / b.sum() if b.sum() > 0 else torch.full((7,), 1 / 7.0, dtype=torch.float64)
    assert torch.allclose(residual(a, b), specbook.verify.residual(a, b)), (a, b)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "rule_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 2: the acceptance rule
#
# Write `accept_token(target_probs, draft_probs, draft_token, generator)` returning the emitted
# token as an `int`: the draft itself if it is kept, otherwise a sample from your residual.
# Compare a uniform with the ratio without dividing by zero (`u * q(x) < p(x)` is one way).

# %% nbgrader={"grade": false, "grade_id": "accept_token", "locked": false, "schema_version": 3, "solution": true}
def accept_token(target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_token: int,
                 generator: torch.Generator | None = None) -> int:
    """Keep draft_token with probability min(1, p(x)/q(x)), else emit a token from the residual."""
    ### BEGIN SOLUTION
    u = torch.rand((), generator=generator, dtype=target_probs.dtype)
    if u * draft_probs[draft_token] < target_probs[draft_token]:
        return draft_token
    return int(torch.multinomial(residual(target_probs, draft_probs), 1, generator=generator))
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "rule_properties", "locked": true, "points": 2, "schema_version": 3, "solution": false}
p = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
g = torch.Generator().manual_seed(0)
out = accept_token(p, p.clone(), 2, g)
assert isinstance(out, int), f"return an int, got {type(out).__name__}"
assert all(accept_token(p, p.clone(), x, g) == x for x in range(4) for _ in range(20)), "p == q: always keep the draft"
disjoint_q = torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=torch.float64)
p3 = torch.tensor([0.5, 0.3, 0.2, 0.0], dtype=torch.float64)
assert all(accept_token(p3, disjoint_q, 3, g) != 3 for _ in range(50)), "p(x) = 0: never keep the draft"

# %% [markdown] nbgrader={"grade": false, "grade_id": "check_text", "locked": true, "schema_version": 3, "solution": false}
# ## Check your work
#
# The checker calls your function about 10,000 times on cases chosen to expose the usual bugs
# (equal and disjoint distributions, one-hot drafts, probabilities of 1e-10, a 50k vocabulary)
# and compares what it emits with the exact laws.  A correct rule passes with probability at least
# 0.999 for any seed.  If it fails, read *What went wrong*: it says which step is off.

# %% nbgrader={"grade": false, "grade_id": "check_your_work", "locked": true, "schema_version": 3, "solution": false}
check_token_rule(accept_token)

# %% nbgrader={"grade": true, "grade_id": "rule_law", "locked": true, "points": 6, "schema_version": 3, "solution": false}
# Hidden test: the statistical checker with another seed.
### BEGIN HIDDEN TESTS
# Short tracebacks: the feedback shows the checker's report, not this cell's source.
# %xmode Minimal
from specbook.grading import assert_token_rule
from specbook.grading.own_work import VERIFIERS, assert_own_work

_p = torch.tensor([0.5, 0.3, 0.2, 0.0], dtype=torch.float64)
_q = torch.tensor([0.2, 0.5, 0.2, 0.1], dtype=torch.float64)
_g = torch.Generator().manual_seed(1)
# Your own residual may call what it likes: that is graded in part 1, not again here.
assert_own_work(accept_token, forbidden=VERIFIERS + ("specbook.verify.residual", "specbook.verify.accepts"),
                calls=[(_p, _q, x, _g) for x in (0, 1, 1, 1, 3)], allowed=(residual,))
# A second seed only if the first one fails: a correct rule then loses these points with probability below 1e-6.
assert_token_rule(accept_token, seed=20_240_917, retry_seed=20_240_919)
### END HIDDEN TESTS
