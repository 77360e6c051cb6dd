"""A compiled pass built ahead of time: ``torch.export`` then AOTInductor, called as one C++ function.

:class:`~specbook.models.compiled.CompiledTarget` runs its passes through ``torch.compile``: each call
first checks the graph's guards (one per input: 61 tensors for SmolLM2's 30 layers) and then runs
inductor's Python wrapper, which calls the matrix-product kernels one by one from Python.  With
``CompiledTarget(..., ahead_of_time=True)`` a width is instead exported once (``torch.export``: the same
:class:`~specbook.models.compiled.CompiledPass`, its kernels fixed, the attention span S the one dynamic
size) and compiled by AOTInductor into a package whose runner is C++ from the first operation to the
last.  It is the same graph, code generated anew: with the library's kernels in bfloat16 the logits were the
``torch.compile`` pass's bit for bit; the tests' tiny float32 model differs by a rounding step (about 1e-5).
Measured on a 2-core AMD EPYC (avx512_bf16, no AMX), SmolLM2-135M in bfloat16, one token after 128
cached, the library's product kernels: 10.2-11.3 ms a call through ``torch.compile`` against 7.8-9.5 ms
through the runner, in the same process (docs/bench.md, "Compiled ahead of time").

Nothing is cached between processes: each package is written to a scratch directory, loaded, and the
file deleted (the loaded runner keeps what it needs); compiling takes about as long as ``torch.compile``'s
first pass (40-70 s a width for SmolLM2-135M on 2 cores), and each package holds its own copy of the weights.
"""
from __future__ import annotations

import os
import tempfile

import torch
from torch import nn


class FixedKernels(nn.Module):
    """A :class:`~specbook.models.compiled.CompiledPass` with its ``kernels`` argument fixed (export
    takes tensors only)."""

    def __init__(self, compiled_pass: nn.Module, kernels: str):
        super().__init__()
        self.compiled_pass, self.kernels = compiled_pass, kernels

    def forward(self, tokens, positions, slots, k_cache, v_cache, visible):
        return self.compiled_pass(tokens, positions, slots, k_cache, v_cache, visible, self.kernels)


def compile_ahead(compiled_pass: nn.Module, kernels: str, inductor_configs: dict, example: tuple,
                  max_span: int | None):
    """Export ``compiled_pass`` on ``example`` = (tokens, positions, slots, k_cache, v_cache, visible), as
    :meth:`CompiledPass.forward` takes them, and compile it with AOTInductor under ``inductor_configs``;
    ``max_span``: the attention span S is dynamic from 2 to this many slots (None: fixed at the example's).
    Returns the loaded runner, called with the same six arguments (k_cache and v_cache as lists)."""
    tokens, positions, slots, keys, values, visible = example
    dynamic = None
    if max_span is not None:
        span = torch.export.Dim("S", min=2, max=max_span)
        dynamic = {"tokens": None, "positions": None, "slots": None, "k_cache": [{2: span}] * len(keys),
                   "v_cache": [{2: span}] * len(values), "visible": {3: span}}
    with torch.no_grad():  # the cache's views were made without autograd, and the pass writes into them
        program = torch.export.export(FixedKernels(compiled_pass, kernels).eval(),
                                      (tokens, positions, slots, list(keys), list(values), visible),
                                      dynamic_shapes=dynamic)
    with tempfile.TemporaryDirectory(prefix="specbook-aot-") as scratch:
        path = torch._inductor.aoti_compile_and_package(program, package_path=os.path.join(scratch, "pass.pt2"),
                                                        inductor_configs=inductor_configs)
        return torch._inductor.aoti_load_package(path)
