"""The student edition of the course: the lessons with every answer taken out, and the assignments released.

    python -m specbook student-edition --out DIR        (or: make student, into build/student)

writes

* ``DIR/notebooks/<lesson>.ipynb`` for every ``notebooks/*.py`` lesson, where each answer region
  of a code cell (the lines between ``### BEGIN SOLUTION`` and ``### END SOLUTION``, markers
  included) is replaced by a stub, and every ``<details>`` block of the markdown whose summary
  starts with "Solution" or "Answer" is removed (a markdown cell left empty is dropped);
* ``DIR/assignments/<name>/`` for every assignment: nbgrader's student release, made by
  ``assignments/course.py``'s ``release`` on a throw-away copy of the course directory.

The stub of a region (see :func:`stub_cell`):

* inside a function body: ``raise NotImplementedError("Exercise 03.2: write break_even_c")``, the
  key being that of the first ``exercises.check("...")`` call at or after the cell;
* elsewhere: ``name = ...`` for every name the region binds at its own level (assignments,
  ``def``, ``class``, ``import``, ``for`` and ``with`` targets, also inside its ``if``/``for``
  blocks), which :func:`specbook.teach.exercises.check` reports as "not answered";
* a region that binds nothing (an instructor-only assertion) leaves nothing at the top level of a
  cell, and ``pass`` inside a block (which might otherwise be left empty).

The instructor's notebooks are read, never written. A lesson of the student edition runs top to
bottom as long as no cell outside an exercise uses an exercise's answer, which is the lessons'
rule (``tests/course/test_student_edition.py`` runs two of them).
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import os
import re
import shutil
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository: notebooks/ and assignments/ sit here
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
_MARKER = re.compile(r"^([ \t]*)### (BEGIN|END) SOLUTION[ \t]*$")
_CHECK_KEY = re.compile(r"exercises\.check\(\s*[\"']([^\"']+)[\"']")
# A <details> block whose summary starts with Solution or Answer (tags such as <b> allowed around the word).
_SOLUTION_DETAILS = re.compile(r"<details>\s*<summary>\s*(?:<[^>]+>\s*)*(?:solution|answer)[\s\S]*?</details>[ \t]*\n?",
                               re.IGNORECASE)


@dataclass(frozen=True)
class Stub:
    """One answer region of a cell, and the lines that stand in its place in the student edition."""

    line: int  # first line of the stub in the student's cell (0-based)
    region: tuple[str, ...]  # the instructor's lines, markers included
    stub: tuple[str, ...]  # what the student sees instead (may be empty)


def _regions(lines: list[str], where: str) -> list[tuple[int, int, str]]:
    """(begin line, end line, indentation) of every answer region; unbalanced markers raise ValueError."""
    out, open_at = [], None
    for i, line in enumerate(lines):
        m = _MARKER.match(line)
        if not m:
            continue
        if m.group(2) == "BEGIN":
            if open_at is not None:
                raise ValueError(f"{where}: {BEGIN} on line {i + 1} inside the region opened on line {open_at + 1}")
            open_at = i
        else:
            if open_at is None:
                raise ValueError(f"{where}: {END} on line {i + 1} with no {BEGIN} before it")
            indent = _MARKER.match(lines[open_at]).group(1)
            if m.group(1) != indent:
                raise ValueError(f"{where}: the markers on lines {open_at + 1} and {i + 1} are indented differently")
            out.append((open_at, i, indent))
            open_at = None
    if open_at is not None:
        raise ValueError(f"{where}: {BEGIN} on line {open_at + 1} is never closed")
    return out


def _enclosing_function(tree: ast.Module, line: int) -> str | None:
    """The innermost function whose body holds ``line`` (1-based), if any."""
    name = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.lineno < line <= node.end_lineno:
                if name is None or node.lineno > name[1]:
                    name = (node.name, node.lineno)
    return name[0] if name else None


def bound_names(code: str) -> list[str]:
    """Names a piece of code binds at its own level, in order of first appearance (not inside a def or class)."""
    names: list[str] = []

    def add(name: str) -> None:
        if name not in names:
            names.append(name)

    def targets(node) -> None:
        if isinstance(node, ast.Name):
            add(node.id)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for elt in node.elts:
                targets(elt)
        elif isinstance(node, ast.Starred):
            targets(node.value)

    def walk(body) -> None:
        for node in body:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    targets(target)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets(node.target)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    add((alias.asname or alias.name).split(".")[0])
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                targets(node.target)
                walk(node.body)
                walk(node.orelse)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    if item.optional_vars is not None:
                        targets(item.optional_vars)
                walk(node.body)
            elif isinstance(node, (ast.If, ast.While)):
                walk(node.body)
                walk(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                    walk(block)

    walk(ast.parse(textwrap.dedent(code)).body)
    return names


def stub_cell(source: str, key: str | None = None, where: str = "cell") -> tuple[str, list[Stub]]:
    """The student's version of one code cell, and the regions it took out (for :func:`paste_back`).

    ``key`` is the exercise the cell answers ("03.2"); it is needed only when a region sits
    inside a function body, for the message of the ``NotImplementedError``.
    """
    lines = source.split("\n")
    regions = _regions(lines, where)
    if not regions:
        return source, []
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise ValueError(f"{where}: a cell with an answer region must be plain Python: {err}") from None
    out: list[str] = []
    stubs: list[Stub] = []
    done = 0
    for begin, end, indent in regions:
        out += lines[done:begin]
        region = lines[begin:end + 1]
        function = _enclosing_function(tree, begin + 1)
        if function is not None:
            if key is None:
                raise ValueError(f"{where}: the region on line {begin + 1} sits in {function}() but no "
                                 "exercises.check(...) call follows it to name the exercise")
            stub = [f'{indent}raise NotImplementedError("Exercise {key}: write {function}")']
        else:
            names = bound_names("\n".join(region[1:-1]))
            stub = [f"{indent}{name} = ..." for name in names]
            if not stub and indent:
                stub = [f"{indent}pass"]  # a block might be left empty
        stubs.append(Stub(len(out), tuple(region), tuple(stub)))
        out += stub
        done = end + 1
    out += lines[done:]
    return "\n".join(out), stubs


def paste_back(student_source: str, stubs: list[Stub]) -> str:
    """Put the instructor's regions back where :func:`stub_cell` left its stubs."""
    lines = student_source.split("\n")
    for s in sorted(stubs, key=lambda s: s.line, reverse=True):
        if tuple(lines[s.line:s.line + len(s.stub)]) != s.stub:
            raise ValueError(f"the stub on line {s.line + 1} is not where stub_cell left it: {s.stub!r}")
        lines[s.line:s.line + len(s.stub)] = s.region
    return "\n".join(lines)


