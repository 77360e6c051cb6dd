"""N-gram / prompt-lookup drafting: no model at all (Saxena 2023, "Prompt Lookup Decoding").

Shape legend: B batch, K draft length.

Find the longest suffix of the context (between ``max_ngram`` and ``min_ngram``
tokens) that also occurs earlier in the context, and propose the tokens that
followed its most recent earlier occurrence.  Drafts are deterministic (q is
one-hot), so verification accepts draft x with probability p(x) and the output
law is still exactly the target's.
"""
from __future__ import annotations

import torch

from ..protocols import Draft
from ..sampling import SamplingParams


class NGramDrafter:
    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got min_ngram={min_ngram}, max_ngram={max_ngram}")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.passes = 0  # no model passes, ever

    def lookup(self, context: list[int], gamma: int) -> list[int]:
        """Up to ``gamma`` tokens that followed the latest earlier match of the longest suffix."""
        T = len(context)
        for n in range(min(self.max_ngram, T - 1), self.min_ngram - 1, -1):
            suffix = context[T - n :]
            for start in range(T - n - 1, -1, -1):  # most recent earlier occurrence first
                if context[start : start + n] == suffix:
                    return context[start + n : start + n + gamma]
        return []

    def propose(self, contexts: list[torch.Tensor], gamma: int, params: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        found = [self.lookup(c.tolist(), gamma) for c in contexts]
        K = max(len(f) for f in found)
        # A row with a shorter match is padded by repeating its last token: any deterministic
        # draft is lossless (it is only verified), padding merely costs verify positions.
        rows = [f + [f[-1] if f else int(c[-1])] * (K - len(f)) for f, c in zip(found, contexts)]
        return Draft(torch.tensor(rows, dtype=torch.long).reshape(len(contexts), K), None)
