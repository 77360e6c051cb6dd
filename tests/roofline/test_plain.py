"""specbook.roofline: the course's table exactly, lesson 1's rows and verify cost, step time, the crossover."""
import math

import pytest

from specbook import roofline as rl
from specbook import theory

SMOLLM2 = 134_515_008  # SmolLM2-135M parameters (tied embeddings counted once)
H100 = "H100 SXM"


def share(fraction: float) -> str:
    """How the course text writes a share of the ridge."""
    if fraction >= 1.0:
        return "OVER the ridge"
    return f"{fraction:.1%}" if fraction < 0.1 else f"{fraction:.0%}"


def test_course_table_exactly():
    """Course text, 'batching versus speculation': intensity 1, 5, 64, 320 against ridge 295."""
    assert round(rl.ridge(H100, "bfloat16")) == 295
    rows = [(1, 0, 1.0, "0.3%"), (1, 4, 5.0, "1.7%"), (64, 0, 64.0, "22%"), (64, 4, 320.0, "OVER the ridge")]
    for params in (SMOLLM2, 7e9, 70e9):  # the weights cancel: intensity does not depend on model size
        for batch, gamma, intensity, text in rows:
            assert rl.step_intensity(batch, gamma, params, 2) == intensity
            assert share(rl.ridge_fraction(H100, "bfloat16", batch, gamma, params, 2)) == text


def test_intensity_formula_and_kv_traffic():
    assert rl.step_intensity(1, 0, 1e9, 2) == 1.0 and rl.step_intensity(8, 3, 1e9, 2) == 32.0  # positions, in bf16
    assert rl.step_intensity(8, 3, 1e9, 4) == 2 * 8 * 4 / 4  # float32 halves the intensity
    with_kv = rl.step_intensity(8, 3, 1e9, 2, kv_bytes_per_row=1e8)
    assert with_kv == pytest.approx(2e9 * 32 / (2e9 + 8e8))
    assert with_kv < rl.step_intensity(8, 3, 1e9, 2)


def test_presets_and_measured_machine():
    for key in ("H100 SXM", "A100 SXM", "L4", "RTX 4090"):
        hw = rl.PRESETS[key]
        assert {"bfloat16", "float32"} <= set(hw.flops) and hw.bandwidth > 0
        assert "datasheet" in hw.source or "whitepaper" in hw.source, hw.source
    assert rl.ridge("A100 SXM", "bfloat16") == pytest.approx(312e12 / 2.039e12)
    assert rl.ridge("L4", "bfloat16") == pytest.approx(403.33, abs=0.01)
    assert rl.ridge(H100, "bfloat16") == pytest.approx(989.4e12 / 3.35e12)
    for key, r in (("H100 SXM", 295), ("H200 SXM", 206), ("A100 SXM", 153)):
        assert rl.ridge(key, "bfloat16") == pytest.approx(r, abs=1)
    with pytest.raises(Exception):
        rl.PRESETS[H100].bandwidth = 1.0  # frozen
    cpu = rl.Hardware.measured({"float32": 0.35e12, "bfloat16": 2.0e12}, 23.6e9)
    assert rl.ridge(cpu, "float32") == pytest.approx(14.83, abs=0.01)
    assert rl.preset(cpu) is cpu and "measured" in cpu.name


def test_lesson_one_rows():
    """Lesson 1's table: the same four steps, as dicts for its plot (plots.plot_roofline)."""
    rows = rl.roofline_rows()
    assert [(r["batch"], r["gamma"], r["intensity"]) for r in rows] == [(1, 0, 1), (1, 4, 5), (64, 0, 64), (64, 4, 320)]
    assert [share(r["fraction_of_ridge"]) for r in rows] == ["0.3%", "1.7%", "22%", "OVER the ridge"]
    assert [r["compute_bound"] for r in rows] == [False, False, False, True]
    assert {r["ridge"] for r in rows} == {rl.ridge(H100, "bfloat16")}
    # on an H200 the same 320 is even further over its lower ridge
    assert rl.roofline_rows([64], [4], hw="H200 SXM")[0]["fraction_of_ridge"] > rows[3]["fraction_of_ridge"]
    # 4-byte float32 weights halve the intensity, against float32's own ridge
    f32 = rl.roofline_rows(dtype="float32")
    assert [r["intensity"] for r in f32] == [0.5, 2.5, 32, 160] and f32[0]["ridge"] == rl.ridge(H100, "float32")


