"""The lessons in a real browser: JupyterLab driven by headless Chromium.

Widgets that pass Python-level tests can still fail where students meet them:
a missing front-end extension, a version mismatch between ``ipywidgets`` and
``jupyterlab_widgets``, an exception thrown in the browser. So this test does
what a student does:

1. starts its own JupyterLab on a free loopback port, with token
   authentication, a temporary root holding a *copy* of ``notebooks/`` and
   temporary config/data/runtime/settings directories (nothing of the user's
   own Jupyter set-up leaks in, nothing is written into the repository);
   news, update checks and the extension manager are switched off, because
   they would reach for the network;
2. opens a lesson in Debian's Chromium through Python ``playwright``
   (``executable_path``: playwright never downloads a browser of its own);
3. runs every cell from the *Run* menu, waits for the kernel to go idle and
   the widgets to render;
4. moves sliders with the keyboard (focus the handle, press arrow keys) and
   checks that the table shows what :mod:`specbook.theory` computes for the
   slider values the page shows, and that the plot is, byte for byte, the
   picture the library draws for those values;
5. saves the notebook and reads it back: no cell may hold an error output,
   every code cell must have run.

It fails on any error in the browser console (apart from the short, justified
list in ``browser_page.BENIGN_CONSOLE_ERRORS``, empty today), any uncaught page
error, any error output in a cell, any "Error displaying widget" and any
error-level entry in JupyterLab's log console (where output of widget
callbacks lands). ``test_browser_checks_catch_broken_notebooks`` shows each of
these detectors firing on a deliberately broken notebook, and
``test_watchdog_turns_a_hang_into_a_failure`` shows a hung browser call ended.

The harness lives in ``browser_server.py`` (server, prerequisites, watchdog)
and ``browser_page.py`` (driving and inspecting a lesson).

Screenshots of every step go to ``test-artifacts/browser/``; the README's
pictures are copied from there by ``scripts/browser_screenshots.py``.

Chromium is Debian's ``chromium`` (``scripts/ensure_chromium.sh`` installs it).
When it is missing the test fails under ``CI=true`` and is skipped elsewhere.
Kernels run with ``SPECBOOK_FAST=1`` so the lessons take their quick path.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from browser_page import (
    CELLS_JS, collect_errors, cell_output_errors, explorer_output, fail_report, image_digest,
    keep_evidence, log_console_errors, open_lesson, press_keys, run_all_cells, save_and_read,
    scroll_cell_to_top, slider, slider_value, wait_until,
)
from browser_server import (
    STEP_S, Watchdog, require_browser_tools, start_lab, stop_lab,
)

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
TEST_BUDGET_S = 300  # hard stop per test (see Watchdog); a passing test takes about a minute

pytestmark = pytest.mark.browser


def teach_tests_on_path() -> None:
    """tests/teach on sys.path, for the expected values its tests compute (also when this file runs alone)."""
    teach_tests = str(Path(__file__).resolve().parents[1] / "teach")
    if teach_tests not in sys.path:
        sys.path.append(teach_tests)


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server over a temporary copy of notebooks/; always shut down."""
    require_browser_tools()
    # Import the library (torch and all) while JupyterLab starts: the tests
    # compute the expected tables and plots in this process.
    warm = threading.Thread(target=__import__, args=("specbook.teach.widgets",), daemon=True)
    warm.start()
    server = start_lab(tmp_path_factory.mktemp("jupyterlab"), NOTEBOOKS)
    try:
        yield server
    finally:
        stop_lab(server)


@pytest.fixture
def page(chromium, lab):
    """A fresh browser context and page, under a watchdog of TEST_BUDGET_S."""
    with Watchdog(TEST_BUDGET_S, lab) as dog:
        context = chromium.new_context(viewport={"width": 1400, "height": 1000}, device_scale_factor=1)
        context.set_default_timeout(STEP_S * 1000)
        try:
            yield context.new_page()
        finally:
            with contextlib.suppress(Exception):
                context.close()
    assert not dog.fired, f"the test ran past its {TEST_BUDGET_S}s budget and was stopped"


