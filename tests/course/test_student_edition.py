"""The student edition (``python -m specbook student-edition``, ``make student``).

* It builds: one notebook per ``notebooks/*.py`` lesson and nbgrader's student release of every
  assignment (an assignment whose source notebook is not built stops the build, and this test).
* No solution survives in it: no line of more than 20 characters from inside a
  ``BEGIN/END SOLUTION`` region, no solution ``<details>`` text, no marker.
* Lesson 3 and the statistics primer (the cheap ones) run top to bottom in fast mode as the
  student gets them, every exercise and concept check reporting "not answered" and nothing
  raising; with the instructor's regions pasted back into the student's cells, every check is
  right (and the lesson's own check cell asserts so).
* The broken twin: graders called directly with wrong answers say "wrong", with a message that
  helps and does not contain the answer; the right answer is accepted.
* The stubbing rules themselves, on small cells.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import jupytext
import nbformat
import pytest
from nbclient import NotebookClient

from specbook import theory
from specbook.teach import edition, exercises

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.py"))
OWN = {"01_the_loop": "01", "02_rule_and_proof": "02", "02b_statistics_primer": "02b", "03_yield_and_speedup": "03",
       "04_real_model": "04", "05_trees_medusa_eagle": "05"}  # the lessons whose exercises this file knows
RUN = {"03_yield_and_speedup": ("03", "all lesson-3 checks passed"),
       "02b_statistics_primer": ("02b", "all primer checks passed")}
BUDGET_S = 60.0  # per notebook run, fast mode, 2-core CPU


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The lessons of the edition, built once (the assignments have a test of their own)."""
    out = tmp_path_factory.mktemp("student")
    start = time.perf_counter()
    made = edition.build_edition(out, assignments=False)
    print(f"student edition (lessons) built in {time.perf_counter() - start:.1f} s")
    return out, made


def instructor(name: str):
    return jupytext.read(ROOT / "notebooks" / f"{name}.py")


def all_text(nb) -> str:
    return "\n".join(c.source for c in nb.cells)


def region_lines(nb) -> list[str]:
    """Every line of more than 20 characters inside an answer region of the notebook."""
    out = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for block in re.findall(r"### BEGIN SOLUTION\n(.*?)\n[ \t]*### END SOLUTION", cell.source, re.S):
            out += [line.strip() for line in block.split("\n") if len(line.strip()) > 20]
    return out


def solution_details_lines(nb) -> list[str]:
    out = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for block in re.findall(r"<details><summary>(?:Solution|Answers)</summary>(.*?)</details>",
                                    cell.source, re.S):
                out += [line.strip() for line in block.split("\n") if len(line.strip()) > 20]
    return out


# ---------------------------------------------------------------------------- the edition as built


def test_edition_has_every_lesson(built):
    out, made = built
    assert made == {"notebooks": LESSONS, "assignments": []}
    assert sorted(p.stem for p in (out / "notebooks").glob("*.ipynb")) == LESSONS
    for name in LESSONS:
        nb = nbformat.read(out / "notebooks" / f"{name}.ipynb", as_version=4)
        nbformat.validate(nb)
        assert "jupytext" not in nb.metadata and nb.metadata["kernelspec"]["name"] == "python3"
        assert all(c.outputs == [] for c in nb.cells if c.cell_type == "code")


def test_edition_releases_every_assignment(tmp_path):
    pytest.importorskip("nbgrader")
    import importlib.util

    spec = importlib.util.spec_from_file_location("course", ROOT / "assignments" / "course.py")
    course = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(course)
    start = time.perf_counter()
    made = edition.build_edition(tmp_path, assignments=True)
    print(f"student edition with the assignments built in {time.perf_counter() - start:.1f} s")
    assert made["assignments"] == list(course.ASSIGNMENTS) and made["notebooks"] == LESSONS
    for name in course.ASSIGNMENTS:
        released = nbformat.read(tmp_path / "assignments" / name / f"{name}.ipynb", as_version=4)
        text = all_text(released)
        assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text, name
        assert any("raise NotImplementedError()" in c.source for c in released.cells), name


def checked_keys(text: str) -> list[str]:
    """The exercise keys a lesson checks: ``exercises.check("03.1", ...)`` calls, and the keys of the
    concept check's loop ``for key, answer in {"03.c1": c1, ...}.items(): exercises.check(key, answer)``."""
    return re.findall(r'exercises\.check\("([^"]+)"', text) + re.findall(r'"(\w+\.c\d+)": c\d+\b', text)


