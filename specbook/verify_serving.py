"""Chain verification as a serving engine batches it: ragged drafts and one generator per row.

Shape legend: B batch, K longest draft, V vocab.

The textbook :func:`specbook.verify.verify_chain` gives every row K drafts and draws every
uniform from one generator.  A serving engine batches requests whose drafts have different
lengths, and seeds each request on its own, so that a row's output depends only on its own
seed.  :func:`verify_chain_serving` does both with the same arithmetic (``accepts``,
``last_law`` and ``emit`` of :mod:`specbook.verify`): row b verifies its first
``num_drafts[b]`` drafts, the padding after them is never read, and its bonus comes from
``target_probs[b, num_drafts[b]]``.
"""
from __future__ import annotations

import torch

from .sampling import sample
from .validate import INT_DTYPES, check_block, describe
from .verify import accepts, emit, last_law, laws


def per_row_generators(generator, B: int) -> list | None:
    """None for one shared generator (or None); else the list of B per-row generators, checked."""
    if generator is None or isinstance(generator, torch.Generator):
        return None
    if not isinstance(generator, (list, tuple)) or len(generator) != B:
        raise ValueError(f"generator must be a torch.Generator, None, or a list of B = {B} generators (one per "
                         f"row), got {describe(generator)}")
    for b, g in enumerate(generator):
        if not isinstance(g, torch.Generator):
            raise ValueError(f"generator[{b}] must be a torch.Generator, got {type(g).__name__}")
    return list(generator)


def _num_drafts(num_drafts, B: int, K: int) -> torch.Tensor:
    if num_drafts is None:
        return torch.full((B,), K, dtype=torch.long)
    if not isinstance(num_drafts, torch.Tensor) or num_drafts.dtype not in INT_DTYPES:
        raise ValueError(f"num_drafts must be an integer tensor of shape ({B},), got {describe(num_drafts)}")
    if tuple(num_drafts.shape) != (B,):
        raise ValueError(f"num_drafts must have shape ({B},) (one count per row), got {tuple(num_drafts.shape)}")
    if num_drafts.numel() and (num_drafts.min() < 0 or num_drafts.max() > K):
        bad = num_drafts[(num_drafts < 0) | (num_drafts > K)][0].item()
        raise ValueError(f"num_drafts contains {bad}, outside [0, K = {K}]")
    return num_drafts.long()


def _fill_padding(target_probs, draft_probs, draft_tokens, num_drafts):
    """Replace what lies past each row's drafts by harmless values, so that padding is never checked or used."""
    B, K1, V = target_probs.shape
    device = target_probs.device
    real = torch.arange(K1 - 1, device=device) < num_drafts[:, None].to(device)  # (B, K) drafts verified
    read = torch.arange(K1, device=device) <= num_drafts[:, None].to(device)  # (B, K+1) target rows read
    uniform = torch.full((), 1.0 / V, dtype=target_probs.dtype, device=device)
    target_probs = torch.where(read[..., None], target_probs, uniform)  # (B, K+1, V)
    if isinstance(draft_probs, torch.Tensor) and draft_probs.shape == (B, K1 - 1, V):
        draft_probs = torch.where(real[..., None], draft_probs, uniform.to(draft_probs.dtype))  # (B, K, V)
    if isinstance(draft_tokens, torch.Tensor) and draft_tokens.shape == (B, K1 - 1):
        draft_tokens = torch.where(real, draft_tokens, torch.zeros((), dtype=draft_tokens.dtype, device=device))
    return target_probs, draft_probs, draft_tokens


def verify_chain_serving(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    draft_tokens: torch.Tensor,
    generator: torch.Generator | list[torch.Generator] | None = None,
    num_drafts: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`specbook.verify.verify_chain` with ragged drafts and per-row generators.

    Args:
        target_probs, draft_probs, draft_tokens: as for ``verify_chain``.
        generator: one generator (or None): a (B, K) block of uniforms, then one categorical per row
            (padding positions draw a uniform that is not used), exactly as ``verify_chain``.  A list
            of B generators: row b draws num_drafts[b] uniforms and then its last token from
            generator[b] alone, so its output depends neither on the other rows nor on K.
        num_drafts: (B,) integer in 0..K, or None (every row has K drafts).

    Returns ``(tokens (B, K+1), num_emitted (B,))``; row b emits 1..num_drafts[b]+1 tokens.
    """
    if not isinstance(target_probs, torch.Tensor) or target_probs.ndim != 3 or not target_probs.is_floating_point():
        raise ValueError(f"target_probs must be a (B, K+1, V) float tensor, got {describe(target_probs)}")
    B, K1, V = target_probs.shape
    n = _num_drafts(num_drafts, B, K1 - 1)
    per_row = per_row_generators(generator, B)
    if num_drafts is not None:
        target_probs, draft_probs, draft_tokens = _fill_padding(target_probs, draft_probs, draft_tokens, n)
    check_block(target_probs, draft_probs, draft_tokens)
    p, q, x = laws(target_probs, draft_probs, draft_tokens)  # (B, K+1, V), (B, K, V), (B, K)
    n = n.to(p.device)
    if per_row is None:
        u = torch.rand((B, K1 - 1), generator=generator, device=p.device, dtype=p.dtype)  # (B, K)
    else:
        u = torch.ones((B, K1 - 1), device=p.device, dtype=p.dtype)  # (B, K); padding stays 1
        for b, g in enumerate(per_row):
            u[b, : int(n[b])] = torch.rand(int(n[b]), generator=g, device=p.device, dtype=p.dtype)
    real = torch.arange(K1 - 1, device=p.device) < n[:, None]  # (B, K)
    num_accepted = (accepts(p, q, x, u) & real).long().cumprod(-1).sum(-1)  # (B,)
    law = last_law(p, q, num_accepted, n)  # (B, V)
    if per_row is None:
        last = sample(law, generator)  # (B,)
    else:
        last = torch.stack([sample(law[b], g) for b, g in enumerate(per_row)])  # (B,)
    return emit(x, num_accepted, last)
