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
# statistical test (6): the checker, at two temperatures, with seeds you do not know (a second
# seed only where the first fails).  Write the fix yourself: a sampler that calls `specbook`'s own
# verifiers scores nothing on the fix.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false}
import torch

from specbook.grading import check_token_rule


def sampling_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """The distribution a token is sampled from at this temperature: softmax(logits / T)."""
    return torch.softmax(logits / temperature, dim=-1)


def given_speculative_token(target_logits, draft_logits, draft_token, temperature, generator=None) -> int:
    """One position of speculative sampling.  draft_token was drawn from sampling_probs(draft_logits, T)."""
    p = sampling_probs(target_logits, temperature)
    q = torch.softmax(draft_logits, dim=-1)
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
# Work from the code and the reports, then compute what the given sampler does on the example
# below (target and draft logits over 4 tokens, temperature 0.5; the draft token is drawn from
# `sampling_probs(example_draft_logits, 0.5)`, as the docstring says).
#
# * `EXACT_AT_TEMPERATURE`: the one temperature (a float) at which the given sampler happens to
#   be exact, whatever the logits.
# * `KEEP_1`: the probability that the given sampler keeps the draft when the drafted token is 1.
# * `EMIT_0`: the probability that the given sampler emits token 0 at all, over a draft drawn as
#   the draft really is (kept drafts of token 0, plus token 0 drawn after a rejection of any
#   draft).  A lossless sampler would give `p(0)`, printed below: is the most likely token
#   emitted too often or too rarely, and why?
#
# Plain arithmetic with `torch` is enough; the hidden test computes the same quantities
# independently.

# %% nbgrader={"grade": false, "grade_id": "diagnosis_data", "locked": true, "schema_version": 3, "solution": false}
example_target_logits = torch.tensor([2.5, 1.0, 0.5, -1.0], dtype=torch.float64)
example_draft_logits = torch.tensor([2.0, 1.0, 0.0, -1.0], dtype=torch.float64)
example_temperature = 0.5
print("the target's p at T = 0.5:", sampling_probs(example_target_logits, example_temperature))

# %% nbgrader={"grade": false, "grade_id": "diagnosis", "locked": false, "schema_version": 3, "solution": true}
### BEGIN SOLUTION
EXACT_AT_TEMPERATURE = 1.0
p_t = sampling_probs(example_target_logits, example_temperature)
drawn = sampling_probs(example_draft_logits, example_temperature)  # what the draft token really follows
used = torch.softmax(example_draft_logits, dim=-1)  # what the given sampler divides by
keep = torch.clamp(p_t / used, max=1)
KEEP_1 = float(keep[1])
leftover = torch.clamp(p_t - used, min=0)
leftover = leftover / leftover.sum()
EMIT_0 = float(drawn[0] * keep[0] + (drawn * (1 - keep)).sum() * leftover[0])
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "diagnosis_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert isinstance(EXACT_AT_TEMPERATURE, float)
assert isinstance(KEEP_1, float) and 0 <= KEEP_1 <= 1, f"KEEP_1 = {KEEP_1!r} must be a probability"
assert isinstance(EMIT_0, float) and 0 <= EMIT_0 <= 1, f"EMIT_0 = {EMIT_0!r} must be a probability"
### BEGIN HIDDEN TESTS
# Short tracebacks: the feedback shows the assertion message, not this cell's source.
# %xmode Minimal
assert abs(EXACT_AT_TEMPERATURE - 1.0) < 1e-9, (
    f"EXACT_AT_TEMPERATURE = {EXACT_AT_TEMPERATURE}: the distribution the sampler divides by and the one the "
    "draft was drawn from agree only where dividing the logits by T changes nothing")
_p = torch.exp(example_target_logits / 0.5) / torch.exp(example_target_logits / 0.5).sum()
_drawn = torch.exp(example_draft_logits / 0.5) / torch.exp(example_draft_logits / 0.5).sum()
_used = torch.exp(example_draft_logits) / torch.exp(example_draft_logits).sum()
_keep = torch.minimum(_p / _used, torch.ones(4, dtype=torch.float64))
_rest = torch.clamp(_p - _used, min=0) / torch.clamp(_p - _used, min=0).sum()
assert abs(KEEP_1 - float(_keep[1])) < 1e-6, (
    f"KEEP_1 = {KEEP_1:.4f}: the given sampler keeps x with probability min(1, p(x) / q(x)) for the q in its code, "
    "which is not the law x was drawn from")
assert abs(EMIT_0 - float(_drawn[0] * _keep[0] + (_drawn * (1 - _keep)).sum() * _rest[0])) < 1e-6, (
    f"EMIT_0 = {EMIT_0:.4f}: add the kept drafts of token 0 (drafts follow the temperature-0.5 law) and token 0's "
    "share of the leftover after every rejected draft")
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
### BEGIN HIDDEN TESTS
# %xmode Minimal
from specbook.grading.own_work import VERIFIERS, assert_own_work

_FORBIDDEN = VERIFIERS + ("specbook.verify.residual",)
assert_own_work(speculative_token, forbidden=_FORBIDDEN, calls=[(logits, logits.flip(0), x, 0.7, g) for x in range(4)])
### END HIDDEN TESTS

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

assert_own_work(speculative_token, forbidden=_FORBIDDEN, calls=[(logits, logits.flip(0), x, 1.7, g) for x in range(4)])
# Each temperature is one family; a second seed only if the first one fails, so a correct sampler loses
# these points with probability below 2e-6.
assert_token_rule(as_token_rule(speculative_token, 0.6), seed=50_512_007, retry_seed=50_512_009)
assert_token_rule(as_token_rule(speculative_token, 1.7), seed=50_512_011, retry_seed=50_512_013)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "closing", "locked": true, "schema_version": 3, "solution": false}
# The rule needs q to be the distribution the draft token was sampled from, with every sampling
# parameter applied (temperature, top-k, top-p).  `specbook.sampling.logits_to_probs` is the one
# function the library applies to both sides for that reason.
