"""The target's own low-bit copy as a drafter (specbook/drafters/lowbit.py), on tiny random Llamas.

* the quantised layer: its output is within the rounding bound of the float layer (int8: each
  weight off by at most half its channel's step s_o = max|W_o| / 127; int4: half its group's
  step (max - min) / 15), through the fused kernel and through the dequantise-and-multiply
  fallback, and the two paths agree;
* the copy: every nn.Linear quantised, the embedding and norms shared, the target untouched;
* the drafter is lossless: greedy speculative output equals plain decoding token for token, and
  the first two sampled tokens follow the target's exact law (one chi-square test);
* bad arguments raise a ValueError naming them.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from specbook.decode import generate, speculative_generate
from specbook.drafters import DraftModelDrafter
from specbook.drafters.lowbit import QuantLinear, fused_kernel_available, fused_max_rows, lowbit_copy, lowbit_drafter
from specbook.models import LlamaConfig, LlamaModel, LlamaTarget
from specbook.models.linear import Linear
from specbook.sampling import GREEDY, SamplingParams, logits_to_probs
from support import check_fit, refuses

TINY = LlamaConfig(vocab_size=97, dim=64, n_layers=4, n_heads=4, n_kv_heads=2, intermediate_size=96,
                   max_position_embeddings=256, rope_theta=500.0, tie_embeddings=True)


def tiny_model(seed=0, std=0.3, config=TINY):
    return LlamaModel(config).init_weights(std=std, generator=torch.Generator().manual_seed(seed)).eval()


def float_layer(out_features=48, in_features=64, bias=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    lin = nn.Linear(in_features, out_features, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(out_features, in_features, generator=g))
        if bias:
            lin.bias.copy_(torch.randn(out_features, generator=g))
    return lin.requires_grad_(False)


def rounding_bound(lin: nn.Linear, x: torch.Tensor, bits: int, group_size: int = 32) -> torch.Tensor:
    """(R, O): the largest |y_quantised - y_float| rounding to nearest allows, sum_i |x_i| step_oi / 2."""
    w = lin.weight.float()
    O, I = w.shape
    if bits == 8:
        step = (w.abs().amax(1) / 127)[:, None].expand(O, I)  # (O, I)
    else:
        g = w.view(O, I // group_size, group_size)
        step = ((g.amax(-1) - g.amin(-1)) / 15)[..., None].expand_as(g).reshape(O, I)
    return x.abs().float() @ (step / 2).t()


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: a tiny model gains nothing from two, and on a busy machine they wait for each
    other at every op (about 8x slower here at a load of 8 on 2 cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def fallback():
    """Force the dequantise-and-multiply path for the test's duration."""
    QuantLinear.FUSED = False
    yield
    QuantLinear.FUSED = True


# ------------------------------------------------------------------------------ the quantised layer

@pytest.mark.parametrize("bits, op", [(8, "_weight_int8pack_mm"), (4, "_weight_int4pack_mm_for_cpu")])
def test_the_fused_kernel_is_used_wherever_torch_has_it(bits, op):
    """Its self-check (the kernel against dequantise-and-multiply on a tiny matrix) must pass where the op exists."""
    if not hasattr(torch.ops.aten, op):
        pytest.skip(f"this torch build has no aten.{op}")
    assert fused_kernel_available(bits)
    assert QuantLinear(float_layer(), bits).uses_fused_kernel(torch.randn(2, 64))


@pytest.mark.parametrize("path", ["fused", "fallback"])
@pytest.mark.parametrize("bits", [8, 4])
def test_quantised_linear_is_within_the_rounding_bound_of_the_float_one(bits, path, request):
    if path == "fallback":
        request.getfixturevalue("fallback")
    elif not fused_kernel_available(bits):
        pytest.skip(f"this torch build has no fused int{bits} CPU kernel")
    lin = float_layer()
    layer = QuantLinear(lin, bits)
    x = torch.randn(2, 1, 64, generator=torch.Generator().manual_seed(1))  # (B, N, I): two decode rows
    assert layer.uses_fused_kernel(x.view(-1, 64)) == (path == "fused")
    with torch.no_grad():
        got, want = layer(x), lin(x)
    assert got.shape == want.shape == (2, 1, 48)
    bound = rounding_bound(lin, x.view(-1, 64), bits).view(2, 1, 48)
    excess = (got - want).abs() - bound
    assert excess.max() <= 1e-4, f"int{bits} {path}: beyond the rounding bound by {excess.max():.3g}"
    # not trivially so: rounding moved the output by a visible fraction of the bound
    assert (got - want).abs().max() > 0.05 * bound.max()


