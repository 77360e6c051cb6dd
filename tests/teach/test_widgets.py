"""The lesson widgets, driven from Python: set a control, read the table and the plot.

The browser test checks the same contract in JupyterLab; these tests pin it without a browser.
"""
import html
import re

import ipywidgets as w
import pytest

from specbook import stats, theory
from specbook.teach import rules
from specbook.teach.batching import BatchingExplorer
from specbook.teach.widgets import ProofExplorer, YieldExplorer
from specbook.grading.twins import PER_TEST_ALPHA
from support import USED

PNG = b"\x89PNG\r\n\x1a\n"


def cells(table_html: str) -> dict[str, str]:
    return dict(re.findall(r'data-key="(\w+)">([^<]*)<', table_html))


def yield_expected(alpha: float, gamma: int, c: float, v: float) -> dict[str, str]:
    """What the yield table must show for these inputs, computed by specbook.theory (also the browser test's)."""
    best_gamma, best_speedup = theory.optimal_gamma(alpha, c, v)
    return {
        "expected_tokens": f"{theory.expected_tokens(alpha, gamma):.4f}",
        "speedup": f"{theory.speedup(alpha, gamma, c, v):.4f}",
        "limit": f"{theory.expected_tokens_limit(alpha):.4f}",
        "break_even_alpha": f"{theory.break_even_alpha(gamma, c, v):.4f}",
        "optimal_gamma": f"{best_gamma}",
        "optimal_speedup": f"{best_speedup:.4f}",
    }


# ----------------------------------------------------------------------------- YieldExplorer

@pytest.mark.parametrize("make, table_class, sliders", [
    (YieldExplorer, "specbook-yield-table", {"alpha": (w.FloatSlider, 0.0, 0.99), "gamma": (w.IntSlider, 0, 16),
                                             "c": (w.FloatSlider, 0.0, 1.0), "v": (w.FloatSlider, 1.0, 3.0)}),
    (BatchingExplorer, "specbook-batching-table", {"batch": (w.IntSlider, 1, 256), "gamma": (w.IntSlider, 0, 16),
                                                   "alpha": (w.FloatSlider, 0.0, 1.0), "c": (w.FloatSlider, 0.0, 1.0)}),
], ids=["yield", "batching"])
def test_explorer_controls_match_the_contract(make, table_class, sliders):
    """Each slider's kind and range, an HTML table, a PNG plot, one VBox that Jupyter displays."""
    ex = make()
    for name, (kind, low, high) in sliders.items():
        control = getattr(ex, name)
        assert isinstance(control, kind) and (control.min, control.max) == (low, high), name
    assert isinstance(ex.table, w.HTML) and f'<table class="{table_class}">' in ex.table.value
    assert isinstance(ex.plot, w.Image) and bytes(ex.plot.value).startswith(PNG)
    assert isinstance(ex.widget, w.VBox)
    assert ex._repr_mimebundle_()["application/vnd.jupyter.widget-view+json"]["model_id"] == ex.widget.model_id


@pytest.mark.parametrize("alpha, gamma, c, v", [
    (0.8, 4, 0.05, 1.0), (0.8, 4, 0.15, 1.0), (0.5, 4, 0.15, 1.0), (0.4, 4, 0.3, 1.0),
    (0.7, 10, 0.0, 1.0), (0.6, 3, 0.1, 1.5), (0.99, 16, 0.02, 3.0), (0.0, 0, 1.0, 1.0), (0.3, 0, 0.5, 2.0),
])
def test_yield_table_shows_the_theory_numbers(alpha, gamma, c, v):
    ex = YieldExplorer()
    ex.alpha.value, ex.gamma.value, ex.c.value, ex.v.value = alpha, gamma, c, v
    got = cells(ex.table.value)
    assert got == yield_expected(alpha, gamma, c, v)
    values = ex.values()
    assert {k: values[k] for k in ("alpha", "gamma", "c", "v")} == dict(alpha=alpha, gamma=gamma, c=c, v=v)
    assert f"{values['speedup']:.4f}" == got["speedup"] and values["optimal_gamma"] == int(got["optimal_gamma"])


