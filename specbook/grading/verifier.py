"""check_verifier: does a chain verifier emit exactly the target's law, position by position?

Shape legend: K draft length, V vocab, n calls in one case, L emitted tokens (1..K+1).

The verifier under test verifies one row (no batch dimension)::

    fn(target_probs (K+1, V), draft_probs (K, V), draft_tokens (K,), generator) -> LongTensor (L,)

and returns the accepted draft prefix followed by one corrected or bonus token
(Leviathan et al. 2023, Algorithm 1).  With m the number of accepted drafts
(L = m + 1) the checker tests, against :func:`specbook.laws.block_law`:

* the first emitted token (its law is p_0 when drafts are x ~ q);
* m, the number of accepted drafts (stopping at the first rejection);
* acceptance at each position j: given that position j was reached, draft x is
  kept with probability min(1, p_j(x)/q_j(x)) (exact binomial tests);
* the corrected token after a rejection at j: residual max(0, p_j - q_j)/Z;
* the bonus token after K acceptances: p_K (the last row);
* the whole emitted block (joint law over all blocks).

Those tests make the ``standard`` verdict.  The ``lossless`` verdict needs no
knowledge of how the verifier uses q.  In the cases whose drafts are drawn from
draft_probs, the checker *completes* each emitted block of L tokens to K+1 tokens
with fresh draws of its own from the remaining target rows p_L, ..., p_K.  A
verifier is lossless exactly when the completed tuple is distributed as the
product p_0 x p_1 x ... x p_K (the rows here do not depend on the context): that
is what sampling K+1 tokens from the target one at a time gives, and a
speculative step followed by ordinary target steps must give the same.  The
lossless tests are, per such case: the first emitted token against p_0 (already
in the list above), each completed position j >= 1 against p_j, and the completed
tuple against the product law (cells of expected count below 10 pooled).  With
"no token of p = 0 is emitted", that is the whole lossless verdict.  Verifiers
that treat each draft as certain (keep x_j with probability p_j(x_j), else sample
p_j without x_j; EAGLE's tree verifier, vLLM's n-gram path and transformers'
sample-and-match work this way) and verifiers that never emit the bonus token are
lossless and not standard; the report then states their measured acceptance per
position against min(1, p/q)'s.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from ..laws import accept_prob, block_law, residual_list
from .calls import CallFailed, as_block
from .cases import ChainCase, chain_cases
from .diagnose import came_back, came_back_hint, chain_hint
from .engine import (DEFAULT_ALPHA, DEFAULT_CALL_TIMEOUT, DEFAULT_TIME_BUDGET, Collected, Plan, call_failure,
                     run_plan, too_slow)
from .lawtests import acceptance_check, law_check
from .report import FAIL, INFO, PASS, Check, Report, assert_with_retry

HINT_FIRST = "The first emitted token must be distributed as target_probs[0] (the law of one ordinary step)."
HINT_FIRST_FIXED = ("Here the drafts are fixed (not drawn from draft_probs), so the law tested is not target_probs[0]: "
                    "the first token is draft 0, kept with probability min(1, p_0(x_0)/q_0(x_0)), or else a token from "
                    "the residual max(0, p_0 - q_0)/Z. Check the acceptance test and the residual at position 0.")
HINT_COMPLETED = ("Completed with fresh target draws after the emitted tokens, the block must look like K+1 tokens "
                  "sampled from the target rows one at a time. Check the acceptance test, the token emitted after a "
                  "rejection (it must make up exactly the target mass the acceptance missed) and the bonus row.")
HINT_COUNT = ("Verify left to right, one fresh uniform per position, and stop at the first rejection: P(m accepted) "
              "= beta_0 ... beta_{m-1} (1 - beta_m) with beta_j = sum_v min(p_j(v), q_j(v)).")
HINT_ACCEPT = ("Draft j must be judged by its own row: keep x_j with probability min(1, p_j(x_j)/q_j(x_j)), using "
               "target_probs[j] and draft_probs[j] (not j+1), with a fresh uniform for each position.")
HINT_CORRECTED = ("After rejecting draft j, emit a token from the residual max(0, p_j - q_j) normalised, at the "
                  "same position j; not from p_j, and not from another position's row.")
HINT_BONUS = ("When all K drafts are accepted, the extra token is sampled (not argmax) from target_probs[K], the "
              "last row, which the verification pass computed for free.")
HINT_BLOCK = "The joint law of the emitted block differs from the lossless one."


def _draws(case: ChainCase, draft_gen) -> np.ndarray:
    if case.draft_tokens is not None:
        return np.tile(np.asarray(case.draft_tokens, dtype=np.int64), (case.n, 1))  # (n, K)
    q = case.draft_probs.double()
    return torch.multinomial(q, case.n, replacement=True, generator=draft_gen).T.contiguous().numpy()  # (n, K)


def _where(drafts, i: int) -> str:
    return f"draft_tokens={drafts[i].tolist()}"


def _collect(case: ChainCase, drafts: np.ndarray, call, fn_gen, deadline) -> Collected:
    p, q = case.target_probs, case.draft_probs  # (K+1, V), (K, V)
    K = q.shape[0]
    drafts = torch.from_numpy(drafts)  # (n, K)
    blocks = np.full((case.n, K + 1), -1, dtype=np.int64)  # (n, K+1), -1 after the emitted tokens
    lengths = np.zeros(case.n, dtype=np.int64)  # (n,)
    for i in range(case.n):
        if deadline.expired():
            return Collected(drafts[:i].numpy(), (blocks[:i], lengths[:i]), i,
                             too_slow(case.name, i, deadline.seconds, case.n))
        tp, dp, dt = p.clone(), q.clone(), drafts[i].clone()
        where = f"call {i + 1} (draft_tokens={drafts[i].tolist()})"
        try:
            out = as_block(call(tp, dp, dt, fn_gen), K + 1)
            if not (torch.equal(tp, p) and torch.equal(dp, q) and torch.equal(dt, drafts[i])):
                raise CallFailed("modified input", "modified target_probs, draft_probs or draft_tokens in place")
        except CallFailed as err:
            failure = call_failure(case.name, err, where, i + 1, case.n)
            return Collected(drafts[:i].numpy(), (blocks[:i], lengths[:i]), i + 1, failure)
        blocks[i, : len(out)] = out
        lengths[i] = len(out)
    return Collected(drafts.numpy(), (blocks, lengths), case.n)


def _n_laws(case: ChainCase) -> int:
    K = case.draft_probs.shape[0]
    if not case.statistical:
        return 0
    return 2 * K + 4 + (K + 1 if case.draft_tokens is None else 0)  # standard tests, then the completed ones


def _property_failure(case: ChainCase, drafts, blocks, lengths) -> Check | None:
    p = case.target_probs.to(torch.float64).numpy()  # (K+1, V)
    n, K1 = blocks.shape
    V = p.shape[1]
    pos = np.arange(K1)[None, :]  # (1, K+1)
    emitted = pos < lengths[:, None]  # (n, K+1)
    safe = np.clip(blocks, 0, V - 1)
    drafts_padded = np.pad(drafts, ((0, 0), (0, 1)), constant_values=-1)  # (n, K+1)
    problems = [
        (emitted & ((blocks < 0) | (blocks >= V)),
         "emitted token {tok} at position {j}, outside the vocabulary [0, {V})",
         "Return only the emitted tokens (no -1 padding), each in [0, V)."),
        ((pos < lengths[:, None] - 1) & (blocks != drafts_padded),
         "token {tok} at position {j} is not the draft there ({draft}); every token before the last must be an "
         "accepted draft",
         "Emit the accepted drafts unchanged, stop at the first rejection, then add exactly one token."),
        (emitted & (p[np.broadcast_to(pos, blocks.shape), safe] == 0),
         "emitted token {tok} at position {j}, where target_probs[{j}, {tok}] = 0",
         "A token the target rules out at that position must never be emitted."),
    ]
    for mask, text, hint in problems:
        bad = np.argwhere(mask)
        if bad.size:
            i, j = (int(v) for v in bad[0])
            draft = drafts[i, j] if j < K1 - 1 else None
            msg = text.format(tok=blocks[i, j], j=j, V=V, draft=draft)
            if j == lengths[i] - 1 and draft == blocks[i, j] and case.draft_tokens is None:  # a rejected draft came back
                law = _exact(case)
                hint = came_back_hint(p, drafts, blocks, lengths, law.accept, law.residuals,
                                      max(came_back(drafts, blocks, lengths), len(np.unique(bad[:, 0]))))
            return Check("outputs well-formed", case.name, "property", FAIL,
                         reason=f"call {i + 1} (draft_tokens={drafts[i].tolist()}, returned "
                                f"{blocks[i, :lengths[i]].tolist()}): {msg} ({len(np.unique(bad[:, 0]))} such calls)",
                         hint=hint, evidence=(("rare", len(np.unique(bad[:, 0])), n, n),))
    return None


def _analyse(case: ChainCase, data: Collected, rng=None) -> list[Check]:
    drafts = data.drafts  # (n, K)
    blocks, lengths = data.outputs  # (n, K+1), (n,)
    failure = _property_failure(case, drafts, blocks, lengths)
    if failure is not None:
        return [failure]
    K = drafts.shape[1]
    checks = [Check("outputs well-formed", case.name, "property", PASS,
                    reason=f"{data.calls} calls: 1 to K+1 = {K + 1} tokens in range each time, the accepted prefix "
                           "equals the drafts, never a token with p = 0, inputs left unmodified")]
    if not case.statistical:
        return checks
    law = _exact(case)
    V = law.first.shape[0]
    toks = [f"token {v}" for v in range(V)]
    given = "given the fixed drafts" if case.draft_tokens is not None else "over drafts x_i ~ q_i"
    m = lengths - 1  # (n,) accepted drafts per call
    sampled = case.draft_tokens is None
    checks.append(law_check("first emitted token", case.name, np.bincount(blocks[:, 0], minlength=V), law.first, toks,
                            what=f"its exact law {given}" + (" (target_probs[0])" if sampled else ""),
                            hint=HINT_FIRST if sampled else HINT_FIRST_FIXED,
                            scope="lossless" if sampled else "standard"))
    checks.append(law_check("number of accepted drafts", case.name, np.bincount(m, minlength=K + 1), law.count,
                            [f"{j} accepted" for j in range(K + 1)], what=f"the exact law {given}", hint=HINT_COUNT))
    for j in range(K):
        reached = m >= j
        x_j, kept_j = drafts[reached, j], m[reached] > j
        xs, tried_x = np.unique(x_j, return_counts=True)
        kept_x = np.bincount(x_j[kept_j], minlength=V)[xs]
        tried = dict(zip(xs.tolist(), tried_x.tolist()))
        kept = dict(zip(xs.tolist(), kept_x.tolist()))
        rate = {x: float(law.accept[j, x]) for x in tried}
        checks.append(acceptance_check(f"acceptance at position {j}", case.name, kept, tried, rate,
                                       where=f" at position {j}", hint=HINT_ACCEPT))
    for j in range(K):
        last = blocks[m == j, j]
        if law.residuals[j] is not None:
            checks.append(law_check(f"corrected token at position {j}", case.name, np.bincount(last, minlength=V),
                                    law.residuals[j], toks, what=f"the residual max(0, p_{j} - q_{j})/Z",
                                    hint=HINT_CORRECTED))
        else:
            checks.append(Check(f"corrected token at position {j}", case.name, "law", pvalue=1.0, n=int(last.size),
                                reason=f"p_{j} == q_{j}: no rejection possible (one would fail the count test)"))
    checks.append(law_check("bonus token", case.name, np.bincount(blocks[m == K, K], minlength=V), law.bonus, toks,
                            what=f"target_probs[{K}]", hint=HINT_BONUS))
    codes = _encode(blocks, V)  # (n,)
    slot = np.searchsorted(law.codes, codes)  # law.codes is sorted
    slot = np.where((slot < law.codes.size) & (law.codes[np.minimum(slot, law.codes.size - 1)] == codes),
                    slot, law.codes.size)  # last slot: blocks of probability 0
    counts = np.bincount(slot, minlength=law.codes.size + 1)
    checks.append(law_check("whole emitted block", case.name, counts, np.append(law.probs, 0.0),
                            law.labels + ["an impossible block"], what=f"the exact block law {given}", hint=HINT_BLOCK))
    if sampled:
        checks += _completed_checks(case, blocks, lengths, rng if rng is not None else np.random.default_rng(0))
        checks.append(_cost(case, law, m))
    return checks


def _diagnose(case: ChainCase, data: Collected) -> str | None:
    """The hint a failed case's data point to (:func:`specbook.grading.diagnose.chain_hint`); sampled drafts only."""
    if case.draft_tokens is not None or not case.statistical:
        return None
    law = _exact(case)
    blocks, lengths = data.outputs
    return chain_hint(case.target_probs.double().numpy(), case.draft_probs.double().numpy(), data.drafts, blocks,
                      lengths, law.accept, law.residuals)


