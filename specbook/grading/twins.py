"""The test suite's broken twins of ``verify_chain``, the block-law cases that expose them, and the
level at which both are judged.

Shared by ``tests/`` (``test_verify_stats.py``, ``test_verify.py``, the family bookkeeping in
``tests/support.py``) and ``scripts/power_report.py``, which imports it without importing the
tests. It needs only the core (sampling, verify, laws, stats), so it sits in the checker's layer.

* The family: every chi-square test of *correct* code in ``tests/`` runs at the Bonferroni level
  ``PER_TEST_ALPHA = FAMILY_ALPHA / FAMILY_BUDGET``; whatever the seeds, a correct implementation
  fails any of them with probability at most ``FAMILY_ALPHA`` (``tests/conftest.py`` holds the
  suite to the budget).  A broken twin is tested at the same level and must be rejected.
* :func:`chain_verifier`: one configurable chain verifier whose defaults equal
  :func:`specbook.verify.verify_chain` draw for draw; each keyword switches on one bug that real
  implementations shipped (DESIGN.md's pitfalls).  ``BROKEN_TWINS`` names them.
* :func:`run`: ``N`` rows of one case (``CASES``, built by :func:`make_case`) in one batched call,
  returned as the exact block law and the observed blocks; ``TWIN_CASES`` says which case exposes
  which twin (a residual bug is invisible where p == q, since nothing is ever rejected).

Shape legend: B rows, K draft length, V vocab.
"""
from __future__ import annotations

import numpy as np
import torch

from ..laws import block_law
from ..sampling import sample
from ..stats import chisquare_gof
from ..verify import residual

FAMILY_ALPHA = 1e-3
FAMILY_BUDGET = 60
PER_TEST_ALPHA = FAMILY_ALPHA / FAMILY_BUDGET

N = 40_000  # rows per block-law test


# --------------------------------------------------------------------------- observed blocks against an exact law

def encode_blocks(tokens, num_emitted, vocab_size: int) -> list[tuple[int, ...]]:
    """Rows of (tokens (B, K+1), num_emitted (B,)) as tuples of the emitted tokens."""
    return [tuple(row[:n]) for row, n in zip(tokens.tolist(), num_emitted.tolist())]


def law_and_counts(law: dict, observed: list) -> tuple[np.ndarray, np.ndarray, list]:
    """Align an exact law {outcome: prob} with observed outcomes; unseen-by-law outcomes get prob 0."""
    outcomes = sorted(set(law) | set(observed), key=lambda o: (len(o), o) if isinstance(o, tuple) else (0, o))
    index = {o: i for i, o in enumerate(outcomes)}
    counts = np.zeros(len(outcomes), dtype=np.int64)
    for o in observed:
        counts[index[o]] += 1
    probs = np.array([float(law.get(o, 0.0)) for o in outcomes], dtype=np.float64)
    return counts, probs / probs.sum(), outcomes


def fit_pvalue(law: dict, observed: list) -> float:
    """Chi-square p-value of the raw counts of ``observed`` against ``law`` (bins pooled as stats does)."""
    counts, probs, _ = law_and_counts(law, observed)
    return chisquare_gof(counts, probs).pvalue


# --------------------------------------------------------------------------- the twins

def chain_verifier(*, accept="min(1,p/q)", resample="residual", bonus_offset=0, stop_at_first=True,
                   shared_uniform=False, target_shift=0):
    """A verifier ``fn(target_probs (B, K+1, V), draft_probs (B, K, V) or None, draft_tokens (B, K),
    generator) -> (tokens (B, K+1), num_emitted (B,))``; the defaults are verify_chain itself."""

    def verify(target_probs, draft_probs, draft_tokens, generator=None):
        B, K1, V = target_probs.shape
        K = K1 - 1
        p = target_probs.to(torch.float64)
        q = torch.nn.functional.one_hot(draft_tokens, V).double() if draft_probs is None else draft_probs.double()
        judge = p[:, target_shift : target_shift + K] if K else p[:, :0]  # target_shift=1: off by one
        if judge.shape[1] < K:
            judge = torch.cat([judge, p[:, -1:].expand(B, K - judge.shape[1], V)], 1)
        p_x = judge.gather(-1, draft_tokens[..., None]).squeeze(-1)
        q_x = q.gather(-1, draft_tokens[..., None]).squeeze(-1)
        u = torch.rand((B, 1 if shared_uniform else K), generator=generator, dtype=torch.float64).expand(B, K)
        if accept == "min(1,p/q)":
            ok = u * q_x < p_x
        elif accept == "p(x)":
            ok = u < p_x
        elif accept == "p>=q":
            ok = p_x >= q_x
        else:
            raise ValueError(accept)
        n_acc = ok.long().cumprod(-1).sum(-1) if stop_at_first else ok.long().sum(-1)
        q_pad = torch.cat([q, q.new_zeros(B, 1, V)], 1)  # (B, K+1, V)
        rows = torch.arange(B)
        pos = torch.where(n_acc == K, K + bonus_offset, n_acc).clamp(0, K)  # where the last token's p is read
        if resample == "residual":
            dist = residual(p[rows, pos], q_pad[rows, n_acc])
        elif resample == "p":
            dist = p[rows, pos]
        elif resample == "q-p":  # the two sides of the residual swapped (the bonus is left right)
            dist = torch.where((n_acc < K)[:, None], residual(q_pad[rows, n_acc], p[rows, pos]), p[rows, pos])
        else:
            raise ValueError(resample)
        last = sample(dist, generator)
        if stop_at_first:
            kept = [draft_tokens[b, : n_acc[b]].tolist() for b in range(B)]
        else:  # keeps every individually accepted draft, skipping rejected ones
            kept = [draft_tokens[b][ok[b]].tolist() for b in range(B)]
        tokens = torch.full((B, K1), -1, dtype=torch.long)
        for b in range(B):
            row = kept[b] + [int(last[b])]
            tokens[b, : len(row)] = torch.tensor(row)
        return tokens, n_acc + 1

    return verify


