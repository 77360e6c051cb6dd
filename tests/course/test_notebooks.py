"""The lessons run headless, in fast mode, in under a minute each, and end with passing checks.

Each notebook is executed top to bottom by ``nbclient`` in a ``python3`` kernel
(``jupyter_client`` runs a kernelspec whose command is ``python`` with the
interpreter running these tests).  ``SPECBOOK_FAST=1`` makes the lessons take
their quick path.  The committed ``.ipynb`` files must carry no outputs and must
match their ``py:percent`` twins cell for cell.

Broken twins: the same notebooks run against a deliberately broken library
(one function patched right after the imports) must stop with an
``AssertionError`` in one of their own checks.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import jupytext
import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
LESSONS = {
    "01_the_loop": "all lesson-1 checks passed",
    "02_rule_and_proof": "all lesson-2 checks passed",
    "02b_statistics_primer": "all primer checks passed",
    "03_yield_and_speedup": "all lesson-3 checks passed",
    "06_batching_vs_speculation": "all lesson-6 checks passed",
}
WIDGETS = {"02_rule_and_proof": "ProofExplorer", "03_yield_and_speedup": "YieldExplorer"}
WIDGETS["06_batching_vs_speculation"] = "BatchingExplorer"
BUDGET_S = 60.0  # per notebook, fast mode, 2-core CPU, kernel start included
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def execute(nb, timeout: int = 300) -> float:
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    start = time.perf_counter()
    client.execute()
    return time.perf_counter() - start


def text_of(nb) -> str:
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            out.append(o.get("text", "") if o.output_type == "stream" else str(o.get("data", {}).get("text/plain", "")))
    return "\n".join(out)


@pytest.fixture(autouse=True)
def fast_mode(monkeypatch):
    monkeypatch.setenv("SPECBOOK_FAST", "1")


@pytest.mark.parametrize("name", list(LESSONS))
def test_lesson_runs_and_its_checks_pass(name):
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    elapsed = execute(nb)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors
    assert LESSONS[name] in text_of(nb) and "fast mode: True" in text_of(nb)
    assert all(c.execution_count for c in nb.cells if c.cell_type == "code"), "a code cell did not run"
    if name in WIDGETS:
        shown = [o for c in nb.cells for o in c.get("outputs", []) if WIDGET_MIME in o.get("data", {})]
        assert shown, f"{name} does not display its {WIDGETS[name]}"
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, f"{name} shows no figure"
    print(f"{name}: {elapsed:.1f} s (fast mode)")
    assert elapsed < BUDGET_S, f"{name} took {elapsed:.1f} s in fast mode (budget {BUDGET_S:.0f} s)"


@pytest.mark.parametrize("name", list(LESSONS))
def test_committed_notebook_is_clean_and_paired(name):
    ipynb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    for cell in ipynb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, "commit notebooks without outputs"
    assert ipynb.metadata["jupytext"]["formats"] == "ipynb,py:percent"
    assert ipynb.metadata["kernelspec"]["name"] == "python3"
    py = jupytext.read(NOTEBOOKS / f"{name}.py")
    as_py = [(c.cell_type, c.source) for c in py.cells]
    as_nb = [(c.cell_type, c.source) for c in ipynb.cells]
    assert as_nb == as_py, f"{name}.ipynb and {name}.py differ: run `jupytext --sync notebooks/{name}.py`"


BREAKS = {
    # lesson 1: the verifier refills from p instead of the residual (a classic bug)
    "01_the_loop": "import specbook.verify as _v\n_v.residual = lambda target_probs, draft_probs: target_probs",
    # lesson 2: an acceptance probability of p/q without the min(1, .)
    "02_rule_and_proof": "laws.accept_prob = lambda p_x, q_x: (p_x / q_x) if q_x else 1",
    # primer: Holm replaced by uncorrected tests at level alpha each
    "02b_statistics_primer": "stats.holm = lambda pvalues, alpha: [float(x) <= alpha for x in pvalues]",
    # lesson 3: E[tokens] without the bonus token
    "03_yield_and_speedup": ("_e = theory.expected_tokens\n"
                             "theory.expected_tokens = lambda a, g: _e(a, g) - a ** g"),
    # lesson 6: the verify step's intensity forgets the +1 (the corrected or bonus position)
    "06_batching_vs_speculation": ("roofline.step_intensity = lambda batch, gamma, params, dtype_bytes, **kw: "
                                   "2.0 * batch * max(gamma, 1) / dtype_bytes"),
}


@pytest.mark.parametrize("name", list(BREAKS))
def test_lesson_checks_catch_a_broken_library(name):
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    at = next(i for i, c in enumerate(nb.cells) if "_started = time.perf_counter()" in c.source)
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(BREAKS[name]))
    with pytest.raises(CellExecutionError) as caught:
        execute(nb)
    assert "AssertionError" in str(caught.value)


def test_kernel_is_the_interpreter_running_the_tests():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import sys, os; print(sys.executable)")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    execute(nb, timeout=120)
    assert Path(text_of(nb).strip()).resolve() == Path(sys.executable).resolve()
    assert os.environ["SPECBOOK_FAST"] == "1"
