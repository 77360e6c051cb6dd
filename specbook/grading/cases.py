"""The inputs the checker feeds to the function under test.

Shape legend: K draft length, V vocab.

Each case is chosen to expose a family of bugs (see ``docs/grading.md`` for the
detection table); sample sizes come from the power calculation there: enough
calls that every catalogued bug is caught with probability >= 0.99 at the
family's Holm level, and no more, because each call is one Python call.

Token-rule cases give (target_probs (V,), draft_probs (V,)); drafts are either
drawn from ``draft_probs`` ("sampled": the marginal law is tested too) or cycled
through every token with q(x) > 0 ("cycled": only the conditional law given the
draft is tested).  Verifier cases give (target_probs (K+1, V), draft_probs (K, V))
with position-dependent rows; drafts are drawn from each row of ``draft_probs``,
or fixed (``draft_tokens``) to test the law given one particular draft.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

LARGE_VOCAB = 50_257  # GPT-2's vocabulary size


@dataclass(frozen=True, eq=False)
class TokenCase:
    name: str
    about: str
    target_probs: torch.Tensor  # (V,)
    draft_probs: torch.Tensor  # (V,)
    n: int  # calls to the function under test
    drafts: str = "sampled"  # "sampled" (x ~ q) or "cycled" (every x with q(x) > 0 in turn)
    statistical: bool = True

    @property
    def residual_mass(self) -> float:
        """sum max(0, p - q): the probability of a rejection over x ~ q (0 when p == q)."""
        return _residual_mass(self.target_probs[None], self.draft_probs[None])


@dataclass(frozen=True, eq=False)
class ChainCase:
    name: str
    about: str
    target_probs: torch.Tensor  # (K+1, V)
    draft_probs: torch.Tensor  # (K, V)
    n: int
    statistical: bool = True
    draft_tokens: tuple[int, ...] | None = None  # fixed drafts (conditional law); None: x_i ~ q_i

    @property
    def residual_mass(self) -> float:
        """The smallest positive sum max(0, p_j - q_j) over the draft positions (0 when p == q everywhere)."""
        return _residual_mass(self.target_probs[:-1], self.draft_probs)


def _residual_mass(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> float:
    mass = (target_probs.double() - draft_probs.double()).clamp(min=0).sum(-1)  # (K,)
    mass = mass[mass > 0]
    return float(mass.min()) if mass.numel() else 0.0


def _t(rows, dtype=torch.float64) -> torch.Tensor:
    t = torch.tensor(rows, dtype=torch.float64)
    return (t / t.sum(-1, keepdim=True)).to(dtype)


def _large_pair(k: int, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Target and draft rows (k, LARGE_VOCAB) that look like truncated LM distributions (zeros outside a top-k)."""
    g = torch.Generator().manual_seed(20_240_601 + k)
    logits = torch.randn(k, LARGE_VOCAB, generator=g, dtype=torch.float64) * 3.0  # (k, V)
    draft_logits = logits + torch.randn(k, LARGE_VOCAB, generator=g, dtype=torch.float64)  # (k, V)

    def top(lg: torch.Tensor, keep: int) -> torch.Tensor:
        kth = lg.topk(keep, dim=-1).values[..., -1:]
        probs = lg.masked_fill(lg < kth, float("-inf")).softmax(-1)  # (k, V)
        return probs.to(dtype)

    return top(logits, 2000), top(draft_logits, 400)


