"""The grading checker: correct implementations pass, every catalogued bug fails, bad code never crashes it.

Calibration (a correct sampler fails with probability <= 1e-3 per report) is shown
over a few seeds here and over many in docs/grading.md (``python -m specbook.grading
--calibration``); the statistical tests below use fixed seeds, so they are deterministic.
"""
from __future__ import annotations

import signal
import threading
import time

import numpy as np
import pytest
import torch

from specbook.grading import (Check, assert_token_rule, assert_verifier, check_token_rule, check_verifier)
from specbook.grading.calls import CallFailed, LimitedCaller, as_block, as_token
from specbook.grading.catalogue import BROKEN_TOKEN_RULES, BROKEN_VERIFIERS, CORRECT_TOKEN_RULES, CORRECT_VERIFIERS
from specbook.grading.cases import token_cases
from specbook.grading.detection import _null_token, needed_scale, null_simulation, predicted_power
from specbook.grading.report import FAIL, NOT_RUN, PASS, WARN, judge_family
from specbook.grading.token_rule import PLAN as TOKEN_PLAN
from specbook.grading.verifier import PLAN as CHAIN_PLAN

ids = lambda entries: [e.name for e in entries]  # noqa: E731


def _broken_verifier(name: str):
    return next(e.fn for e in BROKEN_VERIFIERS if e.name == name)


# --------------------------------------------------------------------------- calibration

@pytest.mark.parametrize("entry", CORRECT_TOKEN_RULES, ids=ids(CORRECT_TOKEN_RULES))
def test_correct_token_rules_pass(entry):
    report = check_token_rule(entry.fn, seed=0)
    assert report.passed, str(report)
    assert report.seconds < 30
    assert report.family_size == 14 and report.alpha == 1e-3
    assert report.lossless and report.standard and report.require == "standard"


@pytest.mark.parametrize("entry", CORRECT_VERIFIERS, ids=ids(CORRECT_VERIFIERS))
def test_correct_verifiers_pass(entry):
    report = check_verifier(entry.fn, seed=0)
    assert report.passed, str(report)
    assert report.seconds < 30
    assert report.family_size == 50  # 38 tests of the standard block law, 12 of the completed blocks
    assert report.lossless and report.standard


def test_correct_rule_on_the_global_rng_passes_with_advice():
    def global_rng_rule(p, q, x, g):
        if torch.rand(()) * q[x] < p[x]:
            return x
        return int(torch.multinomial((p - q).clamp(min=0), 1))

    report = check_token_rule(global_rng_rule, seed=3)
    assert report.passed, str(report)
    advice = [c for c in report.checks if c.kind == "advice"]
    assert [c.verdict for c in advice] == [WARN] and "generator" in advice[0].reason
    assert "Advice" in str(report)


def test_null_simulation_has_no_false_alarm_and_its_broken_twin_fails():
    for plan in (TOKEN_PLAN, CHAIN_PLAN):
        sim = null_simulation(plan, 15)
        assert sim["failed"] == 0 and sim["reps"] == 15
    # Broken twin: data from a different law (p and q swapped) analysed against the case's law.
    case = token_cases()[0]
    swapped = type(case)(case.name, case.about, case.draft_probs, case.target_probs, case.n)
    data = _null_token(swapped, np.random.default_rng(0))
    checks = judge_family(TOKEN_PLAN.analyse(case, data), 1e-3, 14)
    assert any(c.failed for c in checks)


# --------------------------------------------------------------------------- power

@pytest.mark.parametrize("checker, seed, entry",
                         [(check_token_rule, 0, e) for e in BROKEN_TOKEN_RULES]
                         + [(check_verifier, 1, e) for e in BROKEN_VERIFIERS],
                         ids=ids(BROKEN_TOKEN_RULES) + ids(BROKEN_VERIFIERS))
def test_broken_samplers_fail_with_the_right_diagnosis(checker, seed, entry):
    report = checker(entry.fn, seed=seed, fail_fast=True)
    assert not report.passed and not report.lossless, f"{entry.name} was not caught"
    names = " | ".join(c.name for c in report.failures)
    assert any(word in names for word in entry.expect), f"{entry.name}: failed {names}, expected {entry.expect}"
    assert all(c.reason for c in report.failures) and entry.name


def test_catalogue_is_large_and_distinct():
    assert len(BROKEN_TOKEN_RULES) + len(BROKEN_VERIFIERS) >= 10
    assert len(CORRECT_TOKEN_RULES) >= 4 and len(CORRECT_VERIFIERS) >= 4
    fns = [e.fn for e in BROKEN_TOKEN_RULES + BROKEN_VERIFIERS]
    assert len(set(fns)) == len(fns)


