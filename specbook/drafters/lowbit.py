"""The target's own low-bit copy as its drafter: weight-only int8 (or int4), verified in full precision.

Shape legend: R rows multiplied at once (B * N), I input width, O output width, G groups per row
(I / group_size).

Why it can pay on a CPU.  A batch-1 decode step streams every weight once, so its time is
about weight bytes / memory bandwidth (the roofline; Williams, Waterman & Patterson 2009).  A
copy of the target whose matrices hold int8 streams half the bytes of bfloat16 (a quarter of
float32), int4 a quarter; and since it *is* the target up to rounding, it proposes what the
target would say on most tokens: a high alpha at a draft cost c set by bytes.  Georganas et al.
(2025, "ML-SpecQD", arXiv:2503.13565) draft with an MXFP4 copy of the bfloat16 target on Intel
CPUs, with their own MXFP4 kernel, and report up to 2x (2.72x with a second, smaller draft for the
draft).

Why it stays lossless.  The copy is only a draft model: :class:`DraftModelDrafter` samples from
its distribution q and the full-precision target verifies (Leviathan et al. 2023, Appendix A.1
holds for any q).  Quantisation moves alpha and c, never the output.

The quantised layer, :class:`QuantLinear`, replaces every ``nn.Linear`` of the copy; the
embedding and the norms are the target's own tensors (a lookup reads one row; the norms are
tiny).  Activations stay in the run's dtype; only the weights are rounded:

* int8, per output channel, symmetric: s_o = max_i |W_oi| / 127, q = round(W / s) in [-127, 127],
  W ~ q * s.  torch's fused kernel ``aten._weight_int8pack_mm`` multiplies x by q and scales
  each output by s, without building the float matrix;
* int4, per group of ``group_size`` inputs, asymmetric: lo, hi = the group's min and max,
  s = (hi - lo) / 15, q = round((W - lo) / s) in [0, 15], W ~ (q - 8) s + z with z = lo + 8 s
  (the layout of torch's CPU kernel ``aten._weight_int4pack_mm_for_cpu``, whose packed weight
  ``aten._convert_weight_to_int4pack_for_cpu`` builds once, on first use).

Both kernels loop over the rows one matrix-vector product at a time, so their cost grows with the
rows, while dequantising costs one pass over the weights whatever the rows: the kernels serve decode
steps and short feeds (:func:`fused_max_rows`), and a long prefill dequantises each matrix once, in
the activations' dtype, and multiplies (``F.linear``), as does every layer where a fused kernel is
missing (another device, an old torch, an int4 layer whose output width is not a multiple of 16):
the same weights, another order of summation.  Measured on a 2-core AMD EPYC (avx512_bf16, no
AMX), torch 2.13, 1 thread, load 4-5, the 49152 x 576 LM head, per product:

==================  ==========  ===========  ===========  ==========================
dtype, rows         ``Linear``  int8 kernel  int4 kernel  int8 dequantised, F.linear
==================  ==========  ===========  ===========  ==========================
bfloat16, 1 row     4.5 ms      4.1 ms       1.8 ms       106 ms
bfloat16, 5 rows    4.0 ms      14.5 ms      4.6 ms       112 ms
bfloat16, 300 rows  124 ms      688 ms       333 ms       239 ms
float32, 1 row      9.5 ms      41 ms        76 ms        199 ms
float32, 300 rows   344 ms      15.5 s       24.4 s       597 ms
==================  ==========  ===========  ===========  ==========================

So with bfloat16 activations int4 streams its quarter of the bytes about 2.5x faster than the
prepacked bfloat16 product (``models/linear.py``), while the int8 kernel is no faster than it: the
int8 copy's draft step costs about a target step.  With float32 activations both kernels run
scalar code, several times slower than the float32 product they replace: in a float32 run the
low-bit copy is a slower drafter than the target itself (docs/bench.md, "The target's own
low-bit copy").
"""
from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import nn

from ..models.llama import LlamaModel
from ..models.target import LlamaTarget
from .draft_model import DraftModelDrafter

BITS = (8, 4)
INT4_GROUP_SIZES = (32, 64, 128, 256)  # what torch's int4 kernel accepts


def fused_max_rows(bits: int, dtype: torch.dtype) -> int:
    """Rows up to which a layer uses its fused kernel.  Over a whole SmolLM2-135M copy on the machine of
    the table above (a prompt of T rows, best of 3), dequantise-and-multiply became the cheaper path
    between 16 and 100 rows for int8 in bfloat16, between 192 and 300 for int4 (its dequantising is
    dearer), and between 2 and 4 rows with float32 activations (scalar kernels)."""
    if dtype == torch.float32:
        return 2
    return 16 if bits == 8 else 192


@lru_cache(maxsize=None)
def fused_kernel_available(bits: int) -> bool:
    """True when this torch build has the fused CPU kernel for ``bits`` (checked once on a tiny matrix)."""
    try:
        lin = nn.Linear(64, 16, bias=False)
        x = torch.randn(3, 64)
        layer = QuantLinear(lin, bits)
        with torch.no_grad():
            return bool(torch.allclose(layer._fused(x), layer._dequantised_product(x), atol=1e-3))
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


