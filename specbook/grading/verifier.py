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
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from ..laws import accept_prob, block_law, residual_list
from .calls import CallFailed, as_block
from .cases import ChainCase, chain_cases
from .engine import (DEFAULT_ALPHA, DEFAULT_CALL_TIMEOUT, DEFAULT_TIME_BUDGET, Collected, Plan, call_failure,
                     run_plan, too_slow)
from .lawtests import acceptance_check, law_check
from .report import FAIL, PASS, Check, Report, assert_passed

HINT_FIRST = "The first emitted token must be distributed as target_probs[0] (the law of one ordinary step)."
HINT_COUNT = ("Verify left to right, one fresh uniform per position, and stop at the first rejection: P(m accepted) "
              "= beta_0 ... beta_{m-1} (1 - beta_m) with beta_j = sum_v min(p_j(v), q_j(v)).")
HINT_ACCEPT = ("Draft j must be judged by its own row: keep x_j with probability min(1, p_j(x_j)/q_j(x_j)), using "
               "target_probs[j] and draft_probs[j] (not j+1), with a fresh uniform for each position.")
HINT_CORRECTED = ("After rejecting draft j, emit a token from the residual max(0, p_j - q_j) normalised, at the "
                  "same position j; not from p_j, and not from another position's row.")
HINT_BONUS = ("When all K drafts are accepted, the extra token is sampled (not argmax) from target_probs[K], the "
              "last row, which the verification pass computed for free.")
HINT_BLOCK = "The joint law of the emitted block differs from the lossless one."


def _collect(case: ChainCase, call, fn_gen, draft_gen, deadline) -> Collected:
    p, q = case.target_probs, case.draft_probs  # (K+1, V), (K, V)
    K = q.shape[0]
    if case.draft_tokens is not None:
        drafts = torch.tensor([case.draft_tokens] * case.n, dtype=torch.long)  # (n, K)
    else:
        drafts = torch.multinomial(q.double(), case.n, replacement=True, generator=draft_gen).T.contiguous()  # (n, K)
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
    return 2 * K + 4 if case.statistical else 0


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
            return Check("outputs well-formed", case.name, "property", FAIL,
                         reason=f"call {i + 1} (draft_tokens={drafts[i].tolist()}, returned "
                                f"{blocks[i, :lengths[i]].tolist()}): {msg} ({len(np.unique(bad[:, 0]))} such calls)",
                         hint=hint, evidence=(("rare", len(np.unique(bad[:, 0])), n, n),))
    return None


def _analyse(case: ChainCase, data: Collected) -> list[Check]:
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
    checks.append(law_check("first emitted token", case.name, np.bincount(blocks[:, 0], minlength=V), law.first, toks,
                            what=f"its exact law {given}", hint=HINT_FIRST))
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
    return checks


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


PLAN = Plan("verifier", chain_cases(), _collect, _analyse, _n_laws, _replay)


def check_verifier(fn, *, seed: int = 0, alpha: float = DEFAULT_ALPHA, call_timeout: float = DEFAULT_CALL_TIMEOUT,
                   time_budget: float = DEFAULT_TIME_BUDGET, fail_fast: bool = False) -> Report:
    """Check ``fn(target_probs, draft_probs, draft_tokens, generator) -> LongTensor`` against the exact laws.

    target_probs (K+1, V), draft_probs (K, V): float tensors (float64, or float32 in some cases), one
    position-dependent row per position; draft_tokens (K,) long, drawn from the rows of draft_probs (or
    fixed, in the "tiny" case); generator: the ``torch.Generator`` to draw all randomness from.  The
    function returns a 1-D integer tensor: the accepted drafts, then one corrected or bonus token.

    The report fails on any property violation (exception, wrong type or shape, a length outside
    1..K+1, a prefix that is not the drafts, an out-of-range or p = 0 token, modified inputs, a call over
    ``call_timeout`` s, the whole check over ``time_budget`` s) or when Holm rejects any statistical
    test at family-wise level ``alpha``.  ``fail_fast`` stops once a failure is decided (same verdict).
    """
    return run_plan(PLAN, fn, seed=seed, alpha=alpha, call_timeout=call_timeout, time_budget=time_budget,
                    fail_fast=fail_fast)


def assert_verifier(fn, **kwargs) -> Report:
    """:func:`check_verifier`, raising AssertionError with the report's text unless it passed."""
    return assert_passed(check_verifier(fn, **kwargs))