@pytest.mark.parametrize("bits", [8, 4])
def test_fused_kernel_equals_dequantise_and_multiply(bits):
    if not fused_kernel_available(bits):
        pytest.skip(f"this torch build has no fused int{bits} CPU kernel")
    x = torch.randn(7, 64, generator=torch.Generator().manual_seed(2))
    for dtype, tol in ((torch.float32, 1e-4), (torch.bfloat16, 0.1)):
        layer = QuantLinear(float_layer(), bits).to(dtype)
        x = x[:fused_max_rows(bits, dtype)]
        assert layer.uses_fused_kernel(x.to(dtype))
        assert layer.scales.dtype == dtype if bits == 8 else layer.scale_zero.dtype == dtype  # .to() moves the scales
        with torch.no_grad():
            fused = layer(x.to(dtype))
            QuantLinear.FUSED = False
            try:
                plain = layer(x.to(dtype))
            finally:
                QuantLinear.FUSED = True
        assert fused.dtype == plain.dtype == dtype
        torch.testing.assert_close(fused.float(), plain.float(), atol=tol, rtol=1e-2)


def test_dequantised_weights_are_the_stored_integers_times_their_steps():
    lin = float_layer(bias=False)
    q8 = QuantLinear(lin, 8)
    assert q8.qweight.dtype == torch.int8 and q8.qweight.abs().max() == 127
    assert torch.equal(q8.dequantised(), q8.qweight.float() * q8.scales[:, None])
    q4 = QuantLinear(lin, 4, group_size=32)
    assert q4.qweight.shape == (48, 32) and q4.scale_zero.shape == (2, 48, 2)  # two inputs per byte; (G, O, 2)
    w4 = q4.dequantised().view(48, 2, 32)
    lo, hi = lin.weight.view(48, 2, 32).amin(-1), lin.weight.view(48, 2, 32).amax(-1)
    torch.testing.assert_close(w4.amin(-1), lo, atol=1e-5, rtol=0)  # each group's ends are exact levels
    torch.testing.assert_close(w4.amax(-1), hi, atol=1e-5, rtol=0)
    levels = ((w4 - lo[..., None]) / ((hi - lo) / 15)[..., None])
    torch.testing.assert_close(levels, levels.round(), atol=1e-3, rtol=0)  # every weight sits on one of 16 levels


def test_a_prefill_dequantises_once_instead_of_looping_the_kernel_over_its_rows():
    lin = float_layer()
    layer = QuantLinear(lin, 8)
    n = fused_max_rows(8, torch.float32)
    many = torch.randn(n + 1, 64, generator=torch.Generator().manual_seed(4))
    assert not layer.uses_fused_kernel(many)
    assert layer.uses_fused_kernel(many[:n]) == fused_kernel_available(8)
    with torch.no_grad():
        torch.testing.assert_close(layer(many)[:n], layer(many[:n]), atol=1e-4, rtol=1e-4)
        assert ((layer(many) - lin(many)).abs() <= rounding_bound(lin, many, 8) + 1e-4).all()
    assert n < fused_max_rows(8, torch.bfloat16) < fused_max_rows(4, torch.bfloat16)  # int4 dequantises dearer


def test_int4_layer_whose_width_the_kernel_refuses_falls_back():
    """torch's int4 CPU kernel needs the output width to be a multiple of 16; the tiny vocabulary (97) is not."""
    lin = float_layer(out_features=97, bias=False)
    layer = QuantLinear(lin, 4)
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(3))
    assert not layer.uses_fused_kernel(x)
    with torch.no_grad():
        assert ((layer(x) - lin(x)).abs() <= rounding_bound(lin, x, 4) + 1e-4).all()


# ------------------------------------------------------------------------------ the copy