def test_verify_time_ratio():
    assert rl.verify_time_ratio(5, 1) == 1.0  # memory-bound: extra positions free
    assert rl.verify_time_ratio(5, 64) == pytest.approx(320 / rl.ridge(H100, "bfloat16"))
    assert rl.verify_time_ratio(5, 4096) == pytest.approx(5.0)  # fully compute-bound
    r = [rl.verify_time_ratio(5, b) for b in (1, 16, 64, 128, 512, 4096)]
    assert r == sorted(r)
    big = rl.predict(H100, "bfloat16", 128, 4, 0.8, 0.05, 7e9, 2)
    assert rl.verify_time_ratio(5, 128) == pytest.approx(big.verify_cost)  # the cost the prediction uses
    # at batch 1 the first costly pass is the first integer past the ridge (lesson 1, exercise 3)
    assert next(n for n in range(1, 1000) if rl.verify_time_ratio(n) > 1) == math.floor(rl.ridge(H100, "bfloat16")) + 1
    # batching eats the spare compute: the same alpha/gamma/c wins less at batch 128
    s1, s128 = (theory.speedup(0.8, 4, 0.05, rl.verify_time_ratio(5, b)) for b in (1, 128))
    assert s128 < s1


def test_step_time_is_the_larger_of_compute_and_memory():
    hw = rl.PRESETS[H100]
    params = 7e9
    memory = params * 2 / hw.bandwidth
    assert rl.step_time(H100, "bfloat16", 1, 5, params, 2) == memory  # under the ridge: weights only
    big = rl.step_time(H100, "bfloat16", 64, 5, params, 2)
    assert big == pytest.approx(2 * params * 320 / hw.flops["bfloat16"]) and big > memory
    # Below the ridge extra positions are free; above it they cost in proportion.
    assert rl.step_time(H100, "bfloat16", 8, 5, params, 2) == rl.step_time(H100, "bfloat16", 8, 1, params, 2)
    t1, t2 = (rl.step_time(H100, "bfloat16", b, 5, params, 2) for b in (256, 512))
    assert t2 == pytest.approx(2 * t1)


def test_prediction_numbers():
    p = rl.predict(H100, "bfloat16", 1, 4, 0.8, 0.05, 7e9, 2)
    e = theory.expected_tokens(0.8, 4)
    # memory-bound: v = 1, so the speedup is Leviathan et al.'s E / (gamma c + 1)
    assert p.verify_cost == 1.0 and p.speedup == pytest.approx(e / (4 * 0.05 + 1))
    assert p.spec_tokens_per_s == pytest.approx(p.speedup * p.plain_tokens_per_s)
    assert p.spec_ms_per_token == pytest.approx(p.plain_ms_per_token / p.speedup)
    assert p.wasted_fraction == pytest.approx((4 - (e - 1)) / 5) and not p.compute_bound
    assert rl.plain_throughput(H100, "bfloat16", 1, 7e9, 2) == pytest.approx(p.plain_tokens_per_s)
    assert rl.speculative_throughput(H100, "bfloat16", 1, 7e9, 2, 0.8, 4, 0.05) == pytest.approx(p.spec_tokens_per_s)
    big = rl.predict(H100, "bfloat16", 128, 4, 0.8, 0.05, 7e9, 2)
    assert big.compute_bound and big.verify_cost == pytest.approx(640 / 295.343, rel=1e-4)
    assert rl.predict(H100, "bfloat16", 4, 4, 1.0, 0.0, 7e9, 2).wasted_fraction == 0.0
    assert rl.predict(H100, "bfloat16", 4, 4, 0.0, 0.0, 7e9, 2).wasted_fraction == pytest.approx(4 / 5)


