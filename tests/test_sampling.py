import math

import pytest
import torch

from specbook.sampling import GREEDY, SamplingParams, logits_to_probs, sample


def test_plain_softmax():
    logits = torch.tensor([[1.0, 2.0, 3.0]])
    assert torch.allclose(logits_to_probs(logits), logits.softmax(-1))


def test_temperature_zero_is_one_hot_argmax_first_tie():
    probs = logits_to_probs(torch.tensor([0.5, 2.0, 2.0, -1.0]), GREEDY)
    assert probs.tolist() == [0.0, 1.0, 0.0, 0.0]


def test_temperature_scales_logits():
    logits = torch.tensor([0.0, 1.0, 3.0])
    assert torch.allclose(logits_to_probs(logits, SamplingParams(temperature=0.5)), (logits / 0.5).softmax(-1))


def test_top_k_keeps_k_and_ties():
    logits = torch.tensor([1.0, 3.0, 2.0, 0.0])
    p = logits_to_probs(logits, SamplingParams(top_k=2))
    assert (p > 0).tolist() == [False, True, True, False]
    assert torch.allclose(p[[1, 2]], torch.tensor([3.0, 2.0]).softmax(-1))
    p = logits_to_probs(torch.tensor([1.0, 2.0, 2.0, 0.0]), SamplingParams(top_k=1))
    assert (p > 0).tolist() == [False, True, True, False]  # ties at the threshold are all kept


def test_top_p_smallest_set_reaching_mass():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    out = logits_to_probs(probs.log(), SamplingParams(top_p=0.79))
    assert torch.allclose(out, torch.tensor([0.625, 0.375, 0, 0], dtype=torch.float64))
    out = logits_to_probs(probs.log(), SamplingParams(top_p=0.81))
    assert (out > 0).sum() == 3
    out = logits_to_probs(probs.log(), SamplingParams(top_p=0.1))
    assert out.tolist() == [1.0, 0.0, 0.0, 0.0]


def test_same_function_for_any_leading_shape():
    logits = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(0))
    params = SamplingParams(temperature=0.7, top_k=4, top_p=0.9)
    batched = logits_to_probs(logits, params)
    for i in range(2):
        for j in range(3):
            assert torch.allclose(batched[i, j], logits_to_probs(logits[i, j], params))
    assert torch.allclose(batched.sum(-1), torch.ones(2, 3))


def test_minus_inf_logits_allowed_and_half_inputs_upcast():
    p = logits_to_probs(torch.tensor([0.0, -math.inf, 1.0], dtype=torch.float16))
    assert p.dtype == torch.float32 and p[1] == 0


@pytest.mark.parametrize(
    "kwargs, word",
    [({"temperature": -0.1}, "temperature"), ({"temperature": math.nan}, "temperature"), ({"top_k": -1}, "top_k"),
     ({"top_k": 2.5}, "top_k"), ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p")],
)
def test_bad_params(kwargs, word):
    with pytest.raises(ValueError, match=word):
        SamplingParams(**kwargs)


def test_bad_logits():
    with pytest.raises(ValueError, match="NaN"):
        logits_to_probs(torch.tensor([0.0, math.nan]))
    with pytest.raises(ValueError, match="-inf"):
        logits_to_probs(torch.tensor([-math.inf, -math.inf]))


def test_sample_uses_generator():
    probs = torch.full((1000, 5), 0.2)
    a = sample(probs, torch.Generator().manual_seed(3))
    b = sample(probs, torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and a.shape == (1000,)
