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
  joins the weights in one max; :func:`specbook.roofline.serving.serving_step_time` prices
  attention as the kernel of its own that it is.

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

The hardware this prices lives in :mod:`specbook.roofline.hardware`; the terms the plain
roofline leaves out (the KV cache as its own kernel, a draft model's own step, the slowest row)
in :mod:`specbook.roofline.serving` and :mod:`specbook.roofline.slowest_row`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .. import theory
from ._checks import _alpha, _int, _ints, _nonneg, _positive
from .hardware import Hardware, _dtype_bytes, preset

__all__ = [
    "Prediction", "step_intensity", "ridge", "ridge_fraction", "step_time", "roofline_rows", "verify_time_ratio",
    "plain_throughput", "speculative_throughput", "predict", "predicted_crossover",
]


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