@contextlib.contextmanager
def explorer_lesson(page, lab, name: str, tag: str, table_class: str):
    """Open lesson ``name``, run every cell, save it and read it back (no cell may hold an error);
    yield (lesson, the explorer's output, its table); then no error may show anywhere."""
    lesson = open_lesson(page, lab, name, tag)
    with keep_evidence(lesson):
        lesson.shot("opened")
        run_all_cells(lesson)
        nb = save_and_read(lesson)
        assert not cell_output_errors(nb), fail_report(cell_output_errors(nb))
        out = explorer_output(lesson, table_class)
        yield lesson, out, out.locator(f"table.{table_class}")
        errors = collect_errors(lesson, nb)
        lesson.shot("log-console")
        assert not errors, fail_report(errors)


def expect_table(lesson, table, expected, inputs, step: str, timeout_s: float, source: str) -> dict[str, str]:
    """Wait for ``table`` to show ``expected(*inputs())``, for the controls the page shows; return it."""
    want = {}

    def ok() -> bool:
        nonlocal want
        want = dict(expected(*inputs()))  # a copy: ``expected`` may be cached
        return table.evaluate(CELLS_JS) == want

    wait_until(lesson, ok, timeout_s,
               lambda: f"{step}: table {table.evaluate(CELLS_JS)} != {source} {want} for {inputs()}")
    return want


# --------------------------------------------------------------------------- lesson 3: yield and speedup

@functools.lru_cache(maxsize=None)
def yield_table_from_theory(alpha: float, gamma: int, c: float, v: float) -> dict[str, str]:
    """What the yield table must show for these inputs, computed by specbook.theory."""
    teach_tests_on_path()
    from test_widgets import yield_expected

    return yield_expected(alpha, gamma, c, v)


@functools.lru_cache(maxsize=None)
def library_yield_plot(alpha: float, gamma: int, c: float, v: float) -> str:
    """SHA-256 of the PNG that specbook's YieldExplorer draws for these inputs, rendered here."""
    from specbook.teach.widgets import YieldExplorer

    return hashlib.sha256(YieldExplorer(alpha=alpha, gamma=gamma, c=c, v=v).plot.value).hexdigest()


def test_yield_lesson_in_jupyterlab(lab, page):
    """Lesson 3 runs in JupyterLab; keyboard moves of α and γ update table and plot to theory's numbers."""
    with explorer_lesson(page, lab, "03_yield_and_speedup.ipynb", "yield",
                         "specbook-yield-table") as (lesson, out, table):
        sliders = {name: slider(lesson, out, label) for name, label in
                   (("alpha", "α"), ("gamma", "γ"), ("c", "draft cost"), ("v", "verify cost"))}

        def inputs() -> tuple[float, int, float, float]:
            a, g, c, v = (slider_value(sliders[k]) for k in ("alpha", "gamma", "c", "v"))
            return a, int(g), c, v

        def expect_theory(step: str) -> dict[str, str]:
            """Wait for the table to show theory's numbers for the sliders' readouts."""
            return expect_table(lesson, table, yield_table_from_theory, inputs, step, 30, "theory")

        def expect_library_plot(step: str) -> str:
            """Wait for the plot to be, byte for byte, the library's picture for the readouts."""
            want = ""

            def ok() -> bool:
                nonlocal want
                want = library_yield_plot(*inputs())
                return image_digest(out) == want

            wait_until(lesson, ok, 30, lambda: f"{step}: the plot is not the library's plot for {inputs()}")
            return want

        assert set(table.evaluate(CELLS_JS)) >= {"expected_tokens", "speedup", "limit", "break_even_alpha", "optimal_gamma"}
        start_inputs = inputs()
        start_table = expect_theory("as rendered")
        start_plot = expect_library_plot("as rendered")
        scroll_cell_to_top(lesson, out)
        lesson.shot("explorer")
        lesson.shot_widget("widget", out)

        press_keys(lesson, sliders["alpha"], "ArrowLeft", 5)  # one step is 0.01
        assert inputs()[0] == pytest.approx(start_inputs[0] - 0.05, abs=1e-9)
        alpha_table = expect_theory("alpha moved")
        alpha_plot = expect_library_plot("alpha moved")
        assert alpha_table != start_table
        lesson.shot_widget("alpha-moved", out)
        lesson.mark("alpha-moved")

        press_keys(lesson, sliders["gamma"], "ArrowRight", 3)
        assert inputs()[1] == start_inputs[1] + 3
        gamma_table = expect_theory("gamma moved")
        gamma_plot = expect_library_plot("gamma moved")
        assert gamma_table != alpha_table and len({start_plot, alpha_plot, gamma_plot}) == 3
        lesson.shot_widget("gamma-moved", out)
        lesson.mark("gamma-moved")

        # Back to where we started: the same numbers and, byte for byte, the same picture.
        press_keys(lesson, sliders["gamma"], "ArrowLeft", 3)
        press_keys(lesson, sliders["alpha"], "ArrowRight", 5)
        assert inputs() == pytest.approx(start_inputs)
        assert expect_theory("moved back") == start_table
        wait_until(lesson, lambda: image_digest(out) == start_plot, 30,
                   lambda: "moved back: the plot is not the starting plot")
        lesson.mark("moved back")


