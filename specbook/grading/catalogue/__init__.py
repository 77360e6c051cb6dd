"""Implementations the checker is judged by: correct ones that must pass, broken ones that must fail.

Three kinds: CORRECT_* (the modified rejection sampler: lossless and standard),
LOSSLESS_* (lossless but not the standard algorithm: lossless=True, standard=False)
and BROKEN_* (lossy: lossless=False, and so standard=False).

Shape legend: K draft length, V vocab.

The correct implementations use randomness in different ways (inverse CDF,
``torch.multinomial``, Gumbel-max, an unnormalised residual, uniforms drawn up
front), so passing cannot depend on reproducing the reference's exact draws.
The broken ones are bugs students and real implementations make; each must fail
with probability >= 0.99 (see ``python -m specbook.grading --detection-table``).
They are written the way a student would write them, one position at a time.

This package is the catalogue's index: the six tuples and ``Entry`` are imported from here.
The token rules (one position) live in ``token_rules.py``, the chain verifiers in
``verifiers.py`` (import a single implementation from its module), and the ``Entry`` record
with the two draws both use in ``common.py``.
"""
from .common import Entry
from .token_rules import BROKEN_TOKEN_RULES, CORRECT_TOKEN_RULES, LOSSLESS_TOKEN_RULES
from .verifiers import BROKEN_VERIFIERS, CORRECT_VERIFIERS, LOSSLESS_VERIFIERS

__all__ = [
    "Entry",
    "CORRECT_TOKEN_RULES", "LOSSLESS_TOKEN_RULES", "BROKEN_TOKEN_RULES",
    "CORRECT_VERIFIERS", "LOSSLESS_VERIFIERS", "BROKEN_VERIFIERS",
]