@lru_cache(maxsize=None)
def token_cases() -> tuple[TokenCase, ...]:
    """Cases for :func:`specbook.grading.check_token_rule`, most informative first."""
    mixed_p = _t([0.30, 0.25, 0.20, 0.15, 0.10, 0.00])
    mixed_q = _t([0.10, 0.40, 0.05, 0.30, 0.00, 0.15])
    same = _t([0.40, 0.30, 0.20, 0.10])
    onehot_p = _t([0.15, 0.20, 0.30, 0.35, 0.00], torch.float32)
    onehot_q = _t([0.0, 0.0, 1.0, 0.0, 0.0], torch.float32)
    # Tiny masses: the residual max(0, p - q) has total mass 2e-10, split over a likely token
    # (1) and one the target gives 1e-10 (2).  Draft 4 has p = 0 and must always be rejected.
    tiny_p = torch.tensor([0.7, 0.3 - 2e-10, 1e-10, 1e-10, 0.0], dtype=torch.float64)
    tiny_q = torch.tensor([0.7 + 1e-10, 0.3 - 3e-10, 0.0, 1e-10, 1e-10], dtype=torch.float64)
    big_p, big_q = _large_pair(1)
    return (
        TokenCase("mixed", "overlapping p and q with zeros in both; draft 5 has p = 0",
                  mixed_p, mixed_q, 4000),
        TokenCase("one-hot draft", "deterministic draft (q one-hot, as from n-gram lookup), float32",
                  onehot_p, onehot_q, 2000),
        TokenCase("disjoint", "p and q have disjoint supports: every draft is rejected",
                  _t([0.5, 0.3, 0.2, 0.0, 0.0]), _t([0.0, 0.0, 0.0, 0.6, 0.4]), 1000),
        TokenCase("p == q", "identical distributions: every draft is accepted", same, same.clone(), 300),
        TokenCase("tiny", "probabilities of 1e-10 and a residual of total mass 2e-10", tiny_p, tiny_q, 1200,
                  drafts="cycled"),
        TokenCase("large vocab", f"V = {LARGE_VOCAB}, float32, top-k truncated (smoke test)", big_p[0], big_q[0], 12,
                  statistical=False),
    )


@lru_cache(maxsize=None)
def chain_cases() -> tuple[ChainCase, ...]:
    """Cases for :func:`specbook.grading.check_verifier`, most informative first."""
    mixed_p = _t([[0.40, 0.30, 0.20, 0.10, 0.00],
                  [0.05, 0.15, 0.40, 0.25, 0.15],
                  [0.10, 0.00, 0.25, 0.40, 0.25],
                  [0.00, 0.10, 0.15, 0.25, 0.50]])  # bonus row differs from every other row
    mixed_q = _t([[0.20, 0.40, 0.05, 0.20, 0.15],
                  [0.10, 0.05, 0.50, 0.35, 0.00],
                  [0.30, 0.10, 0.20, 0.30, 0.10]])
    onehot_p = _t([[0.10, 0.60, 0.10, 0.20],
                   [0.50, 0.10, 0.10, 0.30],
                   [0.10, 0.20, 0.30, 0.40]], torch.float32)
    onehot_q = torch.nn.functional.one_hot(torch.tensor([1, 3]), 4).to(torch.float32)
    same_p = _t([[0.40, 0.30, 0.20, 0.10], [0.10, 0.20, 0.30, 0.40], [0.25, 0.25, 0.25, 0.25]])
    disj_p = _t([[0.50, 0.30, 0.20, 0.00, 0.00], [0.20, 0.20, 0.20, 0.20, 0.20]])
    disj_q = _t([[0.00, 0.00, 0.00, 0.70, 0.30]])
    tiny_p = torch.tensor([[0.7, 0.3 - 2e-10, 1e-10, 1e-10, 0.0],
                           [0.2, 0.2, 0.2, 0.2, 0.2]], dtype=torch.float64)
    tiny_q = torch.tensor([[0.7 + 1e-10, 0.3 - 3e-10, 0.0, 1e-10, 1e-10]], dtype=torch.float64)
    big_p, big_q = _large_pair(5)
    return (
        ChainCase("mixed K=3", "position-dependent p_i and q_i with zeros; the bonus row differs",
                  mixed_p, mixed_q, 3000),
        ChainCase("one-hot K=2", "deterministic drafts (one-hot q), float32", onehot_p, onehot_q, 1500),
        ChainCase("p == q K=2", "identical distributions: all drafts accepted, then the bonus",
                  same_p, same_p[:2].clone(), 300),
        ChainCase("disjoint K=1", "disjoint supports: the first draft is always rejected", disj_p, disj_q, 600),
        ChainCase("tiny K=1", "draft 4 has p = 0 and q = 1e-10; the residual has total mass 2e-10",
                  tiny_p, tiny_q, 600, draft_tokens=(4,)),
        ChainCase("large vocab K=4", f"V = {LARGE_VOCAB}, float32, top-k truncated (smoke test)", big_p, big_q[:4], 6,
                  statistical=False),
    )
