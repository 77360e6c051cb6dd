# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false}
# # Assignment 11: serve under a latency target
#
# You run a decoding service and must choose its configuration: how many requests to batch
# (B), whether to speculate, with which drafter, and how many tokens to draft (gamma). The
# service has a latency **SLO**: at most `slo_ms` milliseconds between two tokens of one
# request. Within it you want the most throughput (tokens per second over all requests).
#
# Lesson 6 gives the model. One plain step at batch B takes t(B, 1); one round of speculation
# takes gamma draft steps at c_B plain steps each, then one verify pass over gamma + 1
# positions per row, t(B, gamma + 1); it yields E(alpha, gamma) = 1 + alpha + ... + alpha^gamma
# tokens per row (Leviathan et al. 2023, Eq. 1). So
#
#     speedup at batch B = E(alpha, gamma) / (gamma c_B + t(B, gamma + 1) / t(B, 1))
#
# and the configuration's latency is the round's time over E, its throughput B E over the round's
# time.
#
# The measured curves below are one machine's. Then you take the model to three GPUs you do not
# have, where the KV cache has to be counted, and predict where speculation stops paying.
#
# **Grading.** 10 points: the step time with KV bytes (2), the speedup at batch B from the
# measured curves (2), the best configuration under an SLO (3), the crossover with KV bytes (2),
# and one reasoned choice (1). Hidden tests compare your functions with `specbook.roofline` and
# `specbook.theory` on other inputs. Write the arithmetic yourself: a graded function that calls
# specbook's own version of what it asks scores nothing on that part. Python and `math` are enough.

# %% nbgrader={"grade": false, "grade_id": "data", "locked": true, "schema_version": 3, "solution": false}
import math

# Measured with the course's own tools on its 2-core AMD EPYC (no GPU; torch 2.13.0+cpu, 2 threads, load average
# 1.83 at the start), SmolLM2-135M-Instruct in float32: the committed report docs/data/batch.json, made by
#   python -m specbook batch --batch-sizes 1,2,4,8,16,32,64 --max-new-tokens 32 --drafters none,ngram,draft \
#       --categories code_edit,chat,math --repeats 7 --threads 2 --dtype float32 --json docs/data/batch.json
# STEP_MS: t(B, n) = the target's forward over n new positions per row after a 64-token context, the fastest of
#   7 interleaved rounds (specbook.bench.batch_costs.batch_verify_costs), made non-decreasing in n.
# DRAFTERS: each drafter's acceptance alpha (accepted over verified drafts) measured in the run at each batch size
#   (gamma 4, greedy, the code_edit, chat and math prompts), and its cost c_B: prompt lookup runs on the host and
#   is priced at 0 here; the draft model's c_B is one of its forwards over one of the target's, timed as above.
# MEASURED: the whole decoding loop at gamma 4 (median of 7 repeats): (tokens/s over all rows, ms per token).
# --- measured data
STEP_MS = {  # batch -> [t(B, 1), ..., t(B, 5)] in ms: one target forward over n positions per row
    1: [44.45, 49.8, 49.8, 52.06, 59.69],
    2: [50.91, 56.84, 56.84, 60.97, 61.76],
    4: [64.13, 67.95, 77.72, 84.05, 86.09],
    8: [82.03, 92.67, 110.3, 126.61, 146.79],
    16: [95.57, 120.28, 143.98, 179.37, 199.38],
    32: [117.39, 182.67, 245.13, 286.67, 372.13],
    64: [211.18, 321.85, 398.0, 496.71, 604.12],
}
DRAFTERS = {  # drafter -> {"alpha": {batch: acceptance measured there}, "c": {batch: draft cost c_B}}
    "prompt lookup": {"alpha": {1: 0.68, 2: 0.479, 4: 0.434, 8: 0.309, 16: 0.285, 32: 0.288, 64: 0.285},
                      "c": {1: 0.0, 2: 0.0, 4: 0.0, 8: 0.0, 16: 0.0, 32: 0.0, 64: 0.0}},
    "draft model": {"alpha": {1: 0.621, 2: 0.41, 4: 0.407, 8: 0.413, 16: 0.359, 32: 0.349, 64: 0.354},
                    "c": {1: 0.118, 2: 0.155, 4: 0.137, 8: 0.126, 16: 0.11, 32: 0.124, 64: 0.097}},
}
MEASURED = {  # configuration -> batch -> (tokens/s, ms per token) of the whole decoding loop, gamma 4
    "plain": {1: (18.6, 53.8), 2: (29.5, 67.9), 4: (50.2, 75.6), 8: (81.4, 96.0), 16: (127.5, 124.0),
              32: (178.5, 175.8), 64: (195.5, 321.4)},
    "prompt lookup": {1: (30.7, 32.6), 2: (31.5, 52.7), 4: (45.6, 70.2), 8: (59.5, 113.2), 16: (72.2, 184.7),
                      32: (85.5, 303.7), 64: (78.3, 659.4)},
    "draft model": {1: (23.2, 43.0), 2: (21.7, 74.0), 4: (32.9, 95.9), 8: (50.1, 132.2), 16: (56.5, 235.0),
                    32: (66.6, 412.3), 64: (63.4, 860.0)},
}
# --- end of measured data