def test_no_solution_text_survives(built):
    out, _ = built
    checked = 0
    for name in LESSONS:
        student = all_text(nbformat.read(out / "notebooks" / f"{name}.ipynb", as_version=4))
        assert "### BEGIN SOLUTION" not in student and "### END SOLUTION" not in student, name
        assert not re.search(r"<summary>\s*(Solution|Answers)", student), name
        secret = region_lines(instructor(name)) + solution_details_lines(instructor(name))
        leaked = [line for line in secret if line in student]
        assert not leaked, f"{name}: solution text in the student edition: {leaked[:3]}"
        checked += len(secret)
    assert checked > 100  # the six lessons' regions and solutions were there to look for


def test_every_exercise_of_these_lessons_is_stubbed_and_graded():
    """Each lesson's check calls name exactly the graders its module registers, and each answer region is stubbed."""
    import importlib

    for name, lesson in OWN.items():
        nb = instructor(name)
        keys = checked_keys(all_text(nb))
        assert len(keys) == len(set(keys)) >= 7, (name, keys)
        importlib.import_module(f"specbook.teach.exercises.lesson_{lesson}")
        registered = sorted(k for k in exercises._GRADERS if k.split(".", 1)[0] == lesson)
        assert sorted(keys) == registered, name
        assert any(k.split(".", 1)[1].startswith("c") for k in keys), f"{name} has no concept check"
        student, stubs = edition.student_notebook(nb, name)
        assert len(stubs) >= 4, name  # three or four exercises, the concept check, the checks cell's assertion
        stubbed = all_text(student)
        assert "= ..." in stubbed and "exercises.results(" in stubbed, name


# ---------------------------------------------------------------------------- running the cheap lessons


def execute(nb) -> float:
    start = time.perf_counter()
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    return time.perf_counter() - start


def check_lines(nb) -> list[str]:
    """What the check cells printed, one line per graded exercise ("· 03.1: not answered. ...")."""
    lines = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                lines += [ln for ln in out.text.splitlines() if re.match(r"^[·✓✗] \d\d\w?\.c?\d+: ", ln)]
    return lines


def errors(nb) -> list:
    return [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]


@pytest.fixture
def fast_mode(monkeypatch):
    monkeypatch.setenv("SPECBOOK_FAST", "1")


@pytest.mark.parametrize("name", list(RUN))
def test_student_lesson_runs_with_every_check_not_answered(name, fast_mode):
    lesson, passed = RUN[name]
    nb, _ = edition.student_notebook(instructor(name), name)
    seconds = execute(nb)
    assert not errors(nb), errors(nb)
    assert all(c.execution_count for c in nb.cells if c.cell_type == "code"), "a code cell did not run"
    lines = check_lines(nb)
    expected = len(checked_keys(all_text(instructor(name))))
    assert len(lines) == expected and all(": not answered." in ln for ln in lines), lines
    text = "\n".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.output_type == "stream")
    assert f"exercises and concept check: 0 of {expected} right" in text and passed in text
    print(f"{name} (student edition): {seconds:.1f} s")
    assert seconds < BUDGET_S


@pytest.mark.parametrize("name", list(RUN))
def test_student_lesson_with_the_instructors_answers_pasted_back_passes_every_check(name, fast_mode):
    lesson, passed = RUN[name]
    source = instructor(name)
    nb, stubs = edition.student_notebook(source, name)
    for i, cell_stubs in stubs.items():
        nb.cells[i].source = edition.paste_back(nb.cells[i].source, cell_stubs)
    assert [c.source for c in nb.cells if c.cell_type == "code"] == \
        [c.source for c in source.cells if c.cell_type == "code"]  # the round trip is exact
    seconds = execute(nb)
    assert not errors(nb), errors(nb)
    lines = check_lines(nb)
    assert lines and all(": right" in ln for ln in lines), lines
    text = "\n".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.output_type == "stream")
    assert f"exercises and concept check: {len(lines)} of {len(lines)} right" in text and passed in text
    print(f"{name} (answers pasted back): {seconds:.1f} s")


# ---------------------------------------------------------------------------- the graders' broken twin

WRONG = [  # (key, wrong answers, words the message must show, text it must not show)
    ("03.1", (theory.expected_tokens(0.6, 4),), "E[tokens]", "1.65"),
    ("03.1", (1.5,), "γc + 1", "1.65"),
    ("03.2", (lambda alpha, gamma: alpha,), "your c*", "0.2344"),
    ("03.3", (8,), "ceiling", "γ = 1"),
    ("03.c2", ("b",), "compare E[tokens]", None),
    ("03.c2", (2,), "one letter", None),
    ("01.3", (295,), "ridge", "296"),
    ("01.c1", (2,), "residual", None),
    ("02b.3", (0.3, 0.01), "union bound", "0.26"),
    ("02b.c2", (2,), "ℓ/4", None),
    ("05.c5", (32,), "float32", "64"),
]