def strip_solution_text(markdown: str) -> str:
    """Markdown without its solution ``<details>`` blocks (summary starting with Solution or Answer)."""
    text = _SOLUTION_DETAILS.sub("", markdown)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")


def _check_key(cells, start: int) -> str | None:
    """The key of the first ``exercises.check("...")`` call in a code cell at or after ``start``."""
    for cell in cells[start:]:
        if cell.cell_type == "code":
            m = _CHECK_KEY.search(cell.source)
            if m:
                return m.group(1)
    return None


def student_notebook(nb, name: str = "notebook"):
    """The student edition of one lesson, and the stubs of each of its code cells (by cell index).

    Returns ``(notebook, {index: [Stub, ...]})``; ``nb`` is not changed. Outputs and execution
    counts are cleared and the jupytext pairing is dropped from the metadata (the student's
    copy is a plain notebook).
    """
    import nbformat

    out = nbformat.v4.new_notebook()
    out.metadata = nbformat.from_dict({k: v for k, v in nb.metadata.items() if k != "jupytext"})
    stubs: dict[int, list[Stub]] = {}
    for i, cell in enumerate(nb.cells):
        where = f"{name}, cell {i}"
        if cell.cell_type == "markdown":
            text = strip_solution_text(cell.source)
            if any(_MARKER.match(line) for line in text.split("\n")):
                raise ValueError(f"{where}: solution markers in a markdown cell")
            if text.strip():
                out.cells.append(nbformat.v4.new_markdown_cell(text, metadata=dict(cell.metadata)))
            continue
        if cell.cell_type != "code":
            out.cells.append(nbformat.from_dict(dict(cell)))
            continue
        source, cell_stubs = stub_cell(cell.source, _check_key(nb.cells, i), where)
        if cell_stubs:
            stubs[len(out.cells)] = cell_stubs
        out.cells.append(nbformat.v4.new_code_cell(source, metadata=dict(cell.metadata)))
    return out, stubs


