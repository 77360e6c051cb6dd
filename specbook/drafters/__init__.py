"""Drafters: everything that proposes tokens for the target to verify (one idea per file)."""
from .draft_model import DraftModelDrafter
from .ngram import NGramDrafter

__all__ = ["DraftModelDrafter", "NGramDrafter"]
