"""Acceptance as the serving engines report it, computed from one generation's :class:`DecodeStats`.

Shape legend: L draft positions (``len(stats.position_proposed)``: a chain's longest draft, a
tree's depth).  A *row-step* is one row in one verification pass; a *drafting step* is a row-step
whose pass drafted at least one token (the engines' "draft": vLLM counts one per request per
step that carried drafts; SGLang averages its accept length over verify steps).

=====================================  ==========================================  ================================
here (``engine_metrics`` key)          vLLM / SGLang                               specbook's own name
=====================================  ==========================================  ================================
``drafting_steps``                     ``vllm:spec_decode_num_drafts``             ``position_proposed[0]``
``draft_tokens``                       ``vllm:spec_decode_num_draft_tokens``       ``DecodeStats.proposed``
``accepted_tokens``                    ``vllm:spec_decode_num_accepted_tokens``    ``DecodeStats.accepted``
``accepted_tokens_per_position``       ``vllm:spec_decode_num_accepted_tokens_``   ``position_accepted``
                                       ``per_pos``
``mean_acceptance_length``             vLLM "mean acceptance length";              (not ``tau``: tau divides by
  = 1 + accepted / drafting steps      SGLang ``sglang:spec_accept_length``        every row-step, drafting or not)
``draft_acceptance_rate``              vLLM "draft acceptance rate"                ``draft_efficiency``
  = accepted / draft tokens                                                        (not ``acceptance_rate``, which is
                                                                                   alpha = accepted / *verified*)
``acceptance_per_position``            (not an engine figure: conditional)         ``position_acceptance``
  = P(draft i accepted | i verified)
``acceptance_per_position_``           vLLM "per-position acceptance rate":        ``position_accepted[i]`` /
``unconditional``                      num_accepted_tokens_per_pos / num_drafts    drafting steps
``accepted_length_histogram``          vLLM per-request accepted-draft-length      ``accepted_per_step``, drafting
  [j] = drafting steps accepting j     distribution (``num_drafts`` per j)         row-steps only
=====================================  ==========================================  ================================

Sources: vLLM's ``vllm/v1/spec_decode/metrics.py`` (``SpecDecodingProm``: acceptance rate =
accepted / draft tokens, mean acceptance length = 1 + accepted / drafts, per-position rate =
accepted per position / drafts) and its "Per-Request Acceptance Metrics" page; SGLang exports
the gauge ``sglang:spec_accept_length`` (``avg_spec_accept_length`` in its server info), tokens
per verify step with the bonus token included.

How the counters are read.  ``accepted_per_step`` alone cannot tell a row-step that drafted
nothing from one that drafted and accepted none (both record 0), so the drafting steps come from
``position_proposed[0]``: every row-step of a pass with K >= 1 drafts has its first draft verified
(a live row keeps at least one token), and a pass with K = 0 verifies nothing.  A draft is
rectangular (B, K), so a row whose drafter found fewer tokens drafted its padding too (prompt lookup
in a batch) and counts as a drafting step, as its padded tokens count as draft tokens.  ``position_accepted[i]``
counts the row-steps that accepted more than i drafts, so the histogram is the difference of
neighbours.  A **tree** is counted per level, as :meth:`DecodeStats.record` does: position i is
depth i of the tree, accepted when the accepted path reaches it; but its ``draft_tokens`` are all
of its nodes, so its draft acceptance rate is accepted / nodes.  A row **cut short** by its budget
or an end token counts only the accepted drafts it kept, as ``DecodeStats`` does.
Every ratio with a zero denominator is NaN.
"""
from __future__ import annotations

from .decode_stats import DecodeStats


def _ratio(num: int, den: int) -> float:
    return num / den if den else float("nan")


def engine_metrics(stats: DecodeStats) -> dict:
    """vLLM's and SGLang's acceptance figures (module table), with the counts they come from."""
    steps = stats.position_proposed[0] if stats.position_proposed else 0
    per_pos = list(stats.position_accepted)  # (L,) [i]: drafting steps that accepted draft i
    reached = [steps] + per_pos  # (L + 1,) [j]: drafting steps that accepted at least j drafts
    return {"drafting_steps": steps, "draft_tokens": stats.proposed, "accepted_tokens": stats.accepted,
            "accepted_tokens_per_position": per_pos,
            "mean_acceptance_length": 1 + _ratio(stats.accepted, steps),
            "draft_acceptance_rate": _ratio(stats.accepted, stats.proposed),
            "acceptance_per_position": stats.position_acceptance,
            "acceptance_per_position_unconditional": [_ratio(a, steps) for a in per_pos],
            "accepted_length_histogram": [n - m for n, m in zip(reached, per_pos + [0])]}  # (L + 1,)