BROKEN_TWINS = {
    "resample from p, not the residual": dict(resample="p"),
    "residual max(0, q - p) (sides swapped)": dict(resample="q-p"),
    "bonus token from position K-1": dict(bonus_offset=-1),
    "no stop at the first rejection": dict(stop_at_first=False),
    "one uniform shared by all positions": dict(shared_uniform=True),
    "target position off by one": dict(target_shift=1),
    "naive: accept w.p. p(x), resample from p": dict(accept="p(x)", resample="p"),
    "naive: accept iff p(x) >= q(x)": dict(accept="p>=q"),
}


# --------------------------------------------------------------------------- the cases that expose them

def _probs(shape, g, zero_fraction=0.3):
    w = torch.rand(shape, generator=g, dtype=torch.float64) ** 2
    w = w.masked_fill(torch.rand(shape, generator=g) < zero_fraction, 0.0)
    w[..., 0] += (w.sum(-1) == 0).double()  # never an all-zero row
    return w / w.sum(-1, keepdim=True)


def make_case(name, seed=0):
    """(target_probs (K+1, V), draft_probs (K, V) or None, fixed drafts or None) of one named case."""
    g = torch.Generator().manual_seed(seed)
    if name == "position-dependent, K=3, V=4":
        return _probs((4, 4), g), _probs((3, 4), g), None
    if name == "position-dependent, K=4, V=3":
        return _probs((5, 3), g, 0.2), _probs((4, 3), g, 0.2), None
    if name == "p == q, K=2, V=5":
        p = _probs((3, 5), g)
        return p, p[:2].clone(), None
    if name == "disjoint supports, K=2, V=4":
        p = torch.tensor([[0.6, 0.4, 0, 0], [0.1, 0.2, 0.7, 0], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
        q = torch.tensor([[0, 0, 0.5, 0.5], [0, 0, 0, 1.0]], dtype=torch.float64)
        return p, q, None
    if name == "one-hot drafts, K=4, V=4":
        return _probs((5, 4), g, 0.1), None, [1, 2, 0, 3]
    if name == "no drafts, K=0, V=6":
        return _probs((1, 6), g), _probs((0, 6), g), None
    raise KeyError(name)


CASES = ["position-dependent, K=3, V=4", "position-dependent, K=4, V=3", "p == q, K=2, V=5",
         "disjoint supports, K=2, V=4", "one-hot drafts, K=4, V=4", "no drafts, K=0, V=6"]


def run(verifier, case, seed):
    """N rows of ``case``: drafts x_i ~ q_i, then ``verifier`` once; (exact block law, observed blocks)."""
    target, draft, fixed = make_case(case)
    K, V = target.shape[0] - 1, target.shape[1]
    g = torch.Generator().manual_seed(seed)
    if fixed is not None:
        tokens = torch.tensor(fixed).expand(N, K)
    elif K:
        tokens = torch.stack([torch.multinomial(draft[i], N, replacement=True, generator=g) for i in range(K)], 1)
    else:
        tokens = torch.zeros(N, 0, dtype=torch.long)
    out, n = verifier(target.expand(N, K + 1, V), None if draft is None else draft.expand(N, K, V), tokens, g)
    law = block_law(target, draft, fixed)
    return law, encode_blocks(out, n, V)


# Which case exposes which twin (a twin can be invisible in a degenerate case, e.g. any
# residual bug when p == q, where rejection never happens).
TWIN_CASES = {
    "resample from p, not the residual": "position-dependent, K=3, V=4",
    "residual max(0, q - p) (sides swapped)": "position-dependent, K=3, V=4",
    "bonus token from position K-1": "p == q, K=2, V=5",  # every draft accepted: always a bonus
    "no stop at the first rejection": "position-dependent, K=4, V=3",
    "one uniform shared by all positions": "position-dependent, K=4, V=3",
    "target position off by one": "position-dependent, K=3, V=4",
    "naive: accept w.p. p(x), resample from p": "position-dependent, K=3, V=4",
    "naive: accept iff p(x) >= q(x)": "position-dependent, K=3, V=4",
}