# --------------------------------------------------------------------------- lesson 2: the rule and its proof

_CHI2_ROWS_JS = """(table) => Object.fromEntries([...table.querySelectorAll('tr[data-rule]')].map(tr => [
    tr.dataset.rule,
    Object.fromEntries([...tr.querySelectorAll('[data-key]')].map(td => [td.dataset.key, td.textContent.trim()])),
]))"""


@functools.lru_cache(maxsize=None)
def library_proof_explorer(match: float, temperature: float, sample_size: int, rule: str, seed: int):
    """(rows, plot sha256) that specbook's ProofExplorer computes for these controls, here."""
    import html

    from specbook.teach.widgets import ProofExplorer

    ex = ProofExplorer(match=match, temperature=temperature, sample_size=sample_size, rule=rule, seed=seed)
    rows = {}
    for name, body in re.findall(r'<tr data-rule="([^"]+)"[^>]*>(.*?)</tr>', ex.table.value):
        rows[html.unescape(name)] = {k: html.unescape(v) for k, v in re.findall(r'data-key="(\w+)">([^<]*)<', body)}
    return rows, hashlib.sha256(ex.plot.value).hexdigest()


def test_proof_lesson_in_jupyterlab(lab, page):
    """Lesson 2 runs in JupyterLab; its chi-square explorer renders and follows keyboard changes."""
    with explorer_lesson(page, lab, "02_rule_and_proof.ipynb", "proof", "specbook-chi2-table") as (lesson, out, table):
        quality = slider(lesson, out, "draft quality")
        rule_select = out.locator(".widget-dropdown select")
        assert rule_select.count() == 1, "expected one rule selector"

        def controls() -> tuple[float, float, int, str, int]:
            return (slider_value(quality), slider_value(slider(lesson, out, "temperature")),
                    int(slider_value(slider(lesson, out, "sample size"))), rule_select.input_value(),
                    int(out.locator(".widget-text input").first.input_value()))

        def expect_library(step: str):
            """Wait until table and histogram are the library's for the controls the page shows."""
            want_rows, want_plot, got_rows = {}, "", {}

            def ok() -> bool:
                nonlocal want_rows, want_plot, got_rows
                want_rows, want_plot = library_proof_explorer(*controls())
                got_rows = table.evaluate(_CHI2_ROWS_JS)
                return got_rows == want_rows and image_digest(out) == want_plot

            wait_until(lesson, ok, 60, lambda: f"{step}: page {got_rows} / plot {image_digest(out)} "
                                               f"!= library {want_rows} / plot {want_plot} for {controls()}")
            for rule, row in got_rows.items():
                assert 0.0 <= float(row["pvalue"]) <= 1.0, (rule, row)
            return got_rows, want_plot

        start = controls()
        start_rows, start_plot = expect_library("as rendered")
        assert len(start_rows) >= 2 and all("pvalue" in row for row in start_rows.values())
        scroll_cell_to_top(lesson, out)
        lesson.shot("explorer")
        lesson.shot_widget("widget", out)

        press_keys(lesson, quality, "ArrowRight", 2)  # one step is 0.05
        assert controls()[0] == pytest.approx(start[0] + 0.10, abs=1e-9)
        moved_rows, moved_plot = expect_library("draft quality moved")
        assert [r["pvalue"] for r in moved_rows.values()] != [r["pvalue"] for r in start_rows.values()]
        assert moved_plot != start_plot
        lesson.shot_widget("quality-moved", out)
        lesson.mark("quality-moved")

        # Pick another rule from the selector. (Not with arrow keys: inside a
        # notebook, ArrowDown on a focused dropdown does not change it.)
        options = rule_select.locator("option").all_inner_texts()
        assert len(options) >= 2, options
        rule_select.select_option(label=next(o for o in reversed(options) if o != start[3]))
        assert controls()[3] != start[3], "the rule selector did not change"
        _, rule_plot = expect_library("rule changed")
        assert rule_plot != moved_plot
        lesson.shot_widget("rule-changed", out)
        lesson.mark("rule-changed")