def brute_crossover(hw, dtype, alpha, gamma, c, sizes):
    for b in sorted(sizes):
        e = theory.expected_tokens(alpha, gamma)
        t1 = rl.step_time(hw, dtype, b, 1, 7e9, 2)
        tv = rl.step_time(hw, dtype, b, gamma + 1, 7e9, 2)
        if e / (gamma * c + tv / t1) < 1:
            return b
    return None


@pytest.mark.parametrize("hw", sorted(rl.PRESETS))
@pytest.mark.parametrize("alpha, gamma, c", [(0.8, 4, 0.05), (0.6, 4, 0.05), (0.9, 8, 0.02), (0.5, 2, 0.3)])
def test_predicted_crossover_matches_the_definition(hw, alpha, gamma, c):
    sizes = [2 ** k for k in range(11)]
    got = rl.predicted_crossover(hw, "bfloat16", 7e9, 2, alpha, gamma, c, sizes)
    assert got == brute_crossover(hw, "bfloat16", alpha, gamma, c, sizes)
    if got is not None:  # the first batch where speculation loses, and it keeps losing after
        for b in sizes:
            p = rl.predict(hw, "bfloat16", b, gamma, alpha, c, 7e9, 2)
            assert (p.speedup < 1) == (b >= got)


def test_crossover_moves_with_acceptance_and_ridge():
    sizes = range(1, 1025)
    hi = rl.predicted_crossover(H100, "bfloat16", 7e9, 2, 0.9, 4, 0.05, sizes)
    lo = rl.predicted_crossover(H100, "bfloat16", 7e9, 2, 0.5, 4, 0.05, sizes)
    assert lo < hi  # better acceptance keeps speculation worth it to a bigger batch
    a100 = rl.predicted_crossover("A100 SXM", "bfloat16", 7e9, 2, 0.9, 4, 0.05, sizes)
    assert a100 < hi  # a lower ridge (153 against 295) is crossed sooner
    assert rl.predicted_crossover(H100, "bfloat16", 7e9, 2, 0.8, 0, 0.05, sizes) is None  # gamma 0 is plain
    assert rl.predicted_crossover(H100, "bfloat16", 7e9, 2, 0.9, 4, 0.05, [1, 2, 4]) is None


