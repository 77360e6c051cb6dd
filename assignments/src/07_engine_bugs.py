# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false}
# # Assignment 7: two verifier bugs that shipped in serving engines
#
# Below are two chain verifiers, each the arithmetic of a bug that shipped in a real serving
# engine (simplified; the checker's catalogue, `specbook.grading.catalogue.ENGINE_BUGS`, keeps the
# faithful versions with their public sources).  Both have the contract of assignment 2:
# `verify(target_probs (K+1, V), draft_probs (K, V), draft_tokens (K,), generator)` returns the
# kept drafts, then one corrected or bonus token.  Both look reasonable; neither is lossless.
#
# Your job: read the code and the checker's reports, say which part of each verifier is wrong,
# compute by hand what each one does on a small example (the numbers show *why* the output
# law moves away from the target's), and fix engine A.
#
# **Grading.** 10 points: the diagnosis of engine A (2) and of engine B (2), properties of your
# fix (2), and a hidden statistical test of your fix (4): `specbook.grading.check_verifier`, which
# must find it lossless, with seeds you do not know.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false}
import torch

from specbook.grading import check_verifier


def engine_a_verify(target_probs, draft_probs, draft_tokens, generator=None):
    """Engine A: a draft is kept when the target's own sample at that position is the same token,
    or when the ratio test passes ("same token or u * q < p")."""
    K = draft_tokens.shape[0]
    out = []
    for j in range(K):
        x = int(draft_tokens[j])
        target_token = int(torch.multinomial(target_probs[j], 1, generator=generator))  # what the target sampled
        u = torch.rand((), generator=generator, dtype=target_probs.dtype)
        if target_token == x or u * draft_probs[j, x] < target_probs[j, x]:
            out.append(x)
            continue
        leftover = (target_probs[j] - draft_probs[j]).clamp(min=0)
        out.append(int(torch.multinomial(leftover if leftover.sum() > 0 else target_probs[j], 1, generator=generator)))
        return torch.tensor(out)
    out.append(int(torch.multinomial(target_probs[K], 1, generator=generator)))
    return torch.tensor(out)


def engine_b_verify(target_probs, draft_probs, draft_tokens, generator=None):
    """Engine B: the draft proposal travels as (token, probability), and the rejection branch
    builds the leftover distribution from what it has."""
    K = draft_tokens.shape[0]
    out = []
    for j in range(K):
        x = int(draft_tokens[j])
        q_x = draft_probs[j, x]  # the proposal's probability, as the engine stores it
        u = torch.rand((), generator=generator, dtype=target_probs.dtype)
        if u * q_x < target_probs[j, x]:
            out.append(x)
            continue
        proposal = torch.zeros_like(target_probs[j])
        proposal[x] = q_x
        leftover = (target_probs[j] - proposal).clamp(min=0)
        out.append(int(torch.multinomial(leftover if leftover.sum() > 0 else target_probs[j], 1, generator=generator)))
        return torch.tensor(out)
    out.append(int(torch.multinomial(target_probs[K], 1, generator=generator)))
    return torch.tensor(out)


# %% [markdown] nbgrader={"grade": false, "grade_id": "evidence_text", "locked": true, "schema_version": 3, "solution": false}
# ## The evidence
#
# The checker's reports on both engines.  Read which checks fail, in which cases, and the hints.

# %% nbgrader={"grade": false, "grade_id": "evidence", "locked": true, "schema_version": 3, "solution": false}
report_a = check_verifier(engine_a_verify, seed=1)
report_b = check_verifier(engine_b_verify, seed=1)
print("engine A: lossless" if report_a.lossless else "engine A: NOT lossless")
print("engine B: lossless" if report_b.lossless else "engine B: NOT lossless")
print(report_a)
print(report_b)