# The GPUs of part 4: NVIDIA datasheets, dense bfloat16 tensor-core peaks (without 2:4 sparsity), memory bandwidth.
GPUS = {  # name -> (peak bf16 FLOP/s, bandwidth bytes/s, memory)
    "A100 SXM": (312e12, 2.039e12, "HBM2e"),  # NVIDIA A100 Tensor Core GPU datasheet, 80 GB SXM
    "L4": (121e12, 300e9, "GDDR6"),  # NVIDIA L4 Tensor Core GPU datasheet
    "H200 SXM": (989.4e12, 4.8e12, "HBM3e"),  # NVIDIA H200 Tensor Core GPU datasheet
}

# %% [markdown] nbgrader={"grade": false, "grade_id": "step_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 1: one step with the KV cache
#
# A decode step over B rows of n positions each is two kernels, one after the other, each
# bound by its own roofline (lesson 6):
#
# * the weight products: `max(2 params B n / peak, params dtype_bytes / bandwidth)` seconds;
# * attention over the cache: every row reads its own KV cache, `kv_bytes_per_row` bytes, once
#   per pass (`kv_reads="once"`, a multi-query kernel) or once per position
#   (`kv_reads="per_position"`, the pass run as n one-query rows). Price attention by its reads
#   alone (its arithmetic is far below any GPU's ridge).
#
# The two times add. Write `step_time_kv(peak_flops, bandwidth, batch, positions, params,
# dtype_bytes, kv_bytes_per_row, kv_reads="once")`, in seconds.

# %% nbgrader={"grade": false, "grade_id": "step_time_kv", "locked": false, "schema_version": 3, "solution": true}
def step_time_kv(peak_flops: float, bandwidth: float, batch: int, positions: int, params: float, dtype_bytes: float,
                 kv_bytes_per_row: float, kv_reads: str = "once") -> float:
    """Seconds of one step: the weight products on their roofline, plus the KV-cache reads."""
    ### BEGIN SOLUTION
    weights = max(2 * params * batch * positions / peak_flops, params * dtype_bytes / bandwidth)
    reads = positions if kv_reads == "per_position" else 1
    return weights + batch * kv_bytes_per_row * reads / bandwidth
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "step_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_h100 = (989.4e12, 3.35e12)
assert abs(step_time_kv(*_h100, 1, 5, 7e9, 2, 0.0) - 14e9 / 3.35e12) < 1e-12, "batch 1, no cache: the weights' read"
assert abs(step_time_kv(*_h100, 64, 5, 7e9, 2, 0.0) - 2 * 7e9 * 320 / 989.4e12) < 1e-12, "320 positions: arithmetic"
### BEGIN HIDDEN TESTS
# Short tracebacks: the feedback shows the assertion's message, not this cell's source.
# %xmode Minimal
from specbook import roofline as _rl
from specbook.grading.own_work import assert_own_work

_STEP_LIBRARY = tuple(f"specbook.roofline.{name}" for name in (
    "serving_step_time", "step_time", "_step_flops_bytes", "serving_predict", "predict", "plain_throughput"))
assert_own_work(step_time_kv, forbidden=_STEP_LIBRARY,
                calls=[(989.4e12, 3.35e12, 64, 5, 7e9, 2, 6.7e7, "once"), (121e12, 3e11, 8, 3, 1e9, 2, 1e6,
                                                                            "per_position")])
