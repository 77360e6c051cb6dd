"""Set-up files agree with each other and with the code; nothing here installs anything.

pyproject.toml is the one place dependencies are declared; constraints.txt is
the one place torch's exact version is pinned, for the Makefile and
environment.yml alike. The declared lower bounds are checked against the APIs
the code calls (``API_FLOORS``): a call that needs a newer release than the
bound admits fails here, before a user with an old torch meets it.
"""
from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = pathlib.Path(__file__).resolve().parents[1]
CODE_DIRS = ("specbook", "scripts", "notebooks", "tests")


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _pip_section():
    lines = (ROOT / "environment.yml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"\s*-\s*pip:\s*$", line))
    return [line.strip()[2:].strip() for line in lines[start + 1 :] if line.strip().startswith("- ")]


def _requirements(extra: str | None = None) -> list[Requirement]:
    """The project's requirements (``extra=None``) or one extra's, self-references expanded."""
    project = _pyproject()["project"]
    specs = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    out = []
    for spec in specs:
        req = Requirement(spec)
        if req.name == project["name"]:
            for inner in sorted(req.extras):
                out += _requirements(inner)
        else:
            out.append(req)
    return out


def _pin() -> Requirement:
    lines = [l.split("#", 1)[0].strip() for l in (ROOT / "constraints.txt").read_text().splitlines()]
    pins = [Requirement(l) for l in lines if l]
    torch = [r for r in pins if r.name == "torch"]
    assert len(torch) == 1 and str(torch[0].specifier).startswith("=="), f"constraints.txt must pin torch once: {pins}"
    return torch[0]


# --------------------------------------------------------------------------- one pin, one declaration

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
    pip = [e for e in _pip_section() if not e.startswith(("-e", ".", "-c "))]
    assert not pip, f"declare these in pyproject.toml instead: {pip}"
    text = (ROOT / "environment.yml").read_text()
    block = text.split("dependencies:", 1)[1].split("- pip:", 1)[0]
    conda = [l.strip()[2:] for l in block.splitlines() if l.strip().startswith("- ")]
    assert names(conda) <= {"python", "pip"}, f"conda packages duplicating pyproject: {conda}"


def test_environment_and_makefile_share_the_torch_pin(tmp_path):
    assert "-c constraints.txt" in _pip_section(), "environment.yml must install with -c constraints.txt"
    makefile = (ROOT / "Makefile").read_text()
    assert not re.search(r"torch\s*[=<>~]=", makefile), "the Makefile pins torch itself; use constraints.txt"
    commands = _dry_run("test", tmp_path).splitlines()
    installs = [c for c in commands if " pip " in c and " install " in c and "--upgrade pip" not in c]
    assert installs and all("-c constraints.txt" in c for c in installs), f"pip installs without the pin: {installs}"


def test_torch_range_admits_the_pinned_build():
    pinned = next(iter(_pin().specifier)).version
    torch = next(r for r in _requirements() if r.name == "torch")
    assert torch.specifier.contains(pinned), f"{torch} does not admit the pinned torch {pinned}"


def test_required_packages_declared():
    declared = {r.name.lower() for extra in [None, *_pyproject()["project"]["optional-dependencies"]]
                for r in _requirements(extra)}
    assert {"torch", "transformers", "jupyterlab", "ipywidgets", "hypothesis", "scipy", "nbconvert"} <= declared


OPT_IN = ("llamacpp",)  # extras that compile for a long time: installed by hand, never by make test


def test_lab_extra_is_light_and_all_extra_is_complete():
    """`make lab` gets the lessons' needs only; `make test` gets every extra."""
    lab = {r.name.lower() for r in _requirements("lab")}
    assert {"jupyterlab", "ipywidgets", "hypothesis", "gguf"} <= lab  # lessons, lesson 2's proof, the model
    assert not lab & {"playwright", "nbgrader", "pytest"}, f"test tools in the lab extra: {lab}"
    extras = _pyproject()["project"]["optional-dependencies"]
    everything = {r.name.lower() for extra in extras if extra not in ("all", *OPT_IN) for r in _requirements(extra)}
    in_all = {r.name.lower() for r in _requirements("all")}
    assert in_all == everything
    assert not in_all & {r.name.lower() for extra in OPT_IN for r in _requirements(extra)}  # kept out of make test


def _dry_run(target: str, tmp_path: pathlib.Path) -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    venv = tmp_path / "venv"
    out = subprocess.run(["make", "-n", target, f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_make_lab_installs_the_lab_extra_and_make_test_all(tmp_path):
    lab = _dry_run("lab", tmp_path)
    assert "-e '.[lab]'" in lab and ".[all]" not in lab, lab
    assert "jupyter lab notebooks/" in lab and "fetch-model" in lab
    test = _dry_run("test", tmp_path)
    assert "-e '.[all]'" in test and "-m pytest" in test, test


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"^make lab\b", readme, re.M) and re.search(r"^make test\b", readme, re.M)
    assert "make site" in readme
    assert re.search(r"^make test$", (ROOT / ".ci/run").read_text(), re.M)


# --------------------------------------------------------------------------- bounds against the code

# (what the code does, pattern, package, first release that has it). "python" is
# requires-python. Extend this table when the code starts using a newer API.
ARGS = r"(?:[^()]|\([^()]*\))*?"  # a call's arguments, with one level of nested parentheses
API_FLOORS = [
    ("F.rms_norm", r"\b(?:F|functional)\.rms_norm\(", "torch", "2.4"),
    ("torch.nn.RMSNorm", r"\bnn\.RMSNorm\(", "torch", "2.4"),
    ("scaled_dot_product_attention(enable_gqa=)", rf"scaled_dot_product_attention\({ARGS}\benable_gqa=", "torch", "2.5"),
    ("torch.nn.attention.flex_attention", r"\bflex_attention\b", "torch", "2.5"),
    ("torch.accelerator", r"\btorch\.accelerator\b", "torch", "2.6"),
    ("torch.load(weights_only=)", rf"torch\.load\({ARGS}\bweights_only=", "torch", "1.13"),
    ("from_pretrained(dtype=)", rf"from_pretrained\({ARGS}\bdtype=", "transformers", "4.56"),
    ("from_pretrained(gguf_file=)", rf"from_pretrained\({ARGS}\bgguf_file=", "transformers", "4.41"),
    ("import tomllib", r"^\s*(?:import tomllib|from tomllib import)", "python", "3.11"),
    ("typing.Self", r"\bfrom typing import [^\n]*\bSelf\b", "python", "3.11"),
]

# One line per pattern that must match it (keeps a typo in a pattern from silencing a row).
EXAMPLES = {
    "F.rms_norm": "return F.rms_norm(x, shape, w, eps)",
    "torch.nn.RMSNorm": "self.norm = nn.RMSNorm(dim)",
    "scaled_dot_product_attention(enable_gqa=)": "F.scaled_dot_product_attention(q, k, v, enable_gqa=True)",
    "torch.nn.attention.flex_attention": "from torch.nn.attention.flex_attention import flex_attention",
    "torch.accelerator": "device = torch.accelerator.current_accelerator()",
    "torch.load(weights_only=)": "torch.load(path, weights_only=True)",
    "from_pretrained(dtype=)": "AutoModelForCausalLM.from_pretrained(\n    str(p), dtype=torch.float32)",
    "from_pretrained(gguf_file=)": "AutoTokenizer.from_pretrained(d, gguf_file=name)",
    "import tomllib": "import tomllib",
    "typing.Self": "from typing import Any, Self",
}


def _lower_bound(package: str, pyproject: dict) -> Version:
    """The version a ``>=`` bound admits at the lowest (0 when there is none)."""
    project = pyproject["project"]
    if package == "python":
        specs = [s for s in re.split(r",\s*", project["requires-python"])]
    else:
        specs = [str(s) for r in map(Requirement, project["dependencies"]) if r.name == package for s in r.specifier]
    lows = [Version(s[2:]) for s in specs if s.startswith(">=")]
    return max(lows, default=Version("0"))


def _code_text() -> dict[str, str]:
    files = {}
    for folder in CODE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name != "test_packaging.py":  # this file names every pattern
                files[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8", errors="replace")
    return files


def bound_violations(pyproject: dict, files: dict[str, str]) -> list[str]:
    """Each API the code uses whose first release is newer than the declared lower bound."""
    problems = []
    for what, pattern, package, floor in API_FLOORS:
        users = [name for name, text in files.items() if re.search(pattern, text, re.M)]
        low = _lower_bound(package, pyproject)
        if users and low < Version(floor):
            problems.append(f"{what} needs {package}>={floor}, declared lower bound {low} (used in {users[0]})")
    return problems


def test_api_patterns_match_their_examples():
    assert set(EXAMPLES) == {row[0] for row in API_FLOORS}
    for what, pattern, _package, _floor in API_FLOORS:
        assert re.search(pattern, EXAMPLES[what], re.M), f"{what}: pattern {pattern!r} misses its example"


def test_declared_lower_bounds_cover_the_apis_the_code_uses():
    assert bound_violations(_pyproject(), _code_text()) == []


def test_bound_check_catches_the_old_bounds():
    """The broken twin: the bounds this project once declared fail against the same code."""
    old = _pyproject()
    old["project"]["requires-python"] = ">=3.10"
    old["project"]["dependencies"] = ["torch>=2.2,<2.15", "transformers>=4.45,<6"]
    files = {"models/llama.py": "y = F.rms_norm(x, s, w, eps)",
             "hf.py": "m = AutoModelForCausalLM.from_pretrained(p, dtype=d)",
             "tests/t.py": "import tomllib"}
    found = bound_violations(old, files)
    assert len(found) == 3 and all(any(w in f for f in found) for w in ("torch>=2.4", "transformers>=4.56", "python>=3.11"))
