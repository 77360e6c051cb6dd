"""The grading checker: is this sampler exactly lossless, and is it the standard algorithm?

    >>> from specbook.grading import check_token_rule, check_verifier
    >>> report = check_token_rule(my_rule)        # fn(target_probs, draft_probs, draft_token, generator) -> int
    >>> report.lossless, report.standard, report.passed, print(report)
    >>> check_verifier(my_verifier, require="lossless")  # fn(target_probs, draft_probs, draft_tokens, generator)

Two verdicts per report: ``lossless`` (the output follows the target, whatever the
sampler does with the draft) and ``standard`` (the modified rejection sampler's own
laws); ``passed`` follows ``require`` ("standard" by default).  A sampler for which a
verdict holds gets it with probability at least 1 - alpha (alpha = 1e-3 by default,
family-wise over all statistical tests of one report, Holm) for every seed; every lossy
bug in :mod:`specbook.grading.catalogue` fails ``lossless`` with probability at least
0.99 (see docs/grading.md for the tables, the timings and the audit of transformers).
"""
from .. import _lazy_submodules
from .calls import CallFailed, LimitedCaller
from .engine import DEFAULT_ALPHA, DEFAULT_CALL_TIMEOUT, DEFAULT_TIME_BUDGET
from .report import Check, Report, assert_passed
from .token_rule import assert_token_rule, check_token_rule
from .verifier import assert_verifier, check_verifier

__all__ = [
    "check_token_rule", "check_verifier", "assert_token_rule", "assert_verifier", "Report", "Check",
    "assert_passed", "CallFailed", "LimitedCaller", "DEFAULT_ALPHA", "DEFAULT_CALL_TIMEOUT", "DEFAULT_TIME_BUDGET",
]

__getattr__, __dir__ = _lazy_submodules(globals())  # every submodule resolves on first use
