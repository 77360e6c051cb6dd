"""Lesson 6's BatchingExplorer, driven from Python: its table is specbook.roofline, it refuses bad values."""
import re

import pytest

from specbook import roofline
from specbook.teach.batching import BatchingExplorer


def cells(table_html: str) -> dict[str, str]:
    return dict(re.findall(r'data-key="(\w+)">([^<]*)<', table_html))


def expected(batch, gamma, alpha, c, hardware="H100 SXM", dtype="bfloat16", params=7e9) -> dict[str, str]:
    hw = roofline.PRESETS[hardware]
    nbytes = roofline.DTYPE_BYTES[dtype]
    p = roofline.predict(hw, dtype, batch, gamma, alpha, c, params, nbytes)
    cross = roofline.predicted_crossover(hw, dtype, params, nbytes, alpha, gamma, c, range(1, 257))
    return {
        "intensity": f"{p.intensity:.1f}", "ridge": f"{p.ridge:.1f}", "ridge_fraction": f"{p.ridge_fraction:.1%}",
        "plain_tokens_per_s": f"{p.plain_tokens_per_s:.1f}", "plain_ms_per_token": f"{p.plain_ms_per_token:.3f}",
        "spec_tokens_per_s": f"{p.spec_tokens_per_s:.1f}", "spec_ms_per_token": f"{p.spec_ms_per_token:.3f}",
        "speedup": f"{p.speedup:.3f}", "verify_cost": f"{p.verify_cost:.3f}",
        "wasted_fraction": f"{p.wasted_fraction:.1%}", "ridge_batch": str(roofline.ridge_batch(hw, dtype, gamma, nbytes)),
        "crossover": "none" if cross is None else str(cross),
    }


def test_hardware_choices_are_the_presets():
    """The hardware menu is the roofline presets (the sliders, table and plot: test_widgets.py's contract)."""
    assert set(BatchingExplorer().hardware.options) == set(roofline.PRESETS)


def test_the_course_table_through_the_explorer():
    ex = BatchingExplorer(batch=1, gamma=0)
    assert cells(ex.table.value)["ridge_fraction"] == "0.3%"
    ex.gamma.value = 4
    assert cells(ex.table.value)["ridge_fraction"] == "1.7%"
    ex.set(batch=64, gamma=0)
    assert cells(ex.table.value)["ridge_fraction"] == "21.7%"
    ex.gamma.value = 4
    assert cells(ex.table.value)["intensity"] == "320.0" and "compute-bound" in ex.table.value


@pytest.mark.parametrize("batch, gamma, alpha, c, hardware, dtype", [
    (1, 4, 0.8, 0.05, "H100 SXM", "bfloat16"), (64, 4, 0.8, 0.05, "H100 SXM", "bfloat16"),
    (256, 8, 0.6, 0.1, "A100 SXM", "bfloat16"), (16, 4, 0.9, 0.02, "L4", "float32"),
    (3, 0, 0.5, 0.0, "RTX 4090", "bfloat16"), (128, 16, 1.0, 1.0, "H200 SXM", "float16"),
])
def test_table_is_the_roofline_module(batch, gamma, alpha, c, hardware, dtype):
    ex = BatchingExplorer()
    ex.hardware.value, ex.dtype.value = hardware, dtype
    ex.set(batch=batch, gamma=gamma, alpha=alpha, c=c)
    assert cells(ex.table.value) == expected(batch, gamma, alpha, c, hardware, dtype)
    v = ex.values()
    assert (v["batch"], v["gamma"], v["alpha"], v["c"], v["hardware"], v["dtype"]) == (
        batch, gamma, alpha, c, hardware, dtype)


def test_plot_redraws_and_measured_hardware_is_offered():
    cpu = roofline.Hardware.measured({"float32": 0.2e12, "bfloat16": 0.6e12}, 20e9, name="this CPU, measured")
    ex = BatchingExplorer(hardware="this CPU, measured", dtype="float32", params=135e6, extra_hardware=[cpu])
    seen = {bytes(ex.plot.value)}
    ex.batch.value = 8
    seen.add(bytes(ex.plot.value))
    ex.hardware.value = "L4"
    seen.add(bytes(ex.plot.value))
    assert len(seen) == 3 and ex.values()["ridge"] == pytest.approx(roofline.ridge("L4", "float32"))
    assert ex.values()["ridge_fraction"] == pytest.approx(roofline.ridge_fraction("L4", "float32", 8, 4, 135e6, 4))


@pytest.mark.parametrize("make, name", [
    (lambda: BatchingExplorer(batch=0), "batch"),
    (lambda: BatchingExplorer(batch=257), "batch"),
    (lambda: BatchingExplorer(batch=2.5), "batch"),
    (lambda: BatchingExplorer(gamma=17), "gamma"),
    (lambda: BatchingExplorer(alpha=-0.1), "alpha"),
    (lambda: BatchingExplorer(c=1.5), "c"),
    (lambda: BatchingExplorer(hardware="TPU v5"), "hardware"),
    (lambda: BatchingExplorer(dtype="int4"), "dtype"),
    (lambda: BatchingExplorer(params=0), "params"),
    (lambda: BatchingExplorer(extra_hardware=["my gpu"]), "extra_hardware"),
])
def test_constructor_refuses_out_of_range(make, name):
    with pytest.raises(ValueError, match=name):
        make()


@pytest.mark.parametrize("control, value", [("batch", 300), ("batch", 0), ("gamma", 20), ("alpha", 1.01),
                                            ("c", -0.5)])
def test_controls_refuse_instead_of_clamping(control, value):
    ex = BatchingExplorer()
    before = ex.values()
    with pytest.raises(ValueError, match=control):
        setattr(getattr(ex, control), "value", value)
    with pytest.raises(ValueError, match=control):
        ex.set(**{control: value})
    assert ex.values() == before  # nothing moved, nothing was clamped
    with pytest.raises(ValueError, match="set"):
        ex.set(temperature=0.5)


def test_the_table_shows_the_ridge_batch_and_the_crossover_apart():
    ex = BatchingExplorer(batch=64, gamma=4, alpha=0.8, c=0.05)
    shown = cells(ex.table.value)
    assert (shown["ridge_batch"], shown["crossover"]) == ("60", "187")  # the course's H100 example
    assert ex.values()["ridge_batch"] == roofline.ridge_batch("H100 SXM", "bfloat16", 4, 2)