def _completed_checks(case: ChainCase, blocks: np.ndarray, lengths: np.ndarray, rng) -> list[Check]:
    """The lossless tests: complete each block with target draws, then compare with the product law."""
    p = case.target_probs.to(torch.float64).numpy()  # (K+1, V)
    n, K1 = blocks.shape
    V = p.shape[1]
    fresh = np.stack([rng.choice(V, size=n, p=p[j] / p[j].sum()) for j in range(K1)], 1)  # (n, K+1)
    done = np.where(np.arange(K1)[None, :] < lengths[:, None], blocks, fresh)  # (n, K+1)
    toks = [f"token {v}" for v in range(V)]
    checks = [law_check(f"completed token at position {j}", case.name, np.bincount(done[:, j], minlength=V), p[j],
                        toks, what=f"target_probs[{j}]", hint=HINT_COMPLETED, scope="lossless")
              for j in range(1, K1)]
    product = p[0]
    for j in range(1, K1):
        product = np.multiply.outer(product, p[j])  # (V,) * (K+1)
    cells = np.ravel_multi_index(tuple(done.T), (V,) * K1)  # (n,) one cell per completed tuple
    labels = [str(t) for t in np.ndindex(*(V,) * K1)]
    checks.append(law_check("completed tuple ~ product of target rows", case.name,
                            np.bincount(cells, minlength=V ** K1), product.ravel(), labels,
                            what="the product of the target rows", hint=HINT_COMPLETED, scope="lossless"))
    return checks


