"""The CPU matrix-product path of every projection: ``nn.Linear`` plus a prepacked copy of W.

Shape legend: R rows multiplied at once (B * N), I input width, O output width.

Speculative decoding verifies gamma + 1 (or a tree's N) positions in one target pass, and
pays off only if that pass costs about as much as a one-position pass (the verify cost
v(N) of :func:`specbook.theory.speedup`; Leviathan et al. 2023, sec. 3.4).  Plain decoding,
one row at a time, is bound by how fast the weights stream from memory (the roofline;
Williams, Waterman & Patterson 2009).  On a CPU both depend on the kernel that multiplies a
handful of rows by a weight matrix, which is what this file is about.
"""
from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import nn


@lru_cache(maxsize=None)
def packed_kernels_available(dtype: torch.dtype = torch.float32) -> bool:
    """True when this torch build has oneDNN's prepacked linear (x86 builds do) for ``dtype`` on
    this CPU, checked once per dtype by running it on a tiny matrix against ``F.linear``.
    oneDNN packs bfloat16 only on CPUs with AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT: on an
    AVX2-only CPU bfloat16 products take ``F.linear``."""
    try:
        if not torch.backends.mkldnn.is_available():
            return False
        w, x = torch.randn(8, 4).to(dtype), torch.randn(3, 4).to(dtype)
        with torch.no_grad():
            y = torch.ops.mkldnn._linear_pointwise(x, torch.ops.mkldnn._reorder_linear_weight(w, 1),
                                                  None, "none", [], "")
        return bool(torch.allclose(y.float(), F.linear(x, w).float(), atol=1e-2))
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


