"""The two interfaces every model in specbook implements, and the optional capabilities the loop uses.

Shape legend: B batch, N new tokens in one forward, V vocab, K draft length.

A *Target* is a language model with a key/value cache that can be rolled back per row:

* ``reset(batch_size)``             forget everything (empty cache, every row of length 0);
* ``forward(tokens, parents=None)`` append ``tokens`` (B, N) to every row's cache and return the
  next-token logits at each of them, (B, N, V).  ``parents`` (N,) makes the new tokens a tree
  (-1 = child of the cached context; :mod:`specbook.tree`): node i sits at position
  ``cache_length + depth(i)`` and attends to the context and its ancestors.  None: a chain;
* ``cache_lengths``                 (B,) how many tokens each row holds;
* ``rollback(lengths)``             keep only the first ``lengths[b]`` cached tokens of row b.

A *Drafter* proposes tokens for the target to verify.  It sees every row's whole history (prompt
plus everything emitted) and keeps whatever state it likes, re-synchronising by itself when the
history it is shown diverges from the one it drafted on.

The optional capabilities are each a Protocol, checked with ``isinstance``; the loop asks for nothing
that is not declared here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch


@dataclass
class Draft:
    """What a drafter proposes for one verification pass.

    tokens:  (B, K) integer  proposed tokens (a chain unless ``parents`` is given)
    probs:   (B, K, V) or None  the law each token was *sampled from*, after the same
             SamplingParams the target uses; None = deterministic drafts (one-hot q)
    parents: (K,) or None  tree structure over the K nodes (-1 = child of the context); None = chain
    """

    tokens: torch.Tensor
    probs: torch.Tensor | None = None
    parents: torch.Tensor | None = None

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.shape[1])


@runtime_checkable
class Target(Protocol):
    vocab_size: int

    def reset(self, batch_size: int) -> None: ...

    def forward(self, tokens: torch.Tensor, parents: torch.Tensor | None = None) -> torch.Tensor: ...

    @property
    def cache_lengths(self) -> torch.Tensor: ...

    def rollback(self, lengths: torch.Tensor) -> None: ...


@runtime_checkable
class Drafter(Protocol):
    def propose(self, contexts: list[torch.Tensor], gamma: int, params,  # a specbook.sampling.SamplingParams
                generator: torch.Generator | None = None) -> Draft: ...


@runtime_checkable
class SupportsPrefill(Protocol):
    """A target that fills its cache without computing logits: ``prefill(tokens)`` appends (B, N) like
    ``forward`` and returns nothing (the loop uses it for the prompt, whose logits are never read)."""

    def prefill(self, tokens: torch.Tensor) -> None: ...


@runtime_checkable
class SupportsKeep(Protocol):
    """A target that can verify a tree draft: ``keep(indices)``, called right after
    ``forward(tokens, parents)``, keeps in row b only the new tokens ``indices[b]`` (a root-to-node
    path, root first), packed into place, and drops the rest of the tree."""

    def keep(self, indices: list[list[int]]) -> None: ...


@runtime_checkable
class SupportsObserve(Protocol):
    """A drafter that reads the target's hidden states (Medusa, EAGLE): ``observe(target, kept)`` runs after
    the prefill and after every verification; ``kept[b]`` lists the indices of the last forward's new
    tokens that stayed in row b's cache."""

    def observe(self, target: Target, kept: list[list[int]]) -> None: ...


@runtime_checkable
class SupportsAttach(Protocol):
    """A drafter that needs something of the target before the prefill: ``attach(target)`` runs once per
    generation, first (an EAGLE head that reads earlier blocks asks the target to keep their states)."""

    def attach(self, target: Target) -> None: ...


@runtime_checkable
class CountsPasses(Protocol):
    """A drafter that counts its own forward passes (``passes``, an int that only grows); the loop
    reports the difference as ``DecodeStats.draft_passes`` (Leviathan et al. 2023, sec. 3.4)."""

    passes: int


@runtime_checkable
class SupportsSelectRows(Protocol):
    """A target or drafter whose per-row state can shrink: ``select_rows(rows)`` keeps only the batch
    slots ``rows`` (in that order), caches included.  The loop calls it when rows end; a target
    without it is rebuilt from the live rows' histories (one prefill), and a drafter without it
    re-synchronises from the smaller batch it is shown."""

    def select_rows(self, rows: list[int]) -> None: ...