def _cost(case: ChainCase, law, m: np.ndarray) -> Check:
    """Measured acceptance per position and tokens per call, against the modified rejection sampler's."""
    K = case.draft_probs.shape[0]
    p = case.target_probs.to(torch.float64)
    beta = torch.minimum(p[:K], case.draft_probs.to(torch.float64)).sum(-1).tolist()  # (K,) sum_v min(p_j, q_j)
    seen = [float(np.mean(m[m >= j] > j)) if np.any(m >= j) else float("nan") for j in range(K)]
    expected_len = float((law.count * np.arange(1, K + 2)).sum())
    z = (float(np.mean(m)) + 1 - expected_len) / max(float(np.std(m)) / np.sqrt(m.size), 1e-12)
    verdict = "more than" if z > 3 else "fewer than" if z < -3 else "as many as"  # tokens per call, 3 standard errors
    return Check("acceptance per position", case.name, "cost", INFO, n=int(m.size),
                 reason="measured " + " / ".join(f"{a:.3f}" for a in seen) + " vs min(1, p/q)'s "
                        + " / ".join(f"{b:.3f}" for b in beta)
                        + f"; tokens per call {float(np.mean(m + 1)):.3f} vs {expected_len:.3f} ({verdict} "
                          "token-wise verification)")


def _encode(blocks: np.ndarray, V: int) -> np.ndarray:
    """One int64 per block: sum_j (token_j + 1) (V + 1)^j, the -1 padding contributing 0."""
    weights = (V + 1) ** np.arange(blocks.shape[1], dtype=np.int64)  # (K+1,)
    return (blocks + 1) @ weights  # (n,)