# --------------------------------------------------------------------------- the detectors can fail

_BROKEN_NOTEBOOK_CELLS = [
    "import ipywidgets as w\n"
    "trip = w.IntSlider(description='trip')\n"
    "trip.observe(lambda change: 1 / 0, names='value')  # fails only when moved in the browser\n"
    "trip",
    "from IPython.display import Javascript, display\n"
    "display(Javascript(\"console.error('specbook harness check')\"))",
    "raise ValueError('specbook harness check')",
    "print('never reached')",
]
# Shown right after the slider (cell 1): a widget view whose model does not exist.
_MISSING_MODEL_CELL = (
    "display({'application/vnd.jupyter.widget-view+json':"
    " {'model_id': 'no-such-model', 'version_major': 2, 'version_minor': 0}}, raw=True)")


def test_browser_checks_catch_broken_notebooks(lab, page):
    """Broken twin: a notebook with a console error, a cell error and a failing widget
    callback must trip each detector the lesson tests rely on."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cells = [_BROKEN_NOTEBOOK_CELLS[0], _MISSING_MODEL_CELL, *_BROKEN_NOTEBOOK_CELLS[1:]]
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    nbformat.write(nb, lab.root / "harness_check.ipynb")

    lesson = open_lesson(page, lab, "harness_check.ipynb", "harness-check")
    with keep_evidence(lesson):
        run_all_cells(lesson)
        saved = save_and_read(lesson)
        press_keys(lesson, slider(lesson, page.locator(".jp-NotebookPanel"), "trip"), "ArrowRight", 1)
        wait_until(lesson, lambda: bool(log_console_errors(lesson)), 30,
                   lambda: "the failing widget callback left no error in the log console")
        errors = collect_errors(lesson, saved)
        lesson.shot("caught")

    report = "\n".join(errors)
    assert any("[error]" in e and "specbook harness check" in e for e in lesson.errors), report
    assert any(e.startswith("[widget]") for e in errors), report
    assert any(e.startswith("[cell 3] ValueError: specbook harness check") for e in errors), report
    assert any(e.startswith("[cell 4] did not run") for e in errors), report
    assert any(e.startswith("[log console, error]") and "ZeroDivisionError" in e for e in errors), report


_HANG_SCRIPT = """
import os, sys, time
sys.path.insert(0, sys.argv[1])
import browser_server as tb
from playwright.sync_api import Error, sync_playwright

with sync_playwright() as pw:
    browser = pw.chromium.launch(executable_path=str(tb.CHROMIUM), args=tb.CHROMIUM_ARGS)
    page = browser.new_page()
    with tb.Watchdog(2.0) as dog:
        try:
            page.evaluate("() => new Promise(() => {})")  # never settles, and evaluate has no timeout
            print("evaluate returned")
        except Error as exc:
            print("raised:", type(exc).__name__)
    print("fired:", dog.fired)
    try:
        browser.close()
    except Error:
        pass
