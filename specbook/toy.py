"""Toy language models whose every conditional distribution is known exactly.

Shape legend: B batch, N new tokens, V vocab, S = V**order Markov states.

A :class:`MarkovLM` of order r over V tokens picks the next token from a fixed
table ``transitions[state]`` where the state is the last r tokens.  It
implements the :class:`specbook.protocols.Target` interface (a rollback-able
"cache" that is simply the token history), so the speculative loop runs on it
exactly as on a transformer, and :func:`sequence_law` gives the exact
probability of every continuation, against which whole generated sequences are
tested.
"""
from __future__ import annotations

import math
from itertools import product

import torch

from .sampling import SamplingParams, logits_to_probs
from .tree import ancestors


class MarkovLM:
    """An order-``order`` Markov chain over ``vocab_size`` tokens, usable as Target and draft model.

    transitions: (V**order, V) rows of probabilities (zeros allowed).  Contexts shorter than
    ``order`` are left-padded with token 0.
    """

    def __init__(self, transitions: torch.Tensor, order: int = 1):
        if order < 1:
            raise ValueError(f"order must be >= 1, got {order}")
        V = transitions.shape[-1]
        if transitions.shape != (V**order, V):
            raise ValueError(f"transitions must have shape ({V}**{order}, {V}), got {tuple(transitions.shape)}")
        if (transitions < 0).any() or not torch.allclose(transitions.sum(-1).double(), torch.ones(V**order, dtype=torch.float64)):
            raise ValueError("transitions rows must be probability vectors")
        self.transitions = transitions.to(torch.float64)
        self.order = order
        self.vocab_size = V
        self.log_transitions = self.transitions.log()  # (S, V); log 0 = -inf
        self._history = torch.zeros(0, 0, dtype=torch.long)
        self._lengths = torch.zeros(0, dtype=torch.long)
        self._last_start: torch.Tensor | None = None
        self.forward_calls = 0  # how many forward passes were made (one per target / draft pass)

    # --- exact conditionals -------------------------------------------------------------------
    def state(self, context) -> int:
        ctx = [int(t) for t in context][-self.order:]
        ctx = [0] * (self.order - len(ctx)) + ctx
        s = 0
        for t in ctx:
            s = s * self.vocab_size + t
        return s

    def next_logits(self, context) -> torch.Tensor:
        return self.log_transitions[self.state(context)]  # (V,)

    # --- Target protocol ------------------------------------------------------------------------
    def reset(self, batch_size: int) -> None:
        self._history = torch.zeros(batch_size, 0, dtype=torch.long)
        self._lengths = torch.zeros(batch_size, dtype=torch.long)

    @property
    def cache_lengths(self) -> torch.Tensor:
        return self._lengths.clone()

    def rollback(self, lengths: torch.Tensor) -> None:
        lengths = torch.as_tensor(lengths, dtype=torch.long)
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
        rows = [torch.as_tensor(idx, dtype=torch.long).reshape(-1) for idx in indices]
        if len(rows) != len(self._lengths):
            raise ValueError(f"indices must hold {len(self._lengths)} rows, got {len(rows)}")
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
        if tokens.ndim != 2 or tokens.shape[0] != self._lengths.shape[0]:
            raise ValueError(f"tokens must be (B, N) with B = {self._lengths.shape[0]}, got {tuple(tokens.shape)}")
        B, N = tokens.shape
        tokens = tokens.long()
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
        are the sequences that stop at the end token or run to ``length``."""
        if length < 0:
            raise ValueError(f"length must be >= 0, got {length}")
        law = {(): 1.0}
        for _ in range(length):
            nxt = {}
            for seq, w in law.items():
                if seq and seq[-1] == eos_token_id:
                    nxt[seq] = w  # ended: no more tokens
                    continue
                probs = self.next_probs(list(prompt) + list(seq), params).tolist()
                for z, pz in enumerate(probs):
                    if pz > 0:
                        nxt[seq + (z,)] = w * pz
            law = nxt
        return law


def random_transitions(vocab_size: int, order: int = 1, *, zero_fraction: float = 0.25,
                       sharpness: float = 1.0, generator: torch.Generator | None = None) -> torch.Tensor:
    """Random rows with about ``zero_fraction`` exact zeros each (never a whole row): (V**order, V).

    Weights are Exp(1) draws raised to ``sharpness`` (1 = uniform Dirichlet; larger = peakier rows).
    """
    if not 0 <= zero_fraction < 1:
        raise ValueError(f"zero_fraction must be in [0, 1), got {zero_fraction}")
    if not sharpness > 0:
        raise ValueError(f"sharpness must be > 0, got {sharpness}")
    S = vocab_size**order
    u = torch.rand(S, vocab_size, generator=generator, dtype=torch.float64)  # (S, V)
    w = (-u.clamp_min(1e-300).log()) ** sharpness
    zeros = torch.rand(S, vocab_size, generator=generator) < zero_fraction
    zeros[torch.arange(S), torch.randint(vocab_size, (S,), generator=generator)] = False
    w = w.masked_fill(zeros, 0.0)
    return w / w.sum(-1, keepdim=True)


def make_toy_pair(vocab_size: int = 6, order: int = 1, *, match: float = 0.6, zero_fraction: float = 0.25,
                  seed: int = 0) -> tuple[MarkovLM, MarkovLM]:
    """A target and a draft model: draft = match * target + (1 - match) * unrelated chain.

    ``match`` in [0, 1] is the knob for how well the draft imitates the target (1 = identical).
    Both have exact zeros, so the draft sometimes proposes tokens the target forbids and misses
    tokens the target allows.
    """
    if not 0 <= match <= 1:
        raise ValueError(f"match must be in [0, 1], got {match}")
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be >= 2, got {vocab_size}")
    g = torch.Generator().manual_seed(seed)
    target = random_transitions(vocab_size, order, zero_fraction=zero_fraction, generator=g)
    other = random_transitions(vocab_size, order, zero_fraction=zero_fraction, generator=g)
    draft = match * target + (1 - match) * other
    return MarkovLM(target, order), MarkovLM(draft / draft.sum(-1, keepdim=True), order)
