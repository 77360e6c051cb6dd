# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false}
# # Assignment 5: find and fix the bug in a sampler that looks right
#
# Below is a speculative sampler for one position, written the way real implementations
# write it: it takes the target's and the draft's **logits** and a sampling temperature,
# turns them into probabilities, and applies the acceptance rule.  It has passed code review.
# Its output reads fine.  It is not lossless.
#
# The proof of Leviathan et al. (2023, Appendix A.1) is a statement about the two
# distributions the tokens are *actually drawn from*.  The draft token x was drawn from the
# draft's distribution after the sampling parameters were applied; the target's token must come
# from the target's distribution after the same parameters.  Your job: find which side of the
# rule uses a different distribution from the one it should, predict when the bug is invisible,
# and fix it.  The grading checker (`specbook.grading`) is the judge: it runs your sampler
# thousands of times and compares what it emits with the exact law.
#
# **Grading.** 10 points: your diagnosis (2), properties of your fix (2), and a hidden
# statistical test (6): the checker, at two temperatures, with seeds you do not know.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false}
import torch

from specbook.grading import check_token_rule


def sampling_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """The distribution a token is sampled from at this temperature: softmax(logits / T)."""
    return torch.softmax(logits / temperature, dim=-1)


def given_speculative_token(target_logits, draft_logits, draft_token, temperature, generator=None) -> int:
    """One position of speculative sampling.  draft_token was drawn from sampling_probs(draft_logits, T)."""
    p = sampling_probs(target_logits, temperature)  # what the target would sample from
    q = torch.softmax(draft_logits, dim=-1)  # the draft model's distribution
    u = torch.rand((), generator=generator, dtype=p.dtype)
    if u * q[draft_token] < p[draft_token]:  # accept with probability min(1, p(x) / q(x))
        return draft_token
    leftover = (p - q).clamp(min=0)  # the residual, max(0, p - q)
    if leftover.sum() <= 0:
        leftover = p
    return int(torch.multinomial(leftover, 1, generator=generator))


def as_token_rule(sampler, temperature):
    """Adapt a logits sampler to the checker's contract fn(target_probs, draft_probs, draft_token, generator).

    The checker hands us probabilities p and q and a token drawn from q.  Logits T * log(p) give
    back exactly p after sampling_probs(., T), so a correct sampler must emit p at every T.
    """
    def rule(target_probs, draft_probs, draft_token, generator=None):
        return sampler(temperature * torch.log(target_probs), temperature * torch.log(draft_probs),
                       draft_token, temperature, generator)
    return rule


# %% [markdown] nbgrader={"grade": false, "grade_id": "evidence_text", "locked": true, "schema_version": 3, "solution": false}
# ## The evidence
#
# The checker on the given sampler, at temperature 1 and at temperature 0.6.  Read both reports:
# which checks fail, and in which cases?

# %% nbgrader={"grade": false, "grade_id": "evidence", "locked": true, "schema_version": 3, "solution": false}
at_1 = check_token_rule(as_token_rule(given_speculative_token, 1.0), seed=1)
at_06 = check_token_rule(as_token_rule(given_speculative_token, 0.6), seed=1)
print("temperature 1.0:", "PASSED" if at_1.passed else "FAILED")
print(at_06)

# %% [markdown] nbgrader={"grade": false, "grade_id": "diagnosis_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 1: the diagnosis
#
# * `EXACT_AT_TEMPERATURE`: the one temperature (a float) at which the given sampler happens to
#   be exact, whatever the logits.
# * `BUGGY_Q`: for the logits below at temperature 0.5, the probability vector the given sampler
#   uses as q in its acceptance test (a tensor of shape (4,)).  Compare it with the distribution
#   the draft token was really drawn from.

# %% nbgrader={"grade": false, "grade_id": "diagnosis_data", "locked": true, "schema_version": 3, "solution": false}
example_draft_logits = torch.tensor([2.0, 1.0, 0.0, -1.0], dtype=torch.float64)
example_temperature = 0.5
print("drawn from:", sampling_probs(example_draft_logits, example_temperature))

