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

from ..protocols import Draft, Target
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

    def _sync(self, contexts: list[torch.Tensor]) -> torch.Tensor:
        """Bring the draft cache up to ``contexts`` minus what must be fed now; return tokens to feed (B, m)."""
        B = len(contexts)
        ctx = [c.tolist() for c in contexts]
        if self._cached is None or len(self._cached) != B:
            self.model.reset(B)
            self._cached = [[] for _ in range(B)]
        # keep what still agrees, but always re-feed at least the last context token (we need its logits)
        keep = [min(_common_prefix(self._cached[b], ctx[b]), len(ctx[b]) - 1) for b in range(B)]
        m = max(len(ctx[b]) - keep[b] for b in range(B))  # feed the same number of tokens in every row
        if any(len(c) < m for c in ctx):
            # rows are too far out of step to catch up with one equal-width forward: start over
            # (only happens for batches of very short prompts); rows must then have equal length
            if len({len(c) for c in ctx}) != 1:
                raise ValueError("batched draft-model drafting needs prompts longer than the draft length + 2")
            self.model.reset(B)
            self._cached = [[] for _ in range(B)]
            m = len(ctx[0])
        new_lengths = torch.tensor([len(c) - m for c in ctx], dtype=torch.long)
        self.model.rollback(new_lengths)
        self._cached = [ctx[b][: len(ctx[b]) - m] for b in range(B)]
        return torch.tensor([c[len(c) - m :] for c in ctx], dtype=torch.long)  # (B, m)

    def propose(self, contexts: list[torch.Tensor], gamma: int, params: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        B = len(contexts)
        V = self.model.vocab_size
        if gamma == 0:
            return Draft(torch.zeros(B, 0, dtype=torch.long), None if params.greedy else torch.zeros(B, 0, V))
        feed = self._sync(contexts)  # (B, m)
        tokens, probs = [], []
        for _ in range(gamma):
            logits = self.model.forward(feed)[:, -1]  # (B, V)
            self.passes += 1
            for cached, fed in zip(self._cached, feed.tolist()):
                cached.extend(fed)
            if params.greedy:
                nxt = logits.argmax(-1)  # (B,)
            else:
                q = logits_to_probs(logits, params)  # (B, V) the distribution the draft is sampled from
                nxt = sample(q, generator)
                probs.append(q)
            tokens.append(nxt)
            feed = nxt[:, None]
        # the last draft was sampled but not fed: the cache holds the context and drafts 1..K-1
        draft_tokens = torch.stack(tokens, dim=1)  # (B, K)
        draft_probs = None if params.greedy else torch.stack(probs, dim=1)  # (B, K, V)
        return Draft(draft_tokens, draft_probs)
