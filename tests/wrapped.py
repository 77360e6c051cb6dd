"""A target that hands every call to the model it wraps; tests subclass it to count or corrupt one call."""
from __future__ import annotations


class WrappedTarget:
    """Every Target method, optional capabilities included, passed through to ``inner``."""

    def __init__(self, inner):
        self.inner, self.vocab_size = inner, inner.vocab_size

    def reset(self, batch_size):
        self.inner.reset(batch_size)

    @property
    def cache_lengths(self):
        return self.inner.cache_lengths

    def rollback(self, lengths):
        self.inner.rollback(lengths)

    def select_rows(self, rows):
        self.inner.select_rows(rows)

    def keep(self, indices):
        self.inner.keep(indices)

    def forward(self, tokens, parents=None):
        return self.inner.forward(tokens, parents)
