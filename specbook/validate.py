"""Every check in specbook: what a drafter, a target or a caller hands in, checked once.

Shape legend: B batch (live rows), K draft tokens (chain length or tree nodes), V vocab, T prompt length.

A bad value either crashes deep inside torch or silently breaks the lossless guarantee (q(x) = 0
makes p(x)/q(x) infinite).  The decode loop checks at its door, naming who produced the value; the
functions called directly (``verify_chain``, ``logits_to_probs``, ...) use the same helpers.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from .protocols import Draft
from .tree import check_parents

INT_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)

# Probability rows must sum to 1 within this tolerance (absolute), by dtype; one table for every check.
SUM_TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 2e-2}


def describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"a {x.dtype} tensor of shape {tuple(x.shape)}"
    return f"{type(x).__name__} {x!r}"[:200]


def check_shape(name: str, x: torch.Tensor, shape: tuple, why: str = "") -> None:
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {tuple(shape)}{why}")


def check_tokens(name: str, tokens, vocab_size: int) -> None:
    """An integer tensor (bool refused: True is not token 1) of ids in [0, vocab_size)."""
    if not isinstance(tokens, torch.Tensor) or tokens.dtype not in INT_DTYPES:
        raise ValueError(f"{name} must be an integer tensor of token ids, got {describe(tokens)}")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(f"{name} has token ids outside the vocabulary [0, {vocab_size}): "
                         f"min {int(tokens.min())}, max {int(tokens.max())}")


def _floats(name: str, x, shape: tuple | None, what: str) -> None:
    """A floating-point tensor (..., V) with V >= 1, of ``shape`` if given."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise ValueError(f"{name} must be {what}, got {describe(x)}")
    if shape is not None:
        check_shape(name, x, shape)
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ValueError(f"{name} has no vocabulary dimension (shape {tuple(x.shape)})")


def check_probs(name: str, probs, shape: tuple | None = None) -> None:
    """Floating-point probability rows over the last dim: finite, >= 0, summing to 1 (SUM_TOLERANCE)."""
    _floats(name, probs, shape, "a floating-point tensor")
    if probs.numel() == 0:
        return  # e.g. (B, 0, V): no drafts this step
    if not torch.isfinite(probs).all():
        raise ValueError(f"{name} contains a non-finite value (NaN or inf)")
    if (probs < 0).any():
        raise ValueError(f"{name} contains a negative probability ({probs.min().item():.3g})")
    sums = probs.double().sum(-1)
    worst = (sums - 1).abs().flatten().argmax()
    tol = SUM_TOLERANCE.get(probs.dtype, 1e-4)
    if abs(sums.flatten()[worst].item() - 1) > tol:
        where = [int(i) for i in torch.unravel_index(worst, sums.shape)]
        raise ValueError(f"{name}{where} is summing to {sums.flatten()[worst].item():.6g}: rows must sum to 1 "
                         f"(tolerance {tol:g} for {probs.dtype})")


def check_logits(name: str, logits, shape: tuple | None = None, greedy: bool = False) -> None:
    """Floating-point logits (..., V): no NaN, no row where every token is -inf, and no +inf unless
    ``greedy`` (an argmax takes the first +inf; a softmax of +inf is NaN)."""
    _floats(name, logits, shape, "float logits")
    top = logits.amax(-1)  # (...,) one pass: NaN propagates; +inf, and a row of only -inf, show in the maximum
    if torch.isnan(top).any() or (not greedy and (top == torch.inf).any()):
        raise ValueError(f"{name} contain NaN" + ("" if greedy else " or +inf"))
    if (top == -torch.inf).any():
        where = [int(i) for i in (top == -torch.inf).nonzero()[0]]
        raise ValueError(f"{name}{where} is -inf everywhere: no token is possible there")


def check_block(target: torch.Tensor, draft_probs, draft_tokens, parents=None, target_name: str = "target_probs",
                logits: bool = False) -> None:
    """One verification block: ``target`` (B, K+1, V) against K drafts (draft_probs (B, K, V) or None),
    a chain, or a tree of K nodes when ``parents`` is given (``target`` at the root and after each node)."""
    N = None if parents is None else len(check_parents(parents))
    if N is not None and isinstance(target, torch.Tensor) and target.ndim == 3 and target.shape[1] != N + 1:
        raise ValueError(f"{target_name} has {target.shape[1]} positions but the tree has {N} nodes: "
                         f"it needs N+1 = {N + 1} (the root, then one per node)")
    if logits:
        check_logits(target_name, target, greedy=True)
    else:
        check_probs(target_name, target)
    if target.ndim != 3:
        raise ValueError(f"{target_name} must have 3 dims (B, K+1, V), got shape {tuple(target.shape)}")
    B, K1, V = target.shape
    why = f": {target_name} {tuple(target.shape)} holds K+1 = {K1} positions, so K = {K1 - 1} drafts"
    for name, x, shape in (("draft_tokens", draft_tokens, (B, K1 - 1)), ("draft_probs", draft_probs, (B, K1 - 1, V))):
        if not isinstance(x, torch.Tensor) and (x is not None or name == "draft_tokens"):
            raise ValueError(f"{name} must be a tensor of shape {shape}, got {describe(x)}")
        if x is not None:
            check_shape(name, x, shape, why)
    check_tokens("draft_tokens", draft_tokens, V)
    if draft_probs is not None:
        check_probs("draft_probs", draft_probs)


# ----------------------------------------------------------------------------- the decode loop's door

