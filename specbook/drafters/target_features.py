"""The target's hidden states at every cached position, mirrored for drafters that read them.

Shape legend: B batch, T cached positions of one row, N new tokens of one forward, D width.

Medusa heads (Cai et al., 2024) and EAGLE (Li et al., 2024) draft from the target's own
features, but ``Drafter.propose`` sees only token histories.  The decoding loop therefore
calls ``drafter.observe(target, kept)`` after the prefill and after every verification
(see :mod:`specbook.decode`): ``kept[b]`` are the indices of the last forward's new tokens
that stayed in row b's cache.  Those tokens now occupy the last ``len(kept[b])`` cached
positions, so this store drops anything it held from that position on and appends
``target.last_hidden[b, kept[b]]``.  The invariant afterwards: row b holds exactly one
feature per cached token, ``len(features(b)) == target.cache_lengths[b]`` -- which is
``len(context) - 1`` at the next ``propose`` (the pending token has not been fed yet).
"""
from __future__ import annotations

from collections.abc import Callable

import torch


class TargetFeatures:
    """Per-row buffers of ``transform(target.last_hidden)`` at the cached positions, followed, with
    ``layers``, by the residual stream after each of those blocks (``target.last_hidden_layers``: a
    ``LlamaTarget`` that keeps them, ``keep_layers`` or ``hidden_layers``), concatenated on the last dim."""

    def __init__(self, transform: Callable[[torch.Tensor], torch.Tensor] | None = None, layers: tuple[int, ...] = ()):
        self.transform = transform
        self.layers = tuple(layers)
        self._buf: list[torch.Tensor] = []  # per row, (capacity, D)
        self._len: list[int] = []
        self._stable: list[int] = []  # per row: leading positions unchanged since the last take_stable()

    @property
    def batch_size(self) -> int:
        return len(self._len)

    def length(self, b: int) -> int:
        return self._len[b]

    def features(self, b: int) -> torch.Tensor:
        """(T, D) features of row b's cached positions (a view; copy before keeping it)."""
        return self._buf[b][: self._len[b]]

    def last(self) -> torch.Tensor:
        """(B, D) the feature of each row's last cached position."""
        if any(n == 0 for n in self._len):
            raise ValueError("a row has no cached position yet (prompt of length 1?): no feature to draft from")
        return torch.stack([self._buf[b][self._len[b] - 1] for b in range(self.batch_size)])

    @torch.no_grad()
    def observe(self, target, kept: list[list[int]]) -> None:
        lengths = [int(n) for n in target.cache_lengths.tolist()]
        if len(kept) != len(lengths):
            raise ValueError(f"kept has {len(kept)} rows, the target's cache {len(lengths)}")
        if len(self._len) != len(lengths):
            self._buf, self._len, self._stable = [None] * len(lengths), [0] * len(lengths), [0] * len(lengths)
        hidden = target.last_hidden if any(kept) else None
        if any(kept) and hidden is None:
            raise ValueError("the target exposes no last_hidden; these drafters need LlamaTarget or HFTarget")
        extra = self._layers_of(target) if any(kept) and self.layers else None
        for b, idx in enumerate(kept):
            start = lengths[b] - len(idx)
            if not 0 <= start <= self._len[b]:
                raise ValueError(f"row {b}: the target caches {lengths[b]} tokens but only {self._len[b]} features "
                                 f"were observed before these {len(idx)}: observe() must follow every forward "
                                 "that changes the cache")
            new = hidden[b, idx] if idx else None  # (n, D)
            if new is not None and self.transform is not None:
                new = self.transform(new)
            if new is not None and extra is not None:
                new = torch.cat([new, *(h[b, idx].to(new.dtype) for h in extra)], dim=-1)  # (n, D + len(layers) D)
            self._write(b, start, new)
            self._stable[b] = min(self._stable[b], start)

    def _layers_of(self, target) -> list[torch.Tensor]:
        """The target's hidden states after ``self.layers`` blocks, in that order."""
        have = getattr(target, "hidden_layers", None) or ()
        states = getattr(target, "last_hidden_layers", None)
        if states is None or any(i not in have for i in self.layers):
            raise ValueError(f"this drafter reads the target's hidden states after blocks {self.layers} and this "
                             f"target keeps {tuple(have) or 'none'}: call drafter.attach(target) before the prefill "
                             f"(specbook.decode does), or build LlamaTarget(model, hidden_layers={self.layers})")
        return [states[have.index(i)] for i in self.layers]

    def _write(self, b: int, start: int, new: torch.Tensor | None) -> None:
        n = 0 if new is None else len(new)
        buf = self._buf[b]
        if new is not None and (buf is None or buf.shape[0] < start + n or buf.dtype != new.dtype):
            grown = new.new_empty(max(2 * (start + n), 64), new.shape[-1])
            if buf is not None and start:
                grown[:start] = buf[:start].to(grown.dtype)
            self._buf[b] = buf = grown
        if n:
            buf[start : start + n] = new
        self._len[b] = start + n

    def select_rows(self, rows: list[int]) -> None:
        """Keep only batch rows ``rows``, in that order (the decode loop drops rows that have ended)."""
        self._buf = [self._buf[r] for r in rows]
        self._len = [self._len[r] for r in rows]
        self._stable = [self._stable[r] for r in rows]

    def take_stable(self) -> list[int]:
        """Per row, how many leading features are unchanged since the previous call (then reset)."""
        out = list(self._stable)
        self._stable = list(self._len)
        return out

    def check_contexts(self, contexts: list[torch.Tensor]) -> None:
        """Raise unless every row holds one feature per context token but the last (the pending one)."""
        if len(contexts) != self.batch_size:
            raise ValueError(f"propose got {len(contexts)} rows but observe() saw {self.batch_size}: "
                             "the decoding loop must call drafter.observe(target, kept) (see specbook.decode)")
        for b, c in enumerate(contexts):
            if self._len[b] != len(c) - 1:
                raise ValueError(f"row {b}: context has {len(c)} tokens but {self._len[b]} target features were "
                                 "observed (expected one per token but the last): the loop must call "
                                 "drafter.observe(target, kept) after the prefill and after every verification")
