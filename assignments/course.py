"""Course tooling for the specbook assignments, on top of nbgrader.

    python assignments/course.py build                  # src/*.py (jupytext percent) -> source/<name>/<name>.ipynb
    python assignments/course.py check                  # exit 1 if source/ is out of date with src/
    python assignments/course.py release [NAME ...]     # nbgrader generate_assignment -> release/<name>/
    python assignments/course.py grade NAME [STUDENT]   # nbgrader autograde + generate_feedback for
                                                        # submitted/<student>/<name>/ (all students if omitted)

Every command takes ``--course-dir DIR`` (default: this folder), which must hold
``nbgrader_config.py`` and ``source/``.  The notebooks are authored as plain Python
files in ``src/`` (easy to review and diff); ``build`` turns them into the nbgrader
source notebooks, with cell ids equal to the nbgrader ``grade_id`` so rebuilding
is deterministic.  Nothing here needs the network; the notebooks run on the kernel
named ``python3``, which Jupyter resolves to the Python running this script.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
# Every src/NN_name.py is an assignment, in the order of its number.
ASSIGNMENTS = tuple(sorted(p.stem for p in (HERE / "src").glob("[0-9][0-9]_*.py")))
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
_SOLUTION = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.MULTILINE)


# --------------------------------------------------------------------------- authoring

def build_notebook(src: Path) -> nbformat.NotebookNode:
    """The nbgrader source notebook for one ``src/<name>.py`` file."""
    import jupytext

    nb = jupytext.read(src)
    nb.metadata = nbformat.from_dict({"kernelspec": KERNELSPEC, "language_info": {"name": "python"}})
    for cell in nb.cells:
        cell.metadata.pop("lines_to_next_cell", None)
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if not grade_id:
            raise ValueError(f"{src.name}: every cell needs nbgrader metadata with a grade_id; missing in {cell.source[:60]!r}")
        cell.id = grade_id
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.validate(nb)
    return nb


def source_path(course_dir: Path, name: str) -> Path:
    return course_dir / "source" / name / f"{name}.ipynb"


def build(course_dir: Path = HERE) -> list[Path]:
    written = []
    for name in ASSIGNMENTS:
        path = source_path(course_dir, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(build_notebook(HERE / "src" / f"{name}.py"), path)
        written.append(path)
    return written


def stale_sources(course_dir: Path = HERE) -> list[str]:
    """Names whose committed source notebook differs from what ``build`` would write."""
    stale = []
    for name in ASSIGNMENTS:
        path = source_path(course_dir, name)
        want = nbformat.writes(build_notebook(HERE / "src" / f"{name}.py"))
        if not path.exists() or path.read_text().rstrip("\n") != want.rstrip("\n"):
            stale.append(name)
    return stale


def solutions(name: str, course_dir: Path = HERE) -> dict[str, str]:
    """grade_id -> the instructor's solution cell with the BEGIN/END SOLUTION markers removed."""
    nb = nbformat.read(source_path(course_dir, name), as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: _SOLUTION.sub("", c.source)
            for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")}


# --------------------------------------------------------------------------- nbgrader

def nbgrader_api(course_dir: Path = HERE):
    from nbgrader.apps import NbGraderAPI
    from traitlets.config.loader import PyFileConfigLoader

    # nbgrader runs the `alembic` script (installed next to this Python) by name to set up
    # its database; make it findable when this environment is not activated.
    bindir = str(Path(sys.executable).parent)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")

    config = PyFileConfigLoader("nbgrader_config.py", path=str(course_dir)).load_config()
    config.CourseDirectory.root = str(course_dir)
    return NbGraderAPI(config=config)


def _ok(result: dict, what: str) -> dict:
    if not result.get("success"):
        raise RuntimeError(f"{what} failed:\n{result.get('error')}\n{result.get('log')}")
    return result


def release(names=ASSIGNMENTS, course_dir: Path = HERE) -> list[Path]:
    """nbgrader generate_assignment: student notebooks (stubs, hidden tests removed) in release/."""
    api = nbgrader_api(course_dir)
    for name in names:
        _ok(api.generate_assignment(name), f"generate_assignment {name}")
    return [course_dir / "release" / n / f"{n}.ipynb" for n in names]


def submit(name: str, student: str, answers: dict[str, str], course_dir: Path = HERE) -> Path:
    """Write a submission: the released notebook with the solution cells ``answers`` (grade_id -> code) filled in."""
    released = course_dir / "release" / name / f"{name}.ipynb"
    if not released.exists():
        raise FileNotFoundError(f"{released} does not exist: run `course.py release {name}` first")
    nb = nbformat.read(released, as_version=4)
    unknown = set(answers) - {c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells}
    if unknown:
        raise ValueError(f"no solution cells named {sorted(unknown)} in {name}")
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
    path = course_dir / "submitted" / student / name / f"{name}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def grade(name: str, student: str, course_dir: Path = HERE) -> dict:
    """nbgrader autograde + generate_feedback for one submission.

    Returns {"score", "max_score", "cells": {grade_id: (score, max)}, "feedback": path to the HTML}.
    """
    from nbgrader.api import Gradebook

    api = nbgrader_api(course_dir)
    _ok(api.autograde(name, student), f"autograde {name} {student}")
    _ok(api.generate_feedback(name, student), f"generate_feedback {name} {student}")
    with Gradebook(api.coursedir.db_url) as gb:
        sub = gb.find_submission(name, student)
        nb = gb.find_submission_notebook(name, name, student)
        cells = {g.name: (g.score, g.max_score) for g in nb.grades}
        score, max_score = sub.score, sub.max_score
    return {"score": score, "max_score": max_score, "cells": cells,
            "feedback": course_dir / "feedback" / student / name / f"{name}.html"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["build", "check", "release", "grade"])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--course-dir", type=Path, default=HERE)
    args = ap.parse_args(argv)
    course = args.course_dir.resolve()
    if args.command == "build":
        for p in build(course):
            print("wrote", p)
    elif args.command == "check":
        stale = stale_sources(course)
        print("source notebooks up to date" if not stale else f"out of date (run build): {stale}")
        return 1 if stale else 0
    elif args.command == "release":
        for p in release(args.names or ASSIGNMENTS, course):
            print("released", p)
    else:
        if not args.names:
            ap.error("grade needs an assignment name")
        name, *students = args.names
        students = students or sorted(p.name for p in (course / "submitted").iterdir() if (p / name).is_dir())
        for s in students:
            res = grade(name, s, course)
            print(json.dumps({"student": s, "score": res["score"], "max_score": res["max_score"],
                              "feedback": str(res["feedback"])}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