@pytest.mark.parametrize("call, name", [
    (lambda: rl.step_intensity(0, 4, 1e9, 2), "batch"),
    (lambda: rl.step_intensity(1.5, 4, 1e9, 2), "batch"),
    (lambda: rl.step_intensity(True, 4, 1e9, 2), "batch"),
    (lambda: rl.step_intensity(1, -1, 1e9, 2), "gamma"),
    (lambda: rl.step_intensity(1, 4, 0, 2), "params"),
    (lambda: rl.step_intensity(1, 4, 1e9, math.nan), "dtype_bytes"),
    (lambda: rl.step_intensity(1, 4, 1e9, 2, kv_bytes_per_row=-1), "kv_bytes_per_row"),
    (lambda: rl.ridge("TPU", "bfloat16"), "hw"),
    (lambda: rl.ridge(H100, "int4"), "dtype"),
    (lambda: rl.step_time(H100, "bfloat16", 1, 0, 1e9, 2), "positions_per_row"),
    (lambda: rl.predict(H100, "bfloat16", 1, 4, 1.2, 0.05, 1e9, 2), "alpha"),
    (lambda: rl.predict(H100, "bfloat16", 1, 4, 0.8, -0.1, 1e9, 2), "c"),
    (lambda: rl.predicted_crossover(H100, "bfloat16", 1e9, 2, 0.8, 4, 0.05, []), "batch_sizes"),
    (lambda: rl.predicted_crossover(H100, "bfloat16", 1e9, 2, 0.8, 4, 0.05, [0, 1]), "batch_sizes"),
    (lambda: rl.Hardware("x", {"bfloat16": -1.0}, 1e9, "made up"), "flops"),
    (lambda: rl.Hardware("x", {"bfloat16": 1e12}, 0, "made up"), "bandwidth"),
    (lambda: rl.Hardware("x", {"bfloat16": 1e12}, 1e9, ""), "source"),
    (lambda: rl.Hardware("x", {}, 1e9, "made up"), "flops"),
    (lambda: rl.Hardware("x", {"bfloat16": 1e12}, math.nan, "made up"), "bandwidth"),
    (lambda: rl.roofline_rows(hw="TPU"), "hw"),
    (lambda: rl.roofline_rows(batches=[0]), "batches"),
    (lambda: rl.roofline_rows(gammas=[]), "gammas"),
    (lambda: rl.roofline_rows(dtype="int4"), "dtype"),
    (lambda: rl.verify_time_ratio(0, 1), "n_positions"),
    (lambda: rl.verify_time_ratio(5, 0), "batch"),
])
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_the_batch_commands_prediction_is_this_step_time():
    """bench/batch_costs prices a step with rl.step_time on the machine's measured peaks: at every batch
    size its predicted speedup is the one rl.predict gives for the same machine (no draft model)."""
    from specbook.bench.batch_costs import measured_hardware, roofline_speedup

    hw = measured_hardware({"matmul_flop_per_s": 2e12, "memory_bytes_per_s": 5e10, "dtype": "bfloat16"})
    assert hw.peak("bfloat16") == 2e12 and rl.ridge(hw, "bfloat16") == pytest.approx(40)
    for batch in (1, 8, 64):
        expected = rl.predict(hw, "bfloat16", batch, 4, 0.7, 0.0, 1e8, 2).speedup
        assert roofline_speedup(0.7, 4, batch, hw, "bfloat16", 10**8, 2) == pytest.approx(expected)


# --------------------------------------------------------------------------- what the plain roofline leaves out

SEVEN_B = rl.MODELS["7B"]


def test_presets_name_their_memory():
    assert {k: rl.PRESETS[k].memory for k in rl.PRESETS} == {
        "H100 SXM": "HBM3", "H200 SXM": "HBM3e", "A100 SXM": "HBM2e", "L4": "GDDR6", "RTX 4090": "GDDR6X"}
    assert rl.Hardware.measured({"float32": 1e11}, 1e10).memory == ""


def test_model_shape_kv_bytes_and_attention_flops():
    # Mistral 7B's geometry: 2 x 32 layers x 8 KV heads x 128 dims x 2 bytes = 128 KiB per token in bfloat16
    assert SEVEN_B.kv_bytes_per_token(2) == 131072 and SEVEN_B.kv_bytes_per_token(4) == 262144
    assert SEVEN_B.kv_bytes_per_row(512, 2) == 512 * 131072 and SEVEN_B.kv_bytes_per_row(0, 2) == 0
    assert SEVEN_B.attention_flops_per_position(1000) == 4 * 32 * 32 * 128 * 1000
    draft = rl.MODELS["draft 0.35B"]
    assert draft.params / SEVEN_B.params == pytest.approx(0.05)
    assert draft.kv_bytes_per_token(2) / SEVEN_B.kv_bytes_per_token(2) == 0.25


@pytest.mark.parametrize("hw", sorted(rl.PRESETS))
@pytest.mark.parametrize("batch, n", [(1, 1), (1, 5), (64, 5), (300, 1), (1000, 9)])
def test_serving_step_time_without_extras_is_the_plain_step_time(hw, batch, n):
    assert rl.serving_step_time(hw, "bfloat16", batch, n, 7e9, 2) == rl.step_time(hw, "bfloat16", batch, n, 7e9, 2)