for _peak, _bw, _b, _n, _p, _db, _kv, _reads in [
        (989.4e12, 3.35e12, 64, 5, 7e9, 2, 6.7e7, "once"), (989.4e12, 3.35e12, 64, 5, 7e9, 2, 6.7e7, "per_position"),
        (312e12, 2.039e12, 200, 4, 7e9, 2, 3.3e7, "once"), (121e12, 300e9, 1, 1, 7e9, 2, 0.0, "once"),
        (121e12, 300e9, 500, 3, 1.3e8, 4, 2.5e6, "per_position"), (8.9e10, 3.0e10, 16, 5, 1.35e8, 4, 5.5e5, "once"),
        (4.8e12, 4.8e12, 3, 9, 1e9, 2, 1e8, "per_position")]:
    _hw = _rl.Hardware("a GPU", {"bfloat16": _peak}, _bw, "the hidden test")
    _want = _rl.serving_step_time(_hw, "bfloat16", _b, _n, _p, _db, kv_bytes_per_row=_kv, kv_reads=_reads)
    _got = step_time_kv(_peak, _bw, _b, _n, _p, _db, _kv, _reads)
    assert isinstance(_got, float) and abs(_got - _want) <= 1e-9 * _want, (
        f"step_time_kv(peak={_peak:g}, bandwidth={_bw:g}, batch={_b}, positions={_n}, params={_p:g}, "
        f"dtype_bytes={_db}, kv_bytes_per_row={_kv:g}, kv_reads={_reads!r}) = {_got!r}: every row reads its own cache, "
        "and the cache's reads add to the weights' time instead of sharing its max")
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "speedup_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 2: the speedup at batch B, from the measured curves
#
# Write `speedup_at_batch(step_ms, batch, gamma, alpha, c)`: the predicted speedup of
# speculation over plain decoding at `batch` rows, with `step_ms[batch][n - 1]` = t(B, n) like
# `STEP_MS` above. gamma = 0 means plain decoding: return 1.0.

# %% nbgrader={"grade": false, "grade_id": "speedup_at_batch", "locked": false, "schema_version": 3, "solution": true}
def speedup_at_batch(step_ms: dict, batch: int, gamma: int, alpha: float, c: float) -> float:
    """E(alpha, gamma) / (gamma c + t(B, gamma + 1) / t(B, 1)); 1.0 for gamma = 0."""
    ### BEGIN SOLUTION
    if gamma == 0:
        return 1.0
    tokens = sum(alpha ** k for k in range(gamma + 1))
    verify_cost = step_ms[batch][gamma] / step_ms[batch][0]
    return tokens / (gamma * c + verify_cost)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "speedup_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_flat = {1: [10.0] * 6}
assert speedup_at_batch(_flat, 1, 0, 0.8, 0.05) == 1.0
assert abs(speedup_at_batch(_flat, 1, 4, 0.8, 0.05) - 3.3616 / 1.2) < 1e-9, "free verification: the paper's 2.80"
### BEGIN HIDDEN TESTS
# Short tracebacks: the feedback shows the assertion's message, not this cell's source.
# %xmode Minimal
from specbook import theory as _theory
from specbook.grading.own_work import assert_own_work

_THEORY = tuple(f"specbook.theory.{name}" for name in ("speedup", "expected_tokens", "_yield", "optimal_gamma"))
_ROOF = tuple(f"specbook.roofline.{name}" for name in ("predict", "serving_predict"))
_curves = {1: [20.0, 20.5, 21.0, 22.0, 25.0, 30.0], 8: [30.0, 36.0, 45.0, 54.0, 66.0, 80.0],
           64: [90.0, 170.0, 260.0, 350.0, 430.0, 520.0]}