# %% [markdown] nbgrader={"grade": false, "grade_id": "diagnosis_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 1: the diagnosis
#
# Use one position of the example below: target `p`, draft distribution `q`, drafted token
# `x = 1` (drawn from `q`).
#
# * `WRONG_PART_A`, `WRONG_PART_B`: which part of each engine is wrong, one of `PARTS`.
# * `KEEP_A`: the probability that engine A keeps the draft `x = 1` (a float).
# * `FIRST_TOKEN_1_A`: the probability that engine A emits token 1 as its first token, over a draft
#   drawn from `q` (a float).  A lossless verifier gives `p[1]` = 0.3.
# * `AFTER_REJECTION_B`: the distribution engine B samples from after it rejects `x = 1` (a tensor
#   of shape (3,), summing to 1).

# %% nbgrader={"grade": false, "grade_id": "diagnosis_data", "locked": true, "schema_version": 3, "solution": false}
PARTS = ("the acceptance test", "the token after a rejection", "the bonus token")
p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
q = torch.tensor([0.2, 0.6, 0.2], dtype=torch.float64)
x = 1

# %% nbgrader={"grade": false, "grade_id": "diagnosis", "locked": false, "schema_version": 3, "solution": true}
### BEGIN SOLUTION
WRONG_PART_A = "the acceptance test"
WRONG_PART_B = "the token after a rejection"
ratio = torch.clamp(p / q, max=1)  # min(1, p/q) per token
keep_a = 1 - (1 - p) * (1 - ratio)  # the target's own sample is the token, or the ratio test passes
KEEP_A = float(keep_a[x])
residual = (p - q).clamp(min=0) / (p - q).clamp(min=0).sum()  # after a rejection A samples the true residual
FIRST_TOKEN_1_A = float(q[1] * keep_a[1] + ((q * (1 - keep_a)).sum()) * residual[1])
proposal = torch.zeros_like(p)
proposal[x] = q[x]
AFTER_REJECTION_B = (p - proposal).clamp(min=0) / (p - proposal).clamp(min=0).sum()
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "diagnosis_a_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert WRONG_PART_A in PARTS, f"WRONG_PART_A must be one of {PARTS}"
assert isinstance(KEEP_A, float) and isinstance(FIRST_TOKEN_1_A, float)
### BEGIN HIDDEN TESTS
# Short tracebacks: the feedback shows the assertion message, not this cell's source.
# %xmode Minimal
assert WRONG_PART_A == "the acceptance test", (
    f"WRONG_PART_A = {WRONG_PART_A!r}: compare how often engine A keeps a draft with min(1, p(x)/q(x))")
assert abs(KEEP_A - 0.65) < 1e-6, (
    f"KEEP_A = {KEEP_A}: engine A keeps x when either of two independent events happens")
assert abs(FIRST_TOKEN_1_A - 0.39) < 1e-6, (
    f"FIRST_TOKEN_1_A = {FIRST_TOKEN_1_A}: add the kept drafts of token 1 and the residual's share of token 1")
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "diagnosis_b_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert WRONG_PART_B in PARTS, f"WRONG_PART_B must be one of {PARTS}"
assert isinstance(AFTER_REJECTION_B, torch.Tensor) and AFTER_REJECTION_B.shape == (3,)
### BEGIN HIDDEN TESTS
# %xmode Minimal
assert WRONG_PART_B == "the token after a rejection", (
    f"WRONG_PART_B = {WRONG_PART_B!r}: engine B keeps drafts exactly as often as min(1, p(x)/q(x))")
assert torch.allclose(AFTER_REJECTION_B.double(), torch.tensor([5 / 7, 0.0, 2 / 7], dtype=torch.float64), atol=1e-6), (
    "AFTER_REJECTION_B: follow the code of engine B's rejection branch with this p, q and x")
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "fix_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 2: fix engine A
#
# Write `fixed_engine_a` with engine A's contract, so that the checker finds it lossless.  Keep
# what was right; draw every random number from `generator`; do not modify the inputs; write the
# rule yourself (a function that calls `specbook`'s verifiers scores nothing here).