@pytest.mark.parametrize("checker,fn", [(check_token_rule, BROKEN_TOKEN_RULES[1].fn),
                                        (check_verifier, _broken_verifier("one uniform shared across positions")),
                                        (check_token_rule, CORRECT_TOKEN_RULES[2].fn)])
def test_fail_fast_gives_the_same_verdict(checker, fn):
    full, fast = checker(fn, seed=5), checker(fn, seed=5, fail_fast=True)
    assert full.passed == fast.passed
    assert fast.calls <= full.calls


def test_predicted_power_separates_correct_from_broken():
    good = check_token_rule(CORRECT_TOKEN_RULES[1].fn, seed=2)
    bad = check_verifier(_broken_verifier("one uniform shared across positions"), seed=2)  # the weakest bug
    assert predicted_power(good) < 0.05
    assert predicted_power(bad) > 0.99 and needed_scale(bad) < 1
    assert needed_scale(good) > 1


# --------------------------------------------------------------------------- robustness to bad code

def _raises(p, q, x, g):
    raise RuntimeError("boom")


def _stub(p, q, x, g):
    raise NotImplementedError


def _exits(p, q, x, g):
    raise SystemExit(1)


def _loops(p, q, x, g):
    while True:
        pass


def _mutates(p, q, x, g):
    p.zero_()
    return 0


BAD_TOKEN_RULES = [
    (_raises, "RuntimeError: boom"), (_stub, "still a stub"), (_exits, "SystemExit"),
    (lambda p, q, x, g: "3", "return an int"), (lambda p, q, x, g: None, "return the emitted token id"),
    (lambda p, q, x, g: float("nan"), "float nan"), (lambda p, q, x, g: torch.tensor(1.0), "float32 tensor"),
    (lambda p, q, x, g: torch.tensor([1, 2]), "shape (2,)"), (lambda p, q, x, g: True, "return the emitted"),
    (lambda p, q, x, g: -1, "outside the vocabulary"), (lambda p, q, x, g: len(p), "outside the vocabulary"),
    (_mutates, "modified target_probs"), (_loops, "per-call limit"),
]


@pytest.mark.parametrize("fn,words", BAD_TOKEN_RULES, ids=[w for _, w in BAD_TOKEN_RULES])
def test_bad_token_rules_fail_cleanly(fn, words):
    t0 = time.perf_counter()
    report = check_token_rule(fn, call_timeout=0.3)
    assert time.perf_counter() - t0 < 10
    assert not report.passed
    assert words in report.failures[0].reason, report.failures[0].reason
    assert report.failures[0].kind == "property"


BAD_VERIFIERS = [
    (lambda p, q, x, g: [int(x[0])], "return a 1-D torch.LongTensor"),
    (lambda p, q, x, g: x[:1].double(), "float64 tensor"),
    (lambda p, q, x, g: x[None, :1], "shape (1, 1)"),
    (lambda p, q, x, g: x[:0], "returned 0 tokens"),
    (lambda p, q, x, g: torch.cat([x, x]), "between 1 and K+1"),
    (lambda p, q, x, g: torch.full_like(x[:1], 99), "outside the vocabulary"),
    (lambda p, q, x, g: torch.cat([x.flip(0), x[:1]]), "is not the draft there"),
    (lambda p, q, x, g: x.zero_()[:1], "modified"),
    (lambda p, q, x, g: 1 / 0, "ZeroDivisionError"),
]


@pytest.mark.parametrize("fn,words", BAD_VERIFIERS, ids=[w for _, w in BAD_VERIFIERS])
def test_bad_verifiers_fail_cleanly(fn, words):
    report = check_verifier(fn, call_timeout=0.3)
    assert not report.passed
    assert any(words in c.reason for c in report.failures), str(report)


def test_p_zero_token_is_a_property_failure():
    def emits_zero_prob(p, q, x, g):
        return 5 if x == 1 else x  # token 5 has p = 0 in the mixed case

    report = check_token_rule(emits_zero_prob)
    first = report.failures[0]
    assert first.name == "never emits a token with p = 0" and "target_probs[5] = 0" in first.reason


