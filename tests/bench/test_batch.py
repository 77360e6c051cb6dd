"""Batching versus speculation: the load-aware adaptive policy, the batch command's accounting, and per-row
losslessness of batched speculation on the real model (batch 1 to 16, prompts of different lengths)."""
from __future__ import annotations

import math
import os
import time
import warnings

import pytest
import torch

from specbook import theory
from specbook.bench import batch as batch_cmd
from specbook.bench.batch_calibration import (LoopCosts, PinnedGamma, full_passes, measure_loop_costs, per_draft,
                                              step_ratios, straight)
from specbook.bench.batch_costs import (adaptive_vs_best, crossovers, measured_hardware, roofline_crossover,
                                        roofline_speedup)
from specbook.bench.batch_runs import PrefillOnce, Run, StepLog, side_by_side
from specbook.bench.batch_traces import WindowAcceptance
from specbook.costs import BatchCosts
from specbook.decode import generate, speculative_generate
from specbook.drafters import AdaptiveGamma, DraftModelDrafter, GammaPolicy, NGramDrafter
from specbook.drafters.adaptive import best_gamma
from specbook.protocols import Draft
from specbook.sampling import GREEDY
from specbook.toy import make_toy_pair

PROMPTS = [[1, 2, 3, 1, 2], [4], [2, 2, 5, 1, 2, 3, 1, 2, 3], [3, 1], [5, 5, 5, 5, 5, 5, 5]]
FLAT = {1: (1.0, 1.02, 1.04, 1.06, 1.08)}  # verification nearly free: speculate
STEEP = {1: (1.0, 1.02, 1.04, 1.06, 1.08), 4: (1.0, 2.0, 3.0, 4.0, 5.0)}  # at 4 rows a position costs a pass


def sched(drafter, costs, *, shadow=False, **settings) -> AdaptiveGamma:
    """The adaptive policy priced by ``costs``, load-aware as the batch command runs it (free to stop
    drafting, decay 0.95, margin 0.2) and probing after 16 idle steps, unless ``settings`` say otherwise."""
    policy = {"decay": 0.95, "min_gamma": 0, "margin": 0.2, "probe_every": 16, **settings}
    return AdaptiveGamma(drafter, GammaPolicy(costs=costs, **policy), shadow)


def chain_expected(alpha):
    """E(alpha, gamma) as a function of gamma: one acceptance rate at every draft position."""
    return lambda gamma: float(theory.expected_tokens(alpha, gamma))


def best(costs, alpha, batch, ceiling, **kw) -> int:
    """The best gamma for one acceptance rate at every draft position."""
    return best_gamma(costs, batch, ceiling, chain_expected(alpha), **kw)


def speedup(costs, alpha, gamma, batch) -> float:
    """S_B(alpha, gamma) = E(alpha, gamma) / (gamma c_B + v_B(gamma + 1))."""
    return chain_expected(alpha)(gamma) / costs.step(batch, gamma)


def test_costs_interpolate_and_refuse_bad_tables():
    costs = BatchCosts({1: (1.0, 1.1), 4: (1.0, 2.1)}, {1: 0.1, 4: 0.3})
    assert costs.v(1, 2) == pytest.approx(1.1) and costs.v(4, 2) == pytest.approx(2.1)
    assert costs.v(2, 2) == pytest.approx(1.6)  # halfway in log2(B)
    assert costs.v(64, 2) == pytest.approx(2.1)  # clamped beyond the last measured batch size
    assert costs.v(1, 4) == pytest.approx(1.3)  # a longer chain: the last step extrapolated
    assert costs.c(2) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="verify_cost"):
        BatchCosts({})
    with pytest.raises(ValueError, match="verify_cost\\[2\\]"):
        BatchCosts({2: (1.0, -1.0)})
    with pytest.raises(ValueError, match="draft_cost"):
        BatchCosts(FLAT, -0.5)


def test_catch_up_is_priced_from_the_measured_prefill():
    costs = BatchCosts({1: (1.0, 1.1, 1.2)}, 0.5, {1: 0.01})
    assert costs.catch_up_cost(1, 2) == pytest.approx(0.5 * 1.1)  # within the curve: c v(n)
    assert costs.catch_up_cost(1, 100) == pytest.approx(1.0)  # past it: the prefill rate, 0.01 per token
    unmeasured = BatchCosts({1: (1.0, 1.1, 1.2)}, 0.5)
    assert unmeasured.catch_up_cost(1, 100) == pytest.approx(0.5 * (1.2 + 0.1 * 97))  # extrapolated
    with pytest.raises(ValueError, match="catch_up"):
        BatchCosts(FLAT, 0.1, -1.0)


