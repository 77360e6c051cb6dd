"""Verification: the modified rejection sampler that makes speculative decoding lossless.

Shape legend: B batch, K draft length, V vocab.

Leviathan, Kalman & Matias, "Fast Inference from Transformers via Speculative
Decoding" (ICML 2023), Algorithm 1; Chen et al., "Accelerating Large Language
Model Decoding with Speculative Sampling" (2023), Algorithm 2.  For a draft
token x drawn from q, with target distribution p at the same position:

    accept x with probability min(1, p(x) / q(x))
    on rejection emit z ~ max(0, p - q) / sum(max(0, p - q))      (the residual)

Then P(emit z) = p(z) exactly, whatever q is (see :mod:`specbook.laws`).  A
chain of K drafts is verified left to right and stops at the first rejection;
if all K survive, one *bonus* token is drawn from the target's distribution at
position K, which the single verification pass has already computed.

Conventions: ``target_probs`` are p, ``draft_probs`` are q.  ``draft_probs=None``
means deterministic drafts (q is one-hot on the drafted token), as produced by
n-gram lookup or greedy drafting.  Every random draw comes from ``generator``.

For serving engines, :func:`verify_chain` also takes one generator per row (a
row's output then depends only on its own generator, as with per-request seeds)
and ragged drafts (``num_drafts``: row b verifies only its first num_drafts[b]
drafts; the padding after them is never read, and its bonus comes from
target_probs[b, num_drafts[b]]).
"""
from __future__ import annotations

import torch

from .sampling import sample

# Probability rows must sum to 1 within this tolerance (absolute), per dtype.
SUM_TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 2e-2}


def work_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """float64 if any input is float64, else float32 (half inputs are upcast)."""
    return torch.float64 if any(t is not None and t.dtype == torch.float64 for t in tensors) else torch.float32


def check_probs(name: str, probs: torch.Tensor, ndim: int | None = None) -> None:
    """Raise ValueError unless ``probs`` is a tensor of probability rows over its last dim."""
    if not isinstance(probs, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(probs).__name__}")
    if ndim is not None and probs.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dims, got shape {tuple(probs.shape)}")
    if not probs.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {probs.dtype}")
    if probs.ndim == 0 or probs.shape[-1] == 0:
        raise ValueError(f"{name} has an empty vocabulary dimension (shape {tuple(probs.shape)})")
    if probs.numel() == 0:
        return  # e.g. draft_probs of shape (B, 0, V): no drafts this step
    if not torch.isfinite(probs).all():
        bad = probs[~torch.isfinite(probs)].flatten()[0].item()
        raise ValueError(f"{name} contains a non-finite value ({bad})")
    if (probs < 0).any():
        raise ValueError(f"{name} contains a negative probability ({probs.min().item():.3g})")
    tol = SUM_TOLERANCE.get(probs.dtype, 1e-4)
    sums = probs.to(torch.float64).sum(-1)
    worst_row = (sums - 1).abs().flatten().argmax()
    worst = (sums - 1).abs().flatten()[worst_row].item()
    if worst > tol:
        raise ValueError(f"{name} rows must sum to 1 (tolerance {tol:g} for {probs.dtype}); a row sums to {sums.flatten()[worst_row].item():.6g}")


def check_tokens(name: str, tokens: torch.Tensor, vocab_size: int) -> None:
    if not isinstance(tokens, torch.Tensor) or tokens.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise ValueError(f"{name} must be an integer tensor, got {getattr(tokens, 'dtype', type(tokens).__name__)}")
    tokens = tokens.long()  # compare as int64: a uint8 id of 250 is legal when V = 300
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= vocab_size):
        bad = tokens[(tokens < 0) | (tokens >= vocab_size)].flatten()[0].item()
        raise ValueError(f"{name} contains token {bad}, outside the vocabulary [0, {vocab_size})")