@pytest.mark.parametrize("bits", [8, 4])
def test_lowbit_copy_quantises_every_linear_and_shares_the_rest(bits):
    model = tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    copy = lowbit_copy(model, bits)
    quantised = [m for m in copy.modules() if isinstance(m, QuantLinear)]
    assert len(quantised) == 4 * TINY.n_layers + 1  # qkv, o, gate_up, down per block, and the head
    assert not any(isinstance(m, nn.Linear) for m in copy.modules())
    assert copy.embed.weight.data_ptr() == model.embed.weight.data_ptr()  # shared, not copied
    assert copy.norm.weight.data_ptr() == model.norm.weight.data_ptr()
    assert all(isinstance(m, Linear) for m in (model.lm_head, model.layers[0].attn.wqkv))  # the target is untouched
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert not any(p.requires_grad for p in copy.parameters())
    x = torch.randint(97, (2, 12), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        agree = (copy(x).argmax(-1) == model(x).argmax(-1)).float().mean()
    assert agree > (0.8 if bits == 8 else 0.2), f"int{bits} copy agrees with its target on {agree:.0%} of argmaxes"


@pytest.mark.parametrize("bits", [8, 4])
def test_lowbit_drafter_greedy_equals_autoregressive(bits):
    model = tiny_model()
    target = LlamaTarget(model, max_length=96)
    prompts = torch.randint(97, (3, 6), generator=torch.Generator().manual_seed(4))
    plain = generate(target, prompts, 40, params=GREEDY)
    drafter = lowbit_drafter(target, bits)
    assert isinstance(drafter, DraftModelDrafter) and drafter.model.max_length == 96
    spec = speculative_generate(target, drafter, prompts, 40, params=GREEDY, gamma=4)
    assert torch.equal(spec.tokens, plain.tokens)
    assert spec.stats.draft_passes > 0 and spec.stats.verified > 0
    if bits == 8:  # the target up to rounding: most drafts survive (deterministic seeds)
        assert spec.stats.acceptance_rate > 0.7, spec.stats


def test_lowbit_drafter_runs_in_bfloat16():
    model = tiny_model().to(torch.bfloat16)
    drafter = lowbit_drafter(model, 8, max_length=32)
    draft = drafter.propose([torch.tensor([3, 1, 4, 1, 5])], 3, GREEDY)
    assert draft.tokens.shape == (1, 3) and int(draft.tokens.max()) < 97


def exact_two_token_law(model, prompt, params) -> dict:
    with torch.no_grad():
        p1 = logits_to_probs(model(torch.tensor([prompt]))[0, -1].double(), params)  # (V,)
        V = model.config.vocab_size
        p2 = logits_to_probs(model(torch.tensor([prompt + [x] for x in range(V)]))[:, -1].double(), params)  # (V, V)
    return {(a, b): float(p1[a] * p2[a, b]) for a in range(V) for b in range(V) if p1[a] * p2[a, b] > 0}


def test_first_two_sampled_tokens_follow_the_targets_exact_law():
    """int4 on a 12-token vocabulary: a copy that often disagrees, so the residual resampling is exercised."""
    config = LlamaConfig(vocab_size=12, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, intermediate_size=64,
                         max_position_embeddings=64, rope_theta=500.0)
    model = tiny_model(0, std=0.5, config=config)
    params, prompt = SamplingParams(temperature=0.8), [3, 1, 4]
    target, g = LlamaTarget(model, max_length=16), torch.Generator().manual_seed(20)
    drafter = lowbit_drafter(target, 4)
    observed, accepted, verified = [], 0, 0
    for _ in range(10):
        res = speculative_generate(target, drafter, torch.tensor([prompt] * 200), 2, params=params, gamma=3,
                                   generator=g)
        observed.extend(tuple(r) for r in res.new_tokens.tolist())
        accepted, verified = accepted + res.stats.accepted, verified + res.stats.verified
    assert 0.2 < accepted / verified < 0.98, "the test needs rejections to exercise the residual"
    check_fit("int4 self-draft two-token law", exact_two_token_law(model, prompt, params), observed)


# ------------------------------------------------------------------------------ bad arguments

BAD = [
    ("not a linear layer", lambda: QuantLinear(nn.Conv1d(4, 4, 1)), "linear", "Conv1d"),
    ("bits 3", lambda: QuantLinear(float_layer(), bits=3), "bits", "3"),
    ("bits as text", lambda: QuantLinear(float_layer(), bits="8"), "bits", "'8'"),
    ("group size the kernel lacks", lambda: QuantLinear(float_layer(), bits=4, group_size=48), "group_size", "48"),
    ("group size not dividing the width", lambda: QuantLinear(float_layer(in_features=96), bits=4, group_size=64),
     "group_size", "96"),
    ("copy of a non-Llama", lambda: lowbit_copy(nn.Linear(4, 4)), "model", "Linear"),
    ("copy with bits 2", lambda: lowbit_copy(tiny_model(), bits=2), "bits", "2"),
    ("drafter with bits 16", lambda: lowbit_drafter(tiny_model(), bits=16), "bits", "16"),
]


@pytest.mark.parametrize("call, fragments", [(c, f) for _, c, *f in BAD], ids=[n for n, *_ in BAD])
def test_bad_arguments_are_refused(call, fragments):
    refuses(call, *fragments)
