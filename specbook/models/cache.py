"""A preallocated key/value cache whose rows may hold different lengths.

Shape legend: L layers, B batch, Hkv key/value heads, T max length, Dh head width,
N new tokens in one forward, S keys attended to (max row length after the forward).

Speculative decoding appends a draft, verifies it, and throws away the rejected tail.
Each row of a batch accepts a different number of tokens, so every row has its own
length, new tokens go in at each row's own length, and attention is masked to each
row's valid entries.  Rolling back is just lowering a length: the stale entries stay in
the buffer, are never attended to, and are overwritten by the next append.

Row lengths live in a Python list, so planning a forward never waits on the device.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch


@dataclass
class AttentionPlan:
    """Where one forward's N new tokens go and what each may attend to.

    starts:    each row's length before the forward (new token i of row b goes to slot
               starts[b] + i)
    kv_len:    S, keys read per row (enough to cover every row's new tokens)
    positions: (B, N) long default position ids, starts[b] + i
    mask:      (B or 1, 1, N, S) bool, True = attend; None = attend to all S keys
    is_causal: plain causal attention with no cache before it (mask is None)
    slots:     (B, N) long write slots when rows are out of step, else None
    """

    starts: list[int]
    n_new: int
    kv_len: int
    positions: torch.Tensor
    mask: torch.Tensor | None
    is_causal: bool
    slots: torch.Tensor | None


class KVCache:
    """Keys and values for every layer, ``k``/``v`` of shape (L, B, Hkv, T, Dh)."""

    def __init__(self, n_layers: int, batch_size: int, n_kv_heads: int, head_dim: int, max_length: int,
                 *, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None):
        for name, value in (("n_layers", n_layers), ("batch_size", batch_size), ("n_kv_heads", n_kv_heads),
                            ("head_dim", head_dim), ("max_length", max_length)):
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        shape = (n_layers, batch_size, n_kv_heads, max_length, head_dim)
        # zeros, not empty: a masked-out slot still enters softmax(..) @ V with weight 0,
        # and 0 * NaN from uninitialised memory would poison the output.
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self._lengths = [0] * batch_size
        self._lengths_tensor: torch.Tensor | None = None

    @property
    def batch_size(self) -> int:
        return self.k.shape[1]

    @property
    def max_length(self) -> int:
        return self.k.shape[3]

    @property
    def device(self) -> torch.device:
        return self.k.device

    @property
    def lengths(self) -> torch.Tensor:
        """(B,) long on the cache's device: valid entries per row."""
        if self._lengths_tensor is None:
            self._lengths_tensor = torch.tensor(self._lengths, dtype=torch.long, device=self.device)
        return self._lengths_tensor

    def length_list(self) -> list[int]:
        return list(self._lengths)

    def _set_lengths(self, lengths: list[int]) -> None:
        self._lengths = lengths
        self._lengths_tensor = None

    def reset(self) -> None:
        """Forget everything (no reallocation)."""
        self._set_lengths([0] * self.batch_size)

    def clone(self) -> KVCache:
        """A copy of this cache (keys, values, row lengths), e.g. to restore a prefill with :meth:`copy_from`."""
        out = copy.copy(self)
        out.k, out.v = self.k.clone(), self.v.clone()
        out._set_lengths(self.length_list())
        return out

    def copy_from(self, other: KVCache) -> None:
        """Hold what ``other`` (of the same shape) holds: its keys, values and row lengths, copied in place."""
        if other.k.shape != self.k.shape:
            raise ValueError(f"other must have this cache's shape {tuple(self.k.shape)}, got {tuple(other.k.shape)}")
        self.k.copy_(other.k)
        self.v.copy_(other.v)
        self._set_lengths(other.length_list())

    def plan(self, n_new: int, new_mask: torch.Tensor | None = None) -> AttentionPlan:
        """Plan appending ``n_new`` tokens per row.

        new_mask: (B, N, N) or (N, N) bool, which new tokens each new token sees; None = causal.
        """
        B, N, device = self.batch_size, n_new, self.device
        if new_mask is not None and (new_mask.shape[-2:] != (N, N) or new_mask.dim() not in (2, 3)
                                     or (new_mask.dim() == 3 and new_mask.shape[0] not in (1, B))):
            raise ValueError(f"new_mask must be ({N}, {N}) or ({B}, {N}, {N}), got {tuple(new_mask.shape)}")
        starts = list(self._lengths)
        kv_len = max(starts) + N
        if kv_len > self.max_length:
            raise ValueError(f"appending {N} tokens to a row holding {max(starts)} exceeds the cache's "
                             f"max_length of {self.max_length} (prompt plus generation too long?)")
        offsets = torch.arange(N, device=device)
        positions = self.lengths[:, None] + offsets  # (B, N)
        if all(s == starts[0] for s in starts):
            start = starts[0]
            if new_mask is None:
                if N == 1:
                    return AttentionPlan(starts, N, kv_len, positions, None, False, None)
                if start == 0:
                    return AttentionPlan(starts, N, kv_len, positions, None, True, None)
                mask = torch.ones(N, kv_len, dtype=torch.bool, device=device).tril(diagonal=start)
                return AttentionPlan(starts, N, kv_len, positions, mask[None, None], False, None)
            mask = torch.ones(*new_mask.shape[:-2], N, kv_len, dtype=torch.bool, device=device)
            mask[..., start:] = new_mask
            return AttentionPlan(starts, N, kv_len, positions, mask.view(-1, 1, N, kv_len), False, None)
        # Rows out of step: each row sees its own cached prefix plus its own new tokens.
        slots = positions  # (B, N)
        key_idx = torch.arange(kv_len, device=device)
        mask = (key_idx < self.lengths[:, None])[:, None, :].expand(B, N, kv_len).clone()  # (B, N, S)
        if new_mask is None:
            new_mask = torch.ones(N, N, dtype=torch.bool, device=device).tril()
        rows = torch.arange(B, device=device)[:, None]
        mask[rows, :, slots] = new_mask.expand(B, N, N).transpose(1, 2)
        return AttentionPlan(starts, N, kv_len, positions, mask[:, None], False, slots)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan):
        """Write this layer's new keys/values (B, Hkv, N, Dh); return (B, Hkv, S, Dh) views."""
        if plan.slots is None:
            start = plan.starts[0]
            self.k[layer, :, :, start:start + plan.n_new] = k
            self.v[layer, :, :, start:start + plan.n_new] = v
        else:
            rows = torch.arange(self.batch_size, device=self.device)[:, None]
            self.k[layer][rows, :, plan.slots] = k.transpose(1, 2)
            self.v[layer][rows, :, plan.slots] = v.transpose(1, 2)
        return self.k[layer, :, :, :plan.kv_len], self.v[layer, :, :, :plan.kv_len]

    def advance(self, plan: AttentionPlan) -> None:
        self._set_lengths([s + plan.n_new for s in plan.starts])

    def appended(self, n_new: int) -> None:
        """Count ``n_new`` entries written straight into the buffers after each row's length as
        held (a compiled pass writes its slots itself, :mod:`specbook.models.compiled`)."""
        if n_new < 0 or max(self._lengths) + n_new > self.max_length:
            raise ValueError(f"n_new must be in [0, {self.max_length - max(self._lengths)}], got {n_new}")
        self._set_lengths([n + n_new for n in self._lengths])

    def rollback(self, lengths) -> None:
        """Keep only the first ``lengths[b]`` entries of row b (lengths: (B,) ints, never growing)."""
        new = [int(x) for x in (lengths.tolist() if torch.is_tensor(lengths) else lengths)]
        if len(new) != self.batch_size:
            raise ValueError(f"lengths must have {self.batch_size} entries, got {len(new)}")
        for b, (n, old) in enumerate(zip(new, self._lengths)):
            if not 0 <= n <= old:
                raise ValueError(f"lengths[{b}]={n} is not in [0, {old}] (rollback cannot grow a row)")
        self._set_lengths(new)

    def select_rows(self, rows: list[int]) -> None:
        """Keep only batch rows ``rows`` (slot indices, in that order); the others leave the batch."""
        if not rows or any(not 0 <= r < self.batch_size for r in rows):
            raise ValueError(f"rows must be a non-empty list of row indices in [0, {self.batch_size}), got {rows}")
        index = torch.tensor(rows, dtype=torch.long, device=self.device)
        self.k = self.k.index_select(1, index)
        self.v = self.v.index_select(1, index)
        self._set_lengths([self._lengths[r] for r in rows])

    def compact(self, starts: list[int], keep: list[list[int]]) -> None:
        """Keep, for each row b, the entries ``starts[b] + keep[b][m]`` moved to ``starts[b] + m``.

        Used after tree verification: the accepted path's nodes are scattered among the
        tree's slots; they are packed into place and everything after them dropped.
        """
        if len(starts) != self.batch_size or len(keep) != self.batch_size:
            raise ValueError(f"starts and keep need {self.batch_size} rows, got {len(starts)} and {len(keep)}")
        new_lengths = []
        for b, (start, idx) in enumerate(zip(starts, keep)):
            idx = [int(i) for i in idx]
            if any(i < 0 or start + i >= self._lengths[b] for i in idx) or start > self._lengths[b]:
                raise ValueError(f"keep[{b}]={idx} points outside row {b}'s new entries "
                                 f"[{start}, {self._lengths[b]})")
            if idx != list(range(len(idx))):
                src = torch.tensor([start + i for i in idx], device=self.device)
                dst = torch.arange(start, start + len(idx), device=self.device)
                # Advanced indexing on the right makes a copy first, so overlap is safe.
                self.k[:, b, :, dst] = self.k[:, b, :, src]
                self.v[:, b, :, dst] = self.v[:, b, :, src]
            new_lengths.append(start + len(idx))
        self._set_lengths(new_lengths)
