"""Block verification: judge the drafted block as a whole, and keep more of it.

Shape legend: B batch, K draft length, V vocab.

Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami & Suresh, "Block Verification Accelerates
Speculative Decoding" (ICLR 2025, arXiv 2403.10444), Algorithm 2.  Token-wise verification
(:mod:`specbook.verify`) stops at the first draft it rejects.  Block verification carries a
weight per drafted prefix, what is left of the target's claim on it after the draft paid for it:

    w_0 = 1,   w_i = min(1, w_{i-1} p_{i-1}(x_i) / q_{i-1}(x_i))        (prefix x_1..x_i)

It then draws one coin per prefix length i = 1..K, heads with probability

    h_i = Z_i / (Z_i + 1 - w_i)  (i < K),   h_K = w_K,   Z_i = sum_z max(0, w_i p_i(z) - q_i(z))

and keeps the *longest* prefix whose coin came up heads (tau = 0 if none did).  It emits
x_1..x_tau and then one token from the block residual max(0, w_tau p_tau - q_tau) normalised, or
from p_K when tau = K (the bonus; q_K = 0 makes it the same formula).  A draft that token-wise
verification rejects can still be kept when the drafts after it make up for it, so the expected
number of kept drafts is never smaller, and the output law is still exactly the target's
(:mod:`specbook.block_laws` computes both exactly).  With K = 1 the two rules are the same; at
temperature 0 (p one-hot) every h_i is 1 up to the first mismatch and 0 after it, so block
verification is greedy matching (:func:`specbook.verify.accept_greedy`).
"""
from __future__ import annotations

import torch

from .sampling import sample
from .validate import check_block
from .verify import emit, laws, residual
from .verify_serving import per_row_generators


def prefix_weights(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """(B, K+1) w_0..w_K.  A draft of q(x) = 0 (fixed drafts only) reads p(x)/q(x) as infinite when
    p(x) > 0 (w_i = 1 if w_{i-1} > 0) and as 0 when p(x) = 0, as :func:`specbook.verify.accepts` does."""
    p_x = p[:, : x.shape[1]].gather(-1, x[..., None])[..., 0]  # (B, K)
    q_x = q.gather(-1, x[..., None])[..., 0]  # (B, K)
    w = [p.new_ones(p.shape[0])]  # (B,) each
    for i in range(x.shape[1]):
        paid = w[-1] * p_x[:, i]  # (B,)
        w.append(torch.where(q_x[:, i] > 0, (paid / q_x[:, i].clamp_min(torch.finfo(p.dtype).tiny)).clamp_max(1),
                             (paid > 0).to(p.dtype)))
    return torch.stack(w, 1)  # (B, K+1)


def stop_probs(p: torch.Tensor, q: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """(B, K) h_1..h_K; Z_i + 1 - w_i = 0 (w_i = 1 and p_i = q_i) reads as h_i = 1."""
    K = q.shape[1]
    Z = (w[:, 1:K, None] * p[:, 1:K] - q[:, 1:K]).clamp_min(0).sum(-1)  # (B, K-1) for i = 1..K-1
    den = Z + 1 - w[:, 1:K]  # (B, K-1)
    h = torch.where(den > 0, Z / den.clamp_min(torch.finfo(p.dtype).tiny), torch.ones_like(Z))  # (B, K-1)
    return torch.cat([h, w[:, K:]], 1)  # (B, K)


def block_accepts(p, q, x, u) -> tuple[torch.Tensor, torch.Tensor]:
    """(tau (B,): the longest prefix whose coin u_i < h_i came up, 0 when none did; w (B, K+1))."""
    w = prefix_weights(p, q, x)  # (B, K+1)
    if x.shape[1] == 0:
        return x.new_zeros(x.shape[0]), w
    heads = u < stop_probs(p, q, w)  # (B, K)
    lengths = torch.arange(1, x.shape[1] + 1, device=x.device)  # (K,)
    return (heads * lengths).amax(-1), w


def block_last_law(p, q, w, tau) -> torch.Tensor:
    """(B, V) the law of the token after the kept prefix: max(0, w_tau p_tau - q_tau) normalised, q_K = 0."""
    B, V = p.shape[0], p.shape[-1]
    rows = torch.arange(B, device=p.device)
    q_padded = torch.cat([q, q.new_zeros(B, 1, V)], dim=1)  # (B, K+1, V)
    return residual(w[rows, tau, None] * p[rows, tau], q_padded[rows, tau])  # (B, V)


def accept_block(target_probs, draft_probs, draft_tokens, generator=None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`verify_block` on inputs already checked, one generator: the decode loop's ``chain_verifier``."""
    p, q, x = laws(target_probs, draft_probs, draft_tokens)  # (B, K+1, V), (B, K, V), (B, K)
    u = torch.rand(x.shape, generator=generator, device=p.device, dtype=p.dtype)  # (B, K) one coin per prefix
    tau, w = block_accepts(p, q, x, u)  # (B,), (B, K+1)
    return emit(x, tau, sample(block_last_law(p, q, w, tau), generator))


def verify_block(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    draft_tokens: torch.Tensor,
    generator: torch.Generator | list[torch.Generator] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Block verification of K drafted tokens per row, with :func:`specbook.verify.verify_chain`'s
    arguments and result: target_probs (B, K+1, V), draft_probs (B, K, V) or None (one-hot drafts),
    draft_tokens (B, K).  ``generator``: one generator (a (B, K) block of coins, then one categorical
    per row, as verify_chain) or a list of B generators (row b draws its K coins and its last token
    from generator[b] alone).  Returns (tokens (B, K+1): kept drafts, one residual or bonus token,
    then -1; num_emitted (B,) in 1..K+1)."""
    B = target_probs.shape[0] if isinstance(target_probs, torch.Tensor) and target_probs.ndim == 3 else 0
    per_row = per_row_generators(generator, B)
    check_block(target_probs, draft_probs, draft_tokens)
    if per_row is None:
        return accept_block(target_probs, draft_probs, draft_tokens, generator)
    p, q, x = laws(target_probs, draft_probs, draft_tokens)
    u = torch.stack([torch.rand(x.shape[1], generator=g, device=p.device, dtype=p.dtype) for g in per_row])  # (B, K)
    tau, w = block_accepts(p, q, x, u)
    law = block_last_law(p, q, w, tau)  # (B, V)
    return emit(x, tau, torch.stack([sample(law[b], g) for b, g in enumerate(per_row)]))