def _token_row(row, vocab_size: int, where: str) -> list[int]:
    """One prompt row as a list of ints in [0, V); bools, floats and empty rows are refused."""
    if isinstance(row, torch.Tensor) and (row.dtype not in INT_DTYPES or row.ndim != 1):
        raise TypeError(f"{where} must be a 1-D tensor of integer token ids, got {describe(row)}")
    if isinstance(row, (str, bytes)) or not isinstance(row, (Sequence, torch.Tensor)):
        raise TypeError(f"{where} must be a sequence of token ids, got {describe(row)}")
    values = row.tolist() if isinstance(row, torch.Tensor) else list(row)
    for v in values:
        if (isinstance(v, bool) or not isinstance(v, int)) and not (
                isinstance(v, torch.Tensor) and v.ndim == 0 and v.dtype in INT_DTYPES):
            raise TypeError(f"{where} must hold integer token ids, got the element {v!r}")
    values = [int(v) for v in values]
    if not values:
        raise ValueError(f"{where} is empty: every prompt needs at least one token")
    if min(values) < 0 or max(values) >= vocab_size:
        raise ValueError(f"{where} has token ids outside [0, {vocab_size}): min {min(values)}, max {max(values)}")
    return values


def _is_row(x) -> bool:
    return (isinstance(x, torch.Tensor) and x.ndim > 0) or (isinstance(x, Sequence) and not isinstance(x, (str, bytes)))


def prompt_rows(prompt, vocab_size: int) -> list[list[int]]:
    """A (T,) or (B, T) integer tensor, a list of ints (one row), or a list of rows of any lengths
    (each a list of ints or a 1-D integer tensor), as one list of token ids per row."""
    if isinstance(prompt, torch.Tensor) and (prompt.ndim not in (1, 2) or prompt.ndim == 2 and len(prompt) == 0):
        raise ValueError(f"prompt must be a (T,) or (B, T) tensor or a list of rows, got {describe(prompt)}")
    if _is_row(prompt) and len(prompt) and _is_row(prompt[0]):  # several rows
        return [_token_row(r, vocab_size, f"prompt[{b}]") for b, r in enumerate(prompt)]
    return [_token_row(prompt, vocab_size, "prompt")]  # one row


def eos_ids(eos_token_id, vocab_size: int) -> frozenset[int]:
    """``eos_token_id`` (None, one id, or several) as a set of ids in [0, V)."""
    if eos_token_id is None:
        return frozenset()
    many = isinstance(eos_token_id, (Sequence, torch.Tensor, set, frozenset))
    ids = list(eos_token_id.tolist() if isinstance(eos_token_id, torch.Tensor) else eos_token_id) if many \
        else [eos_token_id]
    if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab_size for t in ids):
        raise ValueError(f"eos_token_id must be None, a token id in [0, {vocab_size}) or a list of them, "
                         f"got {eos_token_id!r}")
    return frozenset(ids)


def check_count(name: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def check_budget(target, rows: list[list[int]], max_new_tokens: int) -> None:
    """Refuse, before any work, a request that cannot fit in the target's ``max_length`` (if any): the
    cache holds every emitted token but the last, so a row needs len(prompt) + max_new_tokens - 1
    slots; speculation needs no more (no drafts are asked past a row's budget)."""
    limit = getattr(target, "max_length", None)
    need = max(len(r) for r in rows) + max_new_tokens - 1
    if limit is not None and need > limit:
        raise ValueError(
            f"the longest prompt ({need - max_new_tokens + 1} tokens) plus max_new_tokens={max_new_tokens} needs "
            f"{need} cache slots, but the target holds max_length={limit}: shorten the prompt, lower "
            f"max_new_tokens, or build the target with a larger max_length")


def check_draft(draft, drafter, batch_size: int, vocab_size: int) -> None:
    """What ``drafter.propose`` returned for ``batch_size`` live rows (see :class:`Draft`)."""
    who = f"{type(drafter).__name__}.propose() returned"
    if not isinstance(draft, Draft):
        raise TypeError(f"{who} {describe(draft)}; it must return a specbook.protocols.Draft")
    tokens = draft.tokens
    if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or tokens.shape[0] != batch_size:
        raise ValueError(f"{who} Draft.tokens as {describe(tokens)}; it must be a (B, K) integer tensor with "
                         f"B = {batch_size} (one row per context)")
    check_tokens(f"{who} Draft.tokens", tokens, vocab_size)
    B, K = tokens.shape
    if draft.parents is not None:
        check_parents(draft.parents, f"{who} Draft.parents", length=K)
    if draft.probs is not None:
        check_probs(f"{who} Draft.probs", draft.probs, (B, K, vocab_size))
        q_of_token = draft.probs.gather(-1, tokens.long().to(draft.probs.device)[..., None])[..., 0]  # (B, K)
        if (q_of_token <= 0).any():
            b, k = (int(i) for i in (q_of_token <= 0).nonzero()[0])
            raise ValueError(
                f"{who} Draft.tokens[{b}, {k}] = {int(tokens[b, k])} with Draft.probs giving it probability 0: "
                "a draft must be sampled from the law it reports (q(x) > 0), otherwise min(1, p/q) is undefined "
                "and the output stops following the target")


def check_target_logits(logits, target, shape: tuple[int, int, int], greedy: bool = False) -> None:
    """``target.forward``'s output: float (B, N, V) logits that ``check_logits`` accepts."""
    who = f"{type(target).__name__}.forward() returned"
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        raise TypeError(f"{who} {describe(logits)}; it must return float logits (B, N, V)")
    check_logits(f"{who} logits", logits, shape, greedy)
