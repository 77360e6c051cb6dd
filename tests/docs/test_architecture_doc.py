"""docs/architecture.md is a true map of specbook: what it names exists where it says, and it
names every module.

(a) Every reference written the doc's way, a file in backticks, a colon, then backticked names,

        `verify.py`: `verify_chain`, `verify_token`, `residual`
        `roofline.py`: `roofline_rows` (lesson 1), `predict`; `teach/batching.py`: `BatchingExplorer`
        `models/target.py`: `LlamaTarget.forward`

    (paths relative to specbook/; a parenthesis after a name is a note, skipped), and every
    dotted `specbook.module.name`, names something defined in that file: a function, a class
    or a module-level assignment, or for `Class.attr` a method or field of that class. Read
    with ast, so nothing is imported; a name merely imported into the file does not count.
(b) Every module file under specbook/ is mentioned: by its path (`rows.py`, `models/dtype.py`),
    its dotted name, or as a backticked bare name (`rows`, `dtype`) in a line where it belongs
    to the last package written before it (`models/` (`llama`, `dtype`)) or to one that
    package sits in; a bare name with no package before it on its line is a top-level module.
    A package is mentioned as `name/`.
"""
from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "specbook"
DOC = ROOT / "docs" / "architecture.md"

NAME = r"`([A-Za-z_][\w.]*)`(?:\s*\([^()]*\))?"  # a backticked name and an optional note after it
REFERENCE = re.compile(rf"`((?:\w+/)*\w+\.py)`:\s*({NAME}(?:\s*,\s*{NAME})*)")
DOTTED = re.compile(r"`specbook\.([\w.]+)`")