assert_own_work(speedup_at_batch, forbidden=_THEORY + _ROOF, calls=[(_curves, 8, 3, 0.7, 0.1), (_curves, 1, 5, 0.9, 0.0)])
for _b, _g, _a, _c in [(1, 4, 0.8, 0.05), (8, 3, 0.7, 0.1), (64, 5, 0.9, 0.0), (64, 1, 0.3, 0.4), (8, 2, 1.0, 0.2),
                       (1, 5, 0.0, 0.1)]:
    _want = float(_theory.speedup(_a, _g, _c, _curves[_b][_g] / _curves[_b][0]))
    _got = speedup_at_batch(_curves, _b, _g, _a, _c)
    assert abs(_got - _want) < 1e-9, (
        f"speedup_at_batch(curves, batch={_b}, gamma={_g}, alpha={_a}, c={_c}) = {_got!r}: a round is gamma draft steps "
        "and one pass over gamma + 1 positions, both relative to one plain step at the same batch, and it yields the "
        "accepted drafts plus one token")
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "config_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 3: the best configuration under an SLO
#
# Write `best_config(step_ms, drafters, slo_ms, max_gamma=4)`. The candidates are plain decoding
# at every batch size of `step_ms`, and every drafter of `drafters` (shaped like `DRAFTERS`) with
# gamma = 1 .. `max_gamma` at every batch size. For each, with t1 = t(B, 1):
#
# * plain decoding: `ms_per_token` = t1, `tokens_per_s` = B / t1 (t1 in seconds);
# * speculation: `ms_per_token` = t1 / speedup, `tokens_per_s` = speedup x B / t1, with the
#   drafter's alpha and c_B at that batch.
#
# Return the candidate with the most `tokens_per_s` among those with `ms_per_token <= slo_ms`, as
# a dict `{"batch", "drafter", "gamma", "tokens_per_s", "ms_per_token"}` (`drafter` None and
# `gamma` 0 for plain decoding), or None if none meets the SLO. On a tie: the smaller batch,
# then plain decoding, then the shorter draft, then the drafter that comes first in `drafters`.

# %% nbgrader={"grade": false, "grade_id": "best_config", "locked": false, "schema_version": 3, "solution": true}
def best_config(step_ms: dict, drafters: dict, slo_ms: float, max_gamma: int = 4) -> dict | None:
    """The configuration with the most throughput whose latency meets slo_ms, or None."""
    ### BEGIN SOLUTION
    candidates = []  # (sort key, config)
    order = {name: i for i, name in enumerate(drafters)}
    for batch in sorted(step_ms):
        t1 = step_ms[batch][0]
        options = [(None, 0, 1.0)]
        for name, drafter in drafters.items():
            for gamma in range(1, max_gamma + 1):
                s = speedup_at_batch(step_ms, batch, gamma, drafter["alpha"][batch], drafter["c"][batch])
                options.append((name, gamma, s))
        for name, gamma, s in options:
            ms = t1 / s
            if ms <= slo_ms:
                tps = s * batch / (t1 / 1e3)
                key = (-tps, batch, name is not None, gamma, -1 if name is None else order[name])
                candidates.append((key, dict(batch=batch, drafter=name, gamma=gamma, tokens_per_s=tps, ms_per_token=ms)))
    return min(candidates, key=lambda kc: kc[0])[1] if candidates else None
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "config_tests", "locked": true, "points": 3, "schema_version": 3, "solution": false}
assert best_config(STEP_MS, DRAFTERS, 0.1) is None, "no configuration answers in 0.1 ms"
_loose = best_config(STEP_MS, DRAFTERS, 1e9)
assert _loose is not None and set(_loose) == {"batch", "drafter", "gamma", "tokens_per_s", "ms_per_token"}
### BEGIN HIDDEN TESTS
# Short tracebacks: the feedback shows the assertion's message, not this cell's source.
# %xmode Minimal
from specbook import theory as _theory
from specbook.grading.own_work import assert_own_work


def _ref_speedup(step_ms, batch, gamma, alpha, c):
    if gamma == 0:
        return 1.0
    return sum(alpha ** k for k in range(gamma + 1)) / (gamma * c + step_ms[batch][gamma] / step_ms[batch][0])


def _ref_best(step_ms, drafters, slo_ms, max_gamma=4):
    best = None
    order = list(drafters)
    for b in sorted(step_ms):
        t1 = step_ms[b][0]
        opts = [(None, 0, 1.0)] + [(n, g, float(_theory.speedup(d["alpha"][b], g, d["c"][b],
                                                                 step_ms[b][g] / step_ms[b][0])))
                                   for n, d in drafters.items() for g in range(1, max_gamma + 1)]
        for n, g, s in opts:
            if t1 / s <= slo_ms:
                key = (-s * b / (t1 / 1e3), b, n is not None, g, -1 if n is None else order.index(n))
                if best is None or key < best[0]:
                    best = (key, dict(batch=b, drafter=n, gamma=g, tokens_per_s=s * b / (t1 / 1e3), ms_per_token=t1 / s))
    return None if best is None else best[1]


