"""What the plain roofline leaves out, one keyword each: lesson 6's third part.

The plain roofline (:mod:`specbook.roofline.plain`) prices a step by its weights alone and lets
the draft cost a fixed fraction c of a plain step.  A server also reads every row's KV cache,
runs a draft whose own step grows with the batch, waits for the rows that accept least, and
reaches a fraction of the datasheet peaks.  :func:`serving_predict` adds each of these as one
keyword, zero or one by default, so that with all of them off the numbers are the plain
roofline's: the KV cache as its own kernel (read once per row or once per position:
:func:`serving_step_time`), a draft priced as a decoder of its own (:class:`ModelShape`), a
static batch that waits for its slowest row (the exact law of the rounds a row needs, in
:mod:`specbook.roofline.slowest_row`), and kernels that reach a share of the peaks.
:func:`serving_crossover` finds where speculation then loses, and :func:`ridge_batch` where the
verify step reaches the ridge, a different batch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from .. import theory
from ._checks import _alpha, _fraction, _int, _ints, _nonneg, _positive
from .hardware import Hardware, _dtype_bytes, preset
from .plain import _step_flops_bytes, ridge
from .slowest_row import slowest_row_yield

__all__ = ["KV_READS", "ModelShape", "MODELS", "ridge_batch", "serving_step_time", "ServingPrediction",
           "serving_predict", "serving_crossover"]

#: How a verify pass reads a row's KV cache: once for all its gamma + 1 queries (a multi-query
#: attention kernel), or once per query (the pass run as gamma + 1 one-query rows).
KV_READS = ("once", "per_position")


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