def test_timeout_when_the_checker_runs_in_a_thread():
    result = {}

    def worker():
        result["report"] = check_verifier(lambda p, q, x, g: time.sleep(3), call_timeout=0.2)

    t0 = time.perf_counter()
    th = threading.Thread(target=worker)
    th.start()
    th.join(10)
    assert time.perf_counter() - t0 < 2.5
    report = result["report"]
    assert not report.passed and "worker process running it was stopped" in report.failures[0].reason
    assert [c.verdict for c in report.checks].count(NOT_RUN) >= 5  # no further calls after the hang


def test_in_process_timeout_in_a_thread_uses_the_thread_fallback():
    result = {}

    def worker():
        result["report"] = check_verifier(lambda p, q, x, g: time.sleep(3), call_timeout=0.2, isolate=False)

    th = threading.Thread(target=worker)
    th.start()
    th.join(10)
    report = result["report"]
    assert not report.passed and "background thread" in report.failures[0].reason
    assert "own process" in str(report)


def test_limited_caller_restores_the_alarm_handler_and_propagates_keyboard_interrupt():
    before = signal.getsignal(signal.SIGALRM)
    with LimitedCaller(lambda: 1, 1.0) as call:
        assert call() == 1
    assert signal.getsignal(signal.SIGALRM) is before

    def interrupt():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        with LimitedCaller(interrupt, 1.0) as call:
            call()


def test_time_budget_is_a_failure_not_a_hang():
    def sleepy(p, q, x, g):
        time.sleep(0.002)
        return x

    report = check_token_rule(sleepy, time_budget=0.2)
    assert not report.passed
    assert report.failures[0].name == "finishes within the time budget"
    assert report.seconds < 5


@pytest.mark.parametrize("isolate", [True, False])
def test_checker_runs_single_threaded_and_restores_the_setting(isolate):
    before = torch.get_num_threads()

    def rule(p, q, x, g):
        raise RuntimeError(f"threads={torch.get_num_threads()}")

    report = check_token_rule(rule, isolate=isolate)
    assert "threads=1" in report.failures[0].reason and torch.get_num_threads() == before


def test_output_coercion():
    assert as_token(3) == 3 and as_token(np.int64(2)) == 2 and as_token(torch.tensor([4])) == 4
    for bad in (2.0, True, "1", torch.tensor([1, 2]), torch.tensor(1.5), None):
        with pytest.raises(CallFailed):
            as_token(bad)
    assert as_block(torch.tensor([1, 2], dtype=torch.int32), 3) == [1, 2]
    with pytest.raises(CallFailed):
        as_block(torch.tensor([1, 2, 3, 4]), 3)


@pytest.mark.parametrize("kwargs", [{"seed": -1}, {"seed": 1.5}, {"alpha": 0}, {"alpha": 2.0},
                                    {"call_timeout": 0}, {"time_budget": -1}])
def test_bad_arguments_raise_value_error(kwargs):
    with pytest.raises(ValueError):
        check_token_rule(CORRECT_TOKEN_RULES[1].fn, **kwargs)
    with pytest.raises(ValueError):
        check_verifier(42)


# --------------------------------------------------------------------------- reports

def test_assert_helpers_raise_with_the_report():
    assert assert_token_rule(CORRECT_TOKEN_RULES[2].fn, seed=1).passed
    with pytest.raises(AssertionError) as info:
        assert_verifier(_broken_verifier("resample from p"), fail_fast=True)
    assert "corrected token" in str(info.value) and info.value.report.passed is False


def test_report_text_and_html():
    report = check_token_rule(BROKEN_TOKEN_RULES[1].fn, fail_fast=True)
    text = str(report)
    assert text.startswith("check of token rule resample_from_p (seed 0, require='standard'): FAILED")
    assert "What went wrong" in text and "Hint:" in text and "residual" in text
    assert "lossless (the output follows the target): NO" in text
    html = report._repr_html_()
    assert "<table>" in html and "FAIL" in html and "&lt;" not in report.function
    assert html.count("<tr>") == len([c for c in report.checks if c.kind != "cost"]) + 1


def test_judge_family_counts_untested_as_p_one():
    checks = [Check("a", "c", "law", pvalue=1e-4), Check("b", "c", "law", pvalue=0.5),
              Check("p", "c", "property", PASS)]
    judged = judge_family(checks, 1e-3, family_size=2)
    assert [c.verdict for c in judged] == [FAIL, PASS, PASS]
    judged = judge_family(checks, 1e-3, family_size=20)  # 1e-4 > 1e-3 / 20
    assert [c.verdict for c in judged[:2]] == [PASS, PASS]
    with pytest.raises(ValueError):
        judge_family(checks, 1e-3, family_size=1)