def test_serving_step_time_adds_attention_as_its_own_kernel():
    hw = rl.PRESETS[H100]
    kv = SEVEN_B.kv_bytes_per_row(512, 2)
    weights = rl.step_time(H100, "bfloat16", 64, 5, 7e9, 2)
    once = rl.serving_step_time(H100, "bfloat16", 64, 5, 7e9, 2, kv_bytes_per_row=kv)
    assert once == pytest.approx(weights + 64 * kv / hw.bandwidth)  # the reads add, they do not hide in the max
    assert once > rl.step_time(H100, "bfloat16", 64, 5, 7e9, 2, kv_bytes_per_row=kv)  # the single-max bound
    per_position = rl.serving_step_time(H100, "bfloat16", 64, 5, 7e9, 2, kv_bytes_per_row=kv, kv_reads="per_position")
    assert per_position == pytest.approx(weights + 5 * 64 * kv / hw.bandwidth)
    # attention's arithmetic: its own max against its own reads (here far below the ridge, so the reads win)
    flops = SEVEN_B.attention_flops_per_position(512)
    with_flops = rl.serving_step_time(H100, "bfloat16", 64, 5, 7e9, 2, kv_bytes_per_row=kv,
                                      attention_flops_per_position=flops)
    assert with_flops == once and flops * 5 / kv < rl.ridge(H100, "bfloat16")
    arithmetic_only = rl.serving_step_time(H100, "bfloat16", 64, 5, 7e9, 2, attention_flops_per_position=flops)
    assert arithmetic_only == pytest.approx(weights + flops * 64 * 5 / hw.peak("bfloat16"))


def test_efficiencies_are_a_slower_machine():
    slow = rl.Hardware("slow H100", {"bfloat16": 0.6 * 989.4e12}, 0.9 * 3.35e12, "scaled")
    for batch, n in [(1, 5), (64, 5), (512, 1), (2048, 9)]:
        got = rl.serving_step_time(H100, "bfloat16", batch, n, 7e9, 2, compute_efficiency=0.6,
                                   bandwidth_efficiency=0.9)
        assert got == pytest.approx(rl.step_time(slow, "bfloat16", batch, n, 7e9, 2))
    assert rl.ridge_batch(H100, "bfloat16", 4, 2, compute_efficiency=0.6, bandwidth_efficiency=0.9) == \
        rl.ridge_batch(slow, "bfloat16", 4, 2) == 40


@pytest.mark.parametrize("hw", sorted(rl.PRESETS))
@pytest.mark.parametrize("gamma", [0, 1, 4, 7])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_ridge_batch_is_the_first_batch_at_the_ridge(hw, gamma, dtype):
    nbytes = rl.DTYPE_BYTES[dtype]
    brute = next(b for b in range(1, 100_000) if rl.ridge_fraction(hw, dtype, b, gamma, 7e9, nbytes) >= 1)
    assert rl.ridge_batch(hw, dtype, gamma, nbytes) == brute


def test_the_course_example_ridge_batch_and_crossover_differ():
    assert rl.ridge_batch(H100, "bfloat16", 4, 2) == 60
    assert rl.serving_crossover(H100, "bfloat16", 4, 0.8, SEVEN_B, range(1, 4097), draft=0.05) == 187
    assert rl.serving_crossover(H100, "bfloat16", 4, 0.6, SEVEN_B, range(1, 4097), draft=0.05) == 125


def _cdf_by_recursion(alpha, gamma, n, r, truncate=False):
    """P(a row finishes n tokens within r rounds), by recursion over the first round (exact, in floats)."""
    if n <= 0:
        return 1.0
    if r == 0:
        return 0.0
    g = min(gamma, n - 1) if truncate else gamma  # a loop that drafts at most what is left, minus the bonus
    law = [alpha ** (k - 1) * (1 - alpha) for k in range(1, g + 1)] + [alpha ** g]
    return sum(p * _cdf_by_recursion(alpha, gamma, n - k, r - 1, truncate) for k, p in enumerate(law, start=1))


