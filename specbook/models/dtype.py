"""Which floating-point type to run a real model in: ``auto_dtype`` and its reasons.

Shape legend: none (this file only chooses a dtype).

Decoding one token streams every weight once, so halving the bytes per weight (bfloat16,
Kalamkar et al., 2019, "A Study of BFLOAT16 for Deep Learning Training", arXiv:1905.12322)
halves the time a memory-bound step needs.  That only pays if the processor also
*multiplies* bfloat16 natively; otherwise every product is widened to float32 in software
and a verify pass over a few positions gets slower, not faster.  Native means:

* an NVIDIA GPU of compute capability 8.0 or later (``torch.cuda.is_bf16_supported()``);
* an x86 CPU with AMX (``amx_bf16``: Intel Sapphire Rapids and later) or with the
  AVX-512 BF16 dot-product instructions (``avx512_bf16``: Intel Cooper Lake, AMD Zen 4
  and later).  The CPU flags are read from ``/proc/cpuinfo``: torch's own
  ``torch.backends.cpu.get_cpu_capability()`` says "AVX512" on both kinds and so cannot
  tell them apart.

Measured on a 2-core AMD EPYC with ``avx512_bf16`` and no AMX (torch 2.13, SmolLM2's
49152 x 576 LM head, busy machine): 1 / 5 / 17 / 65 rows took 27 / 147 / 178 / 330 ms in
float32 and 36 / 36 / 45 / 72 ms in bfloat16: one row about the same, several rows 3-5x
faster, so bfloat16 wins on that CPU too.  On an Intel Xeon with AMX the issue records
3.1 / 7.2 / 11.5 / 21.2 ms against 2.3 / 2.5 / 2.8 / 4.8 ms.

bfloat16 keeps 8 bits of mantissa: logits near 40 are rounded to steps of 0.25, so two
implementations (or a chain pass and a one-token pass) can disagree on the argmax where the
two best logits are that close.  See ``specbook.bench.crosscheck.tie_gap_for``.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import torch

NATIVE_BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16")


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU feature flags of this machine (empty where ``/proc/cpuinfo`` is not readable)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_multiplies_bf16() -> bool:
    """True when this CPU has AMX-BF16 or AVX512-BF16 (a native bfloat16 dot product)."""
    return any(flag in cpu_flags() for flag in NATIVE_BF16_CPU_FLAGS)


def auto_dtype(device: torch.device | str | None = None) -> torch.dtype:
    """The dtype a real model should run in on ``device`` (default: the CPU).

    bfloat16 where the hardware multiplies it natively (CUDA with bf16 support, a CPU with
    AMX or AVX512-BF16), float32 everywhere else.  The choice only changes speed and the
    last bits of the logits; speculative decoding stays lossless in either.

    >>> auto_dtype("cpu") in (torch.float32, torch.bfloat16)
    True
    """
    device = torch.device("cpu" if device is None else device)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float32
    if device.type == "cpu":
        return torch.bfloat16 if cpu_multiplies_bf16() else torch.float32
    return torch.float32


def resolve_dtype(dtype: torch.dtype | str, device: torch.device | str | None = None) -> torch.dtype:
    """``"auto"`` -> :func:`auto_dtype`; a name ("float32", "bfloat16", "float16") or a torch dtype as is."""
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating-point type, got {dtype}")
        return dtype
    if dtype == "auto":
        return auto_dtype(device)
    if dtype not in DTYPE_NAMES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPE_NAMES)} or a torch dtype, got {dtype!r}")
    return getattr(torch, dtype)


def dtype_name(dtype: torch.dtype) -> str:
    """torch.bfloat16 -> "bfloat16" (as written in the benchmark's JSON)."""
    return str(dtype).removeprefix("torch.")
