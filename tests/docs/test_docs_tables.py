"""The JSON behind docs/grading.md and docs/statistics.md: written by the real commands, rendered back.

Each test runs the real code path at tiny settings (a seed or two, a few null replicates) with
``--json``, then checks that the JSON holds the raw numbers and that scripts/docs_tables.py
renders from it exactly the tables the run printed.  The last test holds the committed docs to
the committed JSON: every table rendered from docs/data/grading_*.json and power_report.json
appears, verbatim, in its page.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from support import load_script, md_tables

from specbook.grading.__main__ import main as grading_main
from specbook.machine import machine_info

ROOT = Path(__file__).resolve().parents[2]
DOCS = {"grading_": ROOT / "docs" / "grading.md", "power_report": ROOT / "docs" / "statistics.md"}


def _printed_body(out: str) -> str:
    """What a grading run printed between its header and footer comments."""
    lines = out.strip("\n").splitlines()
    assert lines[0].startswith("<!-- python -m specbook.grading") and lines[-1].startswith("<!-- total")
    return "\n".join(lines[1:-1]).strip("\n")


def _rendered(path: Path, shown_as: Path | None = None) -> str:
    docs_tables = load_script("docs_tables")
    return docs_tables.render(shown_as or path, docs_tables.load(path))


def test_machine_info_says_threads_niceness_and_load():
    info = machine_info()
    assert info["torch_threads"] == torch.get_num_threads() and info["torch"] == torch.__version__
    assert isinstance(info["cpu"], str) and info["cpu"]
    for key in ("niceness", "omp_num_threads", "load_average_start", "python", "logical_cores"):
        assert key in info


def test_calibration_and_detection_json_hold_the_printed_tables(tmp_path, capsys):
    path = tmp_path / "grading.json"
    argv = ["--calibration", "--detection-table", "--checker", "check_token_rule", "--seeds", "2", "--null-reps", "3",
            "--full-seeds", "1", "--entry", "multinomial", "--entry", "always accept", "--json", str(path)]
    grading_main(argv)
    out = capsys.readouterr().out
    report = json.loads(path.read_text())

    assert report["format"] == "specbook.grading/1"
    assert report["command"].startswith("python -m specbook.grading --calibration") and str(path) in report["command"]
    assert report["machine"]["torch_threads"] == torch.get_num_threads()
    assert report["settings"]["seeds"] == 2 and report["settings"]["entries"] == ["multinomial", "always accept"]
    assert report["seconds"] > 0

    (calib,) = report["calibration"]
    null = calib["null_simulation"]
    assert calib["checker"] == "check_token_rule" and null["reps"] == 3 and null["family"] == 14
    (correct,) = calib["rows"]  # "always accept" is lossy: not in the calibration rows
    assert (correct["name"], correct["kind"], correct["seeds"]) == ("multinomial", "correct", 2)
    (lossy,) = report["detection"][0]["rows"]
    assert lossy["name"] == "always accept" and lossy["failed_lossless"] == 2 and lossy["failed"] == 2
    assert lossy["failed_seeds"] == lossy["failed_lossless_seeds"] == [0, 1]  # which seeds, not only how many
    assert len(correct["failed_seeds"]) == correct["failed"] and set(correct["first_failures"]) <= {"0", "1"}
    assert 0.99 < lossy["power"] <= 1 and lossy["margin"] > 1  # one full run fed the power columns
    assert 0.99 < lossy["lossless_power"] <= 1 and lossy["lossless_margin"] > 1 and correct["margin"] is None

    # the rendered tables are the printed ones, and their cells are the JSON's numbers
    rendered = _rendered(path)
    caption, text = rendered.split("\n\n", 1)
    assert f"`{path.as_posix()}`" in caption and report["command"] in caption
    assert text == _printed_body(out)
    calib_table, detect_table = md_tables(text)
    assert calib_table == [[f"multinomial ({correct['description']})", "correct",
                            f"{2 - correct['failed_lossless']}/2", f"{2 - correct['failed']}/2",
                            f"{correct['seconds_per_check']:.2f}"]]
    assert detect_table[0][1:3] == ["2/2", "2/2"] and detect_table[0][5] == lossy["caught_by"]
    assert f"{null['at_0.1']:.4f} of replicates" in text


def test_audit_and_timings_json_hold_the_printed_tables(tmp_path, capsys):
    path = tmp_path / "grading.json"
    grading_main(["audit", "--seeds", "1", "--timings", "--checker", "check_token_rule", "--entry", "multinomial",
                  "--json", str(path)])
    out = capsys.readouterr().out
    report = json.loads(path.read_text())
    audit, timings = report["audit"], report["timings"]
    assert [r["lossless_passed"] for r in audit["rows"]] == [1, 0]  # the standard mode, then the lossy ensemble
    assert audit["rows"][1]["failures_first_seed"] and audit["rows"][1]["ensemble_weight"] == 0.5
    (row,) = timings["rows"]
    assert row["implementation"] == "multinomial" and len(row["wall_s_runs"]) == timings["repeats"] == 3
    assert row["wall_s"] == min(row["wall_s_runs"]) and row["calls"] > 1000

    text = _rendered(path).split("\n\n", 1)[1]
    audit_table, timings_table = md_tables(text)  # a blank line keeps the two tables apart
    assert [r[1:3] for r in audit_table] == [["1/1", "1/1"], ["0/1", "0/1"]]
    assert timings_table == [["check_token_rule", "multinomial", str(row["calls"]), f"{row['wall_s']:.2f}",
                              f"{row['cpu_s']:.2f}", f"{row['slowest_case']} ({row['slowest_case_wall_s']:.2f})"]]
    assert [line for line in text.splitlines() if line] == [line for line in _printed_body(out).splitlines() if line]


def test_power_report_json_holds_the_printed_table(tmp_path, capsys, monkeypatch):
    power_report = load_script("power_report")
    twin = "one uniform shared by all positions"
    # one twin and the correct verifier on its case, the twin's law from 2 batches: seconds, not minutes
    monkeypatch.setattr(power_report, "BROKEN_TWINS", {twin: power_report.BROKEN_TWINS[twin]})
    monkeypatch.setattr(power_report, "TWIN_CASES", {twin: power_report.TWIN_CASES[twin]})
    monkeypatch.setattr(power_report, "LAW_BATCHES", 2)
    path = tmp_path / "power.json"
    power_report.main(["--seeds", "2", "--no-progress", "--json", str(path)])
    out = capsys.readouterr().out
    report = json.loads(path.read_text())
    assert report["format"] == "specbook.power_report/1" and report["command"].endswith(f"--json {path}")
    assert report["settings"]["rows_per_test"] == 40_000 and report["settings"]["law_batches"] == 2
    correct, broken = report["rows"]
    assert correct["implementation"] == "correct verify_chain" and broken["implementation"] == twin
    assert len(broken["pvalues"]) == 2 and broken["detection_rate"] == 1.0 and broken["analytic_power"] > 0.99
    assert correct["median_pvalue"] == pytest.approx(sorted(correct["pvalues"])[0] / 2 + sorted(correct["pvalues"])[1] / 2)

    text = _rendered(path).split("\n\n", 1)[1]
    assert text.strip() == out.strip()
    assert md_tables(text)[0][1] == [twin, broken["case"], "1.00", f"{broken['analytic_power']:.4f}",
                                   f"{broken['median_pvalue']:.1e}"]


@pytest.mark.parametrize("content", [{"format": "something else"}, [1, 2], {"runs": [], "overall": []},
                                     {"format": "specbook.grading/1", "command": "x", "machine": {}, "settings": {}},
                                     {"format": "specbook.power_report/1", "command": "x", "machine": {}, "settings": {},
                                      "rows": [{"implementation": "a"}]}])
def test_a_json_that_is_not_a_report_is_refused_naming_the_file(tmp_path, capsys, content):
    docs_tables = load_script("docs_tables")
    path = tmp_path / "other.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ValueError, match=re.escape(str(path))):
        docs_tables.load(path)
    with pytest.raises(SystemExit) as exit_:  # the command line says the same as a usage error
        docs_tables.main([str(path)])
    assert exit_.value.code == 2 and str(path) in capsys.readouterr().err
    path.write_text("{not json")
    with pytest.raises(ValueError, match="cannot read it as JSON"):
        docs_tables.load(path)


def test_help_and_bad_flags(tmp_path, capsys):
    docs_tables = load_script("docs_tables")
    with pytest.raises(SystemExit) as exit_:
        docs_tables.main(["--help"])
    assert exit_.value.code == 0 and "docs/data" in capsys.readouterr().out
    for argv in (["--bogus", "x.json"], [], [str(tmp_path / "missing.json")]):
        with pytest.raises(SystemExit) as exit_:
            docs_tables.main(argv)
        assert exit_.value.code == 2
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:  # a directory is not a file to write
        grading_main(["--timings", "--json", str(tmp_path)])
    assert exit_.value.code == 2 and "argument --json" in capsys.readouterr().err
    blocker = tmp_path / "plain_file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as exit_:
        load_script("power_report").main(["--seeds", "1", "--json", str(blocker / "power.json")])
    assert exit_.value.code == 2 and "argument --json" in capsys.readouterr().err


def _committed():
    data = ROOT / "docs" / "data"
    return sorted(p for p in data.glob("*.json") if any(p.name.startswith(prefix) for prefix in DOCS))


@pytest.mark.parametrize("path", _committed(), ids=lambda p: p.name)
def test_docs_show_the_tables_of_the_committed_json(path):
    page = next(doc for prefix, doc in DOCS.items() if path.name.startswith(prefix))
    rendered = _rendered(path, shown_as=path.relative_to(ROOT))
    assert rendered in page.read_text(), (f"{page.name} does not show the tables of {path.name} as "
                                          f"`python scripts/docs_tables.py docs/data/{path.name}` renders them")


BATCHING = ROOT / "docs" / "batching.md"
BATCH_BLOCK = re.compile(r"<!-- batch_tables: (\S+) -->\n(.*?)\n<!-- end batch_tables -->", re.S)


def test_batching_page_shows_the_committed_batch_json():
    """docs/batching.md's measured blocks are scripts/batch_tables.py's renders of the JSON beside them."""
    batch_tables = load_script("batch_tables")
    blocks = BATCH_BLOCK.findall(BATCHING.read_text())
    assert {path for path, _ in blocks} >= {"docs/data/batch.json", "docs/data/batch_bfloat16.json"}
    for path, block in blocks:
        report = batch_tables.load(ROOT / path)
        assert block == batch_tables.render(path, report), (
            f"docs/batching.md's block for {path} is not what "
            f"`python scripts/batch_tables.py --write docs/batching.md {path}` writes")
        runs = md_tables(block)[0]  # every run of the report has its row
        assert [(r[0], r[1], int(r[2])) for r in runs] == [
            (r["drafter"], r["policy"], r["batch_size"]) for r in report["runs"]]


def test_batch_tables_refuses_what_it_cannot_render(tmp_path, capsys):
    batch_tables = load_script("batch_tables")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"command": "x"}))
    assert batch_tables.main([str(bad)]) == 2 and "not a report of python -m specbook batch" in capsys.readouterr().err
    page = tmp_path / "page.md"
    page.write_text("no markers here\n")
    good = ROOT / "docs" / "data" / "batch.json"
    assert batch_tables.main(["--write", str(page), str(good)]) == 2 and "no block" in capsys.readouterr().err
    page.write_text(f"a\n<!-- batch_tables: {good} -->\nold\n<!-- end batch_tables -->\nb\n")
    assert batch_tables.main(["--write", str(page), str(good)]) == 0
    text = page.read_text()
    assert "old" not in text and text.startswith("a\n") and text.endswith("b\n") and "| drafter | policy |" in text


def test_heads_page_shows_the_committed_unroll_json(capsys):
    """docs/heads.md's training-time-test table is scripts/eagle_unroll.py's render of its JSON, and every
    head's row carries what the trainer recorded (acceptance by depth non-increasing, tau of both trees)."""
    eagle_unroll = load_script("eagle_unroll")
    path = ROOT / "docs" / "data" / "heads_unroll.json"
    report = json.loads(path.read_text())
    table = eagle_unroll.render(report)
    assert table in (ROOT / "docs" / "heads.md").read_text(), (
        "docs/heads.md does not show `python scripts/eagle_unroll.py --table docs/data/heads_unroll.json`")
    assert eagle_unroll.main(["--table", str(path)]) == 0 and table in capsys.readouterr().out
    for row in report["heads"]:
        acc = row["acceptance_by_depth"]
        assert all(a >= b for a, b in zip(acc, acc[1:])) and set(row["tau_tree"]) == {"16", "64"}
    assert sorted(r["unroll"] for r in report["heads"][:4]) == [1, 2, 3, 4]


