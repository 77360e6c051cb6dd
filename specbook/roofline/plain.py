"""The roofline of one decode step: why batching and speculation draw on one pool of arithmetic.

A decode step of a dense transformer multiplies every weight by every position it processes:
about ``2 * params`` FLOPs per position (one multiply-add per parameter; Kaplan et al. 2020,
"Scaling Laws for Neural Language Models", sec. 2.1), and it reads every weight once per
step, however many positions share the read.  The roofline model (Williams, Waterman &
Patterson 2009, "Roofline: An Insightful Visual Performance Model for Multicore
Architectures") then says a step takes

    step time = max(FLOPs / peak flop/s,  bytes / bandwidth)

and the *ridge* ``peak flop/s / bandwidth`` (FLOP per byte) is the arithmetic intensity at
which the two terms are equal.  Below the ridge the arithmetic units idle while weights
stream in: extra positions ride along for free, which is what speculative decoding spends
(Leviathan, Kalman & Matias 2023, "Fast Inference from Transformers via Speculative
Decoding", sec. 3.4).  A batch of B rows spends the same idle arithmetic, so B rows each
verifying gamma + 1 positions cross the ridge B times sooner.

Symbols (one decode step of B rows, each processing ``positions_per_row`` = gamma + 1
positions when verifying a chain of gamma drafts, 1 when decoding plainly):

* ``params``       parameters read per step (weights);
* ``dtype_bytes``  bytes per weight (2 for bfloat16, 4 for float32);
* ``kv_bytes_per_row``  KV-cache bytes each row reads per step (optional, default 0):
  2 (keys and values) x layers x kv_heads x head_dim x context x dtype bytes.  Here it
  joins the weights in one max; :func:`serving_step_time` prices attention as the kernel
  of its own that it is.

    FLOPs  = 2 * params * B * positions_per_row
    bytes  = params * dtype_bytes + B * kv_bytes_per_row
    intensity = FLOPs / bytes  =  2 * B * positions_per_row / dtype_bytes   (kv_bytes_per_row = 0)

In bfloat16 the intensity is simply the number of positions in the step, B (gamma + 1): the
course's table (H100 SXM, bfloat16 ridge about 295) reads 1 (0.3% of the ridge), 5 (1.7%),
64 (22%) and 320 (over the ridge) for batch 1 and 64, gamma 0 and 4.  Lesson 1 shows that
table with :func:`roofline_rows`, and the verify cost it implies, v = t(B, n) / t(B, 1), with
:func:`verify_time_ratio`; lesson 6 puts the whole model under sliders.

Throughput and latency with speculation use the cost model of Leviathan et al. (Thm 3.8)
with the verify cost taken from the roofline at the actual batch: one round is gamma draft
steps at ``c`` times a plain target step (at the same batch) plus one verify step over
gamma + 1 positions per row, and it yields E(alpha, gamma) = (1 - alpha^(gamma+1)) /
(1 - alpha) tokens per row (:func:`specbook.theory.expected_tokens`).

What the plain roofline leaves out (the second half of this module, lesson 6's third part):
:func:`serving_predict` adds, one keyword each, the KV cache as its own kernel (read once per
row or once per position: :func:`serving_step_time`), a draft priced as a decoder of its own
(:class:`ModelShape`), a static batch that waits for its slowest row (the exact law of the
rounds a row needs: :func:`rounds_needed_cdf`, :func:`expected_slowest_rounds`), and kernels
that reach a share of the peaks; :func:`serving_crossover` finds where speculation then loses,
and :func:`ridge_batch` where the verify step reaches the ridge, a different batch.

Hardware presets hold vendor datasheet peaks (dense, no structured sparsity) and memory
bandwidth; ``docs/batching.md`` cites each.  ``Hardware.measured(...)`` makes "this machine"
one more instance from numbers measured elsewhere (the stopwatch lives in the benchmark
layer, not here).

Everything is pure arithmetic on Python floats; bad input raises ``ValueError`` naming the
argument and the value.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Iterable

from .. import theory

__all__ = [
    "DTYPE_BYTES", "Hardware", "PRESETS", "Prediction", "preset",
    "step_intensity", "ridge", "ridge_fraction", "step_time", "roofline_rows", "verify_time_ratio",
    "plain_throughput", "speculative_throughput", "predict", "predicted_crossover",
    "KV_READS", "ModelShape", "MODELS", "ridge_batch", "serving_step_time", "rounds_needed_cdf",
    "expected_slowest_rounds", "slowest_row_yield", "alpha_for_yield", "ServingPrediction", "serving_predict", "serving_crossover",
]

#: bytes per element of the dtypes the presets quote
DTYPE_BYTES: dict[str, int] = {"float32": 4, "bfloat16": 2, "float16": 2}


# --------------------------------------------------------------------------- validation

def _number(value, name: str, *, zero_ok: bool) -> float:
    """A finite float, > 0 (or >= 0 when ``zero_ok``); bools and strings are refused."""
    bound = ">= 0" if zero_ok else "> 0"
    bad = ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    if isinstance(value, bool):
        raise bad
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise bad from None
    if not (math.isfinite(x) and (x >= 0 if zero_ok else x > 0)):
        raise bad
    return x


def _positive(value, name: str) -> float:
    return _number(value, name, zero_ok=False)


def _nonneg(value, name: str) -> float:
    return _number(value, name, zero_ok=True)


def _int(value, name: str, low: int) -> int:
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or value != int(value) or value < low):
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _ints(values, name: str, low: int) -> list[int]:
    """A non-empty sequence of integers >= low, in the order given."""
    try:
        items = list(values)
    except TypeError:
        raise ValueError(f"{name} must be a sequence of integers >= {low}, got {values!r}") from None
    if not items:
        raise ValueError(f"{name} must hold at least one value, got {values!r}")
    return [_int(v, name, low) for v in items]


def _dtype_bytes(dtype) -> int:
    if not (isinstance(dtype, str) and dtype in DTYPE_BYTES):
        raise ValueError(f"dtype must be one of {sorted(DTYPE_BYTES)}, got {dtype!r}")
    return DTYPE_BYTES[dtype]


def _alpha(value) -> float:
    a = _nonneg(value, "alpha")
    if a > 1:
        raise ValueError(f"alpha must lie in [0, 1], got {value!r}")
    return a


# --------------------------------------------------------------------------- hardware

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


# --------------------------------------------------------------------------- one step

def _step_flops_bytes(batch, positions_per_row, params, dtype_bytes, kv_bytes_per_row) -> tuple[float, float]:
    b = _int(batch, "batch", 1)
    n = _int(positions_per_row, "positions_per_row", 1)
    p = _positive(params, "params")
    db = _positive(dtype_bytes, "dtype_bytes")
    kv = _nonneg(kv_bytes_per_row, "kv_bytes_per_row")
    return 2.0 * p * b * n, p * db + b * kv


def step_intensity(batch, gamma, params, dtype_bytes, *, kv_bytes_per_row=0.0) -> float:
    """FLOP per byte of one decode step: B rows, gamma drafts each (gamma + 1 positions per row).

    2 * params * B * (gamma + 1) / (params * dtype_bytes + B * kv_bytes_per_row); with no KV
    traffic that is 2 B (gamma + 1) / dtype_bytes, i.e. B (gamma + 1) in bfloat16.
    """
    g = _int(gamma, "gamma", 0)
    flops, nbytes = _step_flops_bytes(batch, g + 1, params, dtype_bytes, kv_bytes_per_row)
    return flops / nbytes


def ridge(hw: str | Hardware, dtype: str) -> float:
    """The ridge point of ``hw`` in ``dtype``: peak flop/s over bandwidth, in FLOP per byte."""
    h = preset(hw)
    return h.peak(dtype) / h.bandwidth


def ridge_fraction(hw: str | Hardware, dtype: str, batch, gamma, params, dtype_bytes, *,
                   kv_bytes_per_row=0.0) -> float:
    """Share of the ridge one step uses: step_intensity / ridge (above 1 = compute-bound)."""
    return step_intensity(batch, gamma, params, dtype_bytes, kv_bytes_per_row=kv_bytes_per_row) / ridge(hw, dtype)


def step_time(hw: str | Hardware, dtype: str, batch, positions_per_row, params, dtype_bytes, *,
              kv_bytes_per_row=0.0) -> float:
    """Predicted seconds of one target step: max(FLOPs / peak, bytes / bandwidth)."""
    h = preset(hw)
    flops, nbytes = _step_flops_bytes(batch, positions_per_row, params, dtype_bytes, kv_bytes_per_row)
    return max(flops / h.peak(dtype), nbytes / h.bandwidth)


# --------------------------------------------------------------------------- lesson 1: one pool of spare compute

def roofline_rows(batches=(1, 64), gammas=(0, 4), hw: str | Hardware = "H100 SXM",
                  dtype: str = "bfloat16") -> list[dict]:
    """Lesson 1's "one pool of spare compute" table, one dict per (batch, gamma), batch-major.

    Keys: batch, gamma, intensity, ridge, fraction_of_ridge, compute_bound.  Weight traffic
    only (no KV cache), so the model size cancels out of the intensity.  On the H100 SXM the
    defaults give intensities 1, 5, 64, 320 against a ridge of about 295: 0.3%, 1.7%, 22%, over.
    """
    nbytes, r = _dtype_bytes(dtype), ridge(hw, dtype)
    rows = []
    for b in _ints(batches, "batches", 1):
        for g in _ints(gammas, "gammas", 0):
            intensity = step_intensity(b, g, 1.0, nbytes)  # any params: they cancel
            rows.append(dict(batch=b, gamma=g, intensity=intensity, ridge=r,
                             fraction_of_ridge=intensity / r, compute_bound=intensity >= r))
    return rows


def verify_time_ratio(n_positions, batch=1, hw: str | Hardware = "H100 SXM", dtype: str = "bfloat16") -> float:
    """Roofline estimate of v = time(pass over n positions per row) / time(pass over 1 position).

    From :func:`step_time` with weight traffic only:  v = max(1, x n) / max(1, x), where
    x = 2 B / (dtype_bytes * ridge), i.e. B / ridge in bfloat16.  At batch 1 the extra positions
    are free (v = 1, the paper's assumption) until n passes the ridge; once B n crosses it they
    cost time in proportion: batching has already spent the idle arithmetic speculation uses.
    """
    n = _int(n_positions, "n_positions", 1)
    nbytes = _dtype_bytes(dtype)
    return (step_time(hw, dtype, batch, n, 1.0, nbytes)  # any params: they cancel
            / step_time(hw, dtype, batch, 1, 1.0, nbytes))


# --------------------------------------------------------------------------- with and without speculation

@dataclass(frozen=True)
class Prediction:
    """The roofline's forecast for one setting (B rows, gamma drafts, acceptance alpha, draft cost c).

    intensity, ridge, ridge_fraction:     of the verify step (gamma + 1 positions per row)
    plain_tokens_per_s, plain_ms_per_token:  plain decoding, all rows together / per row
    spec_tokens_per_s, spec_ms_per_token:    speculative decoding, the same two
    speedup:        spec_tokens_per_s / plain_tokens_per_s
    verify_cost:    v_B(gamma + 1) = verify step time / plain step time at this batch
    wasted_fraction: expected computed draft positions that are rejected, over computed positions
    """

    batch: int
    gamma: int
    alpha: float
    c: float
    intensity: float
    ridge: float
    ridge_fraction: float
    plain_tokens_per_s: float
    plain_ms_per_token: float
    spec_tokens_per_s: float
    spec_ms_per_token: float
    speedup: float
    verify_cost: float
    wasted_fraction: float

    @property
    def compute_bound(self) -> bool:
        return self.ridge_fraction >= 1.0


def plain_throughput(hw: str | Hardware, dtype: str, batch, params, dtype_bytes, *, kv_bytes_per_row=0.0) -> float:
    """Tokens/s of plain decoding at batch B: every step gives each of the B rows one token."""
    return _int(batch, "batch", 1) / step_time(hw, dtype, batch, 1, params, dtype_bytes,
                                                kv_bytes_per_row=kv_bytes_per_row)


def speculative_throughput(hw: str | Hardware, dtype: str, batch, params, dtype_bytes, alpha, gamma, c, *,
                           kv_bytes_per_row=0.0) -> float:
    """Tokens/s of speculative decoding: B E(alpha, gamma) / (gamma c t(B, 1) + t(B, gamma + 1))."""
    return predict(hw, dtype, batch, gamma, alpha, c, params, dtype_bytes,
                   kv_bytes_per_row=kv_bytes_per_row).spec_tokens_per_s


def predict(hw: str | Hardware, dtype: str, batch, gamma, alpha, c, params, dtype_bytes, *,
            kv_bytes_per_row=0.0) -> Prediction:
    """Every number of the lesson's explorer for one setting, as a :class:`Prediction`.

    One round: gamma draft steps at c plain target steps each, then one verify step over
    gamma + 1 positions per row; it yields E(alpha, gamma) tokens per row.
    """
    a, g, cost, b = _alpha(alpha), _int(gamma, "gamma", 0), _nonneg(c, "c"), _int(batch, "batch", 1)
    kv = kv_bytes_per_row
    t_plain = step_time(hw, dtype, b, 1, params, dtype_bytes, kv_bytes_per_row=kv)
    t_verify = step_time(hw, dtype, b, g + 1, params, dtype_bytes, kv_bytes_per_row=kv)
    t_round = g * cost * t_plain + t_verify
    e = float(theory.expected_tokens(a, g))
    intensity = step_intensity(b, g, params, dtype_bytes, kv_bytes_per_row=kv)
    r = ridge(hw, dtype)
    # Of the gamma + 1 positions a row verifies, E - 1 drafts are kept and one more is the
    # corrected or bonus token: the gamma - (E - 1) drafts past the first rejection are waste.
    wasted = (g - (e - 1.0)) / (g + 1.0)
    return Prediction(
        batch=b, gamma=g, alpha=a, c=cost, intensity=intensity, ridge=r, ridge_fraction=intensity / r,
        plain_tokens_per_s=b / t_plain, plain_ms_per_token=1e3 * t_plain,
        spec_tokens_per_s=b * e / t_round, spec_ms_per_token=1e3 * t_round / e,
        speedup=e * t_plain / t_round, verify_cost=t_verify / t_plain, wasted_fraction=wasted)


def predicted_crossover(hw: str | Hardware, dtype: str, params, dtype_bytes, alpha, gamma, c,
                        batch_sizes: Iterable[int], *, kv_bytes_per_row=0.0) -> int | None:
    """Smallest batch size in ``batch_sizes`` at which speculation's predicted throughput falls
    below plain decoding's; None if it never does among them.

    Speculation loses at batch B exactly when E(alpha, gamma) / (gamma c + v_B(gamma + 1)) < 1,
    with v_B the roofline's verify cost at that batch.  gamma = 0 is plain decoding itself and
    never falls below it (None).
    """
    for b in sorted(set(_ints(batch_sizes, "batch_sizes", 1))):
        p = predict(hw, dtype, b, gamma, alpha, c, params, dtype_bytes, kv_bytes_per_row=kv_bytes_per_row)
        if p.spec_tokens_per_s < p.plain_tokens_per_s:
            return b
    return None


# --------------------------------------------------------------------------- what the plain roofline leaves out
#
# The plain roofline above prices a step by its weights alone and lets the draft cost a fixed
# fraction c of a plain step.  A server also reads every row's KV cache, runs a draft whose own
# step grows with the batch, waits for the rows that accept least, and reaches a fraction of the
# datasheet peaks.  Each of these is one keyword below, zero or one by default, so that with all
# of them off the numbers are the plain roofline's.

#: How a verify pass reads a row's KV cache: once for all its gamma + 1 queries (a multi-query
#: attention kernel), or once per query (the pass run as gamma + 1 one-query rows).
KV_READS = ("once", "per_position")


def _fraction(value, name: str) -> float:
    x = _positive(value, name)
    if x > 1:
        raise ValueError(f"{name} must lie in (0, 1], got {value!r}")
    return x


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a decoder that set what one step reads and computes besides its weights.

    params:    weights read once per step
    layers, heads, kv_heads, head_dim:  the attention geometry; every cached token holds a key
               and a value of kv_heads x head_dim numbers in every layer (grouped-query attention
               when kv_heads < heads)
    source:    where the sizes come from
    """

    name: str
    params: float
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    source: str

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")
        _positive(self.params, "params")
        for name in ("layers", "heads", "kv_heads", "head_dim"):
            _int(getattr(self, name), name, 1)
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads must divide heads, got heads={self.heads!r}, kv_heads={self.kv_heads!r}")
        if not isinstance(self.source, str) or not self.source:
            raise ValueError(f"source must say where the sizes come from, got {self.source!r}")

    def kv_bytes_per_token(self, dtype_bytes) -> float:
        """Bytes one cached token occupies: 2 (key, value) x layers x kv_heads x head_dim x dtype_bytes."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * _positive(dtype_bytes, "dtype_bytes")

    def kv_bytes_per_row(self, context, dtype_bytes) -> float:
        """Bytes of one row's KV cache at ``context`` cached tokens: what a step reads per row."""
        return _nonneg(context, "context") * self.kv_bytes_per_token(dtype_bytes)

    def attention_flops_per_position(self, context) -> float:
        """FLOPs of attention for one new position over ``context`` cached tokens: q . k for every
        cached key, then the weighted sum of the values, 2 x 2 x heads x head_dim per token and layer."""
        return 4.0 * self.layers * self.heads * self.head_dim * _nonneg(context, "context")


#: The course's 7B example with an attention geometry, and a draft for it.
MODELS: dict[str, ModelShape] = {
    "7B": ModelShape("7B, grouped-query attention", 7e9, 32, 32, 8, 128,
                     "attention geometry of Mistral 7B (Jiang et al. 2023, Table 1: 32 layers, 32 query heads, "
                     "8 KV heads of 128 dims); weights rounded to the course's 7e9"),
    "draft 0.35B": ModelShape("0.35B draft", 0.35e9, 16, 32, 8, 64,
                              "illustrative: 5% of the 7B's weights (the course's c = 0.05) with the attention "
                              "geometry of Llama 3.2 1B (its Hugging Face config: 16 layers, 32 query heads, "
                              "8 KV heads of 64 dims)"),
}


def ridge_batch(hw: str | Hardware, dtype: str, gamma, dtype_bytes, *, compute_efficiency=1.0,
                bandwidth_efficiency=1.0) -> int:
    """The smallest batch whose verify step (gamma + 1 positions per row) reaches the ridge of its
    weight products: 2 B (gamma + 1) / dtype_bytes >= ridge.  With efficiencies the ridge is the
    attained one, (compute_efficiency x peak) / (bandwidth_efficiency x bandwidth).

    The KV cache does not move it: attention is its own kernel, far below any ridge (see
    :func:`serving_step_time`).  This is where extra positions start to cost time, not where
    speculation starts to lose (:func:`serving_crossover`).
    """
    g = _int(gamma, "gamma", 0)
    nbytes = _positive(dtype_bytes, "dtype_bytes")
    r = ridge(hw, dtype) * _fraction(compute_efficiency, "compute_efficiency") / _fraction(
        bandwidth_efficiency, "bandwidth_efficiency")
    b = max(1, math.ceil(r * nbytes / (2.0 * (g + 1))))
    while b > 1 and 2.0 * (b - 1) * (g + 1) / nbytes >= r:  # guard the rounding of the division above
        b -= 1
    while 2.0 * b * (g + 1) / nbytes < r:
        b += 1
    return b


def serving_step_time(hw: str | Hardware, dtype: str, batch, positions_per_row, params, dtype_bytes, *,
                      kv_bytes_per_row=0.0, attention_flops_per_position=0.0, kv_reads: str = "once",
                      compute_efficiency=1.0, bandwidth_efficiency=1.0) -> float:
    """Predicted seconds of one step as two kernels run one after the other, each on its roofline.

    weights:    max(2 params B n / peak,  params dtype_bytes / bandwidth)
    attention:  max(A B n / peak,  B kv r / bandwidth),   r = 1 (``kv_reads="once"``) or n ("per_position")

    with B rows of n positions, A = ``attention_flops_per_position`` and kv = ``kv_bytes_per_row``;
    peak and bandwidth are the datasheet's times ``compute_efficiency`` and ``bandwidth_efficiency``.
    The two terms add up instead of sharing one max (as :func:`step_time` with ``kv_bytes_per_row``
    does): the weight products and attention are separate kernels, so the KV reads cannot hide
    behind the products' arithmetic.  Attention's intensity is a few FLOP per byte (2 n heads /
    (kv_heads dtype_bytes)), far below any GPU's ridge, so its max is nearly always the reads.
    With every keyword at its default this is :func:`step_time` with weights only.
    """
    h = preset(hw)
    flops, weight_bytes = _step_flops_bytes(batch, positions_per_row, params, dtype_bytes, 0.0)
    b, n = int(batch), int(positions_per_row)
    kv = _nonneg(kv_bytes_per_row, "kv_bytes_per_row")
    attention_flops = _nonneg(attention_flops_per_position, "attention_flops_per_position")
    if kv_reads not in KV_READS:
        raise ValueError(f"kv_reads must be one of {KV_READS}, got {kv_reads!r}")
    peak = h.peak(dtype) * _fraction(compute_efficiency, "compute_efficiency")
    bandwidth = h.bandwidth * _fraction(bandwidth_efficiency, "bandwidth_efficiency")
    weights = max(flops / peak, weight_bytes / bandwidth)
    reads = n if kv_reads == "per_position" else 1
    attention = max(attention_flops * b * n / peak, kv * b * reads / bandwidth)
    return weights + attention


# --------------------------------------------------------------------------- rows that accept different numbers of drafts

def _round_law(alpha: float, gamma: int) -> list[float]:
    """P(T = k) for k = 1 .. gamma + 1: the tokens one row gains in one round (i.i.d. acceptance)."""
    return [alpha ** (k - 1) * (1.0 - alpha) for k in range(1, gamma + 1)] + [alpha ** gamma]


def rounds_needed_cdf(alpha, gamma, new_tokens) -> list[float]:
    """P(R <= r) for r = 0, 1, ..., new_tokens, where R is the number of rounds one row needs to emit
    ``new_tokens`` tokens when each draft is accepted with probability alpha (the i.i.d. model of
    Leviathan et al. 2023, sec. 3.1) and a round stops at the first rejection.

    A round emits at least one token, so R <= new_tokens.  A loop that drafts fewer tokens near the
    budget (as :func:`specbook.decode.speculative_generate` does) needs the same number of rounds:
    with m tokens left, either loop finishes this round with probability alpha^(m - 1).
    """
    return list(_rounds_cdf(_alpha(alpha), _int(gamma, "gamma", 0), _int(new_tokens, "new_tokens", 1)))


@functools.lru_cache(maxsize=256)
def _rounds_cdf(a: float, g: int, n: int) -> tuple[float, ...]:
    law = _round_law(a, g)
    have = [0.0] * (n + 1)  # have[t] = P(S_r = t) for t < n; have[n] = P(S_r >= n)
    have[0] = 1.0
    cdf = [0.0]
    for r in range(1, n + 1):
        if have[n] >= 1.0 - 1e-15:  # done with certainty, to rounding: the rest of the cdf is 1
            cdf.extend([1.0] * (n + 1 - r))
            break
        nxt = [0.0] * (n + 1)
        nxt[n] = have[n]
        for t in range(r - 1, n):  # after r - 1 rounds a row holds at least r - 1 tokens
            mass = have[t]
            if mass == 0.0:
                continue
            for k, pk in enumerate(law, start=1):
                nxt[min(t + k, n)] += mass * pk
        have = nxt
        cdf.append(min(1.0, have[n]))
    return tuple(cdf)


def expected_slowest_rounds(alphas, gamma, new_tokens) -> float:
    """E[max_i R_i]: the rounds a static batch runs until its slowest row has ``new_tokens`` tokens,
    with row i accepting drafts with probability ``alphas[i]`` (rows independent).

    E[max] = sum over r >= 0 of (1 - prod_i P(R_i <= r)).  One row with a low acceptance sets the
    pace: a row that accepts nothing needs ``new_tokens`` rounds whatever the others do.
    """
    try:
        rows = list(alphas)
    except TypeError:
        raise ValueError(f"alphas must be a sequence of acceptance rates in [0, 1], got {alphas!r}") from None
    if not rows:
        raise ValueError(f"alphas must hold one acceptance rate per row, got {alphas!r}")
    n = _int(new_tokens, "new_tokens", 1)
    counts: dict[float, int] = {}
    for a in rows:
        a = _alpha(a)
        counts[a] = counts.get(a, 0) + 1
    all_done = [1.0] * (n + 1)  # P(max R <= r)
    for a, count in counts.items():
        cdf = _rounds_cdf(a, _int(gamma, "gamma", 0), n)
        all_done = [p * c ** count for p, c in zip(all_done, cdf)]
    return sum(1.0 - p for p in all_done[:n])


def slowest_row_yield(alphas, gamma, new_tokens) -> float:
    """Tokens per row per round of a static batch that waits for its slowest row:
    new_tokens / E[max_i R_i] (:func:`expected_slowest_rounds`); E(alpha, gamma) for a single row
    and a long generation, less for a wider batch."""
    return _int(new_tokens, "new_tokens", 1) / expected_slowest_rounds(alphas, gamma, new_tokens)


def alpha_for_yield(tokens_per_round, gamma) -> float:
    """The acceptance alpha at which E(alpha, gamma) equals ``tokens_per_round``: turns a row's measured
    tokens per pass (which also counts the passes where its drafter had nothing to propose) into the
    i.i.d. acceptance that yields as much.  Bisection; E is increasing in alpha on [0, 1]."""
    g = _int(gamma, "gamma", 0)
    y = _positive(tokens_per_round, "tokens_per_round")
    if not 1.0 <= y <= g + 1.0:
        raise ValueError(f"tokens_per_round must lie in [1, gamma + 1] = [1, {g + 1}], got {tokens_per_round!r}")
    if g == 0 or y == 1.0:
        return 0.0
    if y == g + 1.0:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        if float(theory.expected_tokens(mid, g)) < y:
            low = mid
        else:
            high = mid
    return (low + high) / 2


# --------------------------------------------------------------------------- a server's step, all terms together

@dataclass(frozen=True)
class ServingPrediction:
    """The extended roofline's forecast for one setting (see :func:`serving_predict`).

    plain_step_s, verify_step_s, draft_step_s:  seconds of one plain step, one verify step over
                     gamma + 1 positions per row, one draft step (0 for a drafter priced by ``c``)
    verify_cost:     v_B(gamma + 1) = verify_step_s / plain_step_s
    draft_cost:      c_B = draft_step_s / plain_step_s (or the fixed c)
    tokens_per_round: E(alpha, gamma), or new_tokens / E[max_i R_i] for a batch that waits for its slowest row
    speedup:         tokens_per_round / (gamma c_B + v_B(gamma + 1))
    """

    batch: int
    gamma: int
    alpha: float
    context: float
    plain_step_s: float
    verify_step_s: float
    draft_step_s: float
    verify_cost: float
    draft_cost: float
    tokens_per_round: float
    speedup: float
    plain_tokens_per_s: float
    plain_ms_per_token: float
    spec_tokens_per_s: float
    spec_ms_per_token: float


def serving_predict(hw: str | Hardware, dtype: str, batch, gamma, alpha, target: ModelShape, *, context=0,
                    draft: ModelShape | float = 0.0, kv_reads: str = "once", attention_flops: bool = True,
                    compute_efficiency=1.0, bandwidth_efficiency=1.0, new_tokens=None) -> ServingPrediction:
    """Speculation against plain decoding at ``batch`` rows, with the terms the plain roofline leaves out.

    * ``context``: cached tokens per row; each step reads the target's KV cache
      (``target.kv_bytes_per_row``) and, with ``attention_flops``, computes attention over it;
      ``kv_reads`` says whether a verify pass reads it once per row or once per position.
    * ``draft``: a number is a fixed draft cost c (a fraction of the plain step, as in
      :func:`predict`); a :class:`ModelShape` is a draft model whose own step, weights and KV cache
      at the same context, is priced by the same roofline, so c_B grows with the batch.
    * ``compute_efficiency``, ``bandwidth_efficiency``: the fractions of the datasheet's peak
      FLOP/s and bandwidth the kernels reach.
    * ``new_tokens``: None prices a round at E(alpha, gamma) tokens per row (every row is replaced
      as soon as it finishes, continuous batching); a number prices a static batch of ``batch``
      rows with that many new tokens each, which runs until its slowest row is done
      (:func:`slowest_row_yield`).

    With every keyword at its default and ``target.params`` = params this equals :func:`predict`.
    """
    if not isinstance(target, ModelShape):
        raise ValueError(f"target must be a ModelShape, got {target!r}")
    nbytes = _dtype_bytes(dtype)
    a, g, b = _alpha(alpha), _int(gamma, "gamma", 0), _int(batch, "batch", 1)
    ctx = _nonneg(context, "context")
    if not isinstance(attention_flops, bool):
        raise ValueError(f"attention_flops must be True or False, got {attention_flops!r}")
    common = dict(compute_efficiency=compute_efficiency, bandwidth_efficiency=bandwidth_efficiency)

    def step(model: ModelShape, positions: int, reads: str) -> float:
        return serving_step_time(hw, dtype, b, positions, model.params, nbytes,
                                 kv_bytes_per_row=model.kv_bytes_per_row(ctx, nbytes),
                                 attention_flops_per_position=model.attention_flops_per_position(ctx)
                                 if attention_flops else 0.0, kv_reads=reads, **common)

    t_plain = step(target, 1, "once")
    t_verify = step(target, g + 1, kv_reads)
    if isinstance(draft, ModelShape):
        t_draft = step(draft, 1, "once")
        c_b = t_draft / t_plain
    elif isinstance(draft, bool) or not isinstance(draft, (int, float)):
        raise ValueError(f"draft must be a ModelShape or a draft cost c >= 0, got {draft!r}")
    else:
        c_b, t_draft = _nonneg(draft, "draft"), 0.0
    if new_tokens is None:
        tokens = float(theory.expected_tokens(a, g))
    else:
        tokens = slowest_row_yield([a] * b, g, new_tokens)
    t_round = g * c_b * t_plain + t_verify
    return ServingPrediction(
        batch=b, gamma=g, alpha=a, context=ctx, plain_step_s=t_plain, verify_step_s=t_verify,
        draft_step_s=t_draft, verify_cost=t_verify / t_plain, draft_cost=c_b, tokens_per_round=tokens,
        speedup=tokens * t_plain / t_round, plain_tokens_per_s=b / t_plain, plain_ms_per_token=1e3 * t_plain,
        spec_tokens_per_s=b * tokens / t_round, spec_ms_per_token=1e3 * t_round / tokens)


def serving_crossover(hw: str | Hardware, dtype: str, gamma, alpha, target: ModelShape,
                      batch_sizes: Iterable[int], **terms) -> int | None:
    """Smallest batch in ``batch_sizes`` at which :func:`serving_predict` (with the same ``terms``)
    puts speculation below plain decoding; None if it never does among them."""
    for b in sorted(set(_ints(batch_sizes, "batch_sizes", 1))):
        if serving_predict(hw, dtype, b, gamma, alpha, target, **terms).speedup < 1.0:
            return b
    return None
