"""The compiled target (specbook.models.compiled) against the eager model it compiles."""
from __future__ import annotations

import pytest
import torch
from support import greedy

from specbook.drafters.ngram import NGramDrafter
from specbook.models import LlamaConfig, LlamaModel, LlamaTarget
from specbook.models.compiled import KERNELS, SPAN_BLOCK, CompiledTarget

TINY = LlamaConfig(vocab_size=97, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, intermediate_size=96,
                   max_position_embeddings=128)


@pytest.fixture(scope="module")
def tiny_and_target():
    model = LlamaModel(TINY).init_weights(std=0.3, generator=torch.Generator().manual_seed(0)).eval()
    target = CompiledTarget(model, max_length=64, widths=(1, 4, 7), autotune=False)
    target.warm_up()  # compiles the three widths (tens of seconds)
    return model, target


def repetitive(seed: int, n: int) -> list[int]:
    """A prompt that repeats itself, so prompt lookup finds drafts."""
    base = torch.randint(0, 97, (6,), generator=torch.Generator().manual_seed(seed)).tolist()
    return (base * n)[: 6 * n]


def test_compiled_greedy_tokens_equal_the_eager_model(tiny_and_target):
    model, target = tiny_and_target
    eager = LlamaTarget(model, max_length=64)
    for seed in range(3):  # the same graphs serve every prompt: stale cache slots stay hidden
        prompt = torch.randint(0, 97, (5 + 4 * seed,), generator=torch.Generator().manual_seed(seed)).tolist()
        assert greedy(target, prompt, 20) == greedy(eager, prompt, 20)
        prompt = repetitive(seed, 3)
        passes = target.compiled_passes
        drafted = greedy(target, prompt, 24, drafter=NGramDrafter(max_ngram=3))
        assert drafted == greedy(eager, prompt, 24)  # chains of 3 drafts run at width 4
        assert target.compiled_passes > passes


