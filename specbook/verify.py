"""Verification: the modified rejection sampler that makes speculative decoding lossless.

Shape legend: B batch, K draft length, V vocab.

Leviathan, Kalman & Matias, "Fast Inference from Transformers via Speculative Decoding" (ICML
2023), Algorithm 1; Chen et al., "Accelerating Large Language Model Decoding with Speculative
Sampling" (2023), Algorithm 2.  For a draft token x drawn from q, target law p at its position:

    accept x with probability min(1, p(x) / q(x))
    on rejection emit z ~ max(0, p - q) / sum(max(0, p - q))      (the residual)

Then P(emit z) = p(z) whatever q is (:mod:`specbook.laws`).  A chain stops at its first rejection;
if all K drafts survive, one *bonus* token comes from p at position K, already computed by the
same pass.  ``draft_probs=None`` means deterministic drafts (q one-hot on the drafted token).
``verify_*`` check their arguments; ``accept_*`` run on inputs already checked, as the decode loop
calls them.  Ragged drafts and per-row generators: :mod:`specbook.verify_serving`.
"""
from __future__ import annotations

import torch

from .sampling import sample
from .validate import check_block, check_probs


def work_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """float64 if any input is float64, else float32 (half inputs are upcast)."""
    return torch.float64 if any(t is not None and t.dtype == torch.float64 for t in tensors) else torch.float32


def residual(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """max(0, p - q), normalised over the last dim (..., V).  With p == q it has no mass, but then a
    rejection has probability 0; should rounding make one happen, p is returned (never NaN)."""
    diff = (target_probs - draft_probs).clamp_min(0)  # (..., V)
    mass = diff.sum(-1, keepdim=True)  # (..., 1)
    return torch.where(mass > 0, diff / mass.clamp_min(torch.finfo(diff.dtype).tiny), target_probs)


def laws(target_probs: torch.Tensor, draft_probs: torch.Tensor | None, draft_tokens: torch.Tensor):
    """(p (B, K+1, V), q (B, K, V), x (B, K) long) in the working dtype; q one-hot when draft_probs is None."""
    dtype = work_dtype(target_probs, draft_probs)
    x = draft_tokens.long()
    q = torch.nn.functional.one_hot(x, target_probs.shape[-1]) if draft_probs is None else draft_probs
    return target_probs.to(dtype), q.to(dtype), x


def accepts(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """(B, K) bool: u * q(x) < p(x), i.e. accept with probability min(1, p(x)/q(x)); the strict "<"
    never accepts p(x) = 0, even when u == 0, and accepts q(x) = 0 < p(x) (min(1, p/0) = 1)."""
    p_x = p[:, : x.shape[1]].gather(-1, x[..., None])[..., 0]  # (B, K)
    q_x = q.gather(-1, x[..., None])[..., 0]  # (B, K)
    return u * q_x < p_x


def last_law(p: torch.Tensor, q: torch.Tensor, num_accepted: torch.Tensor, num_drafts) -> torch.Tensor:
    """(B, V) the law of the token after the accepted prefix: the residual at the first rejected
    position, or p at the bonus position (row b's ``num_drafts``); a zero q there makes both one formula."""
    B, V = p.shape[0], p.shape[-1]
    rows = torch.arange(B, device=p.device)
    q_padded = torch.cat([q, q.new_zeros(B, 1, V)], dim=1)  # (B, K+1, V)
    rejected = (num_accepted < num_drafts).to(p.dtype)[:, None]  # (B, 1): 0 for a bonus
    return residual(p[rows, num_accepted], q_padded[rows, num_accepted] * rejected)


def emit(x: torch.Tensor, num_accepted: torch.Tensor, last: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens (B, K+1): the accepted drafts, then ``last``, then -1 padding; num_emitted (B,))."""
    B, K = x.shape
    keep = torch.arange(K + 1, device=x.device) < num_accepted[:, None]  # (B, K+1)
    tokens = torch.where(keep, torch.cat([x, x.new_full((B, 1), -1)], dim=1), -1)  # (B, K+1)
    return tokens.scatter(1, num_accepted[:, None], last[:, None]), num_accepted + 1


def accept_chain(target_probs, draft_probs, draft_tokens, generator=None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`verify_chain` on inputs already checked: Leviathan et al.'s Algorithm 1, batched."""
    p, q, x = laws(target_probs, draft_probs, draft_tokens)  # (B, K+1, V), (B, K, V), (B, K)
    B, K = x.shape
    u = torch.rand((B, K), generator=generator, device=p.device, dtype=p.dtype)  # (B, K) one per position
    num_accepted = accepts(p, q, x, u).long().cumprod(-1).sum(-1)  # (B,) stop at the first rejection
    last = sample(last_law(p, q, num_accepted, K), generator)  # (B,) corrected or bonus token
    return emit(x, num_accepted, last)


def verify_chain(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    draft_tokens: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify K drafted tokens per row: target_probs (B, K+1, V) (the bonus position last), draft_probs
    (B, K, V) or None, draft_tokens (B, K).  Every draw comes from ``generator``: a (B, K) block of
    uniforms, then one categorical per row.  Returns (tokens (B, K+1): the accepted drafts, one
    corrected or bonus token, then -1; num_emitted (B,) in 1..K+1)."""
    check_block(target_probs, draft_probs, draft_tokens)
    return accept_chain(target_probs, draft_probs, draft_tokens, generator)


def verify_token(target_probs: torch.Tensor, draft_probs: torch.Tensor | None, draft_token: int,
                 generator: torch.Generator | None = None) -> int:
    """The rule for one position (no bonus): accept ``draft_token`` or emit from the residual.
    target_probs, draft_probs: (V,).  Returns the emitted token."""
    check_probs("target_probs", target_probs, target_probs.shape[-1:])
    V = target_probs.shape[0]
    if draft_probs is not None:
        check_probs("draft_probs", draft_probs, (V,))
    if isinstance(draft_token, bool) or not isinstance(draft_token, int) or not 0 <= draft_token < V:
        raise ValueError(f"draft_token must be an int in [0, {V}), got {draft_token!r}")
    p, q, x = laws(target_probs[None, None], None if draft_probs is None else draft_probs[None, None],
                   torch.tensor([[draft_token]], device=target_probs.device))
    u = torch.rand((1, 1), generator=generator, device=p.device, dtype=p.dtype)
    if accepts(p, q, x, u).item():
        return draft_token
    return int(sample(residual(p[0, 0], q[0, 0]), generator))


def accept_greedy(target_logits: torch.Tensor, draft_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`verify_greedy` on inputs already checked."""
    best = target_logits.argmax(-1)  # (B, K+1) first index on ties, as greedy decoding
    num_accepted = (best[:, :-1] == draft_tokens.long()).long().cumprod(-1).sum(-1)  # (B,)
    keep = torch.arange(best.shape[1], device=best.device) <= num_accepted[:, None]  # (B, K+1)
    return torch.where(keep, best, -1), num_accepted + 1  # accepted drafts equal best there


def verify_greedy(target_logits: torch.Tensor, draft_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy (temperature 0) verification: accept drafts while they equal the argmax of target_logits
    (B, K+1, V); returns (tokens, num_emitted) as :func:`verify_chain`.  NaN and rows of only -inf
    (whose argmax would be an arbitrary 0) are refused."""
    check_block(target_logits, None, draft_tokens, target_name="target_logits", logits=True)
    return accept_greedy(target_logits, draft_tokens)
