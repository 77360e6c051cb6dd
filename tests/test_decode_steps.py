"""The stepping forms of the decode loops: generate_steps and speculative_steps, and generate's on_step."""
import pytest
import torch

from specbook.decode import DecodeStep, generate, generate_steps, speculative_generate, speculative_steps
from specbook.drafters import DraftModelDrafter, NGramDrafter
from specbook.sampling import GREEDY, SamplingParams
from specbook.toy import make_toy_pair


def drain(steps):
    """Every yielded step and the returned result of a stepping generation."""
    seen = []
    while True:
        try:
            seen.append(next(steps))
        except StopIteration as stop:
            return seen, stop.value


def same(a, b):
    return torch.equal(a.tokens, b.tokens) and torch.equal(a.lengths, b.lengths) and a.stats == b.stats


@pytest.mark.parametrize("params", [SamplingParams(), GREEDY], ids=["t1", "greedy"])
def test_steps_equal_the_whole_loops(params):
    target, draft = make_toy_pair(6, 1, match=0.6, seed=3)
    prompts = [[1, 2, 3], [3, 0]]  # ragged
    whole = speculative_generate(target, DraftModelDrafter(draft), prompts, 20, params=params, gamma=3,
                                 generator=torch.Generator().manual_seed(4), eos_token_id=5)
    steps, stepped = drain(speculative_steps(target, DraftModelDrafter(draft), prompts, 20, params=params, gamma=3,
                                             generator=torch.Generator().manual_seed(4), eos_token_id=5))
    assert same(whole, stepped) and len(steps) == stepped.stats.target_passes
    assert all(isinstance(s, DecodeStep) for s in steps)

    plain = generate(target, prompts, 20, params=params, generator=torch.Generator().manual_seed(4), eos_token_id=5)
    steps, stepped = drain(generate_steps(target, prompts, 20, params=params, generator=torch.Generator().manual_seed(4),
                                          eos_token_id=5))
    assert same(plain, stepped) and len(steps) == plain.stats.target_passes


@pytest.mark.parametrize("params", [SamplingParams(temperature=0.8), GREEDY], ids=["t0.8", "greedy"])
def test_plain_on_step_sees_every_pass_with_an_empty_draft(params):
    target, _ = make_toy_pair(6, 1, seed=3)
    prompts = [[1, 2, 3], [3, 0]]
    steps: list[DecodeStep] = []
    hooked = generate(target, prompts, 12, params=params, generator=torch.Generator().manual_seed(1), on_step=steps.append)
    alone = generate(target, prompts, 12, params=params, generator=torch.Generator().manual_seed(1))
    assert same(hooked, alone) and len(steps) == 12
    rows: list[list[int]] = [[], []]
    for step in steps:
        B = len(step.rows)
        assert step.draft.num_tokens == 0 and step.target_logits.shape == (B, 1, 6)
        assert step.tokens.shape == (B, 1) and step.num_emitted.tolist() == [1] * B
        assert (step.target_probs is None) == params.greedy
        if not params.greedy:
            assert torch.allclose(step.target_probs.sum(-1), torch.ones(B, 1, dtype=step.target_probs.dtype))
        for b, new, n in zip(step.rows, step.tokens.tolist(), step.kept.tolist()):
            rows[b].extend(new[:n])
    assert rows == hooked.sequences()
    with pytest.raises(TypeError, match="on_step"):
        generate(target, prompts, 5, on_step="print")


def test_generations_interleaved_pass_by_pass_equal_each_alone():
    """Two generations stepped in turns, each on its own target and drafter, give what each gives alone:
    the benchmark's side-by-side timing relies on this."""
    (t1, d1), (t2, _) = make_toy_pair(6, 1, match=0.6, seed=3), make_toy_pair(6, 1, seed=3)
    params = SamplingParams()
    a = speculative_steps(t1, DraftModelDrafter(d1), [[1, 2]], 15, params=params, gamma=2, generator=torch.Generator().manual_seed(7))
    b = generate_steps(t2, [[0, 3, 1]], 15, params=params, generator=torch.Generator().manual_seed(8))
    results = {}
    live = {"a": a, "b": b}
    while live:
        for name in list(live):
            try:
                next(live[name])
            except StopIteration as stop:
                results[name] = stop.value
                del live[name]
    alone_a = speculative_generate(t1, DraftModelDrafter(d1), [[1, 2]], 15, params=params, gamma=2, generator=torch.Generator().manual_seed(7))
    alone_b = generate(t2, [[0, 3, 1]], 15, params=params, generator=torch.Generator().manual_seed(8))
    assert same(results["a"], alone_a) and same(results["b"], alone_b)


def test_steps_check_their_arguments_at_once():
    target, draft = make_toy_pair(4, 1)
    with pytest.raises(ValueError, match="gamma"):
        speculative_steps(target, NGramDrafter(), [1], 5, gamma=-1)  # no next() needed
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate_steps(target, [1], 0)
    with pytest.raises(ValueError, match="prompt"):
        speculative_steps(target, DraftModelDrafter(draft), [], 5)