def test_a_compiled_tree_pass_scores_and_keeps_as_the_eager_target(tiny_and_target):
    model, target = tiny_and_target
    eager = LlamaTarget(model, max_length=64)
    prompt = torch.randint(0, 97, (1, 9), generator=torch.Generator().manual_seed(5))
    parents = torch.tensor([-1, 0, 0, 1, 2, 2])  # 6 nodes: width 7, one spare row
    tokens = torch.tensor([[3, 5, 7, 9, 11, 13]])
    for t in (target, eager):
        t.reset(1)
        t.prefill(prompt)
    compiled, reference = target(tokens, parents), eager(tokens, parents)
    torch.testing.assert_close(compiled, reference, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(target.last_hidden, eager.last_hidden, rtol=1e-4, atol=1e-4)
    assert target.cache_lengths.tolist() == eager.cache_lengths.tolist() == [15]
    for t in (target, eager):
        t.keep([[0, 2, 5]])
    torch.testing.assert_close(target(torch.tensor([[4, 6]])), eager(torch.tensor([[4, 6]])), rtol=1e-4, atol=1e-4)
    # broken twin: the kept path's slots matter; keeping another path must change the next logits
    for t in (target, eager):
        t.rollback([12])
    target.reset(1)
    target.prefill(prompt)
    target(tokens, parents)
    target.keep([[0, 1, 3]])
    assert not torch.allclose(target(torch.tensor([[4, 6]])), eager(torch.tensor([[4, 6]])), atol=1e-3)


def test_attention_reads_a_span_that_grows_without_recompiling():
    """Attention reads the cache's first S slots, S rounded up to SPAN_BLOCK: a generation that
    crosses from one span to the next two keeps the eager model's tokens, on the graph compiled
    at the first span (S is dynamic), and sees no slot it must not (stale ones past the span)."""
    from torch._dynamo.utils import counters

    config = LlamaConfig(**{**TINY.__dict__, "max_position_embeddings": 256})
    model = LlamaModel(config).init_weights(std=0.3, generator=torch.Generator().manual_seed(1)).eval()
    target = CompiledTarget(model, max_length=200, widths=(1,), autotune=False)
    eager = LlamaTarget(model, max_length=200)
    assert SPAN_BLOCK == 64
    prompt = torch.randint(0, 97, (60,), generator=torch.Generator().manual_seed(2)).tolist()
    target.warm_up()
    graphs = counters["stats"]["unique_graphs"]
    assert greedy(target, prompt, 80) == greedy(eager, prompt, 80)  # spans 64, 128 and 192
    assert counters["stats"]["unique_graphs"] == graphs
    target.reset(1)
    target.prefill(torch.tensor([prompt[:5]]))  # a short row now; the slots past it hold the long one
    # the same up to the kernels' rounding (a stale slot seen would move the logits by whole units)
    torch.testing.assert_close(target(torch.tensor([[7]])), eager_logits(eager, prompt[:5] + [7]), rtol=1e-4, atol=1e-4)


def eager_logits(eager, ids: list[int]) -> torch.Tensor:
    eager.reset(1)
    eager.prefill(torch.tensor([ids[:-1]]))
    return eager(torch.tensor([ids[-1:]]))


def test_compiled_passes_follow_the_cache_when_its_buffers_are_replaced(tiny_and_target):
    """The compiled target keeps views of the cache between passes; ``select_rows`` copies the cache into
    new buffers, so the next compiled pass must write and read those (an eager pass after it reads them)."""
    model, target = tiny_and_target
    eager = LlamaTarget(model, max_length=64)
    prompt = torch.randint(0, 97, (1, 9), generator=torch.Generator().manual_seed(7))
    logits = []
    for t in (target, eager):
        t.reset(1)
        t(prompt)
        t(torch.tensor([[4]]))  # compiled: the views of this cache are made
        t.select_rows([0])
        t(torch.tensor([[5]]))  # compiled, into the new buffers
        logits.append(t(torch.arange(10, 18)[None]))  # 8 tokens, eagerly: reads what the pass above wrote
    torch.testing.assert_close(logits[0], logits[1], atol=1e-4, rtol=1e-4)


def test_a_slice_of_a_longer_tensor_runs_the_compiled_pass_as_it_is(tiny_and_target):
    """Tokens handed over as a slice (strides of the tensor they were cut from) run the width's graph already
    compiled, with the eager model's logits; handed to the graph as they are, the new strides failed its guards,
    and the recompile then failed on the span it had marked dynamic."""
    model, target = tiny_and_target
    eager = LlamaTarget(model, max_length=64)
    context = torch.randint(0, 97, (1, 20), generator=torch.Generator().manual_seed(8))
    for t in (target, eager):
        t.reset(1)
        t.prefill(context)
    for width in (1, 4):
        passes = target.compiled_passes
        torch.testing.assert_close(target(context[:, -width:]), eager(context[:, -width:]), rtol=1e-4, atol=1e-4)
        assert target.compiled_passes == passes + 1


def test_passes_wider_than_every_width_are_counted_apart_from_the_prefill(tiny_and_target):
    """The bench's warning reads ``wide_passes``: verify passes that ran eagerly because no compiled
    width held them. A prefill is not one, whether it ran compiled (short) or eagerly (long)."""
    _, target = tiny_and_target
    for prompt, prefill_compiled in (([3, 1, 4], True), (list(range(1, 12)), False)):
        target.reset(1)
        counts = target.compiled_passes, target.eager_passes, target.wide_passes
        target(torch.tensor([prompt]))  # the first pass: the prompt, 3 tokens (width 4) or 11 (eager)
        assert target.wide_passes == counts[2]
        assert (target.compiled_passes > counts[0]) == prefill_compiled != (target.eager_passes > counts[1])
        target(torch.tensor([[5, 6, 7]]))  # width 4
        assert target.wide_passes == counts[2]
        target(torch.arange(1, 9)[None])  # 8 tokens: wider than 7, runs eagerly
        assert target.wide_passes == counts[2] + 1


def test_compiled_stops_at_eos_and_checks_its_arguments(tiny_and_target):
    model, target = tiny_and_target
    prompt = [3, 1, 4, 1, 5]
    full = greedy(target, prompt, 12)
    eos = full[4]
    assert greedy(target, prompt, 12, eos=eos) == full[:full.index(eos) + 1]
    with pytest.raises(ValueError, match="batch_size=1"):
        target.reset(2)
    with pytest.raises(ValueError, match="width"):
        CompiledTarget(model, max_length=64, widths=(0,), autotune=False)
    target.reset(1)
    target.prefill(torch.tensor([prompt]))
    with pytest.raises(ValueError, match="cache was built"):
        target.allow_width(9)
    with pytest.raises(ValueError, match="token ids"):
        target(torch.tensor([[3, 97]]))  # beyond the vocabulary: refused before the compiled pass
    with pytest.raises(ValueError, match="at least one new token"):
        target(torch.zeros(1, 0, dtype=torch.long))
    target.rollback([0])
    target.prefill(torch.tensor([[1] * 62]))
    with pytest.raises(ValueError, match="max_length=64"):
        target(torch.tensor([[1, 2, 3]]))


@pytest.mark.parametrize("gamma", ["3", "auto"])
def test_the_bench_runs_the_compiled_engine_beside_specbook(tmp_path, monkeypatch, gamma):
    """--gamma 3: one compiled engine with the widths specbook's sizes need; auto: the compiled engine
    compiled at COMPILED_WIDTHS, its own curve timed at them and the pilots sized again for it."""
    import json

    import specbook.models.smollm2 as smollm2
    from specbook.bench import cli as bench
    from specbook.bench.engines import CompiledEngine

    class Tokenizer:
        chat_template, eos_token_id = "tiny", 0

        def apply_chat_template(self, messages, add_generation_prompt=True):
            return [1 + ord(c) % 96 for c in messages[0]["content"][:16]]

    model = LlamaModel(TINY).init_weights(std=0.3, generator=torch.Generator().manual_seed(1)).eval()
    monkeypatch.setattr(smollm2, "load_smollm2", lambda *a, **k: (model, Tokenizer()))
    monkeypatch.setattr(bench, "memory_read_bandwidth", lambda **_: 1e10)
    monkeypatch.setattr(bench, "matvec_read_bandwidth", lambda model: 5e9)
    monkeypatch.setattr(CompiledEngine, "AUTOTUNE", False)  # a faster compile for a tiny model
    monkeypatch.setattr(bench, "COMPILED_WIDTHS", (1, 4))  # two compiles, as for --gamma 3
    threads = torch.get_num_threads()
    out = tmp_path / "run.json"
    argv = ["--categories", "code_edit,chat", "--limit", "1", "--drafters", "none,ngram", "--engines", "specbook,compiled",
            "--max-new-tokens", "12", "--ignore-eos", "--gamma", gamma, "--curve-reps", "0" if gamma == "3" else "1",
            "--dtype", "float32", "--threads", "1", "--no-progress", "--json", str(out)]
    try:
        assert bench.main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    report = json.loads(out.read_text())
    rows = {(r["engine"], r["drafter"]) for r in report["runs"]}
    assert {("compiled", "none"), ("compiled", "ngram")} <= rows
    specbook = {(r["category"], r["drafter"]): r for r in report["runs"] if r["engine"] == "specbook"}
    for r in (r for r in report["runs"] if r["engine"] == "compiled"):  # float32: the eager model's greedy tokens
        assert r["output_ids_sha256"] == specbook[(r["category"], r["drafter"])]["output_ids_sha256"]
    gammas = {(r["engine"], r["gamma"]) for r in report["runs"] if r["drafter"] == "ngram"}
    if gamma == "3":
        assert gammas == {("specbook", 3), ("compiled", 3)} and "compiled" not in report["verify_cost"]
        assert "compiled_draft_sizes" not in report
        return
    sized = report["compiled_draft_sizes"]["ngram"]
    assert report["verify_cost"]["compiled"]["n"] == [1, 4] and "v of this engine" in sized["source"]
    assert sized["pilot"] == report["draft_sizes"]["ngram"]["pilot"]  # the one pilot, sized twice
    assert gammas == {("specbook", report["draft_sizes"]["ngram"]["chosen"]), ("compiled", sized["chosen"])}
    assert 1 <= sized["chosen"] <= 3  # within the widest compiled width: no pass ran eagerly


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--context", "128", "--max-length", "100"], ["--rows", "-1"],
                                  ["--width", "0"], ["--width", "8", "--context", "100", "--max-length", "107"]])