def test_measured_costs_on_a_tiny_model():
    from specbook.bench.batch_costs import batch_verify_costs
    from specbook.models import LlamaConfig, LlamaModel, LlamaTarget

    def tiny(seed):
        cfg = LlamaConfig(vocab_size=1100, dim=32, n_layers=1, n_heads=4, n_kv_heads=2, intermediate_size=48,
                          max_position_embeddings=128)
        return LlamaTarget(LlamaModel(cfg).init_weights(generator=torch.Generator().manual_seed(seed)),
                           max_length=64)

    out = batch_verify_costs(tiny(0), [1, 2], 3, context=16, draft=tiny(1), reps=1)
    for B in (1, 2):
        assert out["v"][B][0] == 1.0 and all(b >= a for a, b in zip(out["v"][B], out["v"][B][1:]))
        assert out["v"][B] == [max(out["v_raw"][B][:n]) for n in (1, 2, 3)]
        assert out["c"][B] > 0 and out["catch_up"][B] > 0


def test_best_gamma_follows_load_and_acceptance():
    costs = BatchCosts(STEEP, 0.0)
    assert best(costs, 0.8, 1, 4) == 4  # idle arithmetic, good drafts: draft the ceiling
    assert best(costs, 0.8, 4, 4) == 0  # every position costs a full pass: speculation off
    assert best(costs, 0.01, 1, 4) == 0 or speedup(costs, 0.01, best(costs, 0.01, 1, 4), 1) > 1
    assert best(BatchCosts(FLAT, 0.5), 0.3, 1, 4) == 0  # a costly draft with poor acceptance


def test_margin_keeps_speculation_off_where_the_predicted_gain_is_small():
    costs = BatchCosts({1: (1.0, 1.2)}, 0.0)
    s = speedup(costs, 0.3, 1, 1)  # E(0.3, 1) / v(2) = 1.3 / 1.2: a 8% gain on paper
    assert 1.0 < s < 1.1
    assert best(costs, 0.3, 1, 1) == 1 and best(costs, 0.3, 1, 1, margin=0.1) == 0
    assert best(costs, 0.9, 1, 1, margin=0.1) == 1  # a large gain clears the margin
    # The policy's margin grows with the batch (per-row work the model leaves out): none at B = 1.
    target, _ = make_toy_pair(6, 1, match=0.8, seed=2)
    for rows, drafts in ((1, True), (4, False)):
        policy = sched(NGramDrafter(), BatchCosts({1: (1.0, 1.2)}), shadow=True, prior=1e6, row_prior=1e6,
                       prior_alpha=0.3, margin=0.2)  # alpha held at 0.3: S = 1.08 for gamma 1
        speculative_generate(target, policy, PROMPTS[:rows], 6, params=GREEDY, gamma=1)
        assert any(s.gamma for s in policy.steps) == drafts
    for bad in (-0.1, "0.1", float("nan")):
        with pytest.raises(ValueError, match="margin"):
            GammaPolicy(costs=costs, margin=bad)


class _HalfMatched:
    """Prompt lookup that finds a match in row 0 only: row 1's drafts are padding (match length 0)."""

    passes = 0

    def propose(self, contexts, gamma, params, generator=None):
        self.match_lengths = [2] + [0] * (len(contexts) - 1)
        rows = [[7] * gamma] + [[int(c[-1])] * gamma for c in contexts[1:]]
        return Draft(torch.tensor(rows, dtype=torch.long).reshape(len(contexts), gamma), None)


def test_policy_drafts_for_the_rows_furthest_behind():
    """A step is worth what it gives the rows that finish last; a row without a match gains nothing."""
    policy = sched(_HalfMatched(), BatchCosts(FLAT), shadow=True, margin=0.0, prior=1e6, row_prior=1e6,
                   prior_alpha=0.8)
    ctx = [[1, 2, 3], [4, 5]]
    first = policy.propose([torch.tensor(c) for c in ctx], 4, GREEDY)
    assert first.num_tokens > 0  # rows level: half the batch gains, verification is nearly free
    ctx = [ctx[0] + [7] * first.num_tokens + [1], ctx[1] + [9]]  # row 0 accepted all; row 1 got one token
    assert policy.propose([torch.tensor(c) for c in ctx], 4, GREEDY).num_tokens == 0  # row 1 is behind, unmatched
    # The pooled rule (one alpha over all rows) would have drafted here: the twin this test must tell apart.
    assert best(BatchCosts(FLAT), policy.alpha_estimate(), 2, 4) > 0
    swapped = sched(_HalfMatched(), BatchCosts(FLAT), shadow=True, margin=0.0, prior=1e6, row_prior=1e6,
                    prior_alpha=0.8)
    swapped.propose([torch.tensor(c) for c in ([4, 5], [1, 2, 3])], 4, GREEDY)
    # now the matched row 0 is the one behind: drafting helps the row that sets the pace
    assert swapped.propose([torch.tensor(c) for c in ([4, 5, 9], [1, 2, 3, 9, 9, 9, 9, 9])], 4, GREEDY).num_tokens > 0


