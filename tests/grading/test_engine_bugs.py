"""The engines' verifier bugs (catalogue.ENGINE_BUGS), the hints that name them, and block verification's verdict.

The catch rate over 100 seeds is measured by ``python -m specbook.grading --engine-bugs`` and kept in
docs/data/grading_engine_bugs.json (rendered in docs/grading.md; tests/docs checks the rendering);
here every bug runs at two seeds outside that range, and the committed numbers are held to the catalogue.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from support import md_tables

from specbook.grading import check_token_rule, check_verifier
from specbook.grading.__main__ import main as grading_main
from specbook.grading.catalogue import ENGINE_BUGS, LOSSLESS_VERIFIERS
from specbook.grading.catalogue.engine_bugs import cumulative_block_verifier, raw_from_processed
from specbook.grading.detection import _null_chain, _null_token
from specbook.grading.diagnose import chain_hint, token_hint
from specbook.grading.engine import collect_case
from specbook.grading.token_rule import PLAN as TOKEN_PLAN
from specbook.grading.verifier import PLAN as CHAIN_PLAN
from specbook.grading.verifier import _exact
from specbook.laws import residual_list

ROOT = Path(__file__).resolve().parents[2]
CHECKERS = {"check_token_rule": check_token_rule, "check_verifier": check_verifier}
BLOCK = next(e for e in LOSSLESS_VERIFIERS if e.name.startswith("block verification"))


@pytest.mark.parametrize("seed", [101, 102])
@pytest.mark.parametrize("entry", ENGINE_BUGS, ids=[e.name for e in ENGINE_BUGS])
def test_each_engine_bug_is_caught_and_its_hint_names_it(entry, seed):
    report = CHECKERS[entry.checker](entry.fn, seed=seed, fail_fast=True, require="lossless")
    assert not report.lossless and not report.passed, f"{entry.name} was not caught"
    names = " | ".join(c.name for c in report.failures)
    assert any(word in names for word in entry.expect), f"{entry.name}: failed {names}, expected {entry.expect}"
    first = report.failures[0].hint
    assert entry.hint in first, first
    assert not any(other.hint in first for other in ENGINE_BUGS if other is not entry), first  # this bug's hint only


def test_the_one_hot_case_alone_exposes_block_verify_on_n_gram_drafts():
    """vllm-ascend #7839: for n-gram drafts (no draft probabilities) the kernel read q(x) = 1.  The default
    one-hot K=2 case is such a draft, so no new case is needed: its lossless tests alone reject the rule."""
    index = [c.name for c in CHAIN_PLAN.cases].index("one-hot K=2")
    case = CHAIN_PLAN.cases[index]
    data = collect_case(CHAIN_PLAN, index, cumulative_block_verifier, 0, 60)
    lossless = [c.pvalue for c in CHAIN_PLAN.analyse(case, data, np.random.default_rng(0))
                if c.kind == "law" and c.scope == "lossless"]
    assert min(lossless) < 1e-3 / 50 / 1000  # far below Holm's first level for the 50-test family


def test_correct_data_show_no_signature():
    """The signatures must not fire on data from the exact lossless law (the checker's null simulation)."""
    for rep in range(30):
        rng = np.random.default_rng(1000 + rep)
        for case in CHAIN_PLAN.cases:
            if case.statistical and case.draft_tokens is None:
                data, law = _null_chain(case, rng), _exact(case)
                assert chain_hint(case.target_probs.double().numpy(), case.draft_probs.double().numpy(), data.drafts,
                                  *data.outputs, law.accept, law.residuals) is None, (rep, case.name)
        for case in TOKEN_PLAN.cases:
            if case.statistical and case.drafts == "sampled":
                data = _null_token(case, rng)
                p, q = case.target_probs.double().numpy(), case.draft_probs.double().numpy()
                residual = np.asarray(residual_list(p.tolist(), q.tolist())) if (p > q).any() else None
                assert token_hint(p, q, data.drafts, data.outputs, residual) is None, (rep, case.name)


def test_raw_q_is_undone_by_the_processing():
    """raw_from_processed inverts temperature then top-k: processing the raw softmax gives back the draft law."""
    q = torch.tensor([0.5, 0.3, 0.2, 0.0, 0.0], dtype=torch.float64)
    raw = raw_from_processed(q, temperature=0.7, kept=0.9)
    assert torch.isclose(raw.sum(), torch.tensor(1.0, dtype=torch.float64))
    assert torch.allclose(raw[3:], torch.tensor([0.05, 0.05], dtype=torch.float64))  # top-k dropped 0.1, evenly
    processed = raw[:3] ** (1 / 0.7)  # softmax(log(raw) / T) on the tokens top-k kept
    assert torch.allclose(processed / processed.sum(), q[:3])
    assert raw[0] < q[0] and raw[2] > q[2]  # the likely draft's ratio p/q is inflated, an unlikely one's deflated


def test_block_verification_is_lossless_not_standard_and_keeps_more():
    report = check_verifier(BLOCK.fn, seed=0)
    assert report.lossless and not report.standard and not report.passed, str(report)  # require="lossless" passes
    mixed = next(c for c in report.cost if c.case == "mixed K=3")
    measured, expected = (list(map(float, re.findall(r"\d\.\d{3}", part)))[:3] for part in mixed.reason.split(" vs ")[:2])
    assert measured[2] > expected[2] + 0.1  # position 2 kept far beyond min(1, p/q): it looked ahead
    tokens, tokens_standard = map(float, re.search(r"tokens per call (\S+) vs (\S+)", mixed.reason).groups())
    assert tokens > tokens_standard and "more than token-wise verification" in mixed.reason
    text = str(report)
    assert "What it keeps" in text and "can keep more" in text and "What it costs" not in text
    assert all("depends on the drafts after it" in c.hint for c in report.failures if c.case == "mixed K=3")


def test_engine_bugs_command_prints_and_writes_the_table(tmp_path, capsys):
    path = tmp_path / "engine_bugs.json"
    grading_main(["--engine-bugs", "--entry", "same token", "--seeds", "1", "--json", str(path)])
    out = capsys.readouterr().out
    (row,) = json.loads(path.read_text())["engine_bugs"]["rows"]
    assert row["name"] == "same token or ratio" and row["failed_lossless"] == 1 and row["hint_named"] == 1
    (printed,) = [r for t in md_tables(out) for r in t]
    assert printed[1:5] == ["rtp-llm PR #1295", "verifier", "1/1", row["caught_by"]]
    assert row["hint_words"] in printed[5]


def test_committed_table_is_the_catalogue_and_every_bug_was_caught_at_every_seed():
    rows = json.loads((ROOT / "docs" / "data" / "grading_engine_bugs.json").read_text())["engine_bugs"]["rows"]
    assert [(r["name"], r["description"], r["source"], r["lives_in"], r["checker"], r["hint_words"]) for r in rows] == [
        (e.name, e.description, e.source, e.lives_in, e.checker, e.hint) for e in ENGINE_BUGS]
    assert all(r["seeds"] == 100 and r["failed_lossless"] == 100 and r["hint_named"] == 100 for r in rows), rows
    shown = next(t for t in md_tables((ROOT / "docs" / "grading.md").read_text())
                 if t and t[0][0] == f"{ENGINE_BUGS[0].name} ({ENGINE_BUGS[0].description})")
    assert [r[:4] + r[6:] for r in shown] == [[f"{e.name} ({e.description})", e.source, e.lives_in, "100/100", "100/100"]
                                              for e in ENGINE_BUGS]
