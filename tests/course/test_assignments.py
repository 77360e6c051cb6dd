"""The nbgrader assignments, end to end, in a throw-away course directory.

release (generate_assignment) -> fill in the instructor's solution -> autograde -> full marks;
fill in a buggy solution -> the hidden test fails and the feedback carries the checker's
explanation.  No network; notebooks run on the kernel named ``python3``.
"""
from __future__ import annotations

import importlib.util
import os
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
    if name not in ("03_tree_mask", "04_choose_gamma"):  # the notebook's own check cell shows the checker's verdict
        graded = nbformat.read(course_dir / "autograded" / "reference" / name / f"{name}.ipynb", as_version=4)
        check = next(c for c in graded.cells if c.metadata["nbgrader"]["grade_id"] == "check_your_work")
        assert "PASSED" in str(check.outputs)


RESAMPLE_FROM_P = '''def accept_token(target_probs, draft_probs, draft_token, generator=None):
    u = torch.rand((), generator=generator, dtype=target_probs.dtype)
    if u * draft_probs[draft_token] < target_probs[draft_token]:
        return draft_token
    return int(torch.multinomial(target_probs, 1, generator=generator))
'''

GREEDY_BONUS = '''def verify_row(target_probs, draft_probs, draft_tokens, generator=None):
    out = []
    for j, x in enumerate(draft_tokens.tolist()):
        if torch.rand((), generator=generator) * draft_probs[j, x] < target_probs[j, x]:
            out.append(x)
            continue
        out.append(int(torch.multinomial(residual(target_probs[j], draft_probs[j]), 1, generator=generator)))
        return torch.tensor(out)
    out.append(int(target_probs[-1].argmax()))
    return torch.tensor(out)
'''

NO_VALIDATION = '''def tree_mask(parents):
    N = len(parents)
    mask = torch.eye(N, dtype=torch.bool)
    for i, par in enumerate(parents.tolist()):
        if par >= 0:
            mask[i] |= mask[par]
    return mask
'''

ALPHA_PER_PROPOSED = '''def estimate_alpha(histogram, gamma):
    accepted = sum(k * n for k, n in enumerate(histogram))
    return accepted / (gamma * sum(histogram))
'''

VERIFY_COST_OFF_BY_ONE = '''def predicted_speedup(alpha, gamma, c, verify_cost):
    if gamma == 0:
        return 1.0
    return expected_tokens(alpha, gamma) / (gamma * c + verify_cost[gamma])
'''

PAPER_SPEEDUP_REPORTED = '''ALPHA = estimate_alpha(ACCEPTED_HISTOGRAM, RUN_GAMMA)
C = DRAFT_STEP_MS / TARGET_STEP_MS
on_curve = {g: predicted_speedup(ALPHA, g, C, VERIFY_COST) for g in range(1, 6)}
with_v1 = {g: predicted_speedup(ALPHA, g, C, {n: 1.0 for n in range(1, 7)}) for g in range(1, 6)}
BEST_GAMMA = max(on_curve, key=on_curve.get)
BEST_SPEEDUP = on_curve[BEST_GAMMA]
PAPER_GAMMA = max(with_v1, key=with_v1.get)
PAPER_GAMMA_SPEEDUP = with_v1[PAPER_GAMMA]
'''

UNFIXED = '''def speculative_token(target_logits, draft_logits, draft_token, temperature, generator=None):
    return given_speculative_token(target_logits, draft_logits, draft_token, temperature, generator)
'''

TEMPERATURE_DROPPED = '''def speculative_token(target_logits, draft_logits, draft_token, temperature, generator=None):
    return given_speculative_token(target_logits, draft_logits, draft_token, 1.0, generator)
'''

WRONG_DIAGNOSIS = '''EXACT_AT_TEMPERATURE = 0.0
BUGGY_Q = sampling_probs(example_draft_logits, example_temperature)
'''

SIBLINGS_WITHOUT_RESIDUAL = '''def verify_tree_row(target_probs, draft_probs, draft_tokens, parents, generator=None):
    V = target_probs.shape[-1]
    out, node, p = [], -1, target_probs[0]
    while True:
        for child in children_of(parents, node):
            x = int(draft_tokens[child])
            q = torch.nn.functional.one_hot(torch.tensor(x), V).to(p.dtype) if draft_probs is None else draft_probs[child]
            if torch.rand((), generator=generator, dtype=p.dtype) * q[x] < p[x]:
                out.append(x)
                node, p = child, target_probs[child + 1]
                break
        else:
            out.append(int(torch.multinomial(p, 1, generator=generator)))
            return torch.tensor(out)
'''

