"""The two interfaces every model in specbook implements, and the optional capabilities the loop uses.

Shape legend: B batch, N new tokens in one forward, T sequence, V vocab, K draft length.

A *Target* is a language model with a key/value cache that can be rolled back
per row.  The speculative loop only ever needs four things from it:

* ``reset(batch_size)``           forget everything (empty cache, all rows length 0);
* ``forward(tokens, parents=None)`` append ``tokens`` (B, N) to every row's cache and
  return next-token logits at each of them, (B, N, V).  ``parents`` (N,) describes a
  tree over the new tokens (``-1`` = child of the cached context); ``None`` means a
  plain chain (ordinary causal attention).  Node ``i`` sits at position
  ``cache_length + depth(i)`` and attends to the cached context plus its ancestors;
* ``cache_lengths``              (B,) how many tokens each row holds in its cache;
* ``rollback(lengths)``          keep only the first ``lengths[b]`` cached tokens of row b.

Two more a target *may* offer (each its own Protocol below, checked with ``isinstance``):

* ``prefill(tokens)``  (:class:`SupportsPrefill`) like ``forward`` but without logits (the
  prompt's are unused);
* ``keep(indices)``    (:class:`SupportsKeep`, needed for tree drafts) directly after a tree
  forward, keep per row only the new tokens ``indices[b]`` (a root-to-node path, listed root
  first), packed into place.

A *Drafter* proposes tokens for the target to verify.  It sees the full token
history of every row (prompt plus everything emitted so far) and keeps whatever
state it likes (its own cache, an n-gram index), re-synchronising by itself when
the history it is shown diverges from the one it drafted on.  Two optional capabilities:

* ``observe(target, kept)`` (:class:`SupportsObserve`) for drafters that read the target's
  hidden states (Medusa, EAGLE): called after the prefill and after every verification;
* ``passes``               (:class:`CountsPasses`) the drafter's own forward passes so far,
  which the loop reports as ``DecodeStats.draft_passes``.

All are ``typing.Protocol`` classes: anything with the right methods qualifies.  The loop
(:mod:`specbook.decode`) asks for nothing that is not declared here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from .sampling import SamplingParams


@dataclass
class Draft:
    """What a drafter proposes for one verification step.

    tokens:  (B, K) long   proposed tokens (a chain unless ``parents`` is given)
    probs:   (B, K, V) or None  the distribution each token was *sampled from*,
             after the same SamplingParams the target uses; None = deterministic
             drafts (one-hot q), e.g. n-gram lookup or greedy drafting.
    parents: (K,) long or None  tree structure over the K nodes (-1 = root child);
             None = chain.
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
    def propose(
        self,
        contexts: list[torch.Tensor],
        gamma: int,
        params: SamplingParams,
        generator: torch.Generator | None = None,
    ) -> Draft: ...


# ----------------------------------------------------------------------------- optional capabilities

@runtime_checkable
class SupportsPrefill(Protocol):
    """A target that can fill its cache with the prompt without computing logits.

    ``prefill(tokens)`` appends ``tokens`` (B, N) like ``forward`` and returns nothing; the
    loop uses it for all prompt tokens but the last, whose logits are never read.
    """

    def prefill(self, tokens: torch.Tensor) -> None: ...


@runtime_checkable
class SupportsKeep(Protocol):
    """A target that can verify a tree draft (Medusa, EAGLE, SpecInfer-style trees).

    ``keep(indices)`` is called directly after ``forward(tokens, parents)``: row b keeps only
    the new tokens ``indices[b]`` (a root-to-node path, root first), packed into place, and
    drops the rest of the tree from its cache.
    """

    def keep(self, indices: list[list[int]]) -> None: ...


@runtime_checkable
class SupportsObserve(Protocol):
    """A drafter that reads the target's state (Medusa and EAGLE heads read its hidden states).

    ``observe(target, kept)`` is called after the prefill and after every verification, once
    the cache is final: ``kept[b]`` lists, in order, the indices of the last forward's new
    tokens that stayed in row b's cache.
    """

    def observe(self, target: Target, kept: list[list[int]]) -> None: ...


@runtime_checkable
class CountsPasses(Protocol):
    """A drafter that counts its own forward passes (``passes``, an int that only grows).

    The loop reports the difference over one generation as ``DecodeStats.draft_passes``, the
    draft cost of the cost model (Leviathan et al. 2023, Sec. 3.4).
    """

    passes: int


@runtime_checkable
class SupportsSelectRows(Protocol):
    """A target or drafter whose per-row state can shrink to a subset of its rows.

    ``select_rows(rows)`` keeps only the batch rows ``rows`` (a list of slot indices, in the
    order given) and drops the others, caches included.  The loop calls it when rows end (an
    end token or their budget), so a finished row costs nothing more.  A target without it is
    rebuilt from the live rows' histories instead (one prefill); a drafter without it sees a
    smaller batch and must re-synchronise, as every drafter must when its history diverges.
    """

    def select_rows(self, rows: list[int]) -> None: ...