@pytest.mark.parametrize("key, answers, says, hides", WRONG, ids=[f"{k}-{i}" for i, (k, *_) in enumerate(WRONG)])
def test_a_wrong_answer_is_wrong_with_a_helpful_message(key, answers, says, hides, capsys):
    result = exercises.check(key, *answers)
    assert result.status == "wrong" and not result.passed
    assert says in result.message, result.message
    assert hides is None or hides not in result.message, result.message
    assert "✗" in capsys.readouterr().out  # printed, not raised


RIGHT = [  # the twin's other half: what is right passes
    ("03.1", (theory.speedup(0.6, 4, 0.1),)),
    ("03.2", (lambda alpha, gamma: sum(alpha ** k for k in range(1, gamma + 1)) / gamma,)),
    ("01.3", (296,)),
    ("02b.3", (1 - 0.99 ** 30, 0.01)),
    ("05.c5", (64,)),
]


@pytest.mark.parametrize("key, answers", RIGHT, ids=[k for k, _ in RIGHT])
def test_the_right_answer_is_right(key, answers):
    assert exercises.check(key, *answers, show=False).status == "right"


def test_a_function_that_raises_is_graded_not_propagated():
    def broken(alpha, gamma):
        return alpha / 0

    result = exercises.check("03.2", broken, show=False)
    assert result.status == "wrong" and "ZeroDivisionError" in result.message
    stub = exercises.check("03.2", lambda a, g: (_ for _ in ()).throw(NotImplementedError("stub")), show=False)
    assert stub.status == "not answered"


# ---------------------------------------------------------------------------- the stubbing rules


CELL = '''scaffold = 1
### BEGIN SOLUTION
answer_one = scaffold + 1
first, (second, *rest) = 1, (2, 3)
for k in range(3):
    total = k
### END SOLUTION


def write_me(x):
    """Doc."""
    ### BEGIN SOLUTION
    return x + scaffold
    ### END SOLUTION


if scaffold:
    ### BEGIN SOLUTION
    assert scaffold
    ### END SOLUTION
### BEGIN SOLUTION
assert write_me(1) == 2
### END SOLUTION
print("after")'''


def test_stub_rules_and_the_round_trip():
    student, stubs = edition.stub_cell(CELL, "09.2")
    lines = student.split("\n")
    assert lines[1:7] == ["answer_one = ...", "first = ...", "second = ...", "rest = ...", "k = ...", "total = ..."]
    assert '    raise NotImplementedError("Exercise 09.2: write write_me")' in lines
    assert "    pass" in lines  # the if block is not left empty
    assert "assert write_me(1) == 2" not in student and student.endswith('print("after")')
    assert "SOLUTION" not in student and len(stubs) == 4
    assert edition.paste_back(student, stubs) == CELL
    compile(student, "<student>", "exec")  # the stubbed cell is valid Python


def test_stub_errors_name_the_cell():
    with pytest.raises(ValueError, match="never closed"):
        edition.stub_cell("### BEGIN SOLUTION\nx = 1", where="lesson, cell 3")
    with pytest.raises(ValueError, match="no ### BEGIN SOLUTION"):
        edition.stub_cell("x = 1\n### END SOLUTION")
    with pytest.raises(ValueError, match="exercises.check"):
        edition.stub_cell("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION", key=None)


def test_markdown_loses_solutions_and_keeps_hints():
    md = ("**Exercise.** Why?\n\n<details><summary>Solution</summary>\n\nBecause.\n\n</details>\n\n"
          "<details><summary><b>Answers</b></summary>1. b</details>\n\n<details><summary>Hint</summary>Look up."
          "</details>")
    out = edition.strip_solution_text(md)
    assert "Because" not in out and "1. b" not in out and "Hint" in out and "Look up." in out
    assert out.startswith("**Exercise.** Why?")


# ---------------------------------------------------------------------------- the command line


def test_command_writes_the_lessons_and_refuses_the_instructors_folders(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "specbook", "student-edition", "--out", str(tmp_path / "e"),
                           "--no-assignments"], capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert f"{len(LESSONS)} lessons" in proc.stdout
    assert sorted(p.stem for p in (tmp_path / "e" / "notebooks").glob("*.ipynb")) == LESSONS
    assert edition.main(["--out", str(ROOT), "--no-assignments"]) == 1  # would overwrite notebooks/
