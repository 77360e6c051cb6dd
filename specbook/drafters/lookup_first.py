"""Prompt lookup where the text repeats itself, a model drafter everywhere else.

Shape legend: B rows, K drafted tokens.

Prompt lookup (:mod:`specbook.drafters.ngram`) costs nothing and, where a reply copies its prompt
(code edits, summaries, answers quoting a document), drafts long runs that the target accepts; where
nothing matches, it drafts padding.  A model drafter (EAGLE's head, a draft model) guesses 1.5-2.5
tokens a pass anywhere, at a price.  :class:`LookupFirst` drafts with the lookup when the context's
last ``min_match`` (or more) tokens occur earlier in it, and with the model otherwise: the idea of
SAM-Decoding (Hu et al. 2024), which pairs a suffix automaton with EAGLE's head.

Either way the draft is only a proposal: the target's verification decides what is emitted, so the
output law is the target's whichever drafter spoke (each draft comes with its own q: ``None`` for the
lookup's deterministic tokens, the model's own distribution for its sampled ones).  A step that takes
the lookup skips the model entirely; the model's ``observe`` hook still runs after every pass, so it
catches up on the tokens it did not draft the next time it is asked.
"""
from __future__ import annotations

import torch

from ..protocols import Draft, SupportsAttach, SupportsObserve, SupportsSelectRows
from ..sampling import SamplingParams
from .ngram import NGramDrafter


class LookupFirst:
    """``lookup`` (prompt lookup, up to 3-token suffixes) when every row's suffix match is at least
    ``min_match`` tokens, else ``fallback`` (any drafter: a chain or a tree).

    A lookup draft is as long as the fallback's widest draft: ``gamma`` tokens behind a chain, the tree's
    node budget behind a tree (which, like the tree, ignores ``gamma``), so a pass is never wider than
    the fallback's own and the sizing that chose the tree prices both.  The batch goes one way or the
    other as a whole.  ``lookups`` and ``fallbacks`` count the drafts each made."""

    def __init__(self, fallback, min_match: int = 2, lookup: NGramDrafter | None = None):
        if not isinstance(min_match, int) or isinstance(min_match, bool) or min_match < 1:
            raise ValueError(f"min_match must be an int >= 1, got {min_match!r}")
        if not hasattr(fallback, "propose"):
            raise TypeError(f"fallback must be a drafter (with propose), got {type(fallback).__name__}")
        self.fallback, self.min_match = fallback, min_match
        self.lookup = lookup if lookup is not None else NGramDrafter(max_ngram=max(3, min_match))
        self.lookups = self.fallbacks = 0

    @property
    def tree(self):
        """The fallback's tree (None: a chain); its widest draft is the widest either makes (bench.combos reads it)."""
        return getattr(self.fallback, "tree", None)

    @property
    def passes(self) -> int:
        return int(getattr(self.fallback, "passes", 0))  # the lookup runs no model

    def attach(self, target) -> None:
        if isinstance(self.fallback, SupportsAttach):
            self.fallback.attach(target)

    def observe(self, target, kept: list[list[int]]) -> None:
        if isinstance(self.fallback, SupportsObserve):
            self.fallback.observe(target, kept)

    def select_rows(self, rows: list[int]) -> None:
        self.lookup.select_rows(rows)
        if isinstance(self.fallback, SupportsSelectRows):
            self.fallback.select_rows(rows)

    def propose(self, contexts: list[torch.Tensor], gamma: int, params: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        longest = gamma if self.tree is None else self.tree.num_nodes  # a DynamicTree's or a ChoiceTree's
        if longest > 0:
            draft = self.lookup.propose(contexts, longest, params, generator)
            if min(self.lookup.match_lengths) >= self.min_match:
                self.lookups += 1
                return draft  # (B, K) tokens copied from the context, probs None: deterministic
        self.fallbacks += 1
        return self.fallback.propose(contexts, gamma, params, generator)
