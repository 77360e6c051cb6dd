"""A separate, smaller language model as the drafter (Leviathan et al. 2023; Chen et al. 2023).

Shape legend: B batch, K draft length, V vocab.

The draft model runs autoregressively for K steps, sampling each token from
its own distribution *after the same SamplingParams as the target* and
returning those distributions (q) for verification.  Its KV cache is kept in
sync with the history the loop shows it: on each call it rolls back to the
longest prefix it still agrees with and feeds only the new tokens, so rejected
drafts cost nothing later.
"""
from __future__ import annotations

import torch

from ..protocols import Draft, SupportsSelectRows, Target
from ..sampling import SamplingParams, logits_to_probs, sample


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class DraftModelDrafter:
    """Draft with any model that implements the Target protocol (a toy Markov chain, a small Llama)."""

    def __init__(self, model: Target):
        self.model = model
        self.passes = 0  # draft-model forward passes, for the cost accounting
        self._cached: list[list[int]] | None = None  # tokens in the draft model's cache, per row

    def _sync(self, contexts: list[list[int]]) -> tuple[torch.Tensor, list[int]]:
        """Roll the draft cache back to what still agrees with ``contexts``; return what to feed now.

        Returns (feed (B, m) long, real (B,) list): row b must be fed its last ``real[b]`` context
        tokens (always at least the last one, whose logits give the first draft).  Rows that need
        fewer than m are right-padded with their own last token; the padding is rolled back after
        the forward, so only real tokens stay cached."""
        B = len(contexts)
        if self._cached is None or len(self._cached) != B:
            self.model.reset(B)
            self._cached = [[] for _ in range(B)]
        keep = [min(_common_prefix(self._cached[b], contexts[b]), len(contexts[b]) - 1) for b in range(B)]
        self.model.rollback(torch.tensor(keep, dtype=torch.long))
        real = [len(c) - k for c, k in zip(contexts, keep)]
        m = max(real)
        feed = [c[k:] + [c[-1]] * (m - r) for c, k, r in zip(contexts, keep, real)]
        self._cached = [c[:k] for c, k in zip(contexts, keep)]
        return torch.tensor(feed, dtype=torch.long), real  # (B, m)

    def select_rows(self, rows: list[int]) -> None:
        """Keep only batch rows ``rows`` (the loop calls this when rows finish)."""
        if self._cached is None:
            return
        if any(r >= len(self._cached) for r in rows):
            # The cache holds an earlier, smaller batch: this generation has not drafted yet
            # (a scheduler kept gamma at 0).  Nothing here to keep; the next call re-synchronises.
            self._cached = None
            return
        if isinstance(self.model, SupportsSelectRows):
            self.model.select_rows(rows)
            self._cached = [self._cached[r] for r in rows]
        else:
            self._cached = None  # re-synchronise from scratch on the next call

    def propose(self, contexts: list[torch.Tensor], gamma: int, params: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        B = len(contexts)
        V = self.model.vocab_size
        if gamma == 0:
            return Draft(torch.zeros(B, 0, dtype=torch.long), None if params.greedy else torch.zeros(B, 0, V))
        feed, real = self._sync([c.tolist() for c in contexts])  # (B, m)
        tokens, probs = [], []
        for step in range(gamma):
            logits = self.next_logits(feed, real if step == 0 else None)  # (B, V)
            nxt, q = self.draw(logits, params, generator)
            tokens.append(nxt)
            if q is not None:
                probs.append(q)
            feed = nxt[:, None]
        # the last draft was sampled but not fed: the cache holds the context and drafts 1..K-1
        draft_tokens = torch.stack(tokens, dim=1)  # (B, K)
        draft_probs = torch.stack(probs, dim=1) if probs else None  # (B, K, V)
        return Draft(draft_tokens, draft_probs)

    def next_logits(self, feed: torch.Tensor, real: list[int] | None = None) -> torch.Tensor:
        """Feed ``feed`` (B, m) to the draft model; return the logits after each row's last real token (B, V).

        ``real[b]``: how many of row b's fed tokens are real (the rest is padding, rolled back
        here); None = all of them."""
        logits = self.model.forward(feed)  # (B, m, V)
        self.passes += 1
        rows = feed.tolist()
        if real is None or min(real) == feed.shape[1]:
            logits = logits[:, -1]
        else:
            last = torch.tensor(real, device=logits.device) - 1  # (B,) each row's last real position
            logits = logits[torch.arange(len(rows), device=logits.device), last]
            self.model.rollback(torch.tensor([len(c) + r for c, r in zip(self._cached, real)], dtype=torch.long))
            rows = [row[:r] for row, r in zip(rows, real)]
        for cached, fed in zip(self._cached, rows):
            cached.extend(fed)
        return logits  # (B, V)

    def draw(self, logits: torch.Tensor, params: SamplingParams,
             generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One draft token per row from ``logits`` (B, V), and the distribution it was drawn from
        (None when greedy: a deterministic draft).  The same ``params`` as the target's."""
        if params.greedy:
            return logits.argmax(-1), None  # (B,)
        q = logits_to_probs(logits, params)  # (B, V) the distribution the draft is sampled from
        return sample(q, generator), q