class Linear(nn.Linear):
    """``nn.Linear`` that, on the CPU without autograd, multiplies by a prepacked copy of W.

    Why: ``nn.Linear`` hands a few rows to a general matrix-multiply routine that repacks the
    weight into its own blocked layout on every call, or to a matrix-vector loop that does
    not keep the memory bus busy.  oneDNN (the library behind torch's CPU convolution and
    linear kernels) can pack W into its blocked layout *once*; multiplying then streams the
    packed weight straight through.  torch's own compiler uses the same two operators
    (``torch.ops.mkldnn._reorder_linear_weight`` once, ``torch.ops.mkldnn._linear_pointwise``
    per call) when it freezes a model's weights.

    Measured on a 2-core AMD EPYC (avx512_bf16, no AMX), torch 2.13, 2 threads, weights read
    from memory (not cache), time per product:

    ==========================  ======  =============  ==============
    matrix, dtype, rows         linear  ``x @ W^T``    packed (this)
    ==========================  ======  =============  ==============
    49152 x 576 bf16, 1 row     2.0 ms  3.9 ms         1.3 ms (42 GB/s)
    49152 x 576 bf16, 17 rows   2.9 ms  4.8 ms         2.0 ms
    3072 x 576 bf16, 1 row      144 us  201 us         93 us
    49152 x 576 f32, 1 row      6.7 ms  4.2 ms         3.0 ms (40 GB/s)
    49152 x 576 f32, 17 rows    14.1 ms 13.0 ms        5.3 ms
    3072 x 576 f32, 17 rows     663 us  748 us         316 us
    ==========================  ======  =============  ==============

    So one row reads its weight at about the speed of the memory bus (a plain buffer sum
    reads 43 GB/s here), and 17 rows cost 1.5x one row instead of 2-3x: a flatter verify
    cost curve.  Long prefills (128-512 rows) are as fast or faster too.

    The packed copy is built on first use and rebuilt whenever the weight changes (loading,
    training, moving to another device or dtype); it is never saved in the state dict and
    costs one more copy of the weights in memory.  Results equal ``nn.Linear``'s up to
    float rounding (the same products summed in another order: about 1e-4 on float32 logits
    of size 30).  With autograd on, on other devices, in float16, or where this torch build
    lacks the operators (:func:`packed_kernels_available`), it is ``nn.Linear``.
    ``Linear.PACKED = False`` switches the path off everywhere (``nn.Linear``'s kernels, bit
    for bit).

    **A row multiplied alone gives the bits it gets among others** when ``one_row_as_two`` is
    set (bfloat16 only; :meth:`specbook.models.llama.LlamaModel.batch_invariant` sets it).
    oneDNN multiplies one row with its own matrix-vector kernel and two or more with its
    matrix-matrix kernel.  On the machine above, in bfloat16, the two sum the products of
    an input wider than 1024 (the MLP's down projection, K = 1536) in different orders, and
    rounding the float32 sums to 8 bits of mantissa then differs by one step in about 5 of 64
    rows.  Every other shape, and every row count from 2 to 128, gave identical rows.  With
    the flag, a one-row product whose shape :func:`one_row_kernel_differs` flags runs as the
    row twice and keeps the first output, so plain decoding multiplies its row exactly as a
    5-token verify pass or a 64-node tree does.  Cost there: 1.03x the time of a bfloat16
    decode step (30 down projections).  In float32 the one-row kernel differs for every
    shape, by about 1e-7 relative; padding every product would cost 1.3x, so the flag leaves
    float32 alone.
    """

    PACKED = True
    PACKED_DTYPES = (torch.float32, torch.bfloat16)
    one_row_as_two = False  # per layer; see the class docstring
    ONE_ROW_AS_TWO_DTYPES = (torch.bfloat16,)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._packed_w: torch.Tensor | None = None
        self._packed_key: tuple | None = None

    def _packed(self) -> torch.Tensor:
        w = self.weight
        key = (w.data_ptr(), w._version, w.dtype, w.device, tuple(w.shape))
        if self._packed_key != key:
            with torch.no_grad():
                self._packed_w = torch.ops.mkldnn._reorder_linear_weight(w.detach(), 1)  # (O, I) blocked
            self._packed_key = key
        return self._packed_w

    def _use_packed(self, x: torch.Tensor) -> bool:
        return (self.PACKED and x.device.type == "cpu" and x.dtype in self.PACKED_DTYPES
                and x.dtype == self.weight.dtype and x.numel() > 0
                and not (torch.is_grad_enabled() and (self.weight.requires_grad or x.requires_grad))
                and packed_kernels_available(x.dtype))

    def __getstate__(self):
        """Copies and pickles leave the packed copy behind (an opaque oneDNN tensor has no
        storage to copy); it is rebuilt on first use."""
        state = dict(self.__dict__)
        state["_packed_w"] = state["_packed_key"] = None
        return state

    @classmethod
    def frozen(cls, weight: torch.Tensor) -> "Linear":
        """A bias-free Linear over a copy of ``weight`` (out, in) that is never trained (a draft head
        reusing rows of the target's LM head)."""
        lin = cls(weight.shape[1], weight.shape[0], bias=False, device="meta")  # no throwaway random init
        lin.weight = nn.Parameter(weight.detach().clone(), requires_grad=False)
        return lin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self._use_packed(x):
            return super().forward(x)
        packed, bias = self._packed(), None if self.bias is None else self.bias.detach()
        if x.numel() == self.in_features and self.one_row_as_two and x.dtype in self.ONE_ROW_AS_TWO_DTYPES \
                and one_row_kernel_differs(packed, bias, self.in_features, x.dtype):
            row = x.reshape(1, self.in_features)
            y = _packed_product(torch.cat((row, row)), packed, bias)[:1]  # (1, O): the several-row kernel
            return y.reshape(*x.shape[:-1], self.out_features)
        return _packed_product(x, packed, bias)  # (..., O)


def _packed_product(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


PROBE_ROWS = 64
_ONE_ROW_DIFFERS: dict[tuple, bool] = {}


@torch.no_grad()
def one_row_kernel_differs(packed: torch.Tensor, bias: torch.Tensor | None, in_features: int,
                           dtype: torch.dtype) -> bool:
    """Whether multiplying one row by this packed weight gives other bits than multiplying the
    same row among others (see :class:`Linear`).

    Measured once per (output width, input width, bias, dtype) on this machine: ``PROBE_ROWS``
    random rows multiplied all at once and one at a time.  The kernel oneDNN picks depends on
    the shapes, not on the values, so the answer holds for every weight of that shape."""
    key = (packed.shape, in_features, bias is not None, dtype)
    if key not in _ONE_ROW_DIFFERS:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(PROBE_ROWS, in_features, generator=g).to(dtype)  # (P, I)
        together = _packed_product(x, packed, bias)  # (P, O)
        alone = torch.cat([_packed_product(x[i:i + 1], packed, bias) for i in range(PROBE_ROWS)])
        _ONE_ROW_DIFFERS[key] = not torch.equal(together, alone)
    return _ONE_ROW_DIFFERS[key]
