"""Checks at the decode loop's doors: prompts, end tokens, budgets, and what drafters and targets return.

Shape legend: B batch (live rows), K draft tokens (chain length or tree nodes), V vocab, T prompt length.

The loop in :mod:`specbook.decode` trusts nothing it did not compute itself.  A drafter written by
a student, or a target wrapping some other library, can hand back a tensor of the wrong shape, a
token outside the vocabulary, a tree whose node is its own parent, or a draft distribution that
gives its own token probability zero.  Each of these, left alone, either crashes deep inside
torch or (worse) silently breaks the lossless guarantee: if q(x) = 0 for a drafted x, the ratio
p(x)/q(x) is infinite and x is always accepted.  So every ``Draft`` and every block of target
logits is checked here, before any of it is used, and the error names who produced it.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from .protocols import Draft

_INT_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"a {x.dtype} tensor of shape {tuple(x.shape)}"
    return f"{type(x).__name__} {x!r}"[:200]


def _as_token_row(row, vocab_size: int, where: str) -> list[int]:
    """One prompt row as a list of ints in [0, V); refuse bools, floats and empty rows."""
    if isinstance(row, torch.Tensor):
        if row.dtype == torch.bool or row.dtype not in _INT_DTYPES:
            raise TypeError(f"{where} must hold integer token ids, got {_describe(row)}")
        if row.ndim != 1:
            raise ValueError(f"{where} must be 1-D, got {_describe(row)}")
        values = row.tolist()
    elif isinstance(row, (str, bytes)) or not isinstance(row, Sequence):
        raise TypeError(f"{where} must be a sequence of token ids, got {_describe(row)}")
    else:
        values = list(row)
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int):
                if isinstance(v, torch.Tensor) and v.ndim == 0 and v.dtype in _INT_DTYPES:
                    continue
                raise TypeError(f"{where} must hold integer token ids, got the element {v!r}")
        values = [int(v) for v in values]
    if not values:
        raise ValueError(f"{where} is empty: every prompt needs at least one token")
    lo, hi = min(values), max(values)
    if lo < 0 or hi >= vocab_size:
        raise ValueError(f"{where} has token ids outside [0, {vocab_size}): min {lo}, max {hi}")
    return values


def prompt_rows(prompt, vocab_size: int) -> list[list[int]]:
    """Normalise a prompt to one list of token ids per row.

    Accepted: a (T,) or (B, T) integer tensor, a list of ints (one row), or a list of rows of any
    lengths (each a list of ints or a 1-D integer tensor).  Bool and floating tensors are refused:
    ``True`` is not token 1.
    """
    if isinstance(prompt, torch.Tensor):
        if prompt.ndim == 1:
            return [_as_token_row(prompt, vocab_size, "prompt")]
        if prompt.ndim == 2:
            if prompt.shape[0] == 0:
                raise ValueError(f"prompt has no rows: got {_describe(prompt)}")
            if prompt.dtype == torch.bool or prompt.dtype not in _INT_DTYPES:
                raise TypeError(f"prompt must hold integer token ids, got {_describe(prompt)}")
            return [_as_token_row(r, vocab_size, f"prompt[{b}]") for b, r in enumerate(prompt)]
        raise ValueError(f"prompt must be a (T,) or (B, T) tensor or a list of rows, got {_describe(prompt)}")
    if isinstance(prompt, (str, bytes)) or not isinstance(prompt, Sequence):
        raise TypeError(f"prompt must be a token tensor or a list of token rows, got {_describe(prompt)}")
    if len(prompt) == 0:
        raise ValueError("prompt is empty: give at least one token")
    first = prompt[0]
    first_is_row = (isinstance(first, torch.Tensor) and first.ndim > 0) or (
        isinstance(first, Sequence) and not isinstance(first, (str, bytes)))
    if not first_is_row:  # a flat list of token ids: one row
        return [_as_token_row(prompt, vocab_size, "prompt")]
    return [_as_token_row(r, vocab_size, f"prompt[{b}]") for b, r in enumerate(prompt)]


def eos_ids(eos_token_id, vocab_size: int) -> frozenset[int]:
    """``eos_token_id`` (None, one id, or several) as a set of ids in [0, V)."""
    if eos_token_id is None:
        return frozenset()
    ids = [eos_token_id] if not isinstance(eos_token_id, (Sequence, torch.Tensor, set, frozenset)) else list(
        eos_token_id.tolist() if isinstance(eos_token_id, torch.Tensor) else eos_token_id)
    for t in ids:
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab_size:
            raise ValueError(f"eos_token_id must be None, a token id in [0, {vocab_size}) or a list of them, "
                             f"got {eos_token_id!r}")
    return frozenset(ids)


def check_max_new_tokens(max_new_tokens) -> None:
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")


def check_budget(target, rows: list[list[int]], max_new_tokens: int) -> None:
    """Refuse, before any work, a request that cannot fit in the target's context.

    The cache holds every emitted token but the last, so a row needs ``len(prompt) + max_new_tokens
    - 1`` slots; speculative decoding needs no more than that, because the loop never asks a chain
    drafter for drafts past a row's budget.  A target without ``max_length`` has no limit.
    """
    limit = getattr(target, "max_length", None)
    if limit is None:
        return
    longest = max(len(r) for r in rows)
    need = longest + max_new_tokens - 1
    if need > limit:
        raise ValueError(
            f"the longest prompt ({longest} tokens) plus max_new_tokens={max_new_tokens} needs {need} cache "
            f"slots, but the target holds max_length={limit}: shorten the prompt, lower max_new_tokens, or "
            f"build the target with a larger max_length")


def check_draft(draft, drafter, batch_size: int, vocab_size: int) -> None:
    """Validate what ``drafter.propose`` returned for ``batch_size`` live rows (see :class:`Draft`)."""
    who = f"{type(drafter).__name__}.propose()"
    if not isinstance(draft, Draft):
        raise TypeError(f"{who} must return a specbook.protocols.Draft, got {_describe(draft)}")
    tokens = draft.tokens
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"{who} returned Draft.tokens as {_describe(tokens)}; it must be a (B, K) integer tensor")
    if tokens.dtype == torch.bool or tokens.dtype not in _INT_DTYPES:
        raise TypeError(f"{who} returned Draft.tokens as {_describe(tokens)}; token ids must be integers")
    if tokens.ndim != 2 or tokens.shape[0] != batch_size:
        raise ValueError(f"{who} returned Draft.tokens as {_describe(tokens)}; it must be (B, K) with "
                         f"B = {batch_size} (one row per context)")
    K = tokens.shape[1]
    if K and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(f"{who} returned Draft.tokens outside the vocabulary [0, {vocab_size}): "
                         f"min {int(tokens.min())}, max {int(tokens.max())}")
    if draft.parents is not None:
        _check_draft_parents(draft.parents, K, who)
    if draft.probs is not None:
        _check_draft_probs(draft.probs, tokens, vocab_size, who)


def _check_draft_parents(parents, K: int, who: str) -> None:
    if not isinstance(parents, torch.Tensor) or parents.dtype == torch.bool or parents.dtype not in _INT_DTYPES:
        raise TypeError(f"{who} returned Draft.parents as {_describe(parents)}; it must be a (K,) integer tensor")
    if tuple(parents.shape) != (K,):
        raise ValueError(f"{who} returned Draft.parents of shape {tuple(parents.shape)} for K = {K} tokens")
    for i, par in enumerate(parents.tolist()):
        # parents[i] < i makes every parent link point backwards, so no node can be its own ancestor
        if not -1 <= par < i:
            raise ValueError(f"{who} returned Draft.parents[{i}] = {par}: a node's parent must be -1 (the "
                             f"context) or an earlier node, so the links form a tree listed parents first")


def _check_draft_probs(probs, tokens: torch.Tensor, vocab_size: int, who: str) -> None:
    B, K = tokens.shape
    if not isinstance(probs, torch.Tensor) or not probs.is_floating_point():
        raise TypeError(f"{who} returned Draft.probs as {_describe(probs)}; it must be a (B, K, V) float tensor")
    if tuple(probs.shape) != (B, K, vocab_size):
        raise ValueError(f"{who} returned Draft.probs of shape {tuple(probs.shape)}; expected {(B, K, vocab_size)}")
    if K == 0:
        return
    if not torch.isfinite(probs).all() or (probs < 0).any():
        raise ValueError(f"{who} returned Draft.probs with NaN, infinite or negative entries")
    sums = probs.double().sum(-1)  # (B, K)
    tol = 1e-3 if probs.dtype in (torch.float16, torch.bfloat16) else 1e-4
    bad = (sums - 1).abs() > tol
    if bad.any():
        b, k = (int(i) for i in bad.nonzero()[0])
        raise ValueError(f"{who} returned Draft.probs[{b}, {k}] summing to {float(sums[b, k]):.6g}, not 1")
    q_of_token = probs.gather(-1, tokens.long().to(probs.device)[..., None])[..., 0]  # (B, K)
    zero = q_of_token <= 0
    if zero.any():
        b, k = (int(i) for i in zero.nonzero()[0])
        raise ValueError(
            f"{who} returned Draft.tokens[{b}, {k}] = {int(tokens[b, k])} with Draft.probs giving it probability 0: "
            f"a draft must be sampled from the distribution it reports (q(x) > 0), otherwise min(1, p/q) is "
            f"undefined and the output stops following the target")


def check_target_logits(logits, target, shape: tuple[int, int, int]) -> None:
    """Validate ``target.forward``'s output: a float (B, N, V) tensor with no NaN."""
    who = f"{type(target).__name__}.forward()"
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        raise TypeError(f"{who} must return float logits (B, N, V), got {_describe(logits)}")
    if tuple(logits.shape) != shape:
        raise ValueError(f"{who} returned logits of shape {tuple(logits.shape)}; expected {shape}")
    if torch.isnan(logits).any():
        raise ValueError(f"{who} returned NaN logits: the model's numerics broke (check its dtype and inputs)")


def check_gamma(gamma) -> None:
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 0:
        raise ValueError(f"gamma must be an int >= 0, got {gamma!r}")

