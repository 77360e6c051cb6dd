"""The checker's two verdicts, its hints, and its timer.

* lossless but not standard samplers: lossless=True, standard=False, and the report states the cost;
* every lossy catalogue entry: lossless=False (tests/grading/test_grading.py runs them all);
* a float32 sampler fails only where the residual is below float32's resolution, and is told so;
* the timer stops a function that swallows every exception or ignores the alarm, and accepts
  "no limit" (math.inf, 1e10, None).
"""
from __future__ import annotations

import math
import os
import signal
import time

import pytest
import torch

from specbook.grading import check_token_rule, check_verifier
from specbook.grading import worker
from specbook.grading.catalogue import CORRECT_TOKEN_RULES, CORRECT_VERIFIERS, LOSSLESS_TOKEN_RULES, LOSSLESS_VERIFIERS
from specbook.grading.catalogue.token_rules import rule_multinomial
from specbook.grading.catalogue.verifiers import verifier_loop
from specbook.grading.report import FAIL

ids = lambda entries: [e.name for e in entries]  # noqa: E731


# --------------------------------------------------------------------------- two verdicts

@pytest.mark.parametrize("checker,entry", [(check_token_rule, e) for e in LOSSLESS_TOKEN_RULES]
                         + [(check_verifier, e) for e in LOSSLESS_VERIFIERS],
                         ids=ids(LOSSLESS_TOKEN_RULES + LOSSLESS_VERIFIERS))
def test_lossless_but_not_standard(checker, entry):
    report = checker(entry.fn, seed=0)
    assert report.lossless and not report.standard and not report.passed, str(report)
    failed = [c for c in report.checks if c.failed]
    assert all(c.kind == "law" and c.scope == "standard" for c in failed)
    assert any(word in c.name for c in failed for word in entry.expect)
    text = str(report)
    assert "Lossless, but not the standard algorithm" in text and "min(1, p/q)" in text
    assert report.cost and all("vs" in c.reason for c in report.cost)
    assert checker(entry.fn, seed=0, require="lossless").passed


def test_the_cost_line_shows_the_lower_acceptance():
    report = check_verifier(LOSSLESS_VERIFIERS[0].fn, seed=1)
    mixed = next(c for c in report.cost if c.case == "mixed K=3")
    measured, expected = mixed.reason.split(" vs ")[:2]
    first_measured = float(measured.split()[1])
    first_expected = float(expected.split()[2])
    assert first_measured < first_expected - 0.05  # p(x) < min(1, p/q) on average: fewer drafts kept


def test_standard_samplers_show_no_cost_section():
    report = check_verifier(CORRECT_VERIFIERS[1].fn, seed=2)
    assert report.lossless and report.standard and "What it keeps" not in str(report)


def test_require_is_validated():
    with pytest.raises(ValueError, match="require must be one of"):
        check_token_rule(CORRECT_TOKEN_RULES[1].fn, require="exact")


# --------------------------------------------------------------------------- hints

def verifier_float32(p, q, x, g):
    """The modified rejection sampler computed in float32 (a correct algorithm at the wrong precision)."""
    return verifier_loop(p.float(), q.float(), x, g)


def test_float32_sampler_is_lossless_and_told_about_the_precision():
    report = check_verifier(verifier_float32, seed=0)
    assert report.lossless and not report.standard
    failed = [c for c in report.checks if c.failed]
    assert failed and {c.case for c in failed} == {"tiny K=1"}
    assert all("your code computes in float32" in c.hint and "2e-10" in c.hint for c in failed)
    assert "not from another position's row" not in str(report)


def test_float32_token_rule_gets_the_same_hint():
    def rule_float32(p, q, x, g):
        return rule_multinomial(p.float(), q.float(), x, g)

    report = check_token_rule(rule_float32, seed=0)
    assert report.lossless and not report.standard
    assert report.failures and all(c.case == "tiny" and "float32" in c.hint for c in report.failures)


def test_a_float32_hint_is_not_given_when_other_cases_fail_too():
    report = check_verifier(lambda p, q, x, g: verifier_float32(p, q.flip(-1), x, g), seed=0, fail_fast=True)
    assert not report.lossless and not any("float32" in c.hint for c in report.failures)


def test_fixed_draft_hint_names_the_law_tested():
    def always_target_row(p, q, x, g):  # emits p_0 whatever the draft: right when x ~ q, wrong for a fixed draft
        return torch.multinomial(p[0], 1, generator=g)

    report = check_verifier(always_target_row, seed=0)
    tiny_first = next(c for c in report.checks if c.case == "tiny K=1" and c.name == "first emitted token")
    assert tiny_first.verdict == FAIL
    assert "not target_probs[0]" in tiny_first.hint and "residual" in tiny_first.hint


# --------------------------------------------------------------------------- the timer

def _swallows_everything(p, q, x, g):
    while True:
        try:
            time.sleep(0.01)
        except:  # noqa: E722 - the point of the test: a bare except that swallows the alarm
            pass


def _ignores_the_alarm(p, q, x, g):
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGINT})
    time.sleep(60)
    return x


@pytest.mark.parametrize("fn", [_swallows_everything, _ignores_the_alarm], ids=["bare except", "ignores alarm"])
def test_a_function_that_resists_the_alarm_is_stopped_within_its_limit(fn):
    t0 = time.perf_counter()
    report = check_token_rule(fn, call_timeout=0.5)
    assert time.perf_counter() - t0 < 5
    assert not report.passed and not report.lossless
    first = report.failures[0]
    assert "per-call limit of 0.5 s" in first.reason and "call 1 (draft_token=" in first.reason


@pytest.mark.parametrize("limit", [math.inf, 1e10, None])
def test_no_limit_lets_a_correct_function_pass(limit):
    report = check_token_rule(CORRECT_TOKEN_RULES[2].fn, call_timeout=limit, seed=4)
    assert report.passed, str(report)
    report = check_verifier(CORRECT_VERIFIERS[1].fn, call_timeout=limit, seed=4, isolate=False)
    assert report.passed, str(report)


def test_a_crash_of_the_interpreter_is_a_failure_not_a_crash_of_the_checker():
    report = check_token_rule(lambda p, q, x, g: os._exit(3))
    assert not report.passed and "exit code 3" in report.failures[0].reason


def test_tensors_generators_and_outputs_cross_the_process_boundary_unchanged():
    """The worker's outputs equal the in-process ones call for call (same seeds, same generators)."""
    fn = CORRECT_VERIFIERS[1].fn
    a, b = check_verifier(fn, seed=6), check_verifier(fn, seed=6, isolate=False)
    assert [(c.name, c.case, c.statistic) for c in a.checks] == [(c.name, c.case, c.statistic) for c in b.checks]


def test_spawn_runs_picklable_functions_and_falls_back_with_a_note(monkeypatch):
    monkeypatch.setattr(worker, "START_METHOD", "spawn")
    report = check_token_rule(lambda p, q, x, g: x, fail_fast=True)  # a lambda cannot be pickled
    assert not report.passed and "cannot be pickled" in str(report) and report.notes
    report = check_token_rule(CORRECT_TOKEN_RULES[1].fn, seed=1)  # module-level: runs in a spawned worker
    assert report.passed and not report.notes, str(report)