def test_rows_ahead_count_by_the_share_of_a_step_they_cost():
    """Where a plain step with fewer rows is measurably cheaper, a row ahead that finishes sooner makes
    every later step cheaper: its drafts are worth their price although the row behind gains nothing."""
    ctx = [[1, 2, 3], [4, 5]]
    after = [[1, 2, 3, 7, 7, 7, 7, 1], [4, 5, 9]]  # row 0 accepted all four drafts; row 1 is behind, unmatched

    def second_step(plain_seconds):
        policy = sched(_HalfMatched(), BatchCosts(FLAT, plain_seconds=plain_seconds), shadow=True, margin=0.0,
                       prior=1e6, row_prior=1e6, prior_alpha=0.8)
        policy.propose([torch.tensor(c) for c in ctx], 4, GREEDY)
        return policy.propose([torch.tensor(c) for c in after], 4, GREEDY).num_tokens

    costs = BatchCosts(FLAT, plain_seconds={1: 0.05, 2: 0.084})
    assert costs.ahead_share(2, 1) == pytest.approx(1 - 0.05 / 0.084) and costs.ahead_share(2, 2) == 0.0
    assert BatchCosts(STEEP).ahead_share(2, 1) == 0.0  # not measured: only the rows behind count
    assert second_step({1: 0.05, 2: 0.084}) > 0  # a batch-2 step is 1.7 batch-1 steps: row 0 is worth drafting for
    assert second_step({1: 0.084, 2: 0.084}) == 0  # the twin: a row more costs nothing, only the row behind counts
    assert second_step(None) == 0
    for bad in ({}, {0: 0.1}, {1: 0.0}, {1: -1.0}, [0.1]):
        with pytest.raises(ValueError, match="plain_seconds"):
            BatchCosts(STEEP, plain_seconds=bad)


class _Sevens:
    """A chain drafter that always proposes token 7."""

    passes = 0

    def propose(self, contexts, gamma, params, generator=None):
        return Draft(torch.full((len(contexts), gamma), 7, dtype=torch.long), None)


def test_acceptance_is_estimated_per_draft_position():
    """Bursty acceptance (the first draft half the time, then all of them): one pooled rate says 0.8
    everywhere, the per-position rates say 0.5 for the first draft and nearly 1 after it."""
    policy = sched(_Sevens(), BatchCosts(FLAT), margin=0.0)
    ctx = [1, 2]
    for step in range(60):
        k = policy.propose([torch.tensor(ctx)], 4, GREEDY).num_tokens
        ctx = ctx + ([7] * k + [3] if step % 2 else [9])  # all k accepted plus a bonus, or the first rejected
    assert [s.gamma for s in policy.steps[-10:]] == [4] * 10  # verification is nearly free: the ceiling
    first, *rest = policy.depth_alphas(4)
    assert 0.35 < first < 0.65 and all(a > 0.9 for a in rest)
    assert 0.7 < policy.alpha_estimate() < 0.9
    assert policy.depth_alphas(6)[4:] == [pytest.approx(rest[-1], abs=0.1)] * 2  # untested positions inherit


def test_a_rows_own_estimate_weighs_against_the_pool_by_row_prior():
    """Rows that differ for a reason get their own estimates, the more so the weaker the row prior; rows
    that differ only by chance share the pooled one (row_prior inf)."""
    spread = {}
    for weight in (1.0, 100.0, math.inf):
        policy = sched(_Sevens(), BatchCosts(FLAT), margin=0.0, row_prior=weight)
        ctx = [[1, 2], [1, 2]]
        for _ in range(10):
            k = policy.propose([torch.tensor(c) for c in ctx], 2, GREEDY).num_tokens
            ctx = [ctx[0] + [7] * k + [3], ctx[1] + [9]]  # row 0 accepts every draft, row 1 none
        spread[weight] = policy.row_alpha(0) - policy.row_alpha(1)
    assert spread[1.0] > spread[100.0] > spread[math.inf] == 0
    with pytest.raises(ValueError, match="row_prior"):
        GammaPolicy(row_prior=0)


def test_measured_roofline_uses_the_step_shape():
    from specbook.bench.batch_costs import measure_roofline

    roof = measure_roofline(rows=4, dim=8, hidden=16, size=16, read_mb=1, reps=1)
    assert roof["matmul_shape"] == [4, 8, 16] and roof["matmul_flop_per_s"] > 0
    assert roof["ridge_flop_per_byte"] == pytest.approx(roof["matmul_flop_per_s"] / roof["memory_bytes_per_s"])
    assert roof["square_matmul_flop_per_s"] > 0
    with pytest.raises(ValueError, match="rows"):
        measure_roofline(rows=0)


def test_one_time_catch_up_is_spread_over_the_tokens_to_come():
    costs = BatchCosts(FLAT, 0.1)
    assert best_gamma(costs, 1, 4, lambda g: 1 + 0.5 * g) > 0
    assert best_gamma(costs, 1, 4, lambda g: 1 + 0.5 * g, once=30.0, horizon=8) == 0  # a prefill 8 tokens cannot repay
    assert best_gamma(costs, 1, 4, lambda g: 1 + 0.5 * g, once=30.0, horizon=10_000) > 0
    with pytest.raises(ValueError, match="horizon"):
        GammaPolicy(costs=costs, horizon=0)


