"""The bench rows' acceptance figures (engine_metrics, vLLM's and SGLang's names) and --verifier.

Hand-made counters first, then the transformers reading of a run from the ids its target was fed
against specbook's own loop, then one mocked bench run on a tiny random Llama (no SmolLM2).
"""
from __future__ import annotations

import json

import pytest
import torch

from specbook.bench import cli as bench
from specbook.bench import engines
from specbook.bench.engines import SpecbookEngine, stats_from_calls
from specbook.bench.registry import DRAFTERS, DrafterSpec
from specbook.bench.results import PER_POSITION, acceptance, aggregate
from specbook.decode import speculative_generate
from specbook.decode_stats import DecodeStats
from specbook.drafters import DraftModelDrafter, NGramDrafter
from specbook.metrics import engine_metrics
from specbook.models import LlamaConfig, LlamaModel, LlamaTarget
from specbook.protocols import Draft
from specbook.sampling import GREEDY, SamplingParams
from specbook.toy import make_toy_pair

METRICS = ("drafting_steps", "draft_tokens", "accepted_tokens", "accepted_tokens_per_position",
           "mean_acceptance_length", "draft_acceptance_rate", "acceptance_per_position",
           "acceptance_per_position_unconditional", "accepted_length_histogram")


# ---------------------------------------------------------------- transformers: a run from the ids fed

PROMPT = [1, 2]
CALLS = [[1, 2, 7, 8, 9],  # prompt + 3 drafts: 7, 8 accepted, 9 rejected (5 emitted instead)
         [5, 4, 4],  # last kept token 5 + 2 drafts: the first rejected (3 emitted instead)
         [3],  # no drafts: one token (6)
         [6, 1, 1, 2]]  # 3 drafts: 1, 1 accepted, and the run ends there (an end token): cut short
NEW = [7, 8, 5, 3, 6, 1, 1]


def test_stats_from_calls_by_hand():
    stats = stats_from_calls(PROMPT, CALLS, NEW)
    assert stats.accepted_per_step == [2, 0, 0, 2] and stats.proposed == 8 and stats.accepted == 4
    assert stats.emitted == len(NEW) and stats.target_passes == 4
    assert stats.verified == 3 + 1 + 2  # the cut-short pass tested the 2 drafts it kept
    assert stats.position_proposed == [3, 2, 1] and stats.position_accepted == [2, 2, 0]
    m = engine_metrics(stats)
    assert m["drafting_steps"] == 3 and m["mean_acceptance_length"] == pytest.approx(1 + 4 / 3)
    assert m["accepted_length_histogram"] == [1, 0, 2, 0]


@pytest.mark.parametrize("calls, new", [
    ([[1, 9, 7]], [7]),  # the first pass does not start with the prompt
    ([CALLS[0], [4, 4, 4]] + CALLS[2:], NEW),  # a pass that does not start with the token kept last
    (CALLS + [[1]], NEW),  # a pass after the run ended
    (CALLS[:2], NEW),  # passes that explain only part of the output
], ids=["prompt", "pending", "extra pass", "short"])
def test_stats_from_calls_refuses_passes_that_do_not_fit(calls, new):
    assert stats_from_calls(PROMPT, calls, new) is None


@pytest.mark.parametrize("drafter, temperature", [("draft model", 1.0), ("draft model", 0.0), ("n-gram", 1.0)])
def test_the_reading_from_fed_ids_equals_the_loops_own_counters(drafter, temperature):
    """Token-wise verification never emits the draft it rejected, so the accepted drafts of a pass are
    the longest prefix of them that the output repeats: the loop's own counters, end token included."""
    target, draft = make_toy_pair(5, 1, match=0.7, seed=2)
    d = DraftModelDrafter(draft) if drafter == "draft model" else NGramDrafter(max_ngram=2)
    prompt = [1, 2, 1, 2, 3, 1]
    for seed in range(4):
        fed = []
        out = speculative_generate(target, d, torch.tensor([prompt]), 30, gamma=3, eos_token_id=4,
                                   params=SamplingParams(temperature=temperature),
                                   generator=torch.Generator().manual_seed(seed),
                                   on_step=lambda step: fed.append(step.draft.tokens[0].tolist()))
        new = out.sequences()[0]
        calls, done = [], 0
        for i, (drafts, kept) in enumerate(zip(fed, out.stats.accepted_per_step)):
            calls.append((prompt if i == 0 else [new[done - 1]]) + drafts)
            done += min(kept + 1, len(new) - done)
        mine, theirs = stats_from_calls(prompt, calls, new), out.stats
        for field in ("proposed", "accepted", "verified", "emitted", "accepted_per_step", "position_proposed",
                      "position_accepted"):
            assert getattr(mine, field) == getattr(theirs, field), (field, seed)