PARENT_ROW = SIBLINGS_WITHOUT_RESIDUAL.replace("target_probs[child + 1]", "target_probs[child]").replace(
    "                break", "                break\n            p = residual(p, q)")

ENGINE_A_UNFIXED = '''def fixed_engine_a(target_probs, draft_probs, draft_tokens, generator=None):
    return engine_a_verify(target_probs, draft_probs, draft_tokens, generator)
'''

ENGINE_A_BY_THE_LIBRARY = '''from specbook.verify import verify_chain


def fixed_engine_a(target_probs, draft_probs, draft_tokens, generator=None):
    tokens, n = verify_chain(target_probs[None], draft_probs[None], draft_tokens[None], generator)
    return tokens[0, : n[0]]
'''

ENGINE_PARTS_SWAPPED = '''WRONG_PART_A = "the token after a rejection"
WRONG_PART_B = "the acceptance test"
KEEP_A = 0.5
FIRST_TOKEN_1_A = 0.3
AFTER_REJECTION_B = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
'''

# (assignment, label) -> (answers, cells that must lose all their points, words the feedback must show);
# every other cell must keep full marks.
BUGGY = {
    ("01_acceptance_rule", "resample from p"): ({"accept_token": RESAMPLE_FROM_P}, ("rule_law",),
                                                ["What went wrong", "residual after a rejection", "Hint"]),
    ("02_chain_verifier", "greedy bonus"): ({"verify_row": GREEDY_BONUS}, ("verify_law",),
                                            ["What went wrong", "bonus token", "last row"]),
    ("03_tree_mask", "no validation"): ({"tree_mask": NO_VALIDATION}, ("mask_tests",), ["should raise ValueError"]),
    ("04_choose_gamma", "alpha per proposed"): ({"estimate_alpha": ALPHA_PER_PROPOSED}, ("alpha_tests", "answers_tests"),
                                                ["verified one draft more than it accepted"]),
    ("04_choose_gamma", "v(gamma)"): ({"predicted_speedup": VERIFY_COST_OFF_BY_ONE}, ("speedup_tests", "answers_tests"),
                                      ["plus one pass over gamma + 1 positions"]),
    ("04_choose_gamma", "paper speedup"): ({"answers": PAPER_SPEEDUP_REPORTED}, ("answers_tests",),
                                           ["cannot lose to another choice"]),
    ("05_find_the_bug", "unfixed"): ({"speculative_token": UNFIXED}, ("fix_properties", "fix_law"),
                                     ["same logits on both sides"]),
    ("05_find_the_bug", "temperature dropped"): ({"speculative_token": TEMPERATURE_DROPPED}, ("fix_law",),
                                                 ["What went wrong", "Hint"]),
    ("05_find_the_bug", "wrong diagnosis"): ({"diagnosis": WRONG_DIAGNOSIS}, ("diagnosis_tests",),
                                             ["EXACT_AT_TEMPERATURE = 0.0"]),
    ("06_tree_verifier", "siblings without residual"): ({"verify_tree_row": SIBLINGS_WITHOUT_RESIDUAL},
                                                        ("chain_law", "tree_law"), ["What went wrong", "residual"]),
    ("06_tree_verifier", "parent's row"): ({"verify_tree_row": PARENT_ROW}, ("verify_properties", "chain_law", "tree_law"),
                                           ["What went wrong", "row (node + 1)"]),
    ("07_engine_bugs", "unfixed"): ({"fixed_engine_a": ENGINE_A_UNFIXED}, ("fix_law",),
                                    ["What went wrong", "counts a draft twice"]),
    ("07_engine_bugs", "by the library"): ({"fixed_engine_a": ENGINE_A_BY_THE_LIBRARY}, ("fix_law",),
                                           ["write the rule yourself"]),
    ("07_engine_bugs", "parts swapped"): ({"diagnosis": ENGINE_PARTS_SWAPPED}, ("diagnosis_a_tests", "diagnosis_b_tests"),
                                          ["compare how often engine A keeps a draft", "engine B keeps drafts exactly"]),
}


def test_every_assignment_has_a_broken_submission():
    for name in course.ASSIGNMENTS:
        assert any(n == name for n, _ in BUGGY), name
    for name in course.ASSIGNMENTS[3:]:  # the assignments that test understanding: at least two each
        assert sum(n == name for n, _ in BUGGY) >= 2, name


@pytest.mark.parametrize("name,label", list(BUGGY), ids=[f"{n}-{l}" for n, l in BUGGY])
def test_buggy_solution_fails_the_hidden_test_with_an_explanation(course_dir, name, label):
    answers, lost, words = BUGGY[name, label]
    student = "buggy-" + label.replace(" ", "-").replace("(", "").replace(")", "").replace("'", "")
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