# One mistake costs points once: best_config is graded with the reference speedup_at_batch in place of yours.
_yours = speedup_at_batch
speedup_at_batch = _ref_speedup
try:
    _THEORY = tuple(f"specbook.theory.{name}" for name in ("speedup", "expected_tokens", "_yield", "optimal_gamma"))
    _ROOF = tuple(f"specbook.roofline.{name}" for name in ("predict", "serving_predict", "plain_throughput",
                                                           "speculative_throughput"))
    assert_own_work(best_config, forbidden=_THEORY + _ROOF, calls=[(STEP_MS, DRAFTERS, 60.0)])
    _synthetic = {1: [20.0, 21.0, 21.5, 22.0, 24.0], 4: [24.0, 27.0, 31.0, 36.0, 42.0],
                  16: [40.0, 60.0, 82.0, 104.0, 126.0]}
    _drafts = {"lookup": {"alpha": {1: 0.8, 4: 0.6, 16: 0.5}, "c": {1: 0.0, 4: 0.0, 16: 0.0}},
               "small model": {"alpha": {1: 0.9, 4: 0.85, 16: 0.8}, "c": {1: 0.3, 4: 0.2, 16: 0.1}}}
    _cases = [(STEP_MS, DRAFTERS, _slo) for _slo in (10.0, 25.0, 30.0, 45.0, 60.0, 80.0, 120.0, 200.0, 1e9)]
    _cases += [(_synthetic, _drafts, _slo) for _slo in (8.0, 12.0, 20.0, 25.0, 40.0, 1e9)]
    for _s, _d, _slo in _cases:
        _want, _got = _ref_best(_s, _d, _slo), best_config(_s, _d, _slo)
        if _want is None:
            assert _got is None, f"best_config(..., slo_ms={_slo}) = {_got}: no candidate meets this SLO"
            continue
        assert isinstance(_got, dict) and all(_got.get(k) == _want[k] for k in ("batch", "drafter", "gamma")), (
            f"best_config(..., slo_ms={_slo}) chose {_got}: another candidate gives more tokens per second within "
            "the SLO. The latency to compare with the SLO is the time between one row's tokens, not a round's time")
        assert all(abs(_got[k] - _want[k]) <= 1e-6 * _want[k] for k in ("tokens_per_s", "ms_per_token")), (
            f"best_config(..., slo_ms={_slo}) chose the right configuration but reports {_got}: tokens_per_s counts "
            "every row's tokens, ms_per_token one row's")
finally:
    speedup_at_batch = _yours
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "choice_text", "locked": true, "schema_version": 3, "solution": false}
# ## Your configuration, and what the loop adds
#
# The cell below asks your `best_config` for three SLOs and sets the choice beside what the whole
# decoding loop measured at the same batch size (`MEASURED`: plain decoding and gamma 4 only).
# Nothing here is graded. Before you run it, predict: which SLO wants speculation, and which a big
# batch? And will the loop's measured latency be above or below the prediction from the forwards
# alone?

# %% nbgrader={"grade": false, "grade_id": "choices", "locked": true, "schema_version": 3, "solution": false}
for _slo in (30.0, 60.0, 150.0):
    _pick = best_config(STEP_MS, DRAFTERS, _slo)
    if _pick is None:
        print(f"SLO {_slo:g} ms: nothing meets it")
        continue
    _what = "plain decoding" if _pick["drafter"] is None else f"{_pick['drafter']}, gamma {_pick['gamma']}"
    _loop = MEASURED["plain" if _pick["drafter"] is None else _pick["drafter"]][_pick["batch"]]
    print(f"SLO {_slo:g} ms: {_what} at batch {_pick['batch']}: predicted {_pick['tokens_per_s']:.0f} tokens/s, "
          f"{_pick['ms_per_token']:.1f} ms per token; the loop measured {_loop[0]:.0f} tokens/s, {_loop[1]:.1f} ms "
          f"({'plain' if _pick['drafter'] is None else 'gamma 4'})")