@pytest.mark.parametrize("table, shadow", [(FLAT, False), (STEEP, True), (STEEP, False)])
def test_policy_is_lossless_and_turns_off_under_load(table, shadow):
    target, draft = make_toy_pair(6, 2, match=0.8, seed=3)
    inner = NGramDrafter() if shadow else DraftModelDrafter(draft)
    policy = sched(inner, BatchCosts(table, 0.0), shadow=shadow)
    alone = [generate(target, [p], 20, params=GREEDY).sequences()[0] for p in PROMPTS]
    out = speculative_generate(target, policy, PROMPTS, 20, params=GREEDY, gamma=4)
    assert out.sequences() == alone
    gammas = {s.batch: s.gamma for s in policy.steps}
    if table is STEEP:
        assert all(g == 0 for b, g in gammas.items() if b >= 4 and b in gammas)  # 5 live rows: off
    else:
        assert max(s.gamma for s in policy.steps) > 0


def test_loop_step_costs_replace_the_forward_ratios():
    forwards = BatchCosts({1: (1.0, 1.5, 1.6)}, 0.2)
    assert forwards.step(1, 2) == pytest.approx(2 * 0.2 + 1.6) and forwards.step(1, 0) == 1.0
    looped = LoopCosts({1: (1.0, 1.5, 1.6)}, 0.2, step_cost={1: (1.1, 1.2)})
    assert looped.step(1, 2) == pytest.approx(1.2) and looped.step(1, 4) == pytest.approx(1.4)  # extrapolated
    assert speedup(looped, 0.5, 2, 1) == pytest.approx(1.75 / 1.2)
    # the loop's own costs change the choice: forwards alone say off, the loop says the ceiling
    assert best(forwards, 0.6, 1, 2) == 0 and best(looped, 0.6, 1, 2) == 2
    for bad in ({}, {0: (1.1,)}, {1: ()}, {1: (1.1, -0.2)}):
        with pytest.raises(ValueError, match="step_cost"):
            LoopCosts(FLAT, step_cost=bad)


def test_a_gamma_is_priced_by_the_passes_that_verified_it():
    """A pinned run's passes are priced by the drafts they verified, not by the gamma it was pinned to."""
    run = Run.__new__(Run)  # only the log and the pass times are read
    run.log = StepLog(None)
    run.log.steps = [((0, 1, 2), [0] * 3, [1] * 3, 4),  # the prefill's pass: always left out
                     ((0, 1, 2), [0] * 3, [1] * 3, 4), ((0, 1, 2), [0] * 3, [1] * 3, 0),
                     ((0, 2), [0] * 2, [1] * 2, 4), ((0, 1, 2), [0] * 3, [1] * 3, 2)]
    run.passes = [9.0, 2.0, 1.0, 1.5, 2.2]
    assert full_passes(run, 3) == [(4, 2.0), (0, 1.0), (2, 2.2)]  # every pass with all 3 rows
    assert full_passes(run, 5) == []
    # Theil-Sen: a pass slowed by other work does not move the line
    points = [(0, 1.0), (0, 1.0), (1, 1.1), (2, 1.2), (4, 1.4), (4, 1.4), (0, 5.0)]
    a, b = per_draft(points)
    assert a == pytest.approx(1.0) and b == pytest.approx(0.1)
    assert per_draft([(0, 1.0), (0, 1.2)]) is None and per_draft([]) is None  # no two draft lengths


def test_a_drafting_step_is_priced_by_a_jump_then_a_line():
    """Verifying any drafts costs a jump over a plain step, then a little per draft (the shape measured
    at batch 1 on an AVX2 CPU); one line through every pass would price short drafts far too cheap."""
    points = [(0, 1.0)] * 6 + [(1, 1.6), (2, 1.65), (3, 1.7), (4, 1.75)] * 2 + [(0, 5.0)]  # one slowed pass
    plain, ratios = step_ratios(points, 4)
    assert plain == pytest.approx(1.0) and ratios == pytest.approx([1.6, 1.65, 1.7, 1.75])
    a, b = per_draft(points)  # the broken twin: the old single line
    old = [(a + b * g) / a for g in range(1, 5)]
    assert old[0] < 1.3 and old[1] < 1.45  # one or two drafts priced far below the 1.6 they cost
    # one draft length among the drafting passes: one line through all of them stands in
    assert step_ratios([(0, 1.0), (0, 1.0), (4, 1.4), (4, 1.4)], 4)[1] == pytest.approx([1.1, 1.2, 1.3, 1.4])
    # never below a plain step, never cheaper with more drafts
    assert step_ratios([(0, 1.0), (1, 1.5), (2, 1.3)], 3)[1] == pytest.approx([1.4, 1.4, 1.4])
    assert step_ratios([(0, 1.0), (1, 0.8), (2, 0.9)], 2)[1] == pytest.approx([1.0, 1.0])
    assert step_ratios([(2, 1.0), (3, 1.1)], 4) is None and step_ratios([(0, 1.0)], 4) is None