def _check_chain_inputs(target_probs, draft_probs, draft_tokens) -> None:
    check_probs("target_probs", target_probs, ndim=3)
    B, K1, V = target_probs.shape
    if not isinstance(draft_tokens, torch.Tensor) or draft_tokens.ndim != 2:
        raise ValueError(f"draft_tokens must be a (B, K) tensor, got {getattr(draft_tokens, 'shape', draft_tokens)!r}")
    if tuple(draft_tokens.shape) != (B, K1 - 1):
        raise ValueError(
            f"draft_tokens has shape {tuple(draft_tokens.shape)} but target_probs {tuple(target_probs.shape)} "
            f"needs ({B}, {K1 - 1}): target_probs must hold K+1 positions for K drafts"
        )
    check_tokens("draft_tokens", draft_tokens, V)
    if draft_probs is not None:
        if not isinstance(draft_probs, torch.Tensor) or tuple(draft_probs.shape) != (B, K1 - 1, V):
            raise ValueError(
                f"draft_probs has shape {tuple(getattr(draft_probs, 'shape', ()))}, expected {(B, K1 - 1, V)} "
                "(same batch, K and vocabulary as target_probs)"
            )
        check_probs("draft_probs", draft_probs, ndim=3)


def _check_generators(generator, B: int) -> list | None:
    """None for one shared generator (or None); else the list of B per-row generators, validated."""
    if generator is None or isinstance(generator, torch.Generator):
        return None
    if not isinstance(generator, (list, tuple)) or len(generator) != B:
        raise ValueError(f"generator must be a torch.Generator, None, or a list of B = {B} generators (one per "
                         f"row), got {type(generator).__name__}"
                         + (f" of length {len(generator)}" if isinstance(generator, (list, tuple)) else ""))
    for b, g in enumerate(generator):
        if not isinstance(g, torch.Generator):
            raise ValueError(f"generator[{b}] must be a torch.Generator, got {type(g).__name__}")
    return list(generator)


def _check_num_drafts(num_drafts, B: int, K: int) -> torch.Tensor:
    if not isinstance(num_drafts, torch.Tensor) or num_drafts.dtype not in (torch.int64, torch.int32, torch.int16,
                                                                              torch.uint8):
        raise ValueError(f"num_drafts must be an integer tensor of shape ({B},), got "
                         f"{getattr(num_drafts, 'dtype', type(num_drafts).__name__)}")
    if tuple(num_drafts.shape) != (B,):
        raise ValueError(f"num_drafts must have shape ({B},) (one count per row), got {tuple(num_drafts.shape)}")
    if num_drafts.numel() and (num_drafts.min() < 0 or num_drafts.max() > K):
        bad = num_drafts[(num_drafts < 0) | (num_drafts > K)][0].item()
        raise ValueError(f"num_drafts contains {bad}, outside [0, K = {K}]")
    return num_drafts.long()


def _fill_padding(target_probs, draft_probs, draft_tokens, num_drafts):
    """Replace what lies past each row's drafts by harmless values, so that padding is never validated or used."""
    if not isinstance(target_probs, torch.Tensor) or target_probs.ndim != 3 or not target_probs.is_floating_point():
        raise ValueError(f"target_probs must be a (B, K+1, V) float tensor, got "
                         f"{getattr(target_probs, 'shape', type(target_probs).__name__)}")
    B, K1, V = target_probs.shape
    if not isinstance(draft_tokens, torch.Tensor) or tuple(draft_tokens.shape) != (B, K1 - 1):
        raise ValueError(f"draft_tokens must have shape {(B, K1 - 1)}, got {getattr(draft_tokens, 'shape', draft_tokens)!r}")
    num_drafts = _check_num_drafts(num_drafts, B, K1 - 1)
    device = target_probs.device
    real = torch.arange(K1 - 1, device=device) < num_drafts[:, None]  # (B, K) drafts that are verified
    real_t = torch.arange(K1, device=device) <= num_drafts[:, None]  # (B, K+1) target rows that are read
    uniform = torch.full((), 1.0 / V, dtype=target_probs.dtype, device=device)
    target_probs = torch.where(real_t[..., None], target_probs, uniform)  # (B, K+1, V)
    if draft_probs is not None and isinstance(draft_probs, torch.Tensor) and draft_probs.shape == (B, K1 - 1, V):
        draft_probs = torch.where(real[..., None], draft_probs, uniform.to(draft_probs.dtype))  # (B, K, V)
    draft_tokens = torch.where(real, draft_tokens, torch.zeros((), dtype=draft_tokens.dtype, device=device))
    return target_probs, draft_probs, draft_tokens, num_drafts