def test_yield_table_reference_numbers():
    """The lesson's worked cases, as the student reads them off the table."""
    ex = YieldExplorer(alpha=0.8, gamma=4, c=0.05, v=1.0)
    assert cells(ex.table.value)["expected_tokens"] == "3.3616"
    assert cells(ex.table.value)["speedup"] == "2.8013"
    assert cells(ex.table.value)["limit"] == "5.0000"
    ex.c.value = 0.15
    assert cells(ex.table.value)["speedup"] == "2.1010"
    ex.alpha.value = 0.5
    assert cells(ex.table.value)["speedup"] == "1.2109"
    ex.alpha.value, ex.c.value = 0.4, 0.3
    assert cells(ex.table.value)["speedup"] == "0.7498"
    assert "SLOWER" in ex.table.value
    ex.alpha.value, ex.c.value, ex.gamma.value = 0.7, 0.0, 4
    assert cells(ex.table.value)["expected_tokens"] == "2.7731"


def test_yield_plot_redraws_on_every_change():
    ex = YieldExplorer()
    seen = {bytes(ex.plot.value)}
    for slider, value in ((ex.alpha, 0.6), (ex.gamma, 7), (ex.c, 0.4), (ex.v, 2.0)):
        slider.value = value
        assert bytes(ex.plot.value).startswith(PNG)
        assert bytes(ex.plot.value) not in seen, f"plot did not change when {slider.description} moved"
        seen.add(bytes(ex.plot.value))


def test_yield_explorer_refuses_slider_values_out_of_range():
    ex = YieldExplorer()
    ex.gamma.value = 2.5  # the IntSlider casts to an int, and the table follows the slider
    assert ex.gamma.value == 2 and ex.values()["gamma"] == 2
    assert cells(ex.table.value)["expected_tokens"] == f"{theory.expected_tokens(ex.alpha.value, 2):.4f}"
    before = ex.values()
    for name, value in (("alpha", 5.0), ("alpha", 1.0), ("gamma", 40), ("c", -1.0), ("v", 0.5)):
        with pytest.raises(ValueError, match=rf"{name} must be in .* got {value!r}"):
            getattr(ex, name).value = value  # never clamped to the nearest end of the slider
    assert ex.values() == before  # nothing changed, nothing recomputed with a value nobody gave


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(alpha=1.0), ValueError, r"alpha must be in \[0, 0.99\], got 1.0"),
    (dict(alpha=-0.1), ValueError, r"alpha .* got -0.1"),
    (dict(alpha=float("nan")), ValueError, r"alpha .* got nan"),
    (dict(gamma=100), ValueError, r"gamma must be in \[0, 16\], got 100; pass max_gamma"),
    (dict(gamma=-1), ValueError, r"gamma .* got -1"),
    (dict(gamma=2.5), TypeError, r"gamma must be a whole number, got 2.5"),
    (dict(c=1.5), ValueError, r"c must be in \[0, 1\], got 1.5"),
    (dict(c=True), TypeError, r"c must be a number, got True"),
    (dict(v=0.9), ValueError, r"v must be in \[1, 3\], got 0.9"),
    (dict(v="2"), TypeError, r"v must be a number, got '2'"),
    (dict(max_gamma=0), ValueError, r"max_gamma .* got 0"),
    (dict(max_gamma=10_000), ValueError, r"max_gamma .* got 10000"),
])
def test_yield_explorer_refuses_arguments_out_of_range(kwargs, error, words):
    with pytest.raises(error, match=words):
        YieldExplorer(**kwargs)


def test_yield_explorer_widens_gamma_when_asked():
    ex = YieldExplorer(alpha=0.9, gamma=100, max_gamma=128)
    assert ex.gamma.max == 128 and ex.values()["gamma"] == 100  # shown as given, not 16
    assert cells(ex.table.value)["expected_tokens"] == f"{theory.expected_tokens(0.9, 100):.4f}"


# ----------------------------------------------------------------------------- ProofExplorer

def chi2_rows(table_html: str) -> dict[str, dict[str, str]]:
    rows = {}
    for rule, body in re.findall(r'<tr data-rule="([^"]+)"[^>]*>(.*?)</tr>', table_html):
        rows[html.unescape(rule)] = cells(body)
    return rows