# %% nbgrader={"grade": false, "grade_id": "fixed_engine_a", "locked": false, "schema_version": 3, "solution": true}
def fixed_engine_a(target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_tokens: torch.Tensor,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """Engine A without its shortcut: the ratio test alone decides."""
    ### BEGIN SOLUTION
    n_drafts = len(draft_tokens)
    emitted = []
    for pos in range(n_drafts):
        token = int(draft_tokens[pos])
        coin = torch.rand((), generator=generator, dtype=target_probs.dtype)
        if coin * draft_probs[pos, token] < target_probs[pos, token]:  # the ratio test alone
            emitted.append(token)
            continue
        rest = torch.clamp(target_probs[pos] - draft_probs[pos], min=0)
        rest = rest if float(rest.sum()) > 0 else target_probs[pos]
        emitted.append(int(torch.multinomial(rest, 1, generator=generator)))
        return torch.tensor(emitted, dtype=torch.long)
    emitted.append(int(torch.multinomial(target_probs[n_drafts], 1, generator=generator)))
    return torch.tensor(emitted, dtype=torch.long)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "fix_properties", "locked": true, "points": 2, "schema_version": 3, "solution": false}
g = torch.Generator().manual_seed(0)
rows = torch.tensor([[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4], [0.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
out = fixed_engine_a(rows, rows[:2].clone(), torch.tensor([1, 2]), g)
assert isinstance(out, torch.Tensor) and out.ndim == 1, out
assert out.tolist() == [1, 2, 3], f"p == q keeps both drafts, then the bonus comes from the last row: {out.tolist()}"
never = torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
for _ in range(20):
    out = fixed_engine_a(never, never[:2].flip(-1).clone(), torch.tensor([3, 0]), g)
    assert len(out) == 1 and int(out[0]) in (0, 1), f"a draft the target gives probability 0 is never kept: {out.tolist()}"

# %% [markdown] nbgrader={"grade": false, "grade_id": "check_text", "locked": true, "schema_version": 3, "solution": false}
# ## Check your work
#
# The checker on your fix.  A lossless verifier passes `lossless` with probability at least 0.999
# for any seed; the hidden test runs it with other seeds (and a second seed if the first fails, so
# a correct fix loses points with probability below one in a million).

# %% nbgrader={"grade": false, "grade_id": "check_your_work", "locked": true, "schema_version": 3, "solution": false}
check_verifier(fixed_engine_a, require="lossless")

# %% nbgrader={"grade": true, "grade_id": "fix_law", "locked": true, "points": 4, "schema_version": 3, "solution": false}
# Hidden test: the checker must find the fix lossless; a second seed only if the first one fails.
### BEGIN HIDDEN TESTS
# Short tracebacks: the feedback shows the checker's report, not this cell's source.
# %xmode Minimal
from specbook.grading.own_work import VERIFIERS, assert_own_work

_rows = torch.tensor([[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
assert_own_work(fixed_engine_a, forbidden=VERIFIERS + ("specbook.verify.residual",),
                calls=[(_rows, _rows[:2].flip(-1).clone(), torch.tensor([3, 1]), torch.Generator().manual_seed(s))
                       for s in range(4)])
_report = check_verifier(fixed_engine_a, seed=70_417_003, require="lossless")
if not _report.passed:
    _report = check_verifier(fixed_engine_a, seed=70_417_011, require="lossless")
print(_report)
assert _report.passed, "What went wrong: the checker does not find fixed_engine_a lossless (the report above says why)."
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "closing", "locked": true, "schema_version": 3, "solution": false}
# Engine A is rtp-llm's MTP kernel before PR #1295; engine B is xLLM's rejection sampler before PR
# #2175.  `python -m specbook.grading --engine-bugs` runs these and four more engine bugs through the
# checker; `docs/grading.md` lists them with their sources.
