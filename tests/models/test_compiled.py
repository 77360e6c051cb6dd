"""The compiled decode step (specbook.models.compiled) against the eager model it compiles."""
from __future__ import annotations

import pytest
import torch

from specbook.decode import generate
from specbook.models import LlamaConfig, LlamaModel, LlamaTarget
from specbook.models.compiled import CompiledDecoder
from specbook.sampling import GREEDY

TINY = LlamaConfig(vocab_size=97, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, intermediate_size=96,
                   max_position_embeddings=128)


def eager_greedy(model, prompt: list[int], n: int, eos: int | None = None) -> list[int]:
    target = LlamaTarget(model, max_length=64)
    out = generate(target, torch.tensor([prompt]), n, params=GREEDY, eos_token_id=eos)
    return out.new_tokens[0].tolist()


@pytest.fixture(scope="module")
def tiny_and_decoder():
    model = LlamaModel(TINY).init_weights(std=0.3, generator=torch.Generator().manual_seed(0)).eval()
    return model, CompiledDecoder(model, max_length=64, autotune=False)  # compiles on first use (tens of seconds)


def test_compiled_greedy_tokens_equal_the_eager_model(tiny_and_decoder):
    model, decoder = tiny_and_decoder
    for seed in range(3):  # the same compiled step serves every prompt: stale cache slots stay hidden
        prompt = torch.randint(0, 97, (5 + 4 * seed,), generator=torch.Generator().manual_seed(seed)).tolist()
        assert decoder.generate(prompt, 20) == eager_greedy(model, prompt, 20)


def test_compiled_stops_at_eos_and_checks_its_arguments(tiny_and_decoder):
    model, decoder = tiny_and_decoder
    prompt = [3, 1, 4, 1, 5]
    full = decoder.generate(prompt, 12)
    eos = full[4]
    stopped = decoder.generate(prompt, 12, eos_token_id=eos)
    assert stopped == full[:full.index(eos) + 1] == eager_greedy(model, prompt, 12, eos)
    with pytest.raises(ValueError, match="max_new_tokens"):
        decoder.generate(prompt, 0)
    with pytest.raises(ValueError, match="exceeds max_length"):
        decoder.generate(prompt, 60)
    with pytest.raises(ValueError, match="empty"):
        decoder.generate([], 3)


def test_the_bench_runs_the_compiled_engine_beside_specbook(tmp_path, monkeypatch):
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
    threads = torch.get_num_threads()
    out = tmp_path / "run.json"
    argv = ["--categories", "code_edit,chat", "--limit", "1", "--drafters", "none,ngram", "--engines", "specbook,compiled",
            "--max-new-tokens", "12", "--ignore-eos", "--gamma", "3", "--curve-reps", "0", "--dtype", "float32",
            "--threads", "1", "--no-progress", "--json", str(out)]
    try:
        assert bench.main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    report = json.loads(out.read_text())
    rows = {(r["engine"], r["drafter"]) for r in report["runs"]}
    assert ("compiled", "none") in rows and ("compiled", "ngram") not in rows
    assert {"engine": "compiled", "drafter": "ngram", "reason": "plain decoding only"} in report["skipped"]
    compiled = [r for r in report["runs"] if r["engine"] == "compiled"]
    specbook = {r["category"]: r for r in report["runs"] if r["engine"] == "specbook" and r["drafter"] == "none"}
    for r in compiled:  # float32: the same greedy tokens as the eager model
        assert r["output_ids_sha256"] == specbook[r["category"]]["output_ids_sha256"]