def module_files() -> list[Path]:
    """Every module file of the package (files in plain folders such as data/ are not modules)."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if all((PACKAGE / Path(*rel.parts[:i]) / "__init__.py").exists() for i in range(len(rel.parts))):
            out.append(rel)
    return out


@functools.cache
def definitions(rel: Path) -> dict[str, set[str]]:
    """Top-level names defined in a module file -> the names defined in their bodies (classes)."""
    return defined_in((PACKAGE / rel).read_text())


def defined_in(source: str) -> dict[str, set[str]]:
    def names(body) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[node.name] = set()
            elif isinstance(node, ast.ClassDef):
                out[node.name] = set(names(node.body))
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    for leaf in ast.walk(target):
                        if isinstance(leaf, ast.Name):
                            out[leaf.id] = set()
            elif isinstance(node, (ast.If, ast.Try)):  # definitions under a version or import guard
                for block in (node.body, node.orelse, *(h.body for h in getattr(node, "handlers", []))):
                    out.update(names(block))
        return out

    return names(ast.parse(source).body)


def defines(found: dict[str, set[str]], name: str) -> bool:
    top, _, attr = name.partition(".")
    return top in found and (not attr or attr in found[top])


def references(text: str) -> list[tuple[int, str, str]]:
    """(line number, file relative to specbook/, name) of every `file.py`: `name` reference."""
    out = []
    for m in REFERENCE.finditer(text):  # over the whole text: a list of names may wrap onto the next line
        number = text.count("\n", 0, m.start()) + 1
        for name in re.findall(NAME, m.group(2)):
            out.append((number, m.group(1), name))
    for number, line in enumerate(text.splitlines(), 1):
        for m in DOTTED.finditer(line):
            parts = m.group(1).split(".")
            for cut in range(len(parts) - 1, 0, -1):  # the longest prefix that is a module file
                rel = Path(*parts[:cut]).with_suffix(".py")
                if (PACKAGE / rel).exists():
                    out.append((number, str(rel), ".".join(parts[cut:])))
                    break
            else:
                if not (PACKAGE / Path(*parts)).with_suffix(".py").exists():
                    out.append((number, "/".join(parts) + ".py", "(the module itself)"))
    return out


def mentioned(text: str) -> set[str]:
    """Module paths relative to specbook/, without .py (`models/dtype`), and packages (`models/`)."""
    found = set()
    for line in text.splitlines():
        package: tuple[str, ...] = ()
        for token in re.findall(r"`([^`\s]+)`", line):
            dotted = token.startswith("specbook.")
            token = token.removeprefix("specbook/").removeprefix("specbook.")
            if token.endswith("/"):  # a package of specbook (in the one before it, or above); scripts/ is none
                parts = tuple(token.strip("/").split("/"))
                inside = [package[:depth] + parts for depth in range(len(package), -1, -1)]
                package = next((p for p in inside if (PACKAGE / Path(*p) / "__init__.py").exists()), package)
                found.add("/".join(package) + "/")
            elif token.endswith(".py") or "/" in token:
                found.add(token.removesuffix(".py"))
            elif dotted:  # `specbook.decode.speculative_generate` mentions decode
                parts = token.split(".")
                found.update("/".join(parts[:cut]) for cut in range(1, len(parts) + 1))
            else:
                found.update(bare(token, package))
    return found


def bare(name: str, package: tuple[str, ...]) -> set[str]:
    """The module a bare backticked name stands for: in the package before it, or one above."""
    for depth in range(len(package), -1, -1):  # the package written before it, or one it sits in
        candidate = "/".join((*package[:depth], name))
        if (PACKAGE / f"{candidate}.py").exists():
            return {candidate}
    return set()


def test_the_doc_is_read_the_way_it_is_written():
    refs = references(DOC.read_text())
    assert len(refs) >= 60, f"only {len(refs)} `file.py`: `name` references parsed: has the doc's style changed?"


def test_every_named_function_or_class_is_in_the_file_the_doc_names():
    wrong = []
    for number, file, name in references(DOC.read_text()):
        rel = Path(file)
        if not (PACKAGE / rel).exists():
            wrong.append(f"docs/architecture.md:{number}: {file} does not exist (named with {name})")
        elif name != "(the module itself)" and not defines(definitions(rel), name):
            wrong.append(f"docs/architecture.md:{number}: {file} defines no {name}")
    assert not wrong, "\n".join(wrong)


def test_every_module_is_on_the_map():
    found = mentioned(DOC.read_text())
    missing = []
    for rel in module_files():
        if rel.name == "__init__.py":
            key = "/".join(rel.parts[:-1]) + "/"
            if key == "/":
                continue  # specbook itself: the doc is its map
        else:
            key = rel.with_suffix("").as_posix()
        if key not in found:
            missing.append(f"specbook/{rel}")
    assert not missing, "docs/architecture.md does not mention: " + ", ".join(missing)


def test_the_checks_can_fail():
    text = "| x | `verify.py`: `verify_chain`, `no_such_function`; `rows.py`: `Rows.no_such_method` |\n"
    assert [(f, n) for _, f, n in references(text)] == [("verify.py", "verify_chain"), ("verify.py", "no_such_function"),
                                                      ("rows.py", "Rows.no_such_method")]
    wrapped = "(`protocols.py`: `Target`,\n`Drafter` (a note), `Draft`) and `specbook.rows.prefill`"
    assert [(f, n) for _, f, n in references(wrapped)] == [("protocols.py", "Target"), ("protocols.py", "Drafter"),
                                                         ("protocols.py", "Draft"), ("rows.py", "prefill")]
    found = defined_in("import os\nclass Rows:\n    size: int\n    def keep(self): ...\nRULES = {}\ndef f(): ...\n")
    assert all(defines(found, n) for n in ("Rows", "Rows.keep", "Rows.size", "RULES", "f"))
    assert not any(defines(found, n) for n in ("os", "Rows.drop", "g", "keep"))
    assert "models/dtype" in mentioned("| 1 | `models/` (`llama`, `dtype`), `drafters/` (`ngram`) |")
    assert "models/dtype" not in mentioned("| 1 | `drafters/` (`dtype`) |")
    assert "grading/report" in mentioned("`grading/` (`catalogue/`: `common`, `report`)")
    assert "grading/catalogue/common" in mentioned("`grading/` (`twins`, shared with `scripts/`; `catalogue/`: `common`)")
    assert "train/eagle" in mentioned("`grading/` (`catalogue/`: `common`), `train/` (`eagle`)")