def test_the_batch_policy_adds_a_margin_only_to_forward_timed_costs():
    """Loop-timed costs already hold the loop's per-row work; the forwards' do not."""
    from types import SimpleNamespace

    args = SimpleNamespace(max_new_tokens=32)
    assert batch_cmd.batch_policy(BatchCosts(FLAT), args).margin == 0.2
    assert batch_cmd.batch_policy(LoopCosts(FLAT, step_cost={1: (1.1,)}), args).margin == 0.0


def test_straight_pools_the_gammas_timings():
    assert straight([1.2, 1.4, 1.6, 1.8]) == pytest.approx([1.2, 1.4, 1.6, 1.8])
    noisy = straight([1.48, 1.47, 1.51, 1.85])  # a measured curve from a noisy host
    assert all(b > a for a, b in zip(noisy, noisy[1:])) and sum(noisy) == pytest.approx(1.48 + 1.47 + 1.51 + 1.85)
    assert straight([1.3, 1.1, 0.9]) == pytest.approx([1.1, 1.1, 1.1])  # never cheaper with more drafts
    assert straight([0.9]) == [1.0]


def test_pinned_policy_and_loop_costs_on_toy_models():
    """measure_loop_costs times the loop itself with the policy pinned to each gamma."""
    target, draft = make_toy_pair(6, 2, match=0.8, seed=3)
    pinned = PinnedGamma(DraftModelDrafter(draft), GammaPolicy(costs=BatchCosts({1: (1.0, 9.0)})), 3)
    out = speculative_generate(target, pinned, PROMPTS, 12, params=GREEDY, gamma=4)
    assert {s.gamma for s in pinned.steps} <= {3, 2, 1} and pinned.steps[0].gamma == 3  # never 0: no policy
    assert out.sequences() == [generate(target, [p], 12, params=GREEDY).sequences()[0] for p in PROMPTS]
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="pinned"):
            PinnedGamma(NGramDrafter(), GammaPolicy(), bad)
    from specbook.models import LlamaConfig, LlamaModel, LlamaTarget

    def tiny(seed):
        cfg = LlamaConfig(vocab_size=50, dim=32, n_layers=1, n_heads=4, n_kv_heads=2, intermediate_size=48,
                          max_position_embeddings=128)
        return LlamaTarget(LlamaModel(cfg).init_weights(generator=torch.Generator().manual_seed(seed)),
                           max_length=64)

    pinned = [PinnedGamma(DraftModelDrafter(tiny(1)), GammaPolicy(costs=BatchCosts({1: (1.0, 9.0)})), g)
              for g in range(3)]
    settings = dict(max_new_tokens=12, seed=0, params=GREEDY, eos=None)
    targets = [tiny(0) for _ in range(3)]
    loop = measure_loop_costs(targets, {"draft": pinned}, {2: PROMPTS[:2]}, rounds=2, **settings)
    assert [max(s.gamma for s in p.steps) for p in pinned] == [0, 1, 2]  # each drafted its own gamma
    assert len(loop["draft"]["step"][2]) == 2 and loop["draft"]["seconds"][2] > 0 and loop["draft"]["fitted"][2]
    t1, t2 = loop["draft"]["step"][2]
    assert t2 >= t1 >= 1
    assert len(loop["draft"]["step_raw"][2]) == 2
    with pytest.raises(ValueError, match="targets"):
        measure_loop_costs(targets[:2], {"draft": pinned}, {2: PROMPTS[:2]}, **settings)
    with pytest.raises(ValueError, match="one PinnedGamma per gamma"):
        measure_loop_costs(targets, {"draft": pinned[::-1]}, {2: PROMPTS[:2]}, **settings)


