"""Benchmarking: the command line, the drafter registry, the engines, workloads and every stopwatch.

Layer 3 (it may import the core, models/, drafters/ and train/; nothing below imports it).

* :mod:`~specbook.bench.cli`: ``python -m specbook bench`` (drafters x engines x workloads).
* :mod:`~specbook.bench.registry`: drafters by name (``DRAFTERS``, ``get_drafter``, ``register_drafter``)
  and their factories.
* :mod:`~specbook.bench.engines`: specbook's loop and transformers' ``generate``, one run each.
* :mod:`~specbook.bench.workloads`: the benchmark prompts by category.
* :mod:`~specbook.bench.timing`: the one verify-cost curve v(n), draft costs c, the interleaved timer.
* :mod:`~specbook.bench.measure`: alpha, c, v and the speedup theory predicts, against the stopwatch.
* :mod:`~specbook.bench.heads_eval`: the shipped Medusa and EAGLE heads (tau, speed, tree sizes).
* :mod:`~specbook.bench.exit_layers`: layer-skip drafting, alpha(L) and c(L) per exit layer.
* :mod:`~specbook.bench.crosscheck`, :mod:`~specbook.bench.gpu_check`: equivalence checks on a GPU.
"""
from .. import _lazy_submodules

__getattr__, __dir__ = _lazy_submodules(globals())  # every submodule resolves on first use