def test_heads_page_shows_the_committed_epochs_json():
    """docs/heads.md's sixteen-epoch table is scripts/eagle_unroll.py's render of its JSON, with a column per
    tree shape scored."""
    eagle_unroll = load_script("eagle_unroll")
    report = json.loads((ROOT / "docs" / "data" / "heads_epochs.json").read_text())
    assert eagle_unroll.render(report) in (ROOT / "docs" / "heads.md").read_text()
    assert list(report["trees"]) == ["16", "64", "64 (6x10)", "64 (12x6)"]
    assert "16 epochs" in report["heads"][0]["head"]


def test_heads_page_shows_the_committed_notices_json():
    """docs/heads.md's notices table is scripts/eagle_unroll.py's render of its JSON; its head was shipped
    until the everyday prompts."""
    eagle_unroll = load_script("eagle_unroll")
    report = json.loads((ROOT / "docs" / "data" / "heads_notices.json").read_text())
    assert eagle_unroll.render(report) in (ROOT / "docs" / "heads.md").read_text()
    assert "shipped until the everyday prompts" in report["heads"][0]["head"]
    assert not any("shipped now" in r["head"] for r in report["heads"])


def test_heads_page_shows_the_committed_everyday_json():
    """docs/heads.md's everyday table is scripts/eagle_unroll.py's render of its JSON, and the head it names
    as shipped is the one shipped (its prompt set, training steps, epochs and held-out acceptance by depth)."""
    eagle_unroll = load_script("eagle_unroll")
    report = json.loads((ROOT / "docs" / "data" / "heads_everyday.json").read_text())
    assert eagle_unroll.render(report) in (ROOT / "docs" / "heads.md").read_text()
    shipped = json.loads((ROOT / "specbook" / "weights" / "eagle_smollm2-135m.json").read_text())
    assert shipped["training"]["prompt_set"] == "specbook/data/eagle_prompts_everyday.jsonl"
    row = report["heads"][0]
    assert "shipped now" in row["head"] and not any("shipped now" in r["head"] for r in report["heads"][1:])
    assert (row["steps"], row["epochs"]) == (shipped["training"]["steps"], shipped["training"]["epochs"])
    assert row["acceptance_by_depth"] == shipped["heldout"]["chain_survival_heldout"][1:]


def test_eagle_unroll_reads_tree_shapes_and_refuses_bad_ones():
    """--trees: the default node counts keep their labels, other shapes are labelled by depth and width,
    and a malformed item or a repeated shape is refused with the item named."""
    eagle_unroll = load_script("eagle_unroll")
    trees = eagle_unroll.tree_shapes("16:5x4,64:8x8,64:12x6")
    assert list(trees) == ["16", "64", "64 (12x6)"]
    assert (trees["64 (12x6)"].depth, trees["64 (12x6)"].top_k, trees["64 (12x6)"].num_nodes) == (12, 6, 64)
    assert trees["64"] == eagle_unroll.TREES["64"]
    for bad in ("64", "64:8", "64:8x0", "x:8x8", "64:8x8,64:8x8"):
        with pytest.raises(ValueError, match="--trees"):
            eagle_unroll.tree_shapes(bad)
