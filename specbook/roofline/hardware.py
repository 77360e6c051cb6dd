"""The machines of the roofline: peak dense flop/s per dtype and memory bandwidth, cited.

Hardware presets hold vendor datasheet peaks (dense, no structured sparsity) and memory
bandwidth; ``docs/batching.md`` cites each.  ``Hardware.measured(...)`` makes "this machine"
one more instance from numbers measured elsewhere (the stopwatch lives in the benchmark
layer, not here).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ._checks import _positive

__all__ = ["DTYPE_BYTES", "Hardware", "PRESETS", "preset"]

#: bytes per element of the dtypes the presets quote
DTYPE_BYTES: dict[str, int] = {"float32": 4, "bfloat16": 2, "float16": 2}


def _dtype_bytes(dtype) -> int:
    if not (isinstance(dtype, str) and dtype in DTYPE_BYTES):
        raise ValueError(f"dtype must be one of {sorted(DTYPE_BYTES)}, got {dtype!r}")
    return DTYPE_BYTES[dtype]


@dataclass(frozen=True)
class Hardware:
    """One machine for the roofline: peak dense flop/s per dtype, memory bandwidth, where they come from.

    name:      what to call it ("H100 SXM", "this machine, measured")
    flops:     {dtype name: peak dense flop/s}, e.g. {"bfloat16": 989.4e12, "float32": 66.9e12}
    bandwidth: memory bytes/s (HBM, GDDR or DRAM)
    source:    the datasheet the numbers come from, or how they were measured
    memory:    the kind of memory ("HBM3", "GDDR6"; "" when unknown)
    """

    name: str
    flops: dict[str, float] = field(hash=False)
    bandwidth: float
    source: str
    memory: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.flops, dict) or not self.flops:
            raise ValueError(f"flops must be a non-empty dict {{dtype: flop/s}}, got {self.flops!r}")
        bandwidth = _positive(self.bandwidth, "bandwidth")
        for dtype, peak in self.flops.items():
            if not isinstance(dtype, str):
                raise ValueError(f"flops keys must be dtype names (str), got {dtype!r}")
            if not math.isfinite(_positive(peak, f"flops[{dtype!r}]") / bandwidth):
                raise ValueError(f"ridge flops[{dtype!r}] / bandwidth overflows the float range, "
                                 f"got {peak!r} / {self.bandwidth!r}")
        if not isinstance(self.source, str) or not self.source:
            raise ValueError(f"source must say where the numbers come from, got {self.source!r}")
        if not isinstance(self.memory, str):
            raise ValueError(f"memory must be a string such as 'HBM3', got {self.memory!r}")

    @classmethod
    def measured(cls, flops: dict[str, float], bandwidth: float, name: str = "this machine, measured",
                 source: str = "measured on this machine (matmul flop/s, memory read bytes/s)") -> "Hardware":
        """"This machine" as a preset, from flop/s and bytes/s measured elsewhere (bench/, a notebook)."""
        return cls(name=name, flops=dict(flops), bandwidth=bandwidth, source=source)

    def peak(self, dtype: str) -> float:
        """Peak dense flop/s in ``dtype``; ValueError naming the dtypes it has otherwise."""
        if dtype not in self.flops:
            raise ValueError(f"dtype must be one of {sorted(self.flops)} for {self.name}, got {dtype!r}")
        return float(self.flops[dtype])


_NVIDIA = "NVIDIA {} datasheet"
#: Vendor peaks: dense tensor-core bfloat16/float16 (no 2:4 sparsity), plain float32 (no TF32),
#: and memory bandwidth.  Sources are cited in docs/batching.md.
PRESETS: dict[str, Hardware] = {
    "H100 SXM": Hardware("H100 SXM", {"bfloat16": 989.4e12, "float16": 989.4e12, "float32": 66.9e12},
                         3.35e12, _NVIDIA.format("H100 Tensor Core GPU"), "HBM3"),
    "H200 SXM": Hardware("H200 SXM", {"bfloat16": 989.4e12, "float16": 989.4e12, "float32": 66.9e12},
                         4.8e12, _NVIDIA.format("H200 Tensor Core GPU"), "HBM3e"),
    "A100 SXM": Hardware("A100 SXM 80GB", {"bfloat16": 312e12, "float16": 312e12, "float32": 19.5e12},
                         2.039e12, _NVIDIA.format("A100 Tensor Core GPU"), "HBM2e"),
    "L4": Hardware("L4", {"bfloat16": 121e12, "float16": 121e12, "float32": 30.3e12},
                   300e9, _NVIDIA.format("L4 Tensor Core GPU"), "GDDR6"),
    "RTX 4090": Hardware("GeForce RTX 4090", {"bfloat16": 165.2e12, "float16": 165.2e12, "float32": 82.6e12},
                         1008e9, "NVIDIA Ada Lovelace GPU Architecture whitepaper (RTX 4090, FP32 accumulate)",
                         "GDDR6X"),
}


def preset(hw: str | Hardware) -> Hardware:
    """A :class:`Hardware` given itself or a key of :data:`PRESETS`."""
    if isinstance(hw, Hardware):
        return hw
    if isinstance(hw, str) and hw in PRESETS:
        return PRESETS[hw]
    raise ValueError(f"hw must be a Hardware or one of {sorted(PRESETS)}, got {hw!r}")
