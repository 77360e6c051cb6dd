"""``import specbook as sb; sb.a.b`` reaches every module of the package, with no import by hand.

The walk is over the files, so a module added later is checked without editing this test. It
runs in a fresh interpreter, where nothing has been imported yet; there, before each lookup, the
attribute the import system binds on the parent package is removed, so a module that another
module imported along the way cannot hide a package whose lazy lookup is missing.
"""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "specbook"


def module_names() -> list[str]:
    """Dotted names below ``specbook`` of every module file in a package (``models.smollm2``)."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if not all((PACKAGE.joinpath(*parts[:i]) / "__init__.py").exists() for i in range(len(parts))):
            continue  # a file in a plain folder (data, weights) is no module of the package
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            names.append(".".join(parts))
    return names


WALK = r"""
import importlib, json, sys
names = json.loads(sys.argv[1])
import specbook as sb
loaded = sorted(m for m in sys.modules if m.startswith("specbook."))
missing, undirred = [], []
for name in names:
    *parents, leaf = name.split(".")
    parent = importlib.import_module(".".join(["specbook", *parents]))
    bound = parent.__dict__.pop(leaf, None)
    try:
        obj = sb
        for part in name.split("."):
            obj = getattr(obj, part)
        if obj is not sys.modules[f"specbook.{name}"]:
            missing.append(f"sb.{name} is not the module specbook.{name}")
    except Exception as e:  # an AttributeError, or the module's own import failing
        missing.append(f"sb.{name}: {type(e).__name__}: {e}")
    finally:
        if bound is not None:
            setattr(parent, leaf, bound)
    if leaf not in dir(parent):
        undirred.append(f"dir(specbook{''.join('.' + p for p in parents)}) lacks {leaf!r}")
print(json.dumps({"loaded": loaded, "missing": missing, "undirred": undirred}))
"""


def test_the_walk_finds_the_modules_the_issue_named():
    names = module_names()
    assert {"rows", "validate", "progress", "machine", "cliargs", "models.smollm2", "grading.catalogue",
            "grading.catalogue.common", "__main__"} <= set(names)
    assert not any(n.startswith(("data", "weights")) for n in names)


def test_every_module_resolves_from_the_top_package():
    names = module_names()
    run = subprocess.run([sys.executable, "-c", WALK, json.dumps(names)], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["loaded"] == [], f"`import specbook` must import no submodule (stays fast): {result['loaded']}"
    assert result["missing"] == [], "\n".join(result["missing"])
    assert result["undirred"] == [], "\n".join(result["undirred"])


def test_a_name_that_is_no_module_is_still_an_attribute_error():
    import specbook as sb

    for package in (sb, sb.models, sb.teach, sb.bench):
        with pytest.raises(AttributeError, match=f"{package.__name__}.*no_such_module"):
            package.no_such_module
    assert not hasattr(sb, "data") and not hasattr(sb, "weights"), "folders of files are not modules"


def test_tests_are_laid_out_like_the_package():
    """Every folder of tests/ is a subpackage of specbook, or course/ and docs/ (the lessons', the
    assignments' and the documents' checks); every test module at the top names a core module."""
    tests = pathlib.Path(__file__).resolve().parent
    package = tests.parent / "specbook"
    folders = {p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    subpackages = {p.name for p in package.iterdir() if (p / "__init__.py").exists()}
    assert folders - {"course", "docs"} <= subpackages, folders - subpackages
    cross = {"test_bad_inputs_core", "test_cli", "test_package_map", "test_packaging"}
    for test in tests.glob("test_*.py"):
        stem = test.stem[len("test_"):]
        assert test.stem in cross or any((package / f"{stem[:i]}.py").exists() for i in range(len(stem), 0, -1)
                                         if i == len(stem) or stem[i] == "_"), test.name