def test_proof_explorer_controls_and_table():
    ex = ProofExplorer(sample_size=2000)
    for name in ("match", "temperature", "sample_size", "rule", "seed", "auto", "run_button", "plot", "table"):
        assert hasattr(ex, name)
    assert list(ex.rule.options) == list(rules.RULES)
    assert rules.CORRECT in ex.rule.options and rules.TARGET_ONLY in ex.rule.options
    assert '<table class="specbook-chi2-table">' in ex.table.value
    rows = chi2_rows(ex.table.value)
    assert list(rows) == list(rules.RULES)
    values = ex.values()
    for rule, row in rows.items():
        assert "pvalue" in row and "verdict" in row
        p = values["pvalues"][rule]
        assert row["pvalue"] == (f"{p:.2e}" if p < 1e-4 else f"{p:.4f}")
    assert bytes(ex.plot.value).startswith(PNG)
    assert isinstance(ex.widget, w.VBox)
    assert "application/vnd.jupyter.widget-view+json" in ex._repr_mimebundle_()


def test_proof_explorer_pvalues_are_the_chi_square_of_the_shown_counts():
    ex = ProofExplorer(sample_size=3000, seed=4)
    setup = ex.setup()
    for i, (name, r) in enumerate(rules.RULES.items()):
        import torch

        drawn = r.sample(setup, 3000, torch.Generator().manual_seed(4 * 1000 + i))
        want = stats.chisquare_gof(stats.counts_of(drawn, 8), setup.target_probs.numpy()).pvalue
        assert ex.values()["pvalues"][name] == want


def test_proof_explorer_verdicts():
    ex = ProofExplorer(match=0.3, temperature=0.6, sample_size=4000)
    USED.append("ProofExplorer: modified rejection sampling at match 0.3, T 0.6")
    v = ex.values()
    assert v["pvalues"][rules.CORRECT] > PER_TEST_ALPHA
    assert not v["rejected"][rules.CORRECT]
    for name in rules.RULES:
        if name != rules.CORRECT:  # broken twins: every wrong rule is caught at this setting
            assert v["rejected"][name] and v["pvalues"][name] < 1e-6, name
            assert v["power"][name] > 0.99
    # at temperature 1 the sampling-parameter bug is invisible: its law is exactly p
    ex.temperature.value = 1.0
    assert ex.values()["tv"][rules.TARGET_ONLY] < 1e-12


def test_proof_explorer_state_from_python_and_run_button():
    ex = ProofExplorer(sample_size=1000)
    before = ex.values()
    ex.rule.value = rules.TARGET_ONLY
    assert ex.values()["rule"] == rules.TARGET_ONLY
    assert 'style="background:#fff3cd"><th>temperature on target only' in ex.table.value
    ex.auto.value = False
    ex.match.value = 0.9
    assert ex.values()["match"] == before["match"]  # no auto-update: nothing recomputed yet
    ex.run_button.click()
    after = ex.values()
    assert after["match"] == 0.9 and after["pvalues"] != before["pvalues"]
    # the same settings and seed give the same numbers
    again = ProofExplorer(match=0.9, sample_size=1000, rule=rules.TARGET_ONLY)
    assert again.values()["pvalues"] == after["pvalues"]


def test_proof_explorer_rejects_bad_arguments():
    with pytest.raises(ValueError, match="rule"):
        ProofExplorer(rule="accept everything")
    with pytest.raises(ValueError, match="level"):
        ProofExplorer(level=1.5)


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(temperature=0), ValueError, r"temperature must be in \[0.1, 2\], got 0 \(temperature 0 is greedy"),
    (dict(temperature=2.5), ValueError, r"temperature .* got 2.5"),
    (dict(match=1.5), ValueError, r"match must be in \[0, 1\], got 1.5"),
    (dict(sample_size=50), ValueError, r"sample_size must be in \[100, 20000\], got 50"),
    (dict(sample_size=1000.0), TypeError, r"sample_size must be a whole number, got 1000.0"),
    (dict(seed=-1), ValueError, r"seed must be in \[0, 2147483647\], got -1"),
    (dict(vocab_size=1), ValueError, r"vocab_size .* got 1"),
    (dict(level=True), ValueError, r"level must be in \(0, 1\), got True"),
])
def test_proof_explorer_refuses_arguments_out_of_range(kwargs, error, words):
    with pytest.raises(error, match=words):
        ProofExplorer(**kwargs)


def test_proof_explorer_refuses_slider_values_out_of_range():
    ex = ProofExplorer(sample_size=500)
    before = ex.values()
    for name, value in (("temperature", 0.0), ("match", 2.0), ("sample_size", 10)):
        with pytest.raises(ValueError, match=rf"{name} must be in .* got {value!r}"):
            getattr(ex, name).value = value
    assert ex.values() == before and ex.temperature.value == before["temperature"]