def _load_course(root: Path):
    """``assignments/course.py`` (a script of the repository, not a module of the package)."""
    path = root / "assignments" / "course.py"
    if not path.exists():
        raise ValueError(f"root: no assignments/course.py under {root} (the student edition is built from a checkout)")
    spec = importlib.util.spec_from_file_location("specbook_course", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def _isolated_jupyter(folder: Path):
    """Keep the machine's own Jupyter and nbgrader configuration out of the release."""
    keys = ("JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update(JUPYTER_CONFIG_DIR=str(folder / ".jupyter"), JUPYTER_RUNTIME_DIR=str(folder / ".runtime"),
                      IPYTHONDIR=str(folder / ".ipython"))
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def release_assignments(out: Path, root: Path = ROOT) -> list[str]:
    """nbgrader's student release of every assignment into ``out/<name>/``; returns the names."""
    course = _load_course(root)
    names = list(course.ASSIGNMENTS)
    missing = [n for n in names if not course.source_path(root / "assignments", n).exists()]
    if missing:
        raise ValueError(f"assignments {missing} have no source notebook: run python assignments/course.py build")
    stale = course.stale_sources(root / "assignments")
    if stale:
        print(f"student-edition: warning: the source notebooks of {stale} differ from assignments/src/ "
              "(python assignments/course.py build); releasing the committed ones", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="specbook-release-") as tmp:
        tmp = Path(tmp)
        shutil.copy(root / "assignments" / "nbgrader_config.py", tmp)
        shutil.copytree(root / "assignments" / "source", tmp / "source")
        with _isolated_jupyter(tmp):
            course.release(names, tmp)
        out.mkdir(parents=True, exist_ok=True)
        for name in names:
            if (out / name).exists():
                shutil.rmtree(out / name)
            shutil.copytree(tmp / "release" / name, out / name)
    return names


def _refuse_instructor_folders(out: Path, root: Path) -> None:
    for sub in ("notebooks", "assignments"):
        if (out / sub).resolve() == (root / sub).resolve():
            raise ValueError(f"out: {out} would overwrite the instructor's {sub}/; choose another folder")


def build_edition(out: Path, root: Path = ROOT, assignments: bool = True) -> dict[str, list[str]]:
    """Write the student edition into ``out``; returns ``{"notebooks": [...], "assignments": [...]}``."""
    out = Path(out)
    _refuse_instructor_folders(out, root)
    sources = sorted(p for p in (root / "notebooks").glob("*.py") if not p.name.startswith("."))
    if not sources:
        raise ValueError(f"root: no lessons (notebooks/*.py) under {root}")
    import jupytext
    import nbformat

    lessons = out / "notebooks"
    lessons.mkdir(parents=True, exist_ok=True)
    for stale in lessons.glob("*.ipynb"):  # lessons that no longer exist
        stale.unlink()
    written = []
    for path in sources:
        nb, _ = student_notebook(jupytext.read(path), path.name)
        nbformat.write(nb, lessons / f"{path.stem}.ipynb")
        written.append(path.stem)
    released = release_assignments(out / "assignments", root) if assignments else []
    return {"notebooks": written, "assignments": released}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specbook student-edition", description=__doc__.split("\n\n")[0],
                                     epilog="Writes DIR/notebooks/*.ipynb (answers stubbed, solutions removed) and "
                                            "DIR/assignments/<name>/ (nbgrader's student release).")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="folder to write the edition into")
    parser.add_argument("--root", type=Path, default=ROOT, metavar="DIR",
                        help="the course checkout to read (default: the one this specbook comes from)")
    parser.add_argument("--no-assignments", action="store_true", help="write the lessons only (no nbgrader needed)")
    args = parser.parse_args(argv)
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"argument --out: {args.out} exists and is not a folder")
    try:
        made = build_edition(args.out, args.root, assignments=not args.no_assignments)
    except ValueError as err:
        print(f"specbook student-edition: {err}", file=sys.stderr)
        return 1
    print(f"student edition in {args.out}: {len(made['notebooks'])} lessons in notebooks/, "
          f"{len(made['assignments'])} assignments in assignments/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
