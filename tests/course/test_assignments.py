"""The nbgrader assignments, end to end, in a throw-away course directory.

release (generate_assignment) -> fill in the instructor's solution -> autograde -> full marks;
fill in a buggy solution -> the hidden test fails and the feedback carries the checker's
explanation.  No network; notebooks run on the kernel named ``python3``.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest

pytest.importorskip("nbgrader")
pytest.importorskip("jupytext")

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("course", ROOT / "assignments" / "course.py")
course = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(course)

# nbgrader's own database code warns about SQLAlchemy session use; not ours to fix.
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Object of type.*not in session")]


@pytest.fixture(scope="module")
def course_dir(tmp_path_factory):
    """A course directory holding a copy of the committed config and source notebooks, released."""
    tmp = tmp_path_factory.mktemp("course")
    saved = {k: os.environ.get(k) for k in ("JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR")}
    # Keep any personal Jupyter/nbgrader configuration of the machine out of the run.
    os.environ.update(JUPYTER_CONFIG_DIR=str(tmp / ".jupyter"), JUPYTER_RUNTIME_DIR=str(tmp / ".runtime"),
                      IPYTHONDIR=str(tmp / ".ipython"))
    shutil.copy(ROOT / "assignments" / "nbgrader_config.py", tmp)
    shutil.copytree(ROOT / "assignments" / "source", tmp / "source")
    course.release(course.ASSIGNMENTS, tmp)
    yield tmp
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def test_source_notebooks_are_built_from_src():
    assert course.stale_sources() == [], "run: python assignments/course.py build"


def test_course_cli_check_and_argument_errors(capsys, course_dir, tmp_path):
    assert course.main(["check"]) == 0
    assert "up to date" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        course.main(["grade"])  # an assignment name is required
    with pytest.raises(ValueError, match="no solution cells"):
        course.submit("01_acceptance_rule", "x", {"no_such_cell": ""}, course_dir)
    with pytest.raises(FileNotFoundError, match="release"):
        course.submit("01_acceptance_rule", "x", {}, tmp_path)


def test_kernel_python3_is_this_interpreter():
    from jupyter_client.manager import KernelManager

    cmd = KernelManager(kernel_name="python3").format_kernel_cmd()
    assert os.path.realpath(cmd[0]) == os.path.realpath(sys.executable), cmd


def test_release_has_stubs_and_no_solutions_or_hidden_tests(course_dir):
    for name in course.ASSIGNMENTS:
        nb = nbformat.read(course_dir / "release" / name / f"{name}.ipynb", as_version=4)
        text = "\n".join(c.source for c in nb.cells)
        assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text
        solution_cells = [c for c in nb.cells if c.metadata["nbgrader"].get("solution")]
        assert solution_cells and all("raise NotImplementedError()" in c.source for c in solution_cells)
        source = nbformat.read(course.source_path(ROOT / "assignments", name), as_version=4)
        for cell in source.cells:  # no line between the solution markers leaks into the release
            inside = cell.source.split("### BEGIN SOLUTION")[1:]
            for region in (part.split("### END SOLUTION")[0] for part in inside):
                leaked = [ln.strip() for ln in region.splitlines() if len(ln.strip()) > 20 and ln.strip() in text]
                assert not leaked, (name, leaked)


@pytest.mark.parametrize("name", course.ASSIGNMENTS)
def test_reference_solution_gets_full_marks(course_dir, name):
    course.submit(name, "reference", course.solutions(name), course_dir)
    result = course.grade(name, "reference", course_dir)
    assert result["score"] == result["max_score"] == 10, result
    assert result["feedback"].exists()
    graded = nbformat.read(course_dir / "autograded" / "reference" / name / f"{name}.ipynb", as_version=4)
    check = [c for c in graded.cells if c.metadata["nbgrader"]["grade_id"] == "check_your_work"]
    if check and ("check_verifier" in check[0].source or "check_token_rule" in check[0].source):
        assert "PASSED" in str(check[0].outputs)  # the notebook's own check cell shows the checker's verdict


SUBMISSIONS = ROOT / "tests" / "course" / "submissions"


def _broken(name: str) -> dict:
    """``BROKEN`` of tests/course/submissions/<name>.py (label -> (answers, lost cells, feedback words)).

    The module is loaded as a part of the package tests/course/submissions, whose ``mutated`` writes a broken
    submission as the reference solution with one mistake put in.
    """
    if "course_submissions" not in sys.modules:
        spec = importlib.util.spec_from_file_location("course_submissions", SUBMISSIONS / "__init__.py",
                                                      submodule_search_locations=[str(SUBMISSIONS)])
        sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[spec.name])
    return importlib.import_module(f"course_submissions.{name}").BROKEN


# (assignment, label) -> (answers, cells that must lose all their points, words the feedback must show);
# every other cell must keep full marks.
BUGGY = {(name, label): case for name in course.ASSIGNMENTS if (SUBMISSIONS / f"{name}.py").exists()
         for label, case in _broken(name).items()}


def test_every_assignment_has_a_broken_submission():
    for name in course.ASSIGNMENTS:
        assert any(n == name for n, _ in BUGGY), name
    for name in course.ASSIGNMENTS[3:]:  # the assignments that test understanding: at least two each
        assert sum(n == name for n, _ in BUGGY) >= 2, name


@pytest.mark.parametrize("name,label", list(BUGGY), ids=[f"{n}-{l}" for n, l in BUGGY])
def test_buggy_solution_fails_the_hidden_test_with_an_explanation(course_dir, name, label):
    answers, lost, words = BUGGY[name, label]
    student = "buggy-" + re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
    course.submit(name, student, {**course.solutions(name), **answers}, course_dir)
    result = course.grade(name, student, course_dir)
    for cell in lost:
        score, max_score = result["cells"][cell]
        assert score == 0 and max_score > 0, (cell, result)
    assert all(s == m for cell, (s, m) in result["cells"].items() if cell not in lost), result  # other tests pass
    assert result["score"] < result["max_score"]
    html = result["feedback"].read_text()
    for word in words:
        assert word in html, word
    assert "HIDDEN TESTS" not in html and "seed=" not in html  # hidden test sources stay hidden
