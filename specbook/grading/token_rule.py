"""check_token_rule: is a single-position acceptance rule exactly the modified rejection sampler?

Shape legend: V vocab, n calls in one case.

The rule under test has the signature of :func:`specbook.verify.verify_token`::

    fn(target_probs (V,), draft_probs (V,), draft_token: int, generator) -> int

For a draft x ~ q the correct rule keeps x with probability a(x) = min(1, p(x)/q(x))
and otherwise emits z ~ r = max(0, p - q) / sum(max(0, p - q)) (Leviathan et al.
2023, Algorithm 1; Chen et al. 2023, Algorithm 2).  Given x, the emitted law is
a(x) [z = x] + (1 - a(x)) r(z); over x ~ q it is p (laws.emission_law).  Whenever a
rejection is possible, p(x) < q(x), so r(x) = 0 and "emitted x" means "kept x".
That lets the checker test the two halves separately:

* acceptance: for each draft x, an exact binomial test of how often x was kept;
* residual:   the tokens emitted when the draft was not kept, against r;
* lossless:   the emitted tokens over x ~ q, against p.

The last test (with the property that no token of p = 0 is emitted) is the
``lossless`` verdict; all three are the ``standard`` one.  A rule that treats the
draft as certain (keep x with probability p(x), else sample p without x) is
lossless for every x but keeps fewer drafts: its report says by how much.
"""
from __future__ import annotations

import numpy as np
import torch

from ..laws import conditional_emission_law, residual_list
from .calls import CallFailed, as_token
from .cases import TokenCase, token_cases
from .diagnose import token_hint
from .engine import (DEFAULT_ALPHA, DEFAULT_CALL_TIMEOUT, DEFAULT_TIME_BUDGET, Collected, Plan, call_failure,
                     run_plan, too_slow)
from .lawtests import acceptance_check, law_check
from .report import FAIL, INFO, PASS, Check, Report, assert_with_retry

HINT_ACCEPT = ("Keep the draft x with probability min(1, p(x)/q(x)): draw u ~ U(0, 1) from `generator` and keep x "
               "iff u * q(x) < p(x). Use the draft's own probability q(x), not p(x) alone, and do not swap p and q. "
               "If x comes back too often although your test is right, your rejection branch can emit x again: "
               "the residual max(0, p - q) is 0 at a rejected draft.")
HINT_RESIDUAL = ("After a rejection, sample from the residual max(0, p - q) normalised (torch.clamp(p - q, min=0)); "
                 "not from p, not from q - p, and with a fresh random draw.")
HINT_LOSSLESS = "The emitted token over drafts x ~ q must be distributed exactly as the target p."


def _draws(case: TokenCase, draft_gen) -> np.ndarray:
    q = case.draft_probs
    if case.drafts == "sampled":
        return torch.multinomial(q.double(), case.n, replacement=True, generator=draft_gen).numpy()  # (n,)
    support = torch.nonzero(q > 0).flatten().numpy()
    return support[np.arange(case.n) % support.size]  # (n,)


def _where(drafts, i: int) -> str:
    return f"draft_token={int(drafts[i])}"


def _collect(case: TokenCase, drafts: np.ndarray, call, fn_gen, deadline) -> Collected:
    p, q = case.target_probs, case.draft_probs  # (V,), (V,)
    V = p.shape[0]
    drafts = drafts.tolist()
    out = np.empty(case.n, dtype=np.int64)  # (n,)
    for i, x in enumerate(drafts):
        if deadline.expired():
            return Collected(drafts[:i], out[:i], i, too_slow(case.name, i, deadline.seconds, case.n))
        tp, dp = p.clone(), q.clone()
        where = f"call {i + 1} (draft_token={x})"
        try:
            y = as_token(call(tp, dp, x, fn_gen))
            if not 0 <= y < V:
                raise CallFailed("bad output", f"returned token {y}, outside the vocabulary [0, {V})")
            if not (torch.equal(tp, p) and torch.equal(dp, q)):
                raise CallFailed("modified input", "modified target_probs or draft_probs in place")
        except CallFailed as err:
            failure = call_failure(case.name, err, where, i + 1, case.n)
            return Collected(drafts[:i], out[:i], i + 1, failure)
        out[i] = y
    return Collected(np.asarray(drafts, dtype=np.int64), out, case.n)


def _n_laws(case: TokenCase) -> int:
    if not case.statistical:
        return 0
    return 3 if case.drafts == "sampled" else 2


