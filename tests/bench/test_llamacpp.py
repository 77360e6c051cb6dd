"""The GGUF copy of SmolLM2's weights that llama.cpp reads: metadata kept, values dequantized as specbook's cache."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from specbook.bench import gguf_export
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
