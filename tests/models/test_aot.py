"""Passes compiled ahead of time (CompiledTarget(ahead_of_time=True), specbook.models.aot) against the eager model."""
from __future__ import annotations

import pytest
import torch
from support import greedy

from specbook.drafters.ngram import NGramDrafter
from specbook.models import LlamaConfig, LlamaModel, LlamaTarget
from specbook.models.aot import compile_ahead
from specbook.models.compiled import CompiledTarget

CONFIG = LlamaConfig(vocab_size=97, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, intermediate_size=96,
                     max_position_embeddings=256)


@pytest.fixture(scope="module")
def model_and_target():
    model = LlamaModel(CONFIG).init_weights(std=0.3, generator=torch.Generator().manual_seed(1)).eval()
    target = CompiledTarget(model, max_length=200, widths=(1, 4), autotune=False, ahead_of_time=True,
                            hidden_layers=(1,))
    target.warm_up()  # exports and compiles both widths (some seconds each for this model)
    return model, target


def test_ahead_of_time_tokens_equal_the_eager_model_across_spans(model_and_target):
    """Plain decoding over spans 64, 128 and 192 (S dynamic in one package per width) and n-gram chains at
    width 4 keep the eager model's greedy tokens; no width is compiled twice."""
    model, target = model_and_target
    eager = LlamaTarget(model, max_length=200, hidden_layers=(1,))
    prompt = torch.randint(0, 97, (60,), generator=torch.Generator().manual_seed(2)).tolist()
    passes = target.compiled_passes
    assert greedy(target, prompt, 80) == greedy(eager, prompt, 80)
    repeating = (prompt[:6] * 5)[:30]
    drafted = greedy(target, repeating, 40, drafter=NGramDrafter(max_ngram=3))
    assert drafted == greedy(eager, repeating, 40, drafter=NGramDrafter(max_ngram=3))
    assert target.compiled_passes > passes + 80
    assert set(target._runners) == {("autotuned", 1), ("autotuned", 4)}


def test_an_ahead_of_time_tree_pass_scores_as_the_eager_target(model_and_target):
    model, target = model_and_target
    eager = LlamaTarget(model, max_length=200, hidden_layers=(1,))
    prompt = torch.randint(0, 97, (1, 70), generator=torch.Generator().manual_seed(5))
    parents, tokens = torch.tensor([-1, 0, 0]), torch.tensor([[3, 5, 7]])
    for t in (target, eager):
        t.reset(1)
        t.prefill(prompt)
    torch.testing.assert_close(target(tokens, parents), eager(tokens, parents), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(target.last_hidden_layers[0], eager.last_hidden_layers[0], rtol=1e-4, atol=1e-4)
    for t in (target, eager):
        t.keep([[0, 2]])
    torch.testing.assert_close(target(torch.tensor([[4]])), eager(torch.tensor([[4]])), rtol=1e-4, atol=1e-4)


def test_an_example_that_passes_one_tensor_twice_is_caught(model_and_target):
    """Broken twin of the example CompiledTarget exports on: given the same tensor as tokens and as positions,
    export ties the two inputs, and the package reads one of them for both (the logits move by whole units)."""
    model, target = model_and_target
    target.reset(1)
    target.prefill(torch.tensor([[3, 1, 4, 1, 5]]))
    cache = target.cache
    keys, values = cache.k[..., :64, :].unbind(0), cache.v[..., :64, :].unbind(0)
    zeros = torch.zeros(1, 1, dtype=torch.long)
    tied = compile_ahead(target.pass_module, "autotuned", {"freezing": True}, (zeros, zeros, torch.arange(1), keys,
                         values, torch.ones(1, 1, 1, 64, dtype=torch.bool)), cache.max_length - 1)
    visible = torch.zeros(1, 1, 1, 64, dtype=torch.bool)
    visible[..., :6] = True
    logits = tied(torch.tensor([[9]]), torch.tensor([[5]]), torch.tensor([5]), list(keys), list(values), visible)[0]
    eager = LlamaTarget(model, max_length=200)
    eager.reset(1)
    eager.prefill(torch.tensor([[3, 1, 4, 1, 5]]))
    want = eager(torch.tensor([[9]]))
    assert not torch.allclose(logits, want, atol=1e-2)  # the tied package is caught
    torch.testing.assert_close(target(torch.tensor([[9]])), want, rtol=1e-4, atol=1e-4)  # the target's own is right


def test_timing_both_kernel_kinds_keeps_one_package_a_width(model_and_target):
    """products="timed" compiles a width on both kinds of product kernels, times them, and keeps the faster's
    package only (each holds its own copy of the weights)."""
    model, _ = model_and_target
    target = CompiledTarget(model, max_length=64, widths=(1,), autotune=False, ahead_of_time=True, products="timed")
    target.warm_up()
    assert set(target.kernel_ms[1]) == {"autotuned", "library"}
    assert list(target._runners) == [(target.kernels_of[1], 1)]