class QuantLinear(nn.Module):
    """``nn.Linear`` with its weight stored in int8 (per output channel) or int4 (per input group).

    ``QuantLinear.FUSED = False`` switches the fused kernels off everywhere (dequantise-and-multiply)."""

    FUSED = True

    def __init__(self, linear: nn.Linear, bits: int = 8, group_size: int = 32):
        super().__init__()
        if not isinstance(linear, nn.Linear):
            raise ValueError(f"linear must be an nn.Linear, got {type(linear).__name__}")
        if bits not in BITS:
            raise ValueError(f"bits must be 8 or 4, got {bits!r}")
        O, I = linear.weight.shape
        if bits == 4 and (group_size not in INT4_GROUP_SIZES or I % group_size):
            raise ValueError(f"group_size must be one of {INT4_GROUP_SIZES} and divide the input width {I}, "
                             f"got {group_size!r}")
        self.bits, self.group_size, self.in_features, self.out_features = bits, group_size, I, O
        dtype = linear.weight.dtype  # scales live in the weights' dtype and follow .to(dtype)
        w = linear.weight.detach().float()  # (O, I)
        if bits == 8:
            scale = w.abs().amax(1).clamp(min=1e-12) / 127  # (O,)
            self.register_buffer("qweight", torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8))
            self.register_buffer("scales", scale.to(dtype))  # (O,)
        else:
            groups = w.view(O, I // group_size, group_size)  # (O, G, group_size)
            lo, hi = groups.amin(-1), groups.amax(-1)  # (O, G)
            scale = ((hi - lo) / 15).clamp(min=1e-12)
            q = torch.round((groups - lo[..., None]) / scale[..., None]).clamp(0, 15).to(torch.uint8).view(O, I)
            self.register_buffer("qweight", q[:, 0::2] | (q[:, 1::2] << 4))  # (O, I/2): two inputs per byte
            self.register_buffer("scale_zero", torch.stack([scale, lo + 8 * scale], -1).transpose(0, 1)
                                 .contiguous().to(dtype))  # (G, O, 2): torch's int4 layout
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)
        self._int4_packed: torch.Tensor | None = None  # torch's int4 kernel layout, built on first use

    def dequantised(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weight this layer multiplies by, (O, I), computed in ``dtype``."""
        if self.bits == 8:
            return self.qweight.to(dtype) * self.scales.to(dtype)[:, None]
        q = torch.stack([self.qweight & 15, self.qweight >> 4], -1).view(self.out_features, -1, self.group_size)
        scale, zero = (t.contiguous() for t in self.scale_zero.to(dtype).transpose(0, 1).unbind(-1))  # (O, G) each
        lowest = zero - 8 * scale  # the weight q = 0 stands for: W = lowest + q s, one fused pass
        return torch.addcmul(lowest[..., None], q.to(dtype), scale[..., None]).view(self.out_features, self.in_features)

    def _dequantised_product(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.dequantised(x.dtype))  # (R, O)

    def _fused(self, x: torch.Tensor) -> torch.Tensor:
        if self.bits == 8:
            return torch.ops.aten._weight_int8pack_mm(x, self.qweight, self.scales.to(x.dtype))  # (R, O)
        if self._int4_packed is None:
            q = torch.stack([self.qweight & 15, self.qweight >> 4], -1).view(self.out_features, -1)  # (O, I)
            self._int4_packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), 2)
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x, self._int4_packed, self.group_size,
                                                          self.scale_zero.to(x.dtype))  # (R, O)

    def uses_fused_kernel(self, x: torch.Tensor) -> bool:
        """For ``x`` (R, I): a fused kernel exists here, for this layer, and R <= :func:`fused_max_rows`."""
        return (self.FUSED and x.device.type == "cpu" and x.dtype in (torch.float32, torch.bfloat16, torch.float16)
                and x.shape[0] <= fused_max_rows(self.bits, x.dtype)
                and (self.bits == 8 or self.out_features % 16 == 0) and fused_kernel_available(self.bits))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).contiguous()  # (R, I)
        y = self._fused(rows) if self.uses_fused_kernel(rows) else self._dequantised_product(rows)  # (R, O)
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        group = f", group_size={self.group_size}" if self.bits == 4 else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, bits={self.bits}{group}"


def lowbit_copy(model: LlamaModel, bits: int = 8, group_size: int = 32) -> LlamaModel:
    """A ``LlamaModel`` that is ``model`` with every ``nn.Linear`` replaced by a :class:`QuantLinear`.

    The embedding and the norms are ``model``'s own tensors (shared, not copied); the quantised
    matrices are a snapshot taken now.  The copy has the target's interface (wrap it in a
    ``LlamaTarget``), its dtype and device."""
    if not isinstance(model, LlamaModel):
        raise ValueError(f"model must be a LlamaModel, got {type(model).__name__}")
    if bits not in BITS:
        raise ValueError(f"bits must be 8 or 4, got {bits!r}")
    with torch.device("meta"):
        copy = LlamaModel(model.config)  # no throwaway random weights
    copy.load_state_dict(model.state_dict(), assign=True)  # every tensor shared with model
    for parent in list(copy.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, QuantLinear(child, bits, group_size))
    return copy.requires_grad_(False).eval()


def lowbit_drafter(target, bits: int = 8, group_size: int = 32, max_length: int = 2048) -> DraftModelDrafter:
    """A :class:`DraftModelDrafter` around :func:`lowbit_copy` of ``target`` (a ``LlamaTarget``, whose
    ``max_length`` sizes the copy's cache, or a bare ``LlamaModel``)."""
    model = target.model if isinstance(target, LlamaTarget) else target
    length = target.max_length if isinstance(target, LlamaTarget) else max_length
    return DraftModelDrafter(LlamaTarget(lowbit_copy(model, bits, group_size), max_length=length))