# ---------------------------------------------------------------- rows: counters summed, engine_metrics' names

def record(verifier="token", proposed=6, accepted=3, position_proposed=(2, 2, 1), position_accepted=(2, 1, 0),
           drafter="ngram", pid="p1"):
    return {"engine": "specbook", "drafter": drafter, "verifier": verifier, "verified_by": verifier, "id": pid,
            "category": "c", "new_tokens": 10, "seconds": 1.0, "passes": 5, "emitted": 10, "proposed": proposed,
            "accepted": accepted, "sha256": "x", "dtype": "float32", "gamma": 3, "tree_budget": None,
            "roofline_fraction": 0.5, "limit_tokens_per_s": 10.0,
            "position_proposed": None if position_proposed is None else list(position_proposed),
            "position_accepted": None if position_accepted is None else list(position_accepted)}


def rounded(value):
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return round(value, 4) if isinstance(value, float) else value


def test_a_row_holds_engine_metrics_of_its_summed_counters():
    a, b = record(), record(proposed=3, accepted=1, position_proposed=(1,), position_accepted=(1,), pid="p2")
    row = acceptance([a, b])
    summed = DecodeStats(proposed=9, accepted=4, position_proposed=[3, 2, 1], position_accepted=[3, 1, 0])
    expected = engine_metrics(summed)
    assert row["drafting_steps"] == 3 and row["accepted_length_histogram"] == [0, 2, 1, 0]
    assert row["mean_acceptance_length"] == round(1 + 4 / 3, 4) == round(expected["mean_acceptance_length"], 4)
    assert row["acceptance_per_position"] == [1.0, 0.5, 0.0]
    assert row["acceptance_per_position_unconditional"] == [1.0, round(1 / 3, 4), 0.0]
    for key in METRICS:
        assert row[key] == rounded(expected[key]), key
    assert row["alpha"] == round(4 / 6, 4)  # accepted / verified: 3 + 2 + 1 drafts verified at depths 1, 2, 3
    assert acceptance([record(position_proposed=None, position_accepted=None)])["alpha"] is None  # counters unknown
    runs, overall = aggregate([a, b, record(verifier="block", pid="p1"), record(None, 0, 0, (), (), "none")],
                              greedy=False)
    by = {(r["drafter"], r["verifier"]): r for r in runs}
    assert set(by) == {("ngram", "token"), ("ngram", "block"), ("none", None)} and len(overall) == 3
    assert all(set(METRICS) <= set(r) for r in runs + overall)
    assert by[("ngram", "token")]["mean_acceptance_length"] == row["mean_acceptance_length"]
    assert by[("ngram", "block")]["verified_by"] == "block" and by[("ngram", "block")]["drafting_steps"] == 2
    plain = by[("none", None)]  # nothing drafted: nothing to divide by
    assert plain["mean_acceptance_length"] is None and plain["draft_acceptance_rate"] is None
    assert plain["acceptance_per_position"] == [] and plain["accepted_length_histogram"] == [0]


def test_unknown_counters_leave_the_per_position_figures_null():
    row = acceptance([record(), record(position_proposed=None, position_accepted=None, pid="p2")])
    assert row["draft_tokens"] == 12 and row["accepted_tokens"] == 6 and row["draft_acceptance_rate"] == 0.5
    assert all(row[k] is None for k in PER_POSITION)


# ---------------------------------------------------------------- --verifier

def tiny_llama(seed: int) -> LlamaModel:
    config = LlamaConfig(vocab_size=50, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, intermediate_size=48,
                         max_position_embeddings=256)
    return LlamaModel(config).init_weights(generator=torch.Generator().manual_seed(seed)).eval()


class TinyTokenizer:
    chat_template = "tiny"
    eos_token_id = 0

    def apply_chat_template(self, messages, add_generation_prompt=True):
        return [1 + ord(c) % 49 for c in messages[0]["content"][:16]]


class TreeDrafter:
    """Two siblings under the pending token: a tree, whatever --verifier says."""

    def propose(self, contexts, gamma, params, generator=None):
        probs = torch.full((1, 2, 50), 1 / 50)
        return Draft(torch.tensor([[3, 4]]), None if params.greedy else probs, torch.tensor([-1, -1]))