# %% [markdown] nbgrader={"grade": false, "grade_id": "crossover_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 4: the crossover on three GPUs, with the KV cache
#
# A 7B model with the attention of Mistral 7B (32 layers, 8 KV heads of 128 dimensions, keys and
# values in bfloat16) serves requests with `CONTEXT` = 256 cached tokens each, on the GPUs of
# `GPUS`. Its weights: 7e9 parameters of 2 bytes. Acceptance `ALPHA_GPU` = 0.7, `GAMMA_GPU` = 3,
# a draft at the fixed cost `C_GPU` = 0.1 plain steps.
#
# * Set `KV_BYTES_PER_ROW`: the bytes of one row's KV cache (keys and values, every layer, every
#   KV head, every cached token).
# * Write `crossover_with_kv(peak_flops, bandwidth, params, dtype_bytes, kv_bytes_per_row, alpha,
#   gamma, c, kv_reads="once", max_batch=4096)`: the smallest batch in 1 .. `max_batch` at which
#   speculation is slower than plain decoding, with every step priced by your `step_time_kv`
#   (the draft steps at c times a plain step); None if there is none.

# %% nbgrader={"grade": false, "grade_id": "gpu_setting", "locked": true, "schema_version": 3, "solution": false}
CONTEXT, ALPHA_GPU, GAMMA_GPU, C_GPU = 256, 0.7, 3, 0.1

# %% nbgrader={"grade": false, "grade_id": "crossover_with_kv", "locked": false, "schema_version": 3, "solution": true}
### BEGIN SOLUTION
KV_BYTES_PER_ROW = 2 * 32 * 8 * 128 * 2 * CONTEXT


def crossover_with_kv(peak_flops, bandwidth, params, dtype_bytes, kv_bytes_per_row, alpha, gamma, c,
                      kv_reads="once", max_batch=4096):
    tokens = sum(alpha ** k for k in range(gamma + 1))
    for batch in range(1, max_batch + 1):
        plain = step_time_kv(peak_flops, bandwidth, batch, 1, params, dtype_bytes, kv_bytes_per_row, "once")
        verify = step_time_kv(peak_flops, bandwidth, batch, gamma + 1, params, dtype_bytes, kv_bytes_per_row, kv_reads)
        if tokens * plain < gamma * c * plain + verify:
            return batch
    return None
### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "crossovers", "locked": true, "schema_version": 3, "solution": false}
CROSSOVERS = {reads: {name: crossover_with_kv(peak, bw, 7e9, 2, KV_BYTES_PER_ROW, ALPHA_GPU, GAMMA_GPU, C_GPU, reads)
                      for name, (peak, bw, _) in GPUS.items()} for reads in ("once", "per_position")}
print(f"{KV_BYTES_PER_ROW / 2**20:.0f} MiB of KV cache per row")
for reads, by_gpu in CROSSOVERS.items():
    print(f"cache read {reads.replace('_', ' ')}: " + ", ".join(f"{k}: {v}" for k, v in by_gpu.items()))

# %% nbgrader={"grade": true, "grade_id": "crossover_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert isinstance(KV_BYTES_PER_ROW, (int, float)) and KV_BYTES_PER_ROW > 0
assert crossover_with_kv(989.4e12, 3.35e12, 7e9, 2, 0.0, 0.8, 4, 0.05, "once", 100) is None, \
    "the course's H100 example does not lose below batch 100"
### BEGIN HIDDEN TESTS
# Short tracebacks: the feedback shows the assertion's message, not this cell's source.
# %xmode Minimal
from specbook import roofline as _rl
from specbook.grading.own_work import assert_own_work

assert KV_BYTES_PER_ROW == 2 * 32 * 8 * 128 * 2 * 256, (
    f"KV_BYTES_PER_ROW = {KV_BYTES_PER_ROW}: a cached token holds a key and a value of 128 numbers for each of the "
    "8 KV heads, in each of the 32 layers, at 2 bytes a number")


def _ref_step(peak, bw, b, n, p, db, kv, reads="once"):
    return max(2 * p * b * n / peak, p * db / bw) + b * kv * (n if reads == "per_position" else 1) / bw