def test_runs_stepped_side_by_side_equal_each_run_alone():
    """The benchmark steps plain, fixed and adaptive runs in turns, each on its own cache and drafter: the
    outputs are those of each run alone, and each run's clock counts its own passes only."""
    from specbook.models import LlamaConfig, LlamaModel, LlamaTarget

    def model(seed):
        cfg = LlamaConfig(vocab_size=50, dim=32, n_layers=1, n_heads=4, n_kv_heads=2, intermediate_size=48,
                          max_position_embeddings=128)
        return LlamaModel(cfg).init_weights(generator=torch.Generator().manual_seed(seed))

    target_model, draft_model = model(0), model(0)  # the same weights: the draft agrees with the target
    settings = dict(gamma=3, max_new_tokens=10, seed=0, params=GREEDY)
    prompts = PROMPTS[:3]

    def drafters():
        policy = sched(DraftModelDrafter(LlamaTarget(draft_model, max_length=64)), BatchCosts(FLAT),
                       margin=0.0, probe_every=1)
        return [None, DraftModelDrafter(LlamaTarget(draft_model, max_length=64)), policy]

    runs = [Run(LlamaTarget(target_model, max_length=64), d, prompts, **settings) for d in drafters()]
    t0 = time.perf_counter()
    side_by_side(runs)
    wall = time.perf_counter() - t0
    together = [r.figures() for r in runs]
    alone = []
    for d in drafters():
        run = Run(LlamaTarget(target_model, max_length=64), d, prompts, **settings)
        side_by_side([run])
        alone.append(run.figures())
    plain = generate(LlamaTarget(target_model, max_length=64), prompts, 10, params=GREEDY).sequences()
    for t, a in zip(together, alone):
        assert t["sequences"] == a["sequences"] == plain and t["new_tokens"] == 30
    assert together[0]["positions_per_pass"] == 3 and together[0]["wasted_fraction"] == 0
    assert together[1]["tau"] > 1.5 and max(together[2]["gammas"]) >= 1  # the drafts were accepted
    assert sum(r.seconds for r in runs) <= wall  # each clock counts its own passes, not its neighbours'
    assert all(len(r.passes) == r.result.stats.target_passes for r in runs)


def test_side_by_side_keeps_the_runs_clocks_together():
    """The run furthest behind on its own clock goes next, so no run spends its last seconds alone."""
    order = []

    class Fake:
        def __init__(self, name, step, passes):
            self.name, self.step, self.left, self.seconds, self.closed = name, step, passes, 0.0, False

        def advance(self):
            if not self.left:
                return False
            order.append(self.name)
            self.seconds += self.step
            self.left -= 1
            return True

        def close(self):
            self.closed = True

    short, long_ = Fake("short", 1.0, 9), Fake("long", 3.0, 3)  # 9 s of work each
    side_by_side([short, long_])
    assert order[:5] == ["short", "long", "short", "short", "short"]
    clocks = {"short": 0.0, "long": 0.0}
    for name in order:  # before every pass, the two clocks were within one pass of each other
        assert abs(clocks["short"] - clocks["long"]) <= 3.0
        clocks[name] += 1.0 if name == "short" else 3.0
    assert order.count("short") == 9 and order.count("long") == 3


def test_a_repeated_prefill_is_restored_not_recomputed():
    """PrefillOnce times the prefill and restores the cache it saved for the prompts it prefilled last
    (through the cache's public clone and copy_from): the same outputs, one prefill computed."""
    from specbook.models import LlamaConfig, LlamaModel, LlamaTarget

    class Counting(LlamaTarget):
        prefills = 0

        def prefill(self, tokens):
            self.prefills += 1
            super().prefill(tokens)

    cfg = LlamaConfig(vocab_size=50, dim=32, n_layers=1, n_heads=4, n_kv_heads=2, intermediate_size=48,
                      max_position_embeddings=128)
    model = LlamaModel(cfg).init_weights(generator=torch.Generator().manual_seed(0))
    inner = Counting(model, max_length=64)
    target = PrefillOnce(inner)
    plain = generate(LlamaTarget(model, max_length=64), PROMPTS[:3], 6, params=GREEDY).sequences()
    settings = dict(gamma=2, max_new_tokens=6, seed=0, params=GREEDY)
    for prompts, prefills in ((PROMPTS[:3], 1), (PROMPTS[:3], 1), (PROMPTS[1:4], 2)):
        run = Run(target, None, prompts, **settings)
        side_by_side([run])
        assert inner.prefills == prefills and run.prefill_seconds > 0
        if prompts == PROMPTS[:3]:
            assert run.figures()["sequences"] == plain
    with pytest.raises(ValueError, match="shape"):
        inner.cache.copy_from(LlamaTarget(model, max_length=32).model.make_cache(3, 32))


def test_policy_keeps_acceptance_across_generations():
    """A new generation starts the rows' state afresh but keeps the acceptance learnt before it."""
    target, draft = make_toy_pair(6, 2, match=0.9, seed=3)
    policy = sched(DraftModelDrafter(draft), BatchCosts(FLAT), margin=0.0, probe_every=1)
    speculative_generate(target, policy, PROMPTS[:2], 16, params=GREEDY, gamma=4)
    learnt, first = policy.alpha_estimate(), len(policy.steps)
    assert abs(learnt - policy.policy.prior_alpha) > 0.1
    speculative_generate(target, policy, PROMPTS[2:4], 16, params=GREEDY, gamma=4)
    assert policy.steps[first].alpha == pytest.approx(learnt, rel=0.2)  # not back at the prior
    policy.reset()
    assert policy.alpha_estimate() == pytest.approx(policy.policy.prior_alpha) and policy.steps == []