@dataclass(frozen=True)
class _Laws:
    codes: np.ndarray  # (B,) sorted block codes with positive probability
    probs: np.ndarray  # (B,)
    labels: list
    first: np.ndarray  # (V,) law of the first emitted token
    count: np.ndarray  # (K+1,) law of the number of accepted drafts
    accept: np.ndarray  # (K, V) min(1, p_j(x)/q_j(x))
    residuals: list  # K entries: (V,) residual law, or None when p_j == q_j
    bonus: np.ndarray  # (V,)


@lru_cache(maxsize=64)
def _exact(case: ChainCase) -> _Laws:
    p = case.target_probs.to(torch.float64)
    q = case.draft_probs.to(torch.float64)
    K, V = q.shape
    law = block_law(p, q, case.draft_tokens)
    blocks = np.full((len(law), K + 1), -1, dtype=np.int64)
    for i, b in enumerate(law):
        blocks[i, : len(b)] = b
    codes = _encode(blocks, V)
    order = np.argsort(codes)
    probs = np.array(list(law.values()), dtype=np.float64)
    first, count = np.zeros(V), np.zeros(K + 1)
    np.add.at(first, blocks[:, 0], probs)
    np.add.at(count, (blocks >= 0).sum(1) - 1, probs)
    p_l, q_l = p.tolist(), q.tolist()
    accept = np.array([[float(accept_prob(p_l[j][x], q_l[j][x])) for x in range(V)] for j in range(K)])
    residuals = [np.array(residual_list(p_l[j], q_l[j])) if any(a > b for a, b in zip(p_l[j], q_l[j])) else None
                 for j in range(K)]
    labels = [str(tuple(blocks[i][blocks[i] >= 0].tolist())) for i in order]
    return _Laws(codes[order], probs[order], labels, first, count, accept, residuals, p[K].numpy())