print("left:", [pid for pid in tb.descendants(os.getpid()) if tb.is_playwright_driver(pid)])
"""

def test_watchdog_turns_a_hang_into_a_failure():
    """A browser call that never returns is ended by the watchdog, in a child process."""
    require_browser_tools()
    if not Path("/proc/self/stat").exists():
        pytest.skip("the watchdog finds its processes through /proc (Linux)")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", _HANG_SCRIPT, str(Path(__file__).resolve().parents[1])],
                          capture_output=True, text=True, timeout=60)
    took = time.monotonic() - start
    assert done.returncode == 0, done.stdout + done.stderr
    assert "raised: TargetClosedError" in done.stdout and "fired: True" in done.stdout, done.stdout + done.stderr
    assert "left: []" in done.stdout, done.stdout
    assert took < 30, f"the hang took {took:.0f}s to end"


# --------------------------------------------------------------------------- lesson 6: batching versus speculation

def batching_table_from_roofline(batch: int, gamma: int, alpha: float, c: float, hardware: str,
                                 dtype: str) -> dict[str, str]:
    """What the batching table must show for these inputs (7B model), computed by specbook.roofline."""
    teach_tests_on_path()
    from test_batching_widget import expected

    return expected(batch, gamma, alpha, c, hardware, dtype)


@functools.lru_cache(maxsize=None)
def library_batching_plot(batch: int, gamma: int, alpha: float, c: float, hardware: str, dtype: str) -> str:
    """SHA-256 of the PNG that specbook's BatchingExplorer draws for these inputs, rendered here."""
    from specbook.teach.batching import BatchingExplorer

    ex = BatchingExplorer(batch=batch, gamma=gamma, alpha=alpha, c=c, hardware=hardware, dtype=dtype)
    return hashlib.sha256(ex.plot.value).hexdigest()


def test_batching_lesson_in_jupyterlab(lab, page):
    """Lesson 6 runs in JupyterLab; keyboard moves of B and γ update the table to specbook.roofline's numbers."""
    with explorer_lesson(page, lab, "06_batching_vs_speculation.ipynb", "batching",
                         "specbook-batching-table") as (lesson, out, table):
        sliders = {name: slider(lesson, out, label) for name, label in
                   (("batch", "batch size"), ("gamma", "draft length"), ("alpha", "acceptance"), ("c", "draft cost"))}
        selects = out.locator(".widget-dropdown select")
        assert selects.count() == 2, "expected the hardware and dtype selectors"

        def inputs() -> tuple:
            b, g, a, c = (slider_value(sliders[k]) for k in ("batch", "gamma", "alpha", "c"))
            return int(b), int(g), a, c, selects.nth(0).input_value(), selects.nth(1).input_value()

        def expect_roofline(step: str) -> dict[str, str]:
            return expect_table(lesson, table, batching_table_from_roofline, inputs, step, 60, "roofline")

        start = inputs()
        assert start[4] == "H100 SXM" and start[5] == "bfloat16", start
        start_table = expect_roofline("as rendered")
        assert start_table["intensity"] == "5.0" and start_table["ridge_fraction"] == "1.7%"  # the course's row
        wait_until(lesson, lambda: image_digest(out) == library_batching_plot(*start), 60,
                   lambda: f"as rendered: the plot is not the library's plot for {start}")
        start_plot = image_digest(out)
        scroll_cell_to_top(lesson, out)
        lesson.shot("explorer")
        lesson.shot_widget("widget", out)

        press_keys(lesson, sliders["batch"], "ArrowRight", 3)  # one step is one row
        assert inputs()[0] == start[0] + 3
        batch_table = expect_roofline("batch moved")
        assert batch_table["intensity"] == f"{5.0 * (start[0] + 3):.1f}" and batch_table != start_table
        wait_until(lesson, lambda: image_digest(out) == library_batching_plot(*inputs()), 60,
                   lambda: f"batch moved: the plot is not the library's plot for {inputs()}")
        assert image_digest(out) != start_plot
        lesson.shot_widget("batch-moved", out)
        lesson.mark("batch-moved")

        press_keys(lesson, sliders["gamma"], "ArrowLeft", start[1])  # down to γ = 0: plain decoding
        assert inputs()[1] == 0
        plain_table = expect_roofline("gamma moved")
        assert plain_table["speedup"] == "1.000" and plain_table["crossover"] == "none"
        wait_until(lesson, lambda: image_digest(out) == library_batching_plot(*inputs()), 60,
                   lambda: f"gamma moved: the plot is not the library's plot for {inputs()}")
        lesson.shot_widget("gamma-moved", out)
        lesson.mark("gamma-moved")
