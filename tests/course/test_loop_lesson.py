"""Lesson 4b (write the loop) runs headless in fast mode, in the instructor's edition and in the student
edition (answers stubbed), and its checks catch a broken loop.

The lesson is executed by ``nbclient`` as ``tests/course/test_notebooks.py`` executes the toy lessons.  It
uses SmolLM2-135M where the weights are on disk and a small random Llama where they are not, so it runs
on any machine.  Broken twins: the instructor's solution with one mistake pasted in must be called wrong
by the exercise's check, and the lesson's final Checks cell must then stop with an AssertionError.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import jupytext
import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAME = "04b_write_the_loop"
BUDGET_S = 60.0  # fast mode, 2-core CPU, kernel start included
KEYS = [f"04b.{i}" for i in range(1, 7)] + [f"04b.c{i}" for i in range(1, 6)]


@pytest.fixture(autouse=True)
def fast_mode(monkeypatch):
    monkeypatch.setenv("SPECBOOK_FAST", "1")


def lesson():
    return nbformat.read(NOTEBOOKS / f"{NAME}.ipynb", as_version=4)


def execute(nb, timeout: int = 600) -> float:
    start = time.perf_counter()
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()
    return time.perf_counter() - start


def text_of(nb) -> str:
    return "\n".join(o.get("text", "") if o.output_type == "stream" else str(o.get("data", {}).get("text/plain", ""))
                     for c in nb.cells for o in c.get("outputs", []))


def solution_cell(nb, marker: str):
    """The one solution cell whose source contains ``marker``."""
    cells = [c for c in nb.cells if "solution" in c.metadata.get("tags", []) and marker in c.source]
    assert len(cells) == 1, f"{len(cells)} solution cells contain {marker!r}"
    return cells[0]


def test_lesson_runs_in_fast_mode_and_its_checks_pass():
    nb = lesson()
    elapsed = execute(nb)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors
    assert all(c.execution_count for c in nb.cells if c.cell_type == "code"), "a code cell did not run"
    text = text_of(nb)
    assert "all lesson-4b checks passed" in text and "fast mode: True" in text
    assert "exercises and concept check: 11 of 11 right" in text
    for key in KEYS:
        assert f"✓ {key}: right" in text, key
    assert any("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", [])), "no figure"
    print(f"{NAME}: {elapsed:.1f} s (fast mode)")
    assert elapsed < BUDGET_S, f"{NAME} took {elapsed:.1f} s in fast mode (budget {BUDGET_S:.0f} s)"


def test_committed_notebook_is_clean_and_paired():
    raw = json.loads((NOTEBOOKS / f"{NAME}.ipynb").read_text())
    assert not any(c.get("outputs") or c.get("execution_count") for c in raw["cells"] if c["cell_type"] == "code")
    assert raw["metadata"]["jupytext"]["formats"] == "ipynb,py:percent"
    assert raw["metadata"]["kernelspec"]["name"] == "python3"
    py, ipynb = jupytext.read(NOTEBOOKS / f"{NAME}.py"), jupytext.read(NOTEBOOKS / f"{NAME}.ipynb")
    assert [(c.cell_type, c.source) for c in ipynb.cells] == [(c.cell_type, c.source) for c in py.cells], \
        f"run `jupytext --sync notebooks/{NAME}.py`"


def test_every_exercise_is_a_solution_region_with_a_check():
    nb = lesson()
    checked = re.findall(r'exercises\.check\("(04b\.\d+)"', "\n".join(c.source for c in nb.cells))
    assert checked == KEYS[:6]
    solutions = [c for c in nb.cells if "solution" in c.metadata.get("tags", [])]
    assert len(solutions) == 7 and all("### BEGIN SOLUTION" in c.source for c in solutions)
    assert "### BEGIN SOLUTION" in nb.cells[-1].source  # the Checks cell asserts the answers in the instructor's edition


def test_the_student_edition_runs_and_every_check_says_not_answered():
    edition = pytest.importorskip("specbook.teach.edition")
    nb, stubs = edition.student_notebook(lesson(), NAME)
    assert sum(map(len, stubs.values())) == 9 and "BEGIN SOLUTION" not in "\n".join(c.source for c in nb.cells)
    execute(nb)
    text = text_of(nb)
    for key in KEYS:
        assert f"· {key}: not answered" in text, key
    assert "exercises and concept check: 0 of 11 right" in text
    assert "04b.6 is not answered or not right yet" in text and "all lesson-4b checks passed" in text


def test_a_loop_without_rollback_is_called_wrong_and_the_checks_fail():
    nb = lesson()
    cell = solution_cell(nb, "target.rollback(")
    cell.source = cell.source.replace("    target.rollback(torch.tensor([before + accepted + 1]))", "    pass")
    assert "target.rollback(" not in cell.source
    with pytest.raises(CellExecutionError) as caught:
        execute(nb)
    assert "AssertionError" in str(caught.value)
    text = text_of(nb)
    assert "✗ 04b.5: wrong" in text and "✗ 04b.6: wrong" in text and "cache" in text
    assert "all lesson-4b checks passed" not in text


# label -> (marker in a solution cell, the mistake pasted over it, the exercises that must call it wrong)
TWINS = {
    "bonus from the wrong row": ("p[len(drafts)]", "p[len(drafts) - 1]", ("04b.2", "04b.3", "04b.4")),
    "refill from p after a rejection": ("(p[i] - q[i]).clamp(min=0)", "p[i]", ("04b.2", "04b.3")),
    "one offset for the whole batch": ("logits[b, len(c) - 1: len(c) + gamma]",
                                       "logits[b, len(contexts[0]) - 1: len(contexts[0]) + gamma]", ("04b.4",)),
    "the cache keeps the new token": ("before + accepted + 1", "before + accepted + 2", ("04b.5", "04b.6")),
    "drafts past the budget": ("k = min(gamma, max_new_tokens - len(out) - 1)", "k = gamma", ("04b.6",)),
}
FUNCTIONS = {"04b.2": "toy_round", "04b.3": "toy_generate", "04b.4": "toy_batch_round", "04b.5": "cached_round",
             "04b.6": "cached_decode"}


@pytest.mark.parametrize("label", list(TWINS))
def test_each_check_catches_its_broken_twin(label):
    """The lesson's own cells (the instructor's solutions with one mistake) run in this process; the
    exercise's check must call them wrong (the full run shows the unbroken ones are right)."""
    import torch

    from specbook.teach import exercises

    marker, mistake, keys = TWINS[label]
    nb = lesson()
    cell = solution_cell(nb, marker)
    threads = torch.get_num_threads()
    try:
        setup = [c.source for c in nb.cells if c.cell_type == "code"][:3]  # parameters, imports, the toy models
        namespace = {}
        for source in setup + [c.source for c in nb.cells if "solution" in c.metadata.get("tags", [])][:6]:
            exec(compile(source.replace(marker, mistake) if source == cell.source else source, NAME, "exec"),
                 namespace)
        for key in keys:
            result = exercises.check(key, namespace[FUNCTIONS[key]], show=False)
            assert result.status == "wrong" and result.message, (key, result)
    finally:
        torch.set_num_threads(threads)
