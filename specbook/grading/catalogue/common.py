"""The two draws every catalogued implementation uses, written once.

The implementations in :mod:`.token_rules` and :mod:`.verifiers` are written the way a student
would write them, one position at a time; these helpers keep that code short.
"""
from __future__ import annotations

import torch


def uniform(g, like: torch.Tensor) -> torch.Tensor:
    """One uniform on [0, 1) from generator ``g``, in the dtype of ``like`` (a scalar tensor)."""
    return torch.rand((), generator=g, dtype=like.dtype)


def positive_part(p, q):
    """The unnormalised residual max(0, p - q) (Leviathan et al. 2023, Algorithm 1)."""
    return (p - q).clamp(min=0)