@pytest.mark.parametrize("alpha, gamma, n", [(0.5, 2, 7), (0.8, 4, 9), (0.3, 1, 6), (0.9, 3, 8)])
def test_rounds_needed_cdf_by_recursion(alpha, gamma, n):
    cdf = rl.rounds_needed_cdf(alpha, gamma, n)
    assert len(cdf) == n + 1 and cdf[0] == 0.0 and cdf[-1] == pytest.approx(1.0)
    for r in range(n + 1):
        assert cdf[r] == pytest.approx(_cdf_by_recursion(alpha, gamma, n, r), abs=1e-12)
        # drafting fewer near the budget needs exactly as many rounds (the docstring's claim)
        assert cdf[r] == pytest.approx(_cdf_by_recursion(alpha, gamma, n, r, truncate=True), abs=1e-12)


def test_rounds_needed_edge_cases():
    assert rl.rounds_needed_cdf(1.0, 4, 12) == [0.0, 0.0, 0.0, 1.0] + [1.0] * 9  # 5 tokens a round: 3 rounds
    assert rl.rounds_needed_cdf(0.0, 4, 5) == [0.0] * 5 + [1.0]  # one token a round
    assert rl.rounds_needed_cdf(0.7, 0, 3) == [0.0, 0.0, 0.0, 1.0]  # gamma 0 is plain decoding
    assert rl.expected_slowest_rounds([0.8, 0.8, 0.0], 4, 20) == pytest.approx(20.0)  # the row that accepts nothing


def test_expected_slowest_rounds_is_the_mean_of_the_max():
    n, g = 12, 3
    cdfs = {a: rl.rounds_needed_cdf(a, g, n) for a in (0.5, 0.9)}
    pmf = {a: [c[r] - c[r - 1] for r in range(1, n + 1)] for a, c in cdfs.items()}  # P(R = r), r = 1..n
    mean_max = sum(max(r1, r2) * p1 * p2 for r1, p1 in enumerate(pmf[0.5], start=1)
                   for r2, p2 in enumerate(pmf[0.9], start=1))
    assert rl.expected_slowest_rounds([0.5, 0.9], g, n) == pytest.approx(mean_max, abs=1e-12)
    one = rl.expected_slowest_rounds([0.9], g, n)
    assert one == pytest.approx(sum(r * p for r, p in enumerate(pmf[0.9], start=1)), abs=1e-12)
    widths = [rl.expected_slowest_rounds([0.8] * b, 4, 64) for b in (1, 2, 8, 64, 512)]
    assert widths == sorted(widths) and widths[0] < widths[-1]  # the wider the batch, the longer it waits


def test_slowest_row_yield_tends_to_the_mean_for_one_long_row():
    e = float(theory.expected_tokens(0.8, 4))
    assert rl.slowest_row_yield([0.8], 4, 2000) == pytest.approx(e, rel=5e-3)
    assert rl.slowest_row_yield([0.8] * 64, 4, 256) < rl.slowest_row_yield([0.8] * 8, 4, 256) < e


@pytest.mark.parametrize("alpha, gamma", [(0.0, 4), (0.3, 2), (0.73, 4), (0.95, 8), (1.0, 3)])
def test_alpha_for_yield_inverts_the_expected_tokens(alpha, gamma):
    assert rl.alpha_for_yield(float(theory.expected_tokens(alpha, gamma)), gamma) == pytest.approx(alpha, abs=1e-9)


@pytest.mark.parametrize("hw", sorted(rl.PRESETS))
@pytest.mark.parametrize("batch, gamma, alpha, c", [(1, 4, 0.8, 0.05), (64, 4, 0.8, 0.05), (300, 2, 0.6, 0.2),
                                                    (2048, 8, 0.9, 0.0)])
