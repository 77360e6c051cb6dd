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
from torch.utils import _pytree as pytree


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
    Returns the loaded :class:`Runner`, called with the same six arguments (k_cache and v_cache as lists)."""
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
        return Runner(torch._inductor.aoti_load_package(path))


class Runner:
    """A loaded package called with the pass's six arguments, its tensors handed to the C++ runner as one list.

    The package's own ``__call__`` reads its input and output specs back from text and flattens the
    arguments generically on every call: 0.12 ms of a 9 ms bfloat16 step on a 2-core AMD EPYC.  Here the
    output spec is read once and the inputs listed in the order export flattened them."""

    def __init__(self, package):
        self.package = package
        self.loader = getattr(package, "loader", None)  # torch's AOTICompiledModel; else call the package itself
        self.out_spec = pytree.treespec_loads(self.loader.get_call_spec()[1]) if self.loader is not None else None

    def __call__(self, tokens, positions, slots, k_cache, v_cache, visible):
        if self.loader is None:
            return self.package(tokens, positions, slots, list(k_cache), list(v_cache), visible)
        flat = self.loader.boxed_run([tokens, positions, slots, *k_cache, *v_cache, visible])
        return pytree.tree_unflatten(flat, self.out_spec)
