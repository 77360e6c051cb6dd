"""Set-up files agree with each other: pyproject is the one place dependencies are declared."""
import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _pip_section():
    lines = (ROOT / "environment.yml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"\s*-\s*pip:\s*$", line))
    return [line.strip()[2:].strip() for line in lines[start + 1 :] if line.strip().startswith("- ")]


def test_environment_installs_the_project_with_existing_extras():
    extras = set(_pyproject()["project"]["optional-dependencies"])
    pip = _pip_section()
    project = [entry for entry in pip if entry.startswith("-e .") or entry.startswith(".")]
    assert project, "environment.yml must install the project itself through pip"
    for entry in project:
        m = re.search(r"\[(.*)\]", entry)
        assert m and set(m.group(1).split(",")) <= extras, f"{entry}: unknown extra (pyproject has {sorted(extras)})"


def test_environment_declares_no_dependency_of_its_own():
    names = lambda specs: {re.split(r"[<>=!~\[ ]", s)[0].lower() for s in specs}  # noqa: E731
    pip = [e for e in _pip_section() if not e.startswith(("-e", "."))]
    assert not pip, f"declare these in pyproject.toml instead: {pip}"
    text = (ROOT / "environment.yml").read_text()
    block = text.split("dependencies:", 1)[1].split("- pip:", 1)[0]
    conda = [l.strip()[2:] for l in block.splitlines() if l.strip().startswith("- ")]
    assert names(conda) <= {"python", "pip"}, f"conda packages duplicating pyproject: {conda}"


def test_required_packages_declared():
    project = _pyproject()["project"]
    declared = set()
    for spec in project["dependencies"] + sum(project["optional-dependencies"].values(), []):
        declared.add(re.split(r"[<>=!~\[ ]", spec)[0].lower())
    assert {"torch", "transformers", "jupyterlab", "ipywidgets", "hypothesis", "scipy"} <= declared


def test_torch_range_admits_the_pinned_build():
    makefile = (ROOT / "Makefile").read_text()
    pinned = re.search(r"TORCH_SPEC \?= torch==([\d.]+)", makefile).group(1)
    spec = next(s for s in _pyproject()["project"]["dependencies"] if s.startswith("torch"))
    lo = re.search(r">=([\d.]+)", spec).group(1)
    hi = re.search(r"<([\d.]+)", spec).group(1)
    v = lambda s: tuple(int(x) for x in s.split("."))  # noqa: E731
    assert v(lo) <= v(pinned) < v(hi), f"{spec} does not admit torch {pinned}"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make lab" in readme
    assert re.search(r"^make test$", (ROOT / ".ci/run").read_text(), re.M)