def test_policy_probes_after_idle_steps():
    target, draft = make_toy_pair(6, 1, match=0.8, seed=1)
    policy = sched(DraftModelDrafter(draft), BatchCosts({1: (1.0, 9.0)}, 0.0), probe_every=3)
    speculative_generate(target, policy, [[1, 2]], 12, params=GREEDY, gamma=1)
    assert [s.gamma for s in policy.steps][:6] == [0, 0, 1, 0, 0, 1]
    # A costly catch-up (c = 0.5 of a target pass per draft step, 9 passes for two positions): no probe,
    # unless the budget allows it.
    costly = BatchCosts({1: (1.0, 9.0)}, 0.5)
    for budget, probes in ((1.0, False), (float("inf"), True)):
        policy = sched(DraftModelDrafter(draft), costly, probe_every=3, probe_budget=budget)
        speculative_generate(target, policy, [[1, 2]], 12, params=GREEDY, gamma=1)
        assert any(s.gamma for s in policy.steps) == probes
    with pytest.raises(ValueError, match="probe_budget"):
        GammaPolicy(costs=BatchCosts(FLAT), probe_budget=-1)
    with pytest.raises(ValueError, match="probe_every"):
        GammaPolicy(costs=BatchCosts(FLAT), probe_every=-1)
    with pytest.raises(ValueError, match="probe_every"):  # gamma 0 without a probe or a shadow: never observed
        AdaptiveGamma(DraftModelDrafter(draft), GammaPolicy(costs=BatchCosts(FLAT), min_gamma=0))


def test_idle_model_drafter_lets_rows_leave_a_larger_batch():
    """A policy that never drafts leaves the draft model's cache at an earlier, smaller batch;
    rows that end must still leave this batch cleanly (regression: an IndexError-like refusal)."""
    from specbook.models import LlamaConfig, LlamaModel, LlamaTarget

    def tiny(seed):
        cfg = LlamaConfig(vocab_size=50, dim=32, n_layers=1, n_heads=4, n_kv_heads=2, intermediate_size=48,
                          max_position_embeddings=128)
        return LlamaTarget(LlamaModel(cfg).init_weights(generator=torch.Generator().manual_seed(seed)),
                           max_length=64)

    target, inner = tiny(0), DraftModelDrafter(tiny(1))
    speculative_generate(target, inner, [[1, 2]], 4, params=GREEDY, gamma=2)  # the draft cache now holds one row
    prompts = [[3, 4, 5], [6, 7], [8, 9, 10, 11]]
    alone = [generate(target, [p], 8, params=GREEDY).sequences()[0] for p in prompts]
    eos = alone[0][1]  # row 0 ends after two tokens
    expected = [row[:row.index(eos) + 1] if eos in row else row for row in alone]
    policy = sched(inner, BatchCosts({1: (1.0, 9.0)}), probe_every=1000)  # never drafts
    out = speculative_generate(target, policy, prompts, 8, params=GREEDY, gamma=2, eos_token_id=eos)
    assert out.sequences() == expected and all(s.gamma == 0 for s in policy.steps)


def test_step_log_counts_padding_as_waste():
    """Rows without an n-gram match are padded to the batch's K: those positions count as wasted."""
    target, _ = make_toy_pair(6, 1, match=0.8, seed=2)
    drafter = NGramDrafter()
    log = StepLog(drafter, 0.0)
    prompts = [[1, 2, 3, 1, 2, 3, 1, 2], [4]]  # the second row has nothing to look up at first
    out = speculative_generate(target, drafter, prompts, 10, params=GREEDY, gamma=4, on_step=log)
    assert log.padding > 0 and log.wasted >= log.padding
    assert log.positions == sum(len(rows) * (K + 1) for rows, _, _, K in log.steps)
    useful = sum(sum(acc) for _, acc, _, _ in log.steps)
    assert log.wasted == sum(len(rows) * K for rows, _, _, K in log.steps) - useful
    assert sum(out.lengths.tolist()) == 20


def test_window_acceptance_curve():
    hook = WindowAcceptance(window=4, tokens=10)
    target, draft = make_toy_pair(6, 1, match=0.9, seed=4)
    speculative_generate(target, DraftModelDrafter(draft), [[1, 2], [3]], 10, params=GREEDY, gamma=3, on_step=hook)
    curve = hook.curve()
    assert len(curve) == 3 and all(a is None or 0 <= a <= 1 for a in curve)
    assert sum(hook.verified) > 0


def test_roofline_prediction_turns_over_at_the_ridge():
    hw = measured_hardware({"matmul_flop_per_s": 1e12, "memory_bytes_per_s": 1e10, "dtype": "float32"})  # ridge 100
    params = 10**8
    assert roofline_speedup(0.8, 4, 1, hw, "float32", params, 4) > 3  # memory-bound: 5 positions for one pass
    B = roofline_crossover(0.8, 4, hw, "float32", params, 4)
    assert B is not None and (roofline_speedup(0.8, 4, B, hw, "float32", params, 4) < 1
                              <= roofline_speedup(0.8, 4, B - 1, hw, "float32", params, 4))
    # 2 flop per parameter and position against 4 bytes per parameter: compute-bound past 200 positions
    assert 200 / 5 <= B <= 200


