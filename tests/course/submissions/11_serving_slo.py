"""Broken submissions to 11_serving_slo: each must lose the points of the named cells, and only those."""
from . import mutated

NAME = "11_serving_slo"

STEP_BY_THE_LIBRARY = '''from specbook import roofline


def step_time_kv(peak_flops, bandwidth, batch, positions, params, dtype_bytes, kv_bytes_per_row, kv_reads="once"):
    gpu = roofline.Hardware("mine", {"bfloat16": peak_flops}, bandwidth, "my numbers")
    return roofline.serving_step_time(gpu, "bfloat16", batch, positions, params, dtype_bytes,
                                      kv_bytes_per_row=kv_bytes_per_row, kv_reads=kv_reads)
'''

# every row shares one read of the cache, and the cache's bytes hide inside the weights' max
KV_SHARED = '''def step_time_kv(peak_flops, bandwidth, batch, positions, params, dtype_bytes, kv_bytes_per_row, kv_reads="once"):
    reads = positions if kv_reads == "per_position" else 1
    return max(2 * params * batch * positions / peak_flops,
               (params * dtype_bytes + kv_bytes_per_row * reads) / bandwidth)
'''

SPEEDUP_BY_THE_LIBRARY = '''from specbook import theory


def speedup_at_batch(step_ms, batch, gamma, alpha, c):
    if gamma == 0:
        return 1.0
    return float(theory.speedup(alpha, gamma, c, step_ms[batch][gamma] / step_ms[batch][0]))
'''

# the SLO compared with a whole round's time, not with the time between one row's tokens
SLO_ON_THE_ROUND = '''def best_config(step_ms, drafters, slo_ms, max_gamma=4):
    best = None
    for batch in sorted(step_ms):
        t1 = step_ms[batch][0]
        options = [(None, 0, 1.0, t1)]
        for name, d in drafters.items():
            for gamma in range(1, max_gamma + 1):
                s = speedup_at_batch(step_ms, batch, gamma, d["alpha"][batch], d["c"][batch])
                round_ms = gamma * d["c"][batch] * t1 + step_ms[batch][gamma]
                options.append((name, gamma, s, round_ms))
        for name, gamma, s, round_ms in options:
            if round_ms <= slo_ms:
                tps = s * batch / (t1 / 1e3)
                if best is None or tps > best["tokens_per_s"]:
                    best = dict(batch=batch, drafter=name, gamma=gamma, tokens_per_s=tps, ms_per_token=t1 / s)
    return best
'''

# speculation "loses" where the verify step crosses the ridge, not where a round costs more than its tokens
CROSSOVER_AT_THE_RIDGE = mutated(NAME, "crossover_with_kv", '''        plain = step_time_kv(peak_flops, bandwidth, batch, 1, params, dtype_bytes, kv_bytes_per_row, "once")
        verify = step_time_kv(peak_flops, bandwidth, batch, gamma + 1, params, dtype_bytes, kv_bytes_per_row, kv_reads)
        if tokens * plain < gamma * c * plain + verify:
''', "        if 2 * batch * (gamma + 1) / dtype_bytes >= peak_flops / bandwidth:\n")
KV_ONE_LAYER = mutated(NAME, "crossover_with_kv", "2 * 32 * 8 * 128", "2 * 8 * 128")  # one layer's cache, not 32

# label -> (answers: grade_id -> code, cells that must lose all their points, words the feedback must show)
BROKEN = {
    "step by the library": ({"step_time_kv": STEP_BY_THE_LIBRARY}, ("step_tests",),
                            ["write it yourself", "serving_step_time"]),
    "kv shared": ({"step_time_kv": KV_SHARED}, ("step_tests",), ["every row reads its own cache"]),
    "speedup by the library": ({"speedup_at_batch": SPEEDUP_BY_THE_LIBRARY}, ("speedup_tests",),
                               ["write it yourself", "speedup"]),
    "slo on the round": ({"best_config": SLO_ON_THE_ROUND}, ("config_tests",), ["not a round's time"]),
    "crossover at the ridge": ({"crossover_with_kv": CROSSOVER_AT_THE_RIDGE}, ("crossover_tests",),
                               ["example does not lose below batch 100"]),
    "kv of one layer": ({"crossover_with_kv": KV_ONE_LAYER}, ("crossover_tests",), ["in each of the 32 layers"]),
    "the peak, not the ridge": ({"why": 'WHY = "a"\n'}, ("why_tests",), ["what sets the batch"]),
}
