"""The roofline of one decode step, and what a server adds to it: why batching and speculation
draw on one pool of arithmetic (lesson 1's table, lesson 6's predictions).

* :mod:`~specbook.roofline.hardware`     the machines: peak flop/s per dtype and bandwidth, cited presets
* :mod:`~specbook.roofline.plain`        one step's time, max(FLOPs / peak, bytes / bandwidth); the
  ridge, lesson 1's rows and verify cost, throughput with and without speculation, the crossover
* :mod:`~specbook.roofline.serving`      the terms the plain roofline leaves out (KV cache, a draft
  model's own step, kernel efficiencies), the ridge batch, the serving crossover
* :mod:`~specbook.roofline.slowest_row`  the rounds one row needs, the slowest row of a static batch

Every public name is re-exported here (``specbook.roofline.serving_predict``).  Everything is
pure arithmetic on Python floats; bad input raises ``ValueError`` naming the argument and the value.
"""
from .. import _lazy_submodules
from .hardware import DTYPE_BYTES, PRESETS, Hardware, preset
from .plain import (Prediction, _step_flops_bytes, plain_throughput, predict, predicted_crossover, ridge,  # noqa: F401
                    ridge_fraction, roofline_rows, speculative_throughput, step_intensity, step_time,
                    verify_time_ratio)
from .serving import (KV_READS, MODELS, ModelShape, ServingPrediction, ridge_batch, serving_crossover,
                      serving_predict, serving_step_time)
from .slowest_row import alpha_for_yield, expected_slowest_rounds, rounds_needed_cdf, slowest_row_yield

# _step_flops_bytes is imported for the own-work check of an assignment, which names it.
__all__ = [
    "DTYPE_BYTES", "Hardware", "PRESETS", "Prediction", "preset",
    "step_intensity", "ridge", "ridge_fraction", "step_time", "roofline_rows", "verify_time_ratio",
    "plain_throughput", "speculative_throughput", "predict", "predicted_crossover",
    "KV_READS", "ModelShape", "MODELS", "ridge_batch", "serving_step_time", "rounds_needed_cdf",
    "expected_slowest_rounds", "slowest_row_yield", "alpha_for_yield", "ServingPrediction", "serving_predict",
    "serving_crossover",
]

__getattr__, __dir__ = _lazy_submodules(globals())  # every submodule resolves on first use