@pytest.mark.parametrize("argv, flag", [(["--batch-sizes", "0,2"], "--batch-sizes"), (["--gamma", "0"], "--gamma"),
                                        (["--drafters", "ngram,nope"], "--drafters"), (["--policy", "x"], "--policy"),
                                        (["--max-new-tokens", "0"], "--max-new-tokens"),
                                        (["--prompts", "/nonexistent.jsonl"], "prompts")])
def test_bad_arguments_are_refused_before_the_model_loads(argv, flag, monkeypatch, capsys):
    import specbook.models.smollm2 as smollm2

    monkeypatch.setattr(smollm2, "load_smollm2", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(SystemExit) as exc:
        batch_cmd.main(argv)
    assert exc.value.code == 2 and flag in capsys.readouterr().err


# ---------------------------------------------------------------- the real model, batch 1 to 16

@pytest.mark.model
def test_real_model_batched_greedy_equals_each_row_alone():
    """Every row of a batched speculative run equals plain decoding of that row alone (near-ties explained)."""
    from specbook.bench.crosscheck import explain_divergence
    from specbook.drafters.small_model import distilled_drafter
    from specbook.models import LlamaTarget
    from specbook.models.smollm2 import load_smollm2

    model, tokenizer = load_smollm2()
    threads = torch.get_num_threads()
    if os.getloadavg()[0] > (os.cpu_count() or 1) + 0.5:
        torch.set_num_threads(1)  # busy cores: threads would wait at every barrier for a descheduled peer
    texts = ["Hi", "Name a colour.", "What is 2 + 2?", "Repeat: red green blue red green blue",
             "Write one word.", "Count: 1 2 3 4", "The sky is", "Say yes or no."]
    prompts = [tokenizer.encode(t, add_special_tokens=False) for t in texts] * 2  # 16 rows, lengths 1 to 12
    new = 5
    target = LlamaTarget(model, max_length=32)
    alone = [generate(target, [p], new, params=GREEDY).sequences()[0] for p in prompts[:8]] * 2
    notes = []
    drafters = (NGramDrafter(), distilled_drafter(target))  # each resets itself when the batch size changes
    for B in (1, 3, 8, 16):
        for drafter in drafters:
            out = speculative_generate(target, drafter, prompts[:B], new, params=GREEDY, gamma=3).sequences()
            for b, (got, ref) in enumerate(zip(out, alone)):
                if got != ref:
                    d = explain_divergence(model, prompts[b], ref, got)  # the near-tie threshold of the model's dtype
                    assert d is not None and d.is_tie, f"B={B} row {b} {type(drafter).__name__}: {d and d.describe()}"
                    notes.append(f"B={B} row {b}: {d.describe()}")
    torch.set_num_threads(threads)
    if notes:
        warnings.warn("batched near-tie differences:\n" + "\n".join(notes))


def test_crossover_and_adaptive_ratio_read_the_runs():
    def run(d, pol, B, tps):
        return {"drafter": d, "policy": pol, "batch_size": B, "tokens_per_s": tps}

    runs = [run("none", "plain", 1, 10), run("ngram", "fixed", 1, 15), run("ngram", "adaptive", 1, 14.5),
            run("none", "plain", 4, 30), run("ngram", "fixed", 4, 25), run("ngram", "adaptive", 4, 29)]
    drafters = ["none", "ngram"]
    assert crossovers(runs, drafters) == {"ngram": 4}
    assert adaptive_vs_best(runs)["ngram"] == {1: pytest.approx(14.5 / 15), 4: pytest.approx(29 / 30)}
    for r in runs:  # each policy's fastest repeat, read the same way
        r["tokens_per_s_fastest"] = r["tokens_per_s"] * (1.2 if r["policy"] == "adaptive" else 1.0)
    assert adaptive_vs_best(runs, "tokens_per_s_fastest")["ngram"][4] == pytest.approx(29 * 1.2 / 30)
    for r, each in zip(runs, ([10, 10, 10], [15, 9, 15], [14, 14, 12], [30, 30, 30], [25, 25, 25], [29, 29, 10])):
        r["tokens_per_s_each"] = each  # repeat i of every policy ran side by side
    paired = adaptive_vs_best(runs, paired=True)["ngram"]
    assert paired == {1: pytest.approx(14 / 15), 4: pytest.approx(29 / 30)}  # median of 14/15, 14/10, 12/15
    merged = batch_cmd._median_run([{"seconds": s, "prefill_seconds": 0.0, "tokens_per_s": 10 / s, "ms_per_token": s,
                                     "gammas": [int(s)] * 2} for s in (1.0, 2.0, 4.0)])
    assert merged["tokens_per_s_fastest"] == 10.0 and merged["tokens_per_s"] == 5.0
    assert merged["gammas"] == [1, 1, 2, 2, 4, 4]  # every repeat's steps, not the first repeat's alone
    assert crossovers(runs[:3], drafters) == {"ngram": None}  # never slower: no crossover
