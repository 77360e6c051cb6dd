"""Toy language models whose every conditional distribution is known exactly.

Shape legend: B batch, N new tokens, V vocab, S = V**order Markov states.

A :class:`MarkovLM` of order r over V tokens picks the next token from a fixed
table ``transitions[state]`` where the state is the last r tokens.  It
implements the :class:`specbook.protocols.Target` interface (a rollback-able
"cache" that is simply the token history), so the speculative loop runs on it
exactly as on a transformer, and :func:`sequence_law` gives the exact
probability of every continuation, against which whole generated sequences are
tested.

Every argument is checked before any work: counts must be ints (not bools), token ids
must be integers inside the vocabulary (a bool tensor is not a token tensor), and a
table must be float rows that sum to 1.  Violations raise ``ValueError`` naming the
argument and the value.
"""
from __future__ import annotations

import math
import numbers
from itertools import product

import numpy as np
import torch

from .sampling import SamplingParams, logits_to_probs
from .tree import check_parents
from .tree_paths import ancestors

# sequence_law enumerates continuations; past this many it would take minutes and gigabytes.
MAX_LAW_SIZE = 20_000
# random_transitions refuses tables with more entries than this (1 GiB of float64).
MAX_TABLE_ENTRIES = 2**27


def _int(value, name: str, minimum: int) -> int:
    """An int >= minimum; bools and floats are refused (True is not a count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def _real(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    return float(value)


def _token_list(tokens, vocab_size: int, name: str) -> list[int]:
    """Token ids as a list of ints in [0, vocab_size); from a list/tuple of ints or an integer tensor."""
    if isinstance(tokens, torch.Tensor):
        if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
            raise ValueError(f"{name} must hold integer token ids, got a tensor of dtype {tokens.dtype}")
        ids = tokens.reshape(-1).tolist()
    else:
        try:
            ids = list(tokens)
        except TypeError:
            raise ValueError(f"{name} must be a sequence of token ids, got {tokens!r}") from None
        for i, t in enumerate(ids):
            if isinstance(t, torch.Tensor) and t.ndim == 0 and not (t.is_floating_point() or t.is_complex()
                                                                      or t.dtype == torch.bool):
                ids[i] = int(t)
            elif isinstance(t, numbers.Integral) and not isinstance(t, (bool, np.bool_)):
                ids[i] = int(t)
            else:
                raise ValueError(f"{name} must hold integer token ids, got {t!r}")
    for t in ids:
        if not 0 <= t < vocab_size:
            raise ValueError(f"{name} contains token {t}, outside the vocabulary [0, {vocab_size})")
    return ids


class MarkovLM:
    """An order-``order`` Markov chain over ``vocab_size`` tokens, usable as Target and draft model.

    transitions: (V**order, V) rows of probabilities (zeros allowed).  Contexts shorter than
    ``order`` are left-padded with token 0.
    """

    def __init__(self, transitions: torch.Tensor, order: int = 1):
        _int(order, "order", 1)
        if not isinstance(transitions, torch.Tensor) or not transitions.is_floating_point():
            raise ValueError(f"transitions must be a floating-point tensor, got "
                             f"{getattr(transitions, 'dtype', type(transitions).__name__)}")
        if transitions.ndim != 2 or transitions.shape[0] < 1 or transitions.shape[1] < 1:
            raise ValueError(f"transitions must be a 2-D (V**order, V) table, got shape {tuple(transitions.shape)}")
        V = transitions.shape[-1]
        # V**order for a huge order is a huge int: compare through logarithms first
        if V > 1 and order * math.log(V) > math.log(transitions.shape[0]) + 1e-9:
            raise ValueError(f"transitions must have shape ({V}**{order}, {V}), got {tuple(transitions.shape)}")
        if transitions.shape != (V**order, V):
            raise ValueError(f"transitions must have shape ({V}**{order}, {V}), got {tuple(transitions.shape)}")
        if not torch.isfinite(transitions).all() or (transitions < 0).any():
            raise ValueError("transitions must be finite and non-negative (rows are probability vectors)")
        sums = transitions.sum(-1).double()  # (S,)
        if not torch.allclose(sums, torch.ones_like(sums)):
            row = int((sums - 1).abs().argmax())
            raise ValueError(f"transitions rows must sum to 1; row {row} sums to {sums[row].item():.6g}")
        self.transitions = transitions.to(torch.float64)
        self.order = order
        self.vocab_size = V
        self.log_transitions = self.transitions.log()  # (S, V); log 0 = -inf
        self._history = torch.zeros(0, 0, dtype=torch.long)
        self._lengths = torch.zeros(0, dtype=torch.long)
        self._last_start: torch.Tensor | None = None
        self._last_n = 0  # N of the last forward, for keep()
        self.forward_calls = 0  # how many forward passes were made (one per target / draft pass)

    # --- exact conditionals -------------------------------------------------------------------
    def state(self, context) -> int:
        ctx = _token_list(context, self.vocab_size, "context")[-self.order:]
        ctx = [0] * (self.order - len(ctx)) + ctx
        s = 0
        for t in ctx:
            s = s * self.vocab_size + t
        return s

    def next_logits(self, context) -> torch.Tensor:
        return self.log_transitions[self.state(context)]  # (V,)

    # --- Target protocol ------------------------------------------------------------------------
    def reset(self, batch_size: int) -> None:
        _int(batch_size, "batch_size", 0)
        self._history = torch.zeros(batch_size, 0, dtype=torch.long)
        self._lengths = torch.zeros(batch_size, dtype=torch.long)

    @property
    def cache_lengths(self) -> torch.Tensor:
        return self._lengths.clone()

    def rollback(self, lengths: torch.Tensor) -> None:
        lengths = torch.as_tensor(lengths)
        if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
            raise ValueError(f"rollback lengths must be integers, got dtype {lengths.dtype}")
        lengths = lengths.long()
        if lengths.shape != self._lengths.shape or (lengths < 0).any() or (lengths > self._lengths).any():
            raise ValueError(f"rollback lengths {lengths.tolist()} must be per-row and <= cache lengths {self._lengths.tolist()}")
        self._lengths = lengths.clone()
        self._last_start = None

    def select_rows(self, rows: list[int]) -> None:
        """Keep only batch rows ``rows`` (slot indices, in that order)."""
        if not rows or any(not 0 <= r < len(self._lengths) for r in rows):
            raise ValueError(f"rows must be a non-empty list of row indices in [0, {len(self._lengths)}), got {rows}")
        index = torch.tensor(rows, dtype=torch.long)
        self._history = self._history.index_select(0, index)
        self._lengths = self._lengths.index_select(0, index)
        self._last_start = None

    def keep(self, indices) -> None:
        """After a tree forward, keep only ``indices[b]`` (new-token indices, a root-to-node path) per row."""
        if self._last_start is None:
            raise ValueError("keep() must directly follow forward()")
        rows = [torch.as_tensor(idx).reshape(-1) for idx in indices]
        if len(rows) != len(self._lengths):
            raise ValueError(f"indices must hold {len(self._lengths)} rows, got {len(rows)}")
        for b, r in enumerate(rows):
            if r.numel() and (r.is_floating_point() or r.dtype == torch.bool
                              or r.long().min() < 0 or r.long().max() >= self._last_n):
                raise ValueError(f"indices[{b}] = {r.tolist()}: must be node indices in [0, {self._last_n})")
        rows = [r.long() for r in rows]
        counts = torch.tensor([len(r) for r in rows], dtype=torch.long)  # (B,)
        padded = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True) if len(rows) else torch.zeros(0, 0, dtype=torch.long)
        M = padded.shape[1]
        start = self._last_start[:, None]  # (B, 1)
        kept = self._history.gather(1, start + padded)  # (B, M) read everything before writing
        # row b's slots past counts[b] are beyond its new length: what lands there is never read
        self._history.scatter_(1, start + torch.arange(M)[None], kept)
        self._lengths = self._last_start + counts
        self._last_start = None

    def forward(self, tokens: torch.Tensor, parents: torch.Tensor | None = None) -> torch.Tensor:
        if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or tokens.shape[0] != self._lengths.shape[0]:
            raise ValueError(f"tokens must be a (B, N) tensor with B = {self._lengths.shape[0]}, "
                             f"got {tuple(getattr(tokens, 'shape', ())) or type(tokens).__name__}")
        if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
            raise ValueError(f"tokens must hold integer token ids, got dtype {tokens.dtype}")
        B, N = tokens.shape
        tokens = tokens.long()  # before comparing: a uint8 tensor cannot hold vocab_size
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.vocab_size):
            bad = tokens[(tokens < 0) | (tokens >= self.vocab_size)][0].item()
            raise ValueError(f"tokens contains token {bad}, outside the vocabulary [0, {self.vocab_size})")
        if parents is not None:
            check_parents(parents)
            if len(parents) != N:
                raise ValueError(f"parents has {len(parents)} nodes for {N} tokens")
        width = (int(self._lengths.max()) if B else 0) + N
        if self._history.shape[1] < width:
            grown = torch.zeros(B, max(width, 2 * self._history.shape[1]), dtype=torch.long)
            grown[:, : self._history.shape[1]] = self._history
            self._history = grown
        # the last `order` cached tokens of every row, left-padded with token 0
        offsets = torch.arange(-self.order, 0)  # (order,)
        idx = self._lengths[:, None] + offsets  # (B, order)
        cached = self._history.gather(1, idx.clamp_min(0)).masked_fill(idx < 0, 0)  # (B, order)
        if parents is None:
            seq = torch.cat([cached, tokens], dim=1)  # (B, order + N)
            windows = seq.unfold(1, self.order, 1)[:, 1:]  # (B, N, order): the last `order` tokens at each node
        else:
            paths = [ancestors(parents, i) + [i] for i in range(N)]
            windows = torch.stack([torch.cat([cached, tokens[:, path]], dim=1)[:, -self.order:] for path in paths], 1)
        powers = self.vocab_size ** torch.arange(self.order - 1, -1, -1)  # (order,)
        states = (windows * powers).sum(-1)  # (B, N)
        logits = self.log_transitions[states]  # (B, N, V)
        rows = torch.arange(B)[:, None]
        self._history[rows, self._lengths[:, None] + torch.arange(N)] = tokens
        self._last_start = self._lengths.clone()
        self._last_n = N
        self._lengths = self._lengths + N
        self.forward_calls += 1
        return logits

    # --- exact laws -----------------------------------------------------------------------------
    def next_probs(self, context, params: SamplingParams = SamplingParams()) -> torch.Tensor:
        return logits_to_probs(self.next_logits(context), params)  # (V,)

    def sequence_law(self, prompt, length: int, params: SamplingParams = SamplingParams(),
                     eos_token_id: int | None = None) -> dict[tuple[int, ...], float]:
        """Exact probability of every continuation of ``length`` tokens under ``params`` (zeros omitted).

        With ``eos_token_id`` a continuation ends right after its first end token, so outcomes
        are the sequences that stop at the end token or run to ``length``.  Raises ValueError
        (before enumerating further) once more than ``MAX_LAW_SIZE`` continuations have positive
        probability: shorten ``length`` or sharpen ``params``.
        """
        _int(length, "length", 0)
        prompt = _token_list(prompt, self.vocab_size, "prompt")
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be a SamplingParams, got {type(params).__name__}")
        if eos_token_id is not None:
            _int(eos_token_id, "eos_token_id", 0)
        law = {(): 1.0}
        for step in range(length):
            if len(law) * self.vocab_size > MAX_LAW_SIZE and len(law) > 1:
                raise ValueError(f"sequence_law: length={length} gives more than {MAX_LAW_SIZE} continuations "
                                 f"({len(law)} after {step} tokens, up to {self.vocab_size}x more each step)")
            nxt = {}
            for seq, w in law.items():
                if seq and seq[-1] == eos_token_id:
                    nxt[seq] = w  # ended: no more tokens
                    continue
                probs = self.next_probs(prompt + list(seq), params).tolist()
                for z, pz in enumerate(probs):
                    if pz > 0:
                        nxt[seq + (z,)] = w * pz
            law = nxt
        return law


def random_transitions(vocab_size: int, order: int = 1, *, zero_fraction: float = 0.25,
                       sharpness: float = 1.0, generator: torch.Generator | None = None) -> torch.Tensor:
    """Random rows with about ``zero_fraction`` exact zeros each (never a whole row): (V**order, V).

    Weights are Exp(1) draws raised to ``sharpness`` (1 = uniform Dirichlet; larger = peakier rows;
    ``inf`` = one-hot on each row's largest draw).  Each row is divided by its largest kept draw
    before the power, so every row keeps a weight of exactly 1 and no sharpness gives a NaN row.
    """
    _int(vocab_size, "vocab_size", 1)
    _int(order, "order", 1)
    zero_fraction, sharpness = _real(zero_fraction, "zero_fraction"), _real(sharpness, "sharpness")
    if not 0 <= zero_fraction < 1:
        raise ValueError(f"zero_fraction must be in [0, 1), got {zero_fraction}")
    if not sharpness > 0:
        raise ValueError(f"sharpness must be > 0, got {sharpness}")
    if order * math.log(vocab_size) + math.log(vocab_size) > math.log(MAX_TABLE_ENTRIES):
        raise ValueError(f"vocab_size={vocab_size}, order={order} gives a table of more than {MAX_TABLE_ENTRIES} entries")
    S = vocab_size**order
    u = torch.rand(S, vocab_size, generator=generator, dtype=torch.float64)  # (S, V)
    draws = -u.clamp_min(1e-300).log()  # (S, V) Exp(1), all > 0
    zeros = torch.rand(S, vocab_size, generator=generator) < zero_fraction
    zeros[torch.arange(S), torch.randint(vocab_size, (S,), generator=generator)] = False
    draws = draws.masked_fill(zeros, 0.0)
    w = (draws / draws.amax(-1, keepdim=True)) ** sharpness  # (S, V) in [0, 1], the row max exactly 1
    return w / w.sum(-1, keepdim=True)


def make_toy_pair(vocab_size: int = 6, order: int = 1, *, match: float = 0.6, zero_fraction: float = 0.25,
                  seed: int = 0) -> tuple[MarkovLM, MarkovLM]:
    """A target and a draft model: draft = match * target + (1 - match) * unrelated chain.

    ``match`` in [0, 1] is the knob for how well the draft imitates the target (1 = identical).
    Both have exact zeros, so the draft sometimes proposes tokens the target forbids and misses
    tokens the target allows.
    """
    match = _real(match, "match")
    if not 0 <= match <= 1:
        raise ValueError(f"match must be in [0, 1], got {match}")
    _int(vocab_size, "vocab_size", 2)
    _int(seed, "seed", 0)
    g = torch.Generator().manual_seed(seed)
    target = random_transitions(vocab_size, order, zero_fraction=zero_fraction, generator=g)
    other = random_transitions(vocab_size, order, zero_fraction=zero_fraction, generator=g)
    draft = match * target + (1 - match) * other
    return MarkovLM(target, order), MarkovLM(draft / draft.sum(-1, keepdim=True), order)
