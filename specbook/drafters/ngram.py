"""N-gram / prompt-lookup drafting: no model at all (Saxena 2023, "Prompt Lookup Decoding").

Shape legend: B batch, K draft length, T context length, n n-gram length.

Find the longest suffix of the context (``max_ngram`` down to ``min_ngram`` tokens)
that also occurs earlier in the context (prompt and generated text alike), and
propose the tokens that followed that earlier occurrence.  Drafts are
deterministic (q is one-hot, ``Draft.probs is None``), so verification accepts
draft x with probability p(x) and the output law is still exactly the target's.

The index.  Rescanning the whole context for the suffix at every step costs O(T)
per step and O(T^2) per generation (transformers' ``PromptLookupCandidateGenerator``
slides a window over the full ``input_ids`` every step).  Here each row keeps a
hash table ``n-gram -> where it ended``; when the context grows by m tokens only
the m new n-grams of each length are added, and a lookup is max_ngram dictionary
probes.  Contexts only ever grow during decoding; if the history shown ever
disagrees with the one indexed (a new prompt, an edited history) the row's index
is rebuilt from scratch.

Which occurrence.  ``prefer="latest"`` (default) copies from the most recent
earlier occurrence, which follows the text's most recent habits;
``prefer="earliest"`` copies from the first one, the rule transformers uses
(``tests/drafters/test_drafters.py`` checks that the drafts then equal transformers').

Overlapping copies.  When the copied span runs into the end of the context
(e.g. a line the model is repeating), ``overlap=True`` keeps copying from the
draft itself, as LZ77 does with overlapping matches: after "x a b a b" with
suffix "a b" the drafts are "a b a b ..." instead of stopping after two tokens.
"""
from __future__ import annotations

import torch

from ..protocols import Draft
from ..sampling import SamplingParams


class NGramIndex:
    """Incremental n-gram index of one token history (one row).

    ``table[ngram]`` is the end (exclusive) of the latest / earliest occurrence of
    ``ngram`` that has a known next token, i.e. an index e with e < len(history).
    """

    def __init__(self, max_ngram: int, min_ngram: int, prefer: str = "latest"):
        self.max_ngram, self.min_ngram, self.prefer = max_ngram, min_ngram, prefer
        self.history: list[int] = []
        self.table: dict[tuple[int, ...], int] = {}
        self.last_match = 0  # suffix length the last lookup matched (0: none)

    def extend(self, tokens: list[int]) -> None:
        """Append ``tokens`` to the history and index every n-gram that now has a follower."""
        h = self.history
        old_len = len(h)
        h.extend(tokens)
        latest = self.prefer == "latest"
        # The n-gram h[e-n:e] becomes indexable when its follower h[e] exists; ends up to
        # old_len - 1 were indexed before, so only ends old_len .. len(h) - 1 are new.
        for e in range(max(old_len, 1), len(h)):
            for n in range(self.min_ngram, min(self.max_ngram, e) + 1):
                key = tuple(h[e - n:e])
                if latest or key not in self.table:
                    self.table[key] = e

    def lookup(self, gamma: int, overlap: bool = True) -> list[int]:
        """Up to ``gamma`` tokens that followed an earlier occurrence of the longest matching suffix."""
        h = self.history
        T = len(h)
        self.last_match = 0
        for n in range(min(self.max_ngram, T - 1), self.min_ngram - 1, -1):
            e = self.table.get(tuple(h[T - n:]))
            if e is None:
                continue
            self.last_match = n
            if not overlap:
                return h[e:e + gamma]
            out: list[int] = []
            for j in range(gamma):  # h + out is read as one sequence: copying may overlap the draft
                i = e + j
                out.append(h[i] if i < T else out[i - T])
            return out
        return []


class NGramDrafter:
    """Prompt-lookup drafter with an incremental per-row n-gram index.

    max_ngram, min_ngram: suffix lengths tried, longest first (1 <= min_ngram <= max_ngram).
    prefer: "latest" or "earliest" occurrence to copy from (transformers uses "earliest").
    overlap: keep copying past the end of the context (periodic text); False copies only
             tokens that exist (transformers' behaviour).

    After each ``propose``, ``match_lengths`` holds, per row, the length of the suffix that
    matched (0: no match, the row's draft is padding).  A longer match is a better bet;
    :class:`~specbook.drafters.adaptive.AdaptiveGamma` reads it to tell matched rows from unmatched ones.
    """

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, prefer: str = "latest", overlap: bool = True):
        if not (isinstance(min_ngram, int) and isinstance(max_ngram, int) and 1 <= min_ngram <= max_ngram):
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got min_ngram={min_ngram}, max_ngram={max_ngram}")
        if prefer not in ("latest", "earliest"):
            raise ValueError(f"prefer must be 'latest' or 'earliest', got {prefer!r}")
        self.max_ngram, self.min_ngram, self.prefer, self.overlap = max_ngram, min_ngram, prefer, overlap
        self.passes = 0  # no model passes, ever
        self.match_lengths: list[int] = []  # per row, the suffix length matched by the last propose
        self._rows: list[NGramIndex] = []
        self._shown: list[torch.Tensor] = []  # the context each row's index was last synced to

    def _sync(self, b: int, context: torch.Tensor) -> NGramIndex:
        """Bring row b's index up to ``context``; extend it if the context only grew, else rebuild."""
        if b >= len(self._rows):
            self._rows.append(NGramIndex(self.max_ngram, self.min_ngram, self.prefer))
            self._shown.append(context[:0])
        index, shown = self._rows[b], self._shown[b]
        n_old = shown.shape[0]
        grew = context.shape[0] >= n_old and torch.equal(context[:n_old], shown)  # one memcmp, no Python loop
        if not grew:
            index = self._rows[b] = NGramIndex(self.max_ngram, self.min_ngram, self.prefer)
            n_old = 0
        index.extend(context[n_old:].tolist())
        self._shown[b] = context
        return index

    def select_rows(self, rows: list[int]) -> None:
        """Keep only batch rows ``rows`` (the loop drops rows that have ended); their indexes stay warm."""
        keep = [r for r in rows if r < len(self._rows)]
        self._rows = [self._rows[r] for r in keep]
        self._shown = [self._shown[r] for r in keep]
        if self.match_lengths:
            self.match_lengths = [self.match_lengths[r] for r in keep]

    def lookup(self, context: list[int], gamma: int) -> list[int]:
        """Drafts for one history, from a fresh index (for teaching and tests; ``propose`` is incremental)."""
        index = NGramIndex(self.max_ngram, self.min_ngram, self.prefer)
        index.extend(list(context))
        return index.lookup(gamma, self.overlap)

    def propose(self, contexts: list[torch.Tensor], gamma: int, params: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        if len(contexts) < len(self._rows):  # a smaller batch: a new generation
            self._rows, self._shown = [], []
        indexes = [self._sync(b, c.detach().cpu()) for b, c in enumerate(contexts)]
        found = [index.lookup(gamma, self.overlap) for index in indexes]
        self.match_lengths = [index.last_match for index in indexes]
        K = max(len(f) for f in found)
        # A row with a shorter match is padded by repeating its last token: any deterministic
        # draft is lossless (it is only verified), padding merely costs verify positions.
        rows = [f + [f[-1] if f else int(c[-1])] * (K - len(f)) for f, c in zip(found, contexts)]
        return Draft(torch.tensor(rows, dtype=torch.long).reshape(len(contexts), K), None)
