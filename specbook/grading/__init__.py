"""The grading checker: is this sampler exactly lossless?  (Statistical, calibrated, explained.)

    >>> from specbook.grading import check_token_rule, check_verifier
    >>> report = check_token_rule(my_rule)        # fn(target_probs, draft_probs, draft_token, generator) -> int
    >>> report.passed, print(report)
    >>> check_verifier(my_verifier)               # fn(target_probs, draft_probs, draft_tokens, generator) -> LongTensor

A correct implementation passes with probability at least 1 - alpha (alpha = 1e-3 by
default, family-wise over all statistical tests of one report, Holm) for every seed;
every bug in :mod:`specbook.grading.catalogue` fails with probability at least 0.99
(see docs/grading.md for the detection table and timings).
"""
from .calls import CallFailed, LimitedCaller
from .engine import DEFAULT_ALPHA, DEFAULT_CALL_TIMEOUT, DEFAULT_TIME_BUDGET
from .report import Check, Report, assert_passed
from .token_rule import assert_token_rule, check_token_rule
from .verifier import assert_verifier, check_verifier

__all__ = [
    "check_token_rule", "check_verifier", "assert_token_rule", "assert_verifier", "Report", "Check",
    "assert_passed", "CallFailed", "LimitedCaller", "DEFAULT_ALPHA", "DEFAULT_CALL_TIMEOUT", "DEFAULT_TIME_BUDGET",
]