# %% nbgrader={"grade": false, "grade_id": "diagnosis", "locked": false, "schema_version": 3, "solution": true}
### BEGIN SOLUTION
EXACT_AT_TEMPERATURE = 1.0
BUGGY_Q = torch.softmax(example_draft_logits, dim=-1)
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "diagnosis_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert isinstance(EXACT_AT_TEMPERATURE, float)
assert isinstance(BUGGY_Q, torch.Tensor) and BUGGY_Q.shape == (4,)
### BEGIN HIDDEN TESTS
# Short tracebacks: the feedback shows the assertion message, not this cell's source.
# %xmode Minimal
assert abs(EXACT_AT_TEMPERATURE - 1.0) < 1e-9, (
    f"EXACT_AT_TEMPERATURE = {EXACT_AT_TEMPERATURE}: the two distributions of the draft agree only where "
    "dividing the logits by T changes nothing")
assert torch.allclose(BUGGY_Q.double(), torch.softmax(example_draft_logits, -1), atol=1e-6), (
    "BUGGY_Q: the given sampler tests acceptance against the draft's softmax without the temperature")
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "fix_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 2: the fix
#
# Write `speculative_token` with the same signature and contract as the given sampler, fixed.
# Keep everything that was right.  Draw every random number from `generator`.  The temperature is
# always > 0 here.

# %% nbgrader={"grade": false, "grade_id": "speculative_token", "locked": false, "schema_version": 3, "solution": true}
def speculative_token(target_logits: torch.Tensor, draft_logits: torch.Tensor, draft_token: int,
                      temperature: float, generator: torch.Generator | None = None) -> int:
    """One position of speculative sampling; draft_token was drawn from sampling_probs(draft_logits, T)."""
    ### BEGIN SOLUTION
    # Both sides at the same temperature: q must be the law draft_token was drawn from.
    p_t = sampling_probs(target_logits, temperature)
    q_t = sampling_probs(draft_logits, temperature)
    u = torch.rand((), generator=generator, dtype=p_t.dtype)
    if u * q_t[draft_token] < p_t[draft_token]:
        return draft_token
    resid = torch.clamp(p_t - q_t, min=0)
    return int(torch.multinomial(resid if resid.sum() > 0 else p_t, 1, generator=generator))
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "fix_properties", "locked": true, "points": 2, "schema_version": 3, "solution": false}
g = torch.Generator().manual_seed(0)
logits = torch.tensor([1.0, 0.5, -0.5, 2.0], dtype=torch.float64)
out = speculative_token(logits, logits.clone(), 1, 0.7, g)
assert isinstance(out, int), f"return an int, got {type(out).__name__}"
assert all(speculative_token(logits, logits.clone(), x, T, g) == x for x in range(4) for T in (0.3, 1.0, 2.5)), \
    "same logits on both sides: the draft is always kept, at every temperature"

# %% [markdown] nbgrader={"grade": false, "grade_id": "check_text", "locked": true, "schema_version": 3, "solution": false}
# ## Check your work
#
# The checker at temperature 0.6, as in the evidence above.  A correct sampler passes with
# probability at least 0.999 for any seed.

# %% nbgrader={"grade": false, "grade_id": "check_your_work", "locked": true, "schema_version": 3, "solution": false}
check_token_rule(as_token_rule(speculative_token, 0.6))

# %% nbgrader={"grade": true, "grade_id": "fix_law", "locked": true, "points": 6, "schema_version": 3, "solution": false}
# Hidden test: the statistical checker at two temperatures, with other seeds.
### BEGIN HIDDEN TESTS
# Short tracebacks: the feedback shows the checker's report, not this cell's source.
# %xmode Minimal
from specbook.grading import assert_token_rule

assert_token_rule(as_token_rule(speculative_token, 0.6), seed=50_512_007)
assert_token_rule(as_token_rule(speculative_token, 1.7), seed=50_512_011)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "closing", "locked": true, "schema_version": 3, "solution": false}
# The rule needs q to be the distribution the draft token was sampled from, with every sampling
# parameter applied (temperature, top-k, top-p).  `specbook.sampling.logits_to_probs` is the one
# function the library applies to both sides for that reason.