def _analyse(case: TokenCase, data: Collected, rng=None) -> list[Check]:
    p = case.target_probs.to(torch.float64)
    q = case.draft_probs.to(torch.float64)
    p_np = p.numpy()
    V = p_np.shape[0]
    drafts, out = data.drafts, data.outputs  # (n,), (n,)
    zero = np.flatnonzero(p_np[out] == 0)
    if zero.size:
        i = int(zero[0])
        return [Check("never emits a token with p = 0", case.name, "property", FAIL,
                      reason=f"call {i + 1} (draft_token={drafts[i]}): emitted {out[i]}, but target_probs[{out[i]}] = 0 "
                             f"({zero.size} such calls)",
                      hint="A token the target rules out must never be emitted: check the acceptance test when "
                           "p(x) = 0, and that the residual is clamped at 0.",
                      evidence=(("rare", zero.size, out.size, out.size),))]
    checks = [Check("outputs well-formed", case.name, "property", PASS,
                    reason=f"{data.calls} calls: an int token in [0, {V}) every time, never a token with p = 0, "
                           "inputs left unmodified")]
    if not case.statistical:
        return checks
    labels = [f"token {v}" for v in range(V)]
    # Acceptance: P(emit x | draft x) = a(x) + (1 - a(x)) r(x), which is a(x) whenever a(x) < 1.
    kept, tried, rate = {}, {}, {}
    xs, n_x = np.unique(drafts, return_counts=True)
    for x, nx in zip(xs.tolist(), n_x.tolist()):
        tried[x] = nx
        kept[x] = int(np.count_nonzero(out[drafts == x] == x))
        rate[x] = float(conditional_emission_law(p, q, x)[x])
    checks.append(acceptance_check("acceptance probability", case.name, kept, tried, rate, hint=HINT_ACCEPT))
    # Residual: the tokens emitted when the draft was not kept.
    res = residual_list(p.tolist(), q.tolist())
    rejected = out[out != drafts]
    has_residual = float(np.clip(p_np - q.numpy(), 0, None).sum()) > 0
    if has_residual:
        checks.append(law_check("residual after a rejection", case.name, np.bincount(rejected, minlength=V), res,
                                labels, what="the residual max(0, p - q)/Z", hint=HINT_RESIDUAL))
    else:
        checks.append(Check("residual after a rejection", case.name, "law", pvalue=1.0, n=int(rejected.size),
                            reason="p == q: no rejection is possible (any would fail the acceptance test)"))
    if case.drafts == "sampled":
        checks.append(law_check("emitted token ~ p (lossless)", case.name, np.bincount(out, minlength=V), p_np, labels,
                                what="the target p", hint=HINT_LOSSLESS, scope="lossless"))
        beta = float(np.minimum(p_np, q.numpy()).sum())
        checks.append(Check("draft kept", case.name, "cost", INFO, n=int(out.size),
                            reason=f"{np.mean(out == drafts):.3f} of drafts kept vs {beta:.3f} = sum min(p, q) "
                                   "for min(1, p/q)"))
    return checks


def _diagnose(case: TokenCase, data: Collected) -> str | None:
    """The hint a failed case's data point to (:func:`specbook.grading.diagnose.token_hint`); sampled drafts only."""
    if case.drafts != "sampled" or not case.statistical:
        return None
    p, q = case.target_probs.double().numpy(), case.draft_probs.double().numpy()
    residual = np.asarray(residual_list(p.tolist(), q.tolist())) if np.clip(p - q, 0, None).sum() > 0 else None
    return token_hint(p, q, np.asarray(data.drafts), data.outputs, residual)


def _replay(call, fn_gen) -> list:
    case = token_cases()[0]
    drafts = [0, 1, 3, 5, 1, 3, 0, 5, 1, 3, 2, 1]
    return [as_token(call(case.target_probs.clone(), case.draft_probs.clone(), x, fn_gen)) for x in drafts]


PLAN = Plan("token rule", token_cases(), _draws, _collect, _analyse, _n_laws, _replay, _where, _diagnose)


def check_token_rule(fn, *, seed: int = 0, alpha: float = DEFAULT_ALPHA, call_timeout: float = DEFAULT_CALL_TIMEOUT,
                     time_budget: float = DEFAULT_TIME_BUDGET, fail_fast: bool = False, require: str = "standard",
                     isolate: bool = True) -> Report:
    """Check ``fn(target_probs, draft_probs, draft_token, generator) -> int`` against the exact laws.

    target_probs, draft_probs: 1-D float tensors (V,) (float64, or float32 in some cases); draft_token: an
    int drawn from draft_probs (or, in the "tiny" case, any token with q(x) > 0); generator: a
    ``torch.Generator`` the function should draw all its randomness from.  The function may return an
    int, a numpy integer or a one-element integer tensor.

    Returns a :class:`Report`: ``.passed`` is False if any property fails (an exception, a wrong type,
    an out-of-range or p = 0 token, modified inputs, a call over ``call_timeout`` seconds, the whole
    check over ``time_budget``) or if Holm rejects any statistical test at family-wise level ``alpha``
    (so a correct rule passes with probability >= 1 - alpha for every seed).  ``fail_fast`` stops at
    the first case that has already decided a failure; the verdict is the same as without it.

    The report carries two verdicts, ``report.lossless`` (the emitted token over x ~ q follows p, and no
    token of p = 0 is ever emitted) and ``report.standard`` (also the modified rejection sampler's
    acceptance and residual); ``report.passed`` is the one ``require`` ("standard" or "lossless") names.
    ``call_timeout`` may be ``None`` or ``math.inf`` (no per-call limit).  ``isolate=False`` runs the calls
    in this process (a weaker timer; for debugging the function under a debugger).
    """
    return run_plan(PLAN, fn, seed=seed, alpha=alpha, call_timeout=call_timeout, time_budget=time_budget,
                    fail_fast=fail_fast, require=require, isolate=isolate)


def assert_token_rule(fn, *, retry_seed: int | None = None, **kwargs) -> Report:
    """:func:`check_token_rule`, raising AssertionError with the report's text unless it passed; with
    ``retry_seed``, a failed check is run once more with that seed and the second verdict stands
    (see :func:`~specbook.grading.report.assert_with_retry`)."""
    return assert_with_retry(check_token_rule, fn, retry_seed, **kwargs)