@pytest.fixture
def one_thread():
    """One torch thread (a tiny model gains nothing from two, and on a busy machine they wait for each
    other at every op), restored afterwards: ``--threads`` sets it for the whole process."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_engine_says_what_verified_the_drafts(one_thread):
    sb = SpecbookEngine(tiny_llama(0), max_length=64)
    draft = DraftModelDrafter(LlamaTarget(tiny_llama(1), 64))
    sampled, gen = SamplingParams(temperature=1.0), torch.Generator().manual_seed(0)
    assert sb.run([5, 6, 7], None, sampled, 6, 3, gen).verified_by is None
    assert sb.run([5, 6, 7], draft, GREEDY, 6, 3, verifier="block").verified_by == "greedy"
    assert sb.run([5, 6, 7], draft, sampled, 6, 3, gen, verifier="block").verified_by == "block"
    assert sb.run([5, 6, 7], TreeDrafter(), sampled, 6, 3, gen, verifier="block").verified_by == "tree"
    res = sb.run([5, 6, 7], draft, sampled, 6, 3, gen)
    assert res.verified_by == "token" and res.stats.proposed == res.proposed and len(res.new_ids) == 6


VERIFIER_FLAGS = [
    (["--verifier", "token,block"], "at temperature 0 both verifiers are greedy matching"),
    (["--verifier", "block", "--engines", "transformers", "--temperature", "1"], "specbook engine only"),
    (["--verifier", "blockwise"], "unknown verifier ['blockwise']"),
]


@pytest.mark.parametrize("argv, message", VERIFIER_FLAGS, ids=[m for _, m in VERIFIER_FLAGS])
def test_cli_refuses_a_verifier_that_would_compare_nothing(argv, message, capsys, monkeypatch):
    import specbook.models.smollm2 as smollm2

    monkeypatch.setattr(smollm2, "load_smollm2", lambda *a, **k: pytest.fail("loaded before the flags were checked"))
    assert bench.main(argv) == 2
    assert message in capsys.readouterr().err


def test_cli_runs_both_verifiers_side_by_side_and_every_row_has_engine_metrics(tmp_path, monkeypatch, one_thread):
    import specbook.models.smollm2 as smollm2

    target_model, draft_model = tiny_llama(0), tiny_llama(1)
    monkeypatch.setattr(smollm2, "load_smollm2", lambda *a, **k: (target_model, TinyTokenizer()))
    monkeypatch.setattr(bench, "memory_read_bandwidth", lambda **_: 1e10)
    monkeypatch.setattr(bench, "matvec_read_bandwidth", lambda model: 5e9)
    monkeypatch.setitem(DRAFTERS, "tiny-draft", DrafterSpec(
        "tiny-draft", lambda model, tokenizer, **_: DraftModelDrafter(LlamaTarget(draft_model, 128))))
    calls = {"token": 0, "block": 0}

    def counted(name):
        verify = engines.VERIFIERS[name]

        def run(*args):
            calls[name] += 1
            return verify(*args)
        return run

    monkeypatch.setattr(engines, "VERIFIERS", {name: counted(name) for name in ("token", "block")})
    out = tmp_path / "run.json"
    argv = ["--categories", "code_edit,chat", "--limit", "1", "--drafters", "tiny-draft,ngram", "--engines", "specbook",
            "--temperature", "1", "--verifier", "token,block", "--max-new-tokens", "10", "--ignore-eos", "--gamma", "3",
            "--curve-reps", "0", "--dtype", "float32", "--threads", "1", "--no-progress", "--json", str(out)]
    assert bench.main(argv) == 0
    report = json.loads(out.read_text())
    assert report["settings"]["verifier"] == ["token", "block"] and calls["token"] > 0 and calls["block"] > 0
    rows = report["runs"] + report["overall"]
    keys = {(r["drafter"], r["verifier"], r["category"]) for r in rows}
    assert keys == {(d, v, c) for d, v in [("none", None), ("tiny-draft", "token"), ("tiny-draft", "block"),
                                           ("ngram", "token"), ("ngram", "block")]
                    for c in ("code_edit", "chat", "all")}
    roof = report["roofline"]
    assert roof["bandwidth_bytes_per_s"] == 5e9 and roof["sum_read_bandwidth_bytes_per_s"] == 1e10
    for r in rows:
        assert set(METRICS) <= set(r), r
        assert r["roofline_fraction_sum_read"] == pytest.approx(r["roofline_fraction"] / 2, abs=1e-4)
        if r["drafter"] == "tiny-draft":  # q is a real law: every pass drafts
            assert 0 < r["alpha"] <= 1 and r["alpha"] >= r["draft_acceptance_rate"]  # verified <= proposed
            assert r["verified_by"] == r["verifier"] and r["drafting_steps"] > 0
            assert r["mean_acceptance_length"] == round(1 + r["accepted_tokens"] / r["drafting_steps"], 4)
            assert sum(r["accepted_length_histogram"]) == r["drafting_steps"]
            assert r["draft_acceptance_rate"] == r["draft_efficiency"] == round(r["accepted_tokens"] / r["draft_tokens"], 4)
    for p in report["per_prompt"]:
        assert p["verifier"] in (None, "token", "block") and isinstance(p["position_proposed"], list)
