"""specbook.roofline.serving: the terms the plain roofline leaves out, the ridge batch, the serving crossover."""
import math

import pytest

from specbook import roofline as rl
from specbook import theory

H100 = "H100 SXM"
SEVEN_B = rl.MODELS["7B"]


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