def _replay(call, fn_gen) -> list:
    case = chain_cases()[0]
    drafts = [[1, 2, 3], [0, 3, 0], [3, 1, 4], [1, 2, 2], [0, 0, 0], [4, 2, 3]]
    return [as_block(call(case.target_probs.clone(), case.draft_probs.clone(), torch.tensor(x), fn_gen), 4)
            for x in drafts]


PLAN = Plan("verifier", chain_cases(), _draws, _collect, _analyse, _n_laws, _replay, _where, _diagnose)


def check_verifier(fn, *, seed: int = 0, alpha: float = DEFAULT_ALPHA, call_timeout: float = DEFAULT_CALL_TIMEOUT,
                   time_budget: float = DEFAULT_TIME_BUDGET, fail_fast: bool = False, require: str = "standard",
                   isolate: bool = True) -> Report:
    """Check ``fn(target_probs, draft_probs, draft_tokens, generator) -> LongTensor`` against the exact laws.

    target_probs (K+1, V), draft_probs (K, V): float tensors (float64, or float32 in some cases), one
    position-dependent row per position; draft_tokens (K,) long, drawn from the rows of draft_probs (or
    fixed, in the "tiny" case); generator: the ``torch.Generator`` to draw all randomness from.  The
    function returns a 1-D integer tensor: the accepted drafts, then one corrected or bonus token.

    The report fails on any property violation (exception, wrong type or shape, a length outside
    1..K+1, a prefix that is not the drafts, an out-of-range or p = 0 token, modified inputs, a call over
    ``call_timeout`` s, the whole check over ``time_budget`` s) or when Holm rejects any statistical
    test at family-wise level ``alpha``.  ``fail_fast`` stops once a failure is decided (same verdict).

    Two verdicts: ``report.lossless`` (the completed blocks follow the product of the target rows and no
    token of p = 0 is emitted: lossless whatever the verifier does with q) and ``report.standard`` (every
    test: the modified rejection sampler's block law); ``report.passed`` is the one ``require``
    ("standard" or "lossless") names.  ``call_timeout=None`` or ``math.inf``: no per-call limit.
    ``isolate=False`` runs the calls in this process (a weaker timer; for stepping through in a debugger).
    """
    return run_plan(PLAN, fn, seed=seed, alpha=alpha, call_timeout=call_timeout, time_budget=time_budget,
                    fail_fast=fail_fast, require=require, isolate=isolate)


def assert_verifier(fn, *, retry_seed: int | None = None, **kwargs) -> Report:
    """:func:`check_verifier`, raising AssertionError with the report's text unless it passed; with
    ``retry_seed``, a failed check is run once more with that seed and the second verdict stands
    (see :func:`~specbook.grading.report.assert_with_retry`)."""
    return assert_with_retry(check_verifier, fn, retry_seed, **kwargs)