def test_serving_predict_without_extras_is_predict(hw, batch, gamma, alpha, c):
    plain = rl.predict(hw, "bfloat16", batch, gamma, alpha, c, 7e9, 2)
    got = rl.serving_predict(hw, "bfloat16", batch, gamma, alpha, SEVEN_B, draft=c)
    for key in ("speedup", "verify_cost", "plain_tokens_per_s", "plain_ms_per_token", "spec_tokens_per_s",
                "spec_ms_per_token"):
        assert getattr(got, key) == pytest.approx(getattr(plain, key)), key


def test_each_term_moves_the_crossover_the_way_the_lesson_says():
    sizes = range(1, 4097)

    def cross(**terms):
        return rl.serving_crossover(H100, "bfloat16", 4, 0.8, SEVEN_B, sizes, **terms)

    base = cross(draft=0.05)
    assert base == 187
    # the KV cache read once per row moves it out (here beyond any batch), read per position it moves it in
    assert cross(draft=0.05, context=128) == 221 and cross(draft=0.05, context=512) is None
    assert cross(draft=0.05, context=512, kv_reads="per_position") == 123 < base
    # the draft model priced as a decoder with its own KV cache costs more than its weights say
    priced = rl.serving_predict(H100, "bfloat16", 256, 4, 0.8, SEVEN_B, draft=rl.MODELS["draft 0.35B"], context=512)
    assert priced.draft_cost > 0.05 and priced.draft_step_s > 0
    c_b = [rl.serving_predict(H100, "bfloat16", b, 4, 0.8, SEVEN_B, draft=rl.MODELS["draft 0.35B"],
                              context=512).draft_cost for b in (1, 16, 64, 256)]
    assert c_b == sorted(c_b) and c_b[0] == pytest.approx(0.05, abs=0.002)
    assert cross(draft=rl.MODELS["draft 0.35B"], context=512, kv_reads="per_position") == 107
    # a static batch waits for its slowest row; kernels below the peaks cross a lower ridge
    assert cross(draft=0.05, new_tokens=256) == 159
    assert cross(draft=0.05, compute_efficiency=0.6, bandwidth_efficiency=0.9) == 125
    # all of them together, both kernels
    allin = dict(draft=rl.MODELS["draft 0.35B"], context=512, new_tokens=256, compute_efficiency=0.6,
                 bandwidth_efficiency=0.9)
    assert (cross(**allin), cross(**allin, kv_reads="per_position")) == (129, 69)


def test_kv_read_once_never_loses_when_its_limit_is_under_the_margin():
    """Read once, v_B tends to (5 x 2P/F + K/W) / (2P/F + K/W) as B grows: below E - gamma c, no crossover."""
    for hw, want_none in (("L4", True), ("H200 SXM", True), ("A100 SXM", False)):
        h = rl.PRESETS[hw]
        per_row_compute, per_row_kv = 2 * 7e9 / h.peak("bfloat16"), SEVEN_B.kv_bytes_per_row(512, 2) / h.bandwidth
        limit = (5 * per_row_compute + per_row_kv) / (per_row_compute + per_row_kv)
        margin = float(theory.expected_tokens(0.8, 4)) - 4 * 0.05
        got = rl.serving_crossover(hw, "bfloat16", 4, 0.8, SEVEN_B, range(1, 8193), draft=0.05, context=512)
        assert (limit < margin) == want_none == (got is None), (hw, limit, got)