# One mistake costs points once: crossover_with_kv is graded with the reference step_time_kv in place of yours.
_yours = step_time_kv
step_time_kv = _ref_step
try:
    _FORBIDDEN = tuple(f"specbook.roofline.{name}" for name in (
        "serving_crossover", "predicted_crossover", "serving_predict", "predict", "serving_step_time", "step_time",
        "ridge_batch")) + ("specbook.theory.speedup", "specbook.theory.expected_tokens", "specbook.theory._yield")
    assert_own_work(crossover_with_kv, forbidden=_FORBIDDEN,
                    calls=[(312e12, 2.039e12, 7e9, 2, 3.3e7, 0.7, 3, 0.1, "once", 300)])
    for _peak, _bw, _p, _kv, _a, _g, _c, _reads in [
            (312e12, 2.039e12, 7e9, 3.3e7, 0.7, 3, 0.1, "once"), (312e12, 2.039e12, 7e9, 3.3e7, 0.7, 3, 0.1, "per_position"),
            (989.4e12, 3.35e12, 7e9, 0.0, 0.8, 4, 0.05, "once"), (989.4e12, 3.35e12, 7e9, 6.7e7, 0.8, 4, 0.05, "once"),
            (121e12, 300e9, 7e9, 1.3e8, 0.6, 2, 0.2, "per_position"), (989.4e12, 4.8e12, 1.4e10, 2e7, 0.9, 6, 0.02,
                                                                        "per_position")]:
        _shape = _rl.ModelShape("a model", _p, 1, 1, 1, 1, "the hidden test")  # 2 x 1 x 1 x 1 x 2 bytes per token
        _hw = _rl.Hardware("a GPU", {"bfloat16": _peak}, _bw, "the hidden test")
        _want = _rl.serving_crossover(_hw, "bfloat16", _g, _a, _shape, range(1, 4097), draft=_c, context=_kv / 4,
                                      kv_reads=_reads, attention_flops=False)
        _got = crossover_with_kv(_peak, _bw, _p, 2, _kv, _a, _g, _c, _reads)
        assert _got == _want, (
            f"crossover_with_kv(peak={_peak:g}, bandwidth={_bw:g}, params={_p:g}, kv_bytes_per_row={_kv:g}, "
            f"alpha={_a}, gamma={_g}, c={_c}, kv_reads={_reads!r}) = {_got}: it is the first batch at which a round's "
            "time, gamma draft steps at c plain steps each plus one verify step, exceeds the time plain decoding takes "
            "for the same tokens, E plain steps; None only if that never happens up to max_batch")
finally:
    step_time_kv = _yours
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "why_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 5: which GPU keeps speculation longest, and why
#
# Read `CROSSOVERS`. Set `WHY` to the statement that explains on which GPU speculation pays up to
# the largest batch:
#
# * "a": the H200, because its peak FLOP/s is the highest;
# * "b": the L4, because its ridge (peak FLOP/s over bandwidth) is the highest, so its steps stay
#   memory-bound, and extra positions free, up to the most positions;
# * "c": the A100, because its memory is HBM2e;
# * "d": the L4, because its bandwidth is the lowest, so its KV cache reads cost the least.

# %% nbgrader={"grade": false, "grade_id": "why", "locked": false, "schema_version": 3, "solution": true}
### BEGIN SOLUTION
WHY = "b"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "why_tests", "locked": true, "points": 1, "schema_version": 3, "solution": false}
assert WHY in ("a", "b", "c", "d"), "WHY must be one of 'a', 'b', 'c', 'd'"
### BEGIN HIDDEN TESTS
# %xmode Minimal
from specbook import roofline as _rl

_last = {reads: max(("A100 SXM", "L4", "H200 SXM"), key=lambda hw: _rl.serving_crossover(
    hw, "bfloat16", 3, 0.7, _rl.MODELS["7B"], range(1, 4097), draft=0.1, context=256, kv_reads=reads,
    attention_flops=False) or 10**9) for reads in ("once", "per_position")}
_highest_ridge = max(("A100 SXM", "L4", "H200 SXM"), key=lambda hw: _rl.ridge(hw, "bfloat16"))
assert _last["once"] == _last["per_position"] == _highest_ridge == "L4"
assert WHY == "b", (
    f"WHY = {WHY!r}: look at which GPU lasts longest in CROSSOVERS, then ask what sets the batch at which a step "
    "stops being memory-bound; a slower memory does not make the same bytes cheaper")
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "closing", "locked": true, "schema_version": 3, "solution": false}
# The slowest GPU of the three keeps speculation worth it to the largest batch: what decides the
# crossover is not the peak but the ratio of peak to bandwidth, and the slow memory of the L4 gives
# it the highest ridge. On the measured CPU curves the loop's own work (verification, bookkeeping,
# the host's lookups) adds time that the forwards alone do not show; lesson 6 splits a run into
# those parts, and `docs/batching.md` lists the measured crossovers of this machine.
