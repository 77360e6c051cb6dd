"""llama.cpp as the bench's third engine: the GGUF copy of the weights, the skip without llama_cpp,
the comparison with specbook, and (only where llama_cpp is installed) greedy tokens equal to specbook's."""
from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import torch

from specbook.bench import cli as bench
from specbook.bench import gguf_export, llamacpp
from specbook.bench.combos import engine_combos
from specbook.bench.results import format_table, versus_specbook
from specbook.models import smollm2

gguf = pytest.importorskip("gguf")
Q = gguf.GGMLQuantizationType
FIELDS = {"general.name": "tiny", "llama.block_count": 1, "llama.rope.freq_base": 100000.0,
          "tokenizer.ggml.add_bos_token": False, "tokenizer.ggml.tokens": ["<a>", "b", "c"],
          "tokenizer.ggml.token_type": [3, 1, 1], "tokenizer.chat_template": "{{ messages }}"}


def tiny_gguf(path):
    """A GGUF file like the shipped one, small: a Q8_0 embedding, a Q4_1 matrix, an F32 norm, metadata of each kind."""
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_string("general.name", FIELDS["general.name"])
    w.add_uint32("llama.block_count", FIELDS["llama.block_count"])
    w.add_float32("llama.rope.freq_base", FIELDS["llama.rope.freq_base"])
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    w.add_array("tokenizer.ggml.tokens", FIELDS["tokenizer.ggml.tokens"])
    w.add_key_value("tokenizer.ggml.token_type", FIELDS["tokenizer.ggml.token_type"], gguf.GGUFValueType.ARRAY,
                    gguf.GGUFValueType.INT32)
    w.add_string("tokenizer.chat_template", FIELDS["tokenizer.chat_template"])
    w.add_uint32("general.file_type", 3)  # MOSTLY_Q4_1
    tensors = {"token_embd.weight": (Q.Q8_0, (8, 64)), "blk.0.ffn_up.weight": (Q.Q4_1, (4, 64)),
               "blk.0.attn_norm.weight": (Q.F32, (64,))}
    for name, (kind, shape) in tensors.items():
        x = rng.standard_normal(shape).astype(np.float32)
        w.add_tensor(name, x if kind == Q.F32 else gguf.quants.quantize(x, kind), raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_copy_keeps_the_metadata_and_the_dequantized_values(tmp_path, dtype):
    src = gguf.GGUFReader(str(tiny_gguf(tmp_path / "q.gguf")))
    out = gguf_export.write_gguf(tmp_path / "q.gguf", tmp_path / "out" / "x.gguf", dtype)
    assert [p.name for p in out.parent.iterdir()] == ["x.gguf"]  # the temporary file is gone
    got = gguf.GGUFReader(str(out))
    assert got.fields["general.architecture"].contents() == "llama"
    for key, value in FIELDS.items():
        assert got.fields[key].contents() == value, key
        assert got.fields[key].types == src.fields[key].types, key
    assert got.fields["general.file_type"].contents() == (0 if dtype == torch.float32 else 32)
    want = Q.F32 if dtype == torch.float32 else Q.BF16
    for a, b in zip(src.tensors, got.tensors):
        assert (a.name, list(a.shape)) == (b.name, list(b.shape))
        assert b.tensor_type == (Q.F32 if len(a.shape) == 1 else want)  # norms stay float32
        ref = torch.from_numpy(np.array(gguf.quants.dequantize(a.data, a.tensor_type)))
        if b.tensor_type == Q.BF16:
            ref = ref.to(torch.bfloat16).float()  # rounded as torch rounds: to nearest even
        assert torch.equal(torch.from_numpy(np.array(gguf.quants.dequantize(b.data, b.tensor_type))), ref), a.name


def test_only_float32_and_bfloat16_are_written(tmp_path):
    with pytest.raises(ValueError, match="float32 or bfloat16, not float16"):
        gguf_export.export_path(torch.float16, tmp_path)
    assert gguf_export.export_path("bfloat16", tmp_path) == smollm2.model_dir(tmp_path) / "gguf" / "bfloat16.gguf"


def tensor_table(path) -> dict:
    """{name: (offset, numpy shape)} of an F32 GGUF file's tensors, read by hand: gguf.GGUFReader parses
    all 98k tokenizer strings into arrays and takes many seconds; skipping them takes a fraction of one."""
    import struct

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUF value types -> bytes
    with open(path, "rb") as f:
        def read(fmt):
            return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))

        def skip(kind):
            if kind == 8:  # a string
                f.seek(read("Q")[0], 1)
            elif kind == 9:  # an array
                sub, count = read("IQ")
                if sub in sizes:
                    f.seek(sizes[sub] * count, 1)
                else:
                    for _ in range(count):
                        skip(sub)
            else:
                f.seek(sizes[kind], 1)

        _, _, n_tensors, n_kv = read("IIQQ")
        for _ in range(n_kv):
            f.seek(read("Q")[0], 1)
            skip(read("I")[0])
        infos = {}
        for _ in range(n_tensors):
            name = f.read(read("Q")[0]).decode()
            dims = read(f"{read('I')[0]}Q")
            kind, offset = read("IQ")
            assert kind == 0, name  # F32
            infos[name] = (offset, tuple(reversed(dims)))
        start = -(-f.tell() // 32) * 32  # the data section, aligned (GGUF's default alignment)
    return {name: (start + offset, shape) for name, (offset, shape) in infos.items()}


def test_the_cached_copy_holds_the_values_specbook_loads():
    """The real copy, where it was written: the embedding, V, MLP and norms equal the float32 cache
    exactly (Q and K are stored in llama.cpp's RoPE row order: the same values, permuted)."""
    path = gguf_export.export_path(torch.float32)
    if not (path.is_file() and smollm2.is_fetched()):
        pytest.skip("the float32 GGUF copy is not cached (python -m specbook bench --engines llamacpp writes it)")
    from safetensors import safe_open

    table = tensor_table(path)
    names = {"token_embd.weight": "model.embed_tokens.weight", "blk.0.attn_v.weight": "model.layers.0.self_attn.v_proj.weight",
             "blk.3.ffn_down.weight": "model.layers.3.mlp.down_proj.weight", "output_norm.weight": "model.norm.weight",
             "blk.29.ffn_gate.weight": "model.layers.29.mlp.gate_proj.weight",
             "blk.0.attn_q.weight": "model.layers.0.self_attn.q_proj.weight"}
    with safe_open(str(smollm2.model_dir() / "model.safetensors"), "pt") as st:
        for g, h in names.items():
            ref = st.get_tensor(h)
            offset, shape = table[g]
            rows = min(shape[0], 4096)  # the embedding's first rows: reading all 113 MB is slow on a busy disk
            ref, got = ref[:rows], torch.from_numpy(np.array(np.memmap(path, np.float32, "r", offset, shape)[:rows]))
            if "attn_q" in g:
                assert not torch.equal(got, ref) and torch.equal(got.flatten().sort().values, ref.flatten().sort().values)
            else:
                assert torch.equal(got, ref), g


# ---------------------------------------------------------------- without llama_cpp

def no_llama_cpp(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # `import llama_cpp` now raises ImportError
    monkeypatch.setitem(sys.modules, "llama_cpp.llama_speculative", None)


def test_without_llama_cpp_the_engine_is_skipped_with_one_reason(monkeypatch):
    no_llama_cpp(monkeypatch)
    module, why = llamacpp.import_llama_cpp()
    assert module is None and "llama_cpp is not importable" in why and "pip install llama-cpp-python" in why
    assert "\n" not in why
    combos, skipped = llamacpp.llamacpp_combos(["none", "ngram"], torch.float32, 64, lambda d: 4, greedy=True)
    assert combos == [] and skipped == [{"engine": "llamacpp", "drafter": "none,ngram", "reason": why}]
    with pytest.raises(ImportError, match="llama-cpp-python"):
        llamacpp.LlamaCppEngine("x.gguf", torch.float32, 64, 1)
    args = types.SimpleNamespace(device="cpu", temperature=0.0)
    sb = types.SimpleNamespace(target=types.SimpleNamespace(max_length=64))
    combos, skipped, hf = engine_combos(args, ["llamacpp"], ["none"], sb, None, None, torch.float32,
                                        lambda d, engine="specbook": 4, lambda d, engine="specbook": None)
    assert (combos, hf) == ([], None) and skipped[0]["reason"] == why


def test_the_bench_accepts_the_engine_name():
    args = bench.parse_args(["--engines", "specbook,llamacpp", "--drafters", "ngram"])
    args.argv = []
    _, engines, _ = bench._settings(args)
    assert engines == ["specbook", "llamacpp"]


def test_sampling_skips_the_engine():
    combos, skipped = llamacpp.llamacpp_combos(["none"], torch.float32, 64, lambda d: 4, greedy=False)
    installed = llamacpp.import_llama_cpp()[0] is not None
    assert combos == [] and skipped[0]["reason"].startswith("greedy only" if installed else "llama_cpp is not")


# ---------------------------------------------------------------- specbook over another engine (records only)

def record(engine, drafter, pid, seconds, sha, new=10, verifier=None):
    return {"engine": engine, "drafter": drafter, "verifier": verifier, "id": pid, "seconds": seconds,
            "new_tokens": new, "sha256": sha}


def test_versus_specbook_is_a_median_of_side_by_side_ratios():
    records = [record("specbook", "none", "p0", 1.0, "a"), record("specbook", "none", "p1", 1.0, "b"),
               record("specbook", "ngram", "p0", 0.5, "a", verifier="token"),
               record("specbook", "ngram", "p1", 0.5, "b", verifier="token"),
               record("llamacpp", "none", "p0", 0.5, "a"), record("llamacpp", "none", "p1", 0.25, "x"),
               record("llamacpp", "ngram", "p0", 1.0, "a", verifier="token"),
               record("transformers", "none", "p0", 2.0, "a")]
    rows = versus_specbook(records, greedy=True)
    assert [(r["engine"], r["drafter"]) for r in rows] == [("llamacpp", "none"), ("llamacpp", "ngram")]
    plain, lookup = rows
    assert plain["specbook_over_engine_tokens_per_s_median"] == pytest.approx(0.375)  # median of 0.5, 0.25
    assert (plain["min"], plain["max"], plain["prompts"], plain["identical_to_specbook_plain"]) == (0.25, 0.5, 2, 1)
    assert lookup["specbook_over_engine_tokens_per_s_median"] == 2.0 and lookup["identical_to_specbook_plain"] == 1
    assert versus_specbook(records, greedy=False)[0]["identical_to_specbook_plain"] is None
    text = format_table([], [], None, {}, rows)
    assert "none, specbook / llamacpp tokens/s (median of 2 prompts): 0.38 (range 0.25-0.50)" in text
    assert "equals specbook's plain on 1/2 prompts" in text


# ---------------------------------------------------------------- with llama_cpp (skipped where it is not installed)

def test_llama_cpp_greedy_tokens_equal_specbooks_float32_tokens():
    if llamacpp.import_llama_cpp()[0] is None:
        pytest.skip("llama_cpp is not installed (pip install llama-cpp-python)")
    if not smollm2.is_fetched():
        pytest.skip("SmolLM2 is not in the cache (python -m specbook.models.smollm2)")
    from specbook.bench.crosscheck import explain_divergence
    from specbook.decode import generate
    from specbook.models import LlamaTarget
    from specbook.models.chat import chat_ids
    from specbook.sampling import GREEDY

    model, tokenizer = smollm2.load_smollm2(dtype=torch.float32)
    ids = chat_ids(tokenizer, "Repeat after me: the cat sat on the mat. The cat sat on the mat.")
    n = 16
    ref = generate(LlamaTarget(model, max_length=len(ids) + n + 8), torch.tensor([ids]), n,
                   params=GREEDY).new_tokens[0].tolist()
    path = gguf_export.smollm2_gguf(torch.float32)
    for lookup in (None, (3, 4)):
        engine = llamacpp.LlamaCppEngine(path, torch.float32, len(ids) + n + 8, torch.get_num_threads(), lookup)
        res = engine.run(ids, None, GREEDY, n, 4)
        engine.close()
        assert len(res.new_ids) == n and res.passes >= 1 and res.seconds > 0
        if lookup is None:
            assert res.proposed == 0 and res.passes == n
        else:
            assert res.stats is not None and res.accepted > 0  # the prompt repeats itself: lookup finds drafts
        d = explain_divergence(model, ids, ref, res.new_ids)
        assert d is None or d.is_tie, d.describe()