def test_the_step_profile_refuses_bad_arguments_before_loading_anything(argv, capsys):
    from support import load_script

    with pytest.raises(SystemExit) as exit_:
        load_script("profile_step").main(argv)
    assert exit_.value.code == 2 and argv[-2] in capsys.readouterr().err


def test_the_step_profile_counts_every_matrix_product_kernel_as_one():
    from support import load_script

    group_of = load_script("profile_step").group_of
    for name in ("graph_0_gemm_m1n3072k576_kernel", "mkl::_mkl_linear", "mkldnn::_linear_pointwise", "aten::linear"):
        assert group_of(name) == "matrix products", name
    assert group_of("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert group_of("aten::empty") == "everything else"


def test_the_step_profile_names_a_library_product_by_its_shapes():
    from types import SimpleNamespace

    from support import load_script

    named = load_script("profile_step").named
    event = SimpleNamespace(key="mkldnn::_linear_pointwise", input_shapes=[[1, 576], [3072, 576], [], []])
    assert named(event) == "mkldnn::_linear_pointwise [1, 576] x [3072, 576]"
    binary = SimpleNamespace(key="mkldnn::_linear_pointwise", input_shapes=[[1, 1536], [1, 576], [576, 1536], []])
    assert named(binary) == "mkldnn::_linear_pointwise [1, 1536] x [576, 1536]"  # the residual it adds: not named
    for key in ("graph_0_gemm_m1n3072k576_kernel", "aten::empty"):  # a template names its own shape; the rest
        assert named(SimpleNamespace(key=key, input_shapes=[[1, 576], [3072, 576]])) == key  # are no products


@pytest.mark.parametrize("argv", [["--threads", "0"], ["--rounds", "0"], ["--pool-mb", "0"]])
def test_the_product_overhead_script_refuses_bad_arguments_before_loading_anything(argv, capsys):
    from support import load_script

    with pytest.raises(SystemExit) as exit_:
        load_script("product_overhead").main(argv)
    assert exit_.value.code == 2 and argv[0] in capsys.readouterr().err


def test_the_product_overhead_fit_recovers_a_line():
    from support import load_script

    fit = load_script("product_overhead").fit
    a, rate = fit([(b, 12.0 + b / 50e3) for b in (1e5, 1e6, 5e6, 3e7)])  # 12 us + bytes at 50 GB/s
    assert a == pytest.approx(12.0) and rate == pytest.approx(50.0)


@pytest.mark.parametrize("argv", [["--rounds", "0"], ["--contexts", "500", "--max-length", "400"],
                                  ["--contexts", "60,x"], ["--contexts", "0,60"]])
def test_the_overheads_script_refuses_bad_arguments_before_loading_anything(argv, capsys):
    from support import load_script

    with pytest.raises(SystemExit) as exit_:
        load_script("compiled_overheads").main(argv)
    assert exit_.value.code == 2 and argv[-2] in capsys.readouterr().err


def test_the_span_block_and_the_attention_form_are_checked(tiny_and_target):
    model, _ = tiny_and_target
    for bad in (1, 0, True, 64.0):
        with pytest.raises(ValueError, match="span_block"):
            CompiledTarget(model, max_length=64, span_block=bad, autotune=False)
    with pytest.raises(ValueError, match="attention"):
        CompiledTarget(model, max_length=64, attention="flash", autotune=False)
    auto = CompiledTarget(model, max_length=64, autotune=False)  # "auto": loops for short passes, then by dtype
    assert auto.attention == "auto" and auto.attention_at(1) == auto.attention_at(5) == "loops"
    assert auto.attention_at(6) == "products"  # float32 weights
    half = CompiledTarget(LlamaModel(TINY).to(torch.bfloat16), max_length=64, autotune=False)
    assert half.attention_at(5) == "loops" and half.attention_at(17) == "fused"
    assert CompiledTarget(model, max_length=64, autotune=False, attention="fused").attention_at(1) == "fused"


@pytest.mark.parametrize("attention", ["fused", "products", "loops", "auto"])
def test_every_attention_form_scores_as_the_eager_model(tiny_and_target, attention):
    model, _ = tiny_and_target
    target = CompiledTarget(model, max_length=64, widths=(1, 4, 8), autotune=False, attention=attention)
    eager = LlamaTarget(model, max_length=64)
    prompt = torch.randint(0, 97, (1, 9), generator=torch.Generator().manual_seed(7))
    for t in (target, eager):
        t.reset(1)
        t.prefill(prompt)
    tokens = torch.tensor([[3, 5, 7]])
    torch.testing.assert_close(target(tokens), eager(tokens), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(target(tokens[:, :1]), eager(tokens[:, :1]), rtol=1e-4, atol=1e-4)
    wide = torch.tensor([[11, 13, 17, 19, 23, 29, 31]])  # width 8: "auto" switches to a library kernel
    torch.testing.assert_close(target(wide), eager(wide), rtol=1e-4, atol=1e-4)
    assert target.compiled_passes == 3  # all three compiled (the prefill ran eagerly)


def test_timed_products_compile_each_width_both_ways_and_keep_the_faster():
    """products="timed" (the benchmark's): warm_up compiles every width with each kind of product kernels,
    times whole passes and keeps the faster; either kind gives the eager model's tokens."""
    from torch._dynamo.utils import counters

    model = LlamaModel(TINY).init_weights(std=0.3, generator=torch.Generator().manual_seed(3)).eval()  # no graphs yet
    target = CompiledTarget(model, max_length=64, widths=(1, 4), autotune=False, products="timed")
    eager = LlamaTarget(model, max_length=64)
    assert target.products == "timed" and target.kernels_of == {}
    graphs = counters["stats"]["unique_graphs"]
    target.warm_up()
    assert counters["stats"]["unique_graphs"] == graphs + 4  # two widths, each compiled with both kinds of kernels
    assert set(target.kernel_ms) == {1, 4} and all(set(ms) == set(KERNELS) for ms in target.kernel_ms.values())
    assert all(target.kernels_of[w] == min(ms, key=ms.get) for w, ms in target.kernel_ms.items())
    report = {str(w): {"chosen": target.kernels_of[w], "ms": target.kernel_ms[w]} for w in (1, 4)}
    assert target.kernel_report() == report
    prompt = repetitive(4, 3)
    want = greedy(eager, prompt, 16)
    for kind in KERNELS:  # each graph in turn: chains of 3 drafts run at width 4
        target.kernels_of = {1: kind, 4: kind}
        passes = target.compiled_passes
        assert greedy(target, prompt, 16, drafter=NGramDrafter(max_ngram=2)) == want
        assert target.compiled_passes > passes
    assert {kind for kind, _ in target._traced} == set(KERNELS)
    with pytest.raises(ValueError, match="products must be one of"):
        CompiledTarget(model, max_length=64, products="fastest", autotune=False)


def test_compiled_passes_keep_the_hidden_layers_asked_for():
    """hidden_layers (an EAGLE head that reads earlier blocks) is compiled into the passes: their states equal
    the eager target's, chain and tree passes alike, and changing it afterwards is refused."""
    model = LlamaModel(TINY).init_weights(std=0.3, generator=torch.Generator().manual_seed(5)).eval()
    target = CompiledTarget(model, max_length=64, widths=(4,), autotune=False, hidden_layers=(2, 0, 1))
    eager = LlamaTarget(model, max_length=64, hidden_layers=(2, 0, 1))
    prompt = torch.tensor([repetitive(5, 2)])
    for parents in (None, torch.tensor([-1, 0, 0])):
        states = []
        for t in (target, eager):
            t.reset(1)
            t.forward(prompt)  # the eager prefill
            t.forward(torch.tensor([[3, 4, 5]]), parents)
            states.append(t.last_hidden_layers)
        assert len(states[0]) == 3 and all(s.shape == (1, 3, TINY.dim) for s in states[0])
        for got, want in zip(*states):
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert target.compiled_passes == 2
    target.hidden_layers = (1,)
    with pytest.raises(ValueError, match="hidden_layers is compiled into the passes"):
        target.forward(torch.tensor([[3]]))