@pytest.mark.parametrize("call, name", [
    (lambda: rl.serving_step_time(H100, "bfloat16", 1, 1, 7e9, 2, kv_reads="twice"), "kv_reads"),
    (lambda: rl.serving_step_time(H100, "bfloat16", 1, 1, 7e9, 2, kv_bytes_per_row=-1), "kv_bytes_per_row"),
    (lambda: rl.serving_step_time(H100, "bfloat16", 1, 1, 7e9, 2, attention_flops_per_position=math.inf),
     "attention_flops_per_position"),
    (lambda: rl.serving_step_time(H100, "bfloat16", 1, 1, 7e9, 2, compute_efficiency=1.5), "compute_efficiency"),
    (lambda: rl.serving_step_time(H100, "bfloat16", 1, 1, 7e9, 2, bandwidth_efficiency=0), "bandwidth_efficiency"),
    (lambda: rl.ridge_batch(H100, "bfloat16", -1, 2), "gamma"),
    (lambda: rl.ridge_batch(H100, "bfloat16", 4, 0), "dtype_bytes"),
    (lambda: rl.ModelShape("m", 1e9, 0, 8, 8, 64, "x"), "layers"),
    (lambda: rl.ModelShape("m", 1e9, 4, 8, 3, 64, "x"), "kv_heads"),
    (lambda: rl.ModelShape("m", 1e9, 4, 8, 8, 64, ""), "source"),
    (lambda: SEVEN_B.kv_bytes_per_row(-5, 2), "context"),
    (lambda: rl.rounds_needed_cdf(1.5, 4, 10), "alpha"),
    (lambda: rl.rounds_needed_cdf(0.5, 4, 0), "new_tokens"),
    (lambda: rl.expected_slowest_rounds([], 4, 10), "alphas"),
    (lambda: rl.expected_slowest_rounds(0.8, 4, 10), "alphas"),
    (lambda: rl.alpha_for_yield(6.0, 4), "tokens_per_round"),
    (lambda: rl.serving_predict(H100, "bfloat16", 1, 4, 0.8, 7e9), "target"),
    (lambda: rl.serving_predict(H100, "bfloat16", 1, 4, 0.8, SEVEN_B, draft="big"), "draft"),
    (lambda: rl.serving_predict(H100, "bfloat16", 1, 4, 0.8, SEVEN_B, context=-1), "context"),
    (lambda: rl.serving_predict(H100, "bfloat16", 1, 4, 0.8, SEVEN_B, new_tokens=0), "new_tokens"),
    (lambda: rl.serving_predict(H100, "int4", 1, 4, 0.8, SEVEN_B), "dtype"),
    (lambda: rl.serving_crossover(H100, "bfloat16", 4, 0.8, SEVEN_B, []), "batch_sizes"),
    (lambda: rl.Hardware("x", {"bfloat16": 1e12}, 1e9, "made up", memory=3), "memory"),
])
def test_bad_input_to_the_extended_model_names_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def _doc_table(text: str, header_start: str) -> list[list[str]]:
    """The rows of the markdown table of docs/batching.md whose header line starts with ``header_start``."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[at + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_batching_page_shows_what_the_library_computes():
    """docs/batching.md's crossover tables of the 7B example are serving_crossover's numbers."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "batching.md").read_text()
    sizes = range(1, 4097)

    def shown(value):
        return None if value.startswith("none") else int(value)

    for context, _, once, per_position in _doc_table(text, "| context (tokens per row)"):
        got = [rl.serving_crossover(H100, "bfloat16", 4, 0.8, SEVEN_B, sizes, draft=0.05, context=int(context),
                                    kv_reads=reads) for reads in rl.KV_READS]
        assert got == [shown(once), shown(per_position)], context
    draft = rl.MODELS["draft 0.35B"]
    ladder = [dict(draft=0.05), dict(draft=0.05, context=512), dict(draft=draft, context=512),
              dict(draft=draft, context=512, new_tokens=256),
              dict(draft=draft, context=512, new_tokens=256, compute_efficiency=0.6, bandwidth_efficiency=0.9)]
    rows = _doc_table(text, "| model | crossover, cache read once per row")
    assert len(rows) == len(ladder)
    for (name, once, per_position), terms in zip(rows, ladder):
        got = [rl.serving_crossover(H100, "bfloat16", 4, 0.8, SEVEN_B, sizes, kv_reads=reads, **terms)
               for reads in rl.KV_READS]
        assert got == [shown(once), shown(per_position)], name
