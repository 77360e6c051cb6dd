"""The CPU matrix-product path of every projection: ``nn.Linear`` plus a transposed copy of W.

Shape legend: R rows multiplied at once (B * N), I input width, O output width.

Speculative decoding verifies gamma + 1 (or a tree's N) positions in one target pass, and
pays off only if that pass costs about as much as a one-position pass (the verify cost
v(N) of :func:`specbook.theory.speedup`; Leviathan et al. 2023, sec. 3.4).  On a CPU that
depends on how the BLAS multiplies a handful of rows, which is what this file is about.
"""
from __future__ import annotations

import torch
from torch import nn


class Linear(nn.Linear):
    """``nn.Linear`` that keeps a second, transposed copy of W for short multi-row inputs.

    Why: speculative decoding runs the target on gamma + 1 (or a tree's N) positions at a
    time, and its speed hinges on that pass costing about as much as a one-position pass
    (the verify cost v(N) of :func:`specbook.theory.speedup`).  With the weight stored
    (out, in), as ``nn.Linear`` does, the CPU BLAS (MKL) streams W once for 1-3 rows but
    switches to a packing kernel from 4 rows on.  Measured on SmolLM2-135M, a 2-core x86
    CPU, 2 threads, one forward after a 96-token context: v(4) = 1.69 and v(5) = 1.75 with
    ``nn.Linear``; with ``x @ W^T`` and W^T stored (in, out), 1.35 and 1.46 (and v(9) 2.22
    -> 1.90).  For 1-3 rows and for long prefills the usual layout is as fast or faster.

    One row (plain decoding) gains too: measured single-threaded on a 2-core AMD EPYC, in
    CPU time, the 49152 x 576 LM head read its weight at 18 GB/s through ``nn.Linear`` and
    at 27 GB/s as ``x @ W^T`` (an MLP matrix: 18 -> 22 GB/s).  In bfloat16 the opposite
    holds (LM head: 16 GB/s through ``nn.Linear``, 7.5 GB/s as ``x @ W^T``; a few rows
    likewise), so the transposed copy is used in float32 only.

    So: on the CPU, in float32, without autograd, for 1 <= rows <= 64, use the transposed
    copy; it is built on first use and rebuilt whenever the weight changes (loading,
    training, moving to another device or dtype).  Results equal ``nn.Linear``'s up to
    float rounding (the products are summed in another order: up to 9e-5 on SmolLM2's
    logits, which reach ~30).  Costs one more copy of the weights in memory.
    ``Linear.FAST_ROWS = None`` switches the path off everywhere (``nn.Linear``'s kernels,
    bit for bit).
    """

    FAST_ROWS = (1, 64)
    FAST_DTYPES = (torch.float32,)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._wt: torch.Tensor | None = None
        self._wt_key: tuple | None = None

    def _transposed(self) -> torch.Tensor:
        w = self.weight
        key = (w.data_ptr(), w._version, w.dtype, w.device)
        if self._wt_key != key:
            self._wt = w.detach().t().contiguous()  # (in, out)
            self._wt_key = key
        return self._wt

    @classmethod
    def frozen(cls, weight: torch.Tensor) -> "Linear":
        """A bias-free Linear over a copy of ``weight`` (out, in) that is never trained (a draft head
        reusing rows of the target's LM head)."""
        lin = cls(weight.shape[1], weight.shape[0], bias=False, device="meta")  # no throwaway random init
        lin.weight = nn.Parameter(weight.detach().clone(), requires_grad=False)
        return lin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
        if (self.FAST_ROWS is not None and x.device.type == "cpu" and self.FAST_ROWS[0] <= rows <= self.FAST_ROWS[1]
                and x.dtype in self.FAST_DTYPES
                and not (torch.is_grad_enabled() and (self.weight.requires_grad or x.requires_grad))):
            y = x @ self._transposed()
            return y if self.bias is None else y + self.bias
        return super().forward(x)
