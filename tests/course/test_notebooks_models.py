"""Lessons 4 and 5 (real model, trees / Medusa / EAGLE) execute headless in fast mode and end with their checks."""
import json
import time
from pathlib import Path

import jupytext
import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = ["04_real_model", "05_trees_medusa_eagle"]


@pytest.mark.model
@pytest.mark.parametrize("name", NAMES)
def test_lesson_runs_in_fast_mode(name, monkeypatch):
    monkeypatch.setenv("SPECBOOK_FAST", "1")
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors
    assert all(c.execution_count for c in nb.cells if c.cell_type == "code"), "a code cell did not run"
    text = "\n".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.output_type == "stream")
    assert f"all lesson-{int(name[:2])} checks passed" in text and "fast mode: True" in text
    print(f"{name}: {time.perf_counter() - start:.1f} s (fast mode)")


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_is_clean_and_paired(name):
    raw = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())
    assert not any(c.get("outputs") for c in raw["cells"] if c["cell_type"] == "code"), "outputs committed"
    ipynb = jupytext.read(NOTEBOOKS / f"{name}.ipynb")
    py = jupytext.read(NOTEBOOKS / f"{name}.py")
    assert [c.source for c in ipynb.cells] == [c.source for c in py.cells], f"{name}.ipynb and {name}.py differ"


# Lesson 5's exact check of Medusa's head indexing must catch the off-by-one the course once taught
# (head k trained on x_{t+k+2}, "k+1 places" after the target's own next token).
MEDUSA_OFF_BY_ONE = """
import specbook.train.medusa as _medusa
_labels = _medusa.medusa_examples
def _shifted(fs, seqs, num_heads):
    rows, labels = _labels(fs, seqs, num_heads + 1)
    return rows, labels[:, 1:]
_medusa.medusa_examples = _shifted
"""


@pytest.mark.model
def test_lesson5_checks_catch_medusa_labels_off_by_one(monkeypatch):
    from nbclient.exceptions import CellExecutionError

    monkeypatch.setenv("SPECBOOK_FAST", "1")
    nb = nbformat.read(NOTEBOOKS / "05_trees_medusa_eagle.ipynb", as_version=4)
    at = next(i for i, c in enumerate(nb.cells) if "_started = time.perf_counter()" in c.source)
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(MEDUSA_OFF_BY_ONE))
    with pytest.raises(CellExecutionError) as caught:
        NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    assert "AssertionError" in str(caught.value) and "medusa_examples" in str(caught.value)