def residual(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """max(0, p - q), normalised over the last dim (..., V).

    When p == q the residual has no mass, but then a rejection has probability 0,
    so in exact arithmetic the value is never used.  If rounding ever makes such a
    rejection happen, we return p instead of dividing by zero: the output stays on
    the target's support and no NaN can appear.
    """
    diff = (target_probs - draft_probs).clamp_min(0)  # (..., V)
    mass = diff.sum(-1, keepdim=True)  # (..., 1)
    return torch.where(mass > 0, diff / mass.clamp_min(torch.finfo(diff.dtype).tiny), target_probs)


def verify_chain(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    draft_tokens: torch.Tensor,
    generator: torch.Generator | list[torch.Generator] | None = None,
    num_drafts: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify a chain of K drafted tokens per row in one go.

    Args:
        target_probs: (B, K+1, V) target distribution at each draft position plus the bonus position.
        draft_probs:  (B, K, V) the distribution each draft was sampled from, or None (one-hot drafts).
        draft_tokens: (B, K) long.
        generator: source of every random draw.  One generator (or None): a (B, K) block of uniforms,
            then one categorical per row, in that order (padding positions draw a uniform that is not
            used).  A list of B generators: row b draws num_drafts[b] uniforms and then its last token
            from generator[b] alone, so its output does not depend on the other rows or on K.
        num_drafts: (B,) integer in 0..K, or None (every row has K drafts).  Row b verifies
            draft_tokens[b, :num_drafts[b]]; the padding after them (tokens and probability rows,
            target rows past num_drafts[b]) is never read, and the bonus comes from
            target_probs[b, num_drafts[b]].

    Returns:
        tokens: (B, K+1) long: the accepted draft prefix, then one corrected or bonus token, then -1 padding.
        num_emitted: (B,) long in 1..num_drafts+1.
    """
    if num_drafts is not None:
        target_probs, draft_probs, draft_tokens, num_drafts = _fill_padding(target_probs, draft_probs, draft_tokens,
                                                                            num_drafts)
    _check_chain_inputs(target_probs, draft_probs, draft_tokens)
    B, K1, V = target_probs.shape
    K = K1 - 1
    per_row = _check_generators(generator, B)
    dtype = work_dtype(target_probs, draft_probs)
    device = target_probs.device
    p = target_probs.to(dtype)  # (B, K+1, V)
    draft_tokens = draft_tokens.long()

    if draft_probs is None:
        q = torch.nn.functional.one_hot(draft_tokens, V).to(dtype)  # (B, K, V)
    else:
        q = draft_probs.to(dtype)  # (B, K, V)

    # Acceptance test, one independent uniform per position: accept iff u * q(x) < p(x).
    # The strict "<" means a zero-probability token is never accepted, even if u == 0,
    # and q(x) == 0 < p(x) (a draft the drafter "could not" have made) is accepted (min(1, p/0) = 1).
    p_x = p[:, :K].gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1)  # (B, K)
    q_x = q.gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1)  # (B, K)
    n_drafts = torch.full((B,), K, device=device) if num_drafts is None else num_drafts.to(device)  # (B,)
    if per_row is None:
        u = torch.rand((B, K), generator=generator, device=device, dtype=dtype)  # (B, K)
    else:
        u = torch.ones((B, K), device=device, dtype=dtype)  # (B, K); padding stays 1: never accepted
        for b, g in enumerate(per_row):
            u[b, : int(n_drafts[b])] = torch.rand(int(n_drafts[b]), generator=g, device=device, dtype=dtype)
    accepted = (u * q_x < p_x) & (torch.arange(K, device=device) < n_drafts[:, None])  # (B, K)
    num_accepted = accepted.long().cumprod(-1).sum(-1)  # (B,) stop at the first rejection

    # The last token comes from the residual at the first rejected position, or from p at the row's
    # bonus position num_drafts (K unless ragged).  A zero q there makes both one formula.
    q_padded = torch.cat([q, q.new_zeros(B, 1, V)], dim=1)  # (B, K+1, V)
    rows = torch.arange(B, device=device)
    rejected = (num_accepted < n_drafts).to(dtype)[:, None]  # (B, 1): 0 for a bonus
    last_dist = residual(p[rows, num_accepted], q_padded[rows, num_accepted] * rejected)  # (B, V)
    if per_row is None:
        last_token = sample(last_dist, generator)  # (B,)
    else:
        last_token = torch.stack([sample(last_dist[b], g) for b, g in enumerate(per_row)])  # (B,)

    positions = torch.arange(K1, device=device).expand(B, K1)  # (B, K+1)
    drafts_padded = torch.cat([draft_tokens, draft_tokens.new_full((B, 1), -1)], dim=1)  # (B, K+1)
    tokens = torch.where(positions < num_accepted[:, None], drafts_padded, -1)
    tokens = tokens.scatter(1, num_accepted[:, None], last_token[:, None])  # (B, K+1)
    return tokens, num_accepted + 1


def verify_token(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    draft_token: int,
    generator: torch.Generator | None = None,
) -> int:
    """The token-level rule for one position: accept ``draft_token`` or emit from the residual.

    target_probs, draft_probs: (V,).  Returns the emitted token (never a bonus: K = 1 minus the bonus).
    """
    check_probs("target_probs", target_probs, ndim=1)
    V = target_probs.shape[0]
    if draft_probs is not None:
        check_probs("draft_probs", draft_probs, ndim=1)
        if draft_probs.shape != target_probs.shape:
            raise ValueError(f"draft_probs has shape {tuple(draft_probs.shape)}, target_probs {tuple(target_probs.shape)}")
    if isinstance(draft_token, bool) or not isinstance(draft_token, int) or not 0 <= draft_token < V:
        raise ValueError(f"draft_token must be an int in [0, {V}), got {draft_token!r}")
    dtype = work_dtype(target_probs, draft_probs)
    p = target_probs.to(dtype)
    q = torch.nn.functional.one_hot(torch.tensor(draft_token), V).to(dtype) if draft_probs is None else draft_probs.to(dtype)
    u = torch.rand((), generator=generator, device=p.device, dtype=dtype)
    if u * q[draft_token] < p[draft_token]:
        return draft_token
    return int(sample(residual(p, q), generator))


def verify_greedy(target_logits: torch.Tensor, draft_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy (temperature 0) verification: accept drafts while they equal the target's argmax.

    target_logits: (B, K+1, V) logits or probabilities (only the argmax matters; first index on ties,
    exactly like greedy autoregressive decoding).  Returns (tokens (B, K+1), num_emitted (B,)) as
    :func:`verify_chain` does; no randomness.  Refused with ValueError, like the sampling path
    refuses them: non-float (e.g. bool) logits, NaN, and a row whose entries are all ``-inf``
    (no token is possible there, so its argmax would be an arbitrary 0).
    """
    if not isinstance(target_logits, torch.Tensor) or target_logits.ndim != 3:
        raise ValueError(f"target_logits must be a (B, K+1, V) tensor, got "
                         f"{tuple(target_logits.shape) if isinstance(target_logits, torch.Tensor) else target_logits!r}")
    if not target_logits.is_floating_point():
        raise ValueError(f"target_logits must be a floating-point tensor, got dtype {target_logits.dtype}")
    B, K1, V = target_logits.shape
    if K1 < 1 or V < 1:
        raise ValueError(f"target_logits must hold at least one position and one token, got shape {(B, K1, V)}")
    if not isinstance(draft_tokens, torch.Tensor) or tuple(draft_tokens.shape) != (B, K1 - 1):
        raise ValueError(f"draft_tokens must have shape {(B, K1 - 1)}, got "
                         f"{tuple(draft_tokens.shape) if isinstance(draft_tokens, torch.Tensor) else draft_tokens!r}")
    check_tokens("draft_tokens", draft_tokens, V)
    if torch.isnan(target_logits).any():
        raise ValueError("target_logits contain NaN")
    dead = (target_logits == -torch.inf).all(-1)  # (B, K+1)
    if dead.any():
        b, k = dead.nonzero()[0].tolist()
        raise ValueError(f"target_logits[{b}, {k}] is -inf everywhere: no token is possible at that position")
    best = target_logits.argmax(-1)  # (B, K+1)
    agree = best[:, :-1] == draft_tokens.long()  # (B, K)
    num_accepted = agree.long().cumprod(-1).sum(-1)  # (B,)
    positions = torch.arange(K1, device=best.device).expand(B, K1)
    tokens = torch.where(positions <= num_accepted[:, None], best, -1)  # accepted drafts equal best there
    return tokens, num_accepted + 1
