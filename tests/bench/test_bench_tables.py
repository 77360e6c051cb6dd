"""scripts/bench_tables.py: the markdown tables hold the report's numbers, and only a bench report is read."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from support import load_script, md_tables

COMMAND = "python -m specbook bench --limit 1 --json tiny.json"


# (engine, drafter): FIELDS in each of CATEGORIES;
# transformers has no eagle (as in a real run)
FIGURES = {
    ("specbook", "none"): [(60.0, 1.0, 1.0, 0.34), (61.0, 1.0, 1.0, 0.35), (62.4, 1.0, 1.0, 0.36)],
    ("specbook", "ngram"): [(111.0, 2.31, 1.87, 0.63), (64.0, 1.12, 1.04, 0.37), (96.5, 1.51, 1.64, 0.55)],
    ("specbook", "eagle"): [(123.0, 3.52, 2.06, 0.71), (66.0, 1.83, 1.09, 0.38), (70.3, 1.97, 1.09, 0.4)],
    ("transformers", "none"): [(44.0, 1.0, 1.0, 0.25), (43.0, 1.0, 1.0, 0.24), (40.0, 1.0, 1.0, 0.25)],
    ("transformers", "ngram"): [(88.0, 2.44, 1.93, 0.5), (45.0, 1.07, 1.03, 0.26), (70.5, 1.49, 1.67, 0.4)],
}


CATEGORIES = ("code", "chat", "all")
FIELDS = ("tokens_per_s", "tau", "speedup_vs_autoregressive", "roofline_fraction")


def _rows(categories: tuple[str, ...]) -> list[dict]:
    """The report's rows of ``categories``, category by category, in FIGURES' order within each."""
    return [{"engine": engine, "drafter": drafter, "category": cat, **dict(zip(FIELDS, figures[CATEGORIES.index(cat)]))}
            for cat in categories for (engine, drafter), figures in FIGURES.items()]


def _report() -> dict:
    """Two categories, two engines."""
    runs, overall = _rows(("code", "chat")), _rows(("all",))
    return {
        "settings": {"command": COMMAND},
        "runs": runs, "overall": overall,
        "engine_ratio": {"specbook_over_transformers_tokens_per_s_median": 1.4082, "min": 1.3907, "max": 1.4447,
                         "prompts": 2, "identical_plain_outputs": 2},
        "verify_cost": {"specbook": {"n": list(range(1, 18)), "seconds": [0.0146 * (1 + 0.03 * i) for i in range(17)],
                                     "v": [1 + 0.03 * i for i in range(17)], "context": 96, "reps": 3}},
        "draft_sizes": {"ngram": {"kind": "chain", "chosen": 4, "predicted_speedup": 2.0172,
                                  "pilot": {"alpha": 0.56, **{f"tau@{g}": 1 + g / 100 for g in range(1, 17)}}},
                        "eagle": {"kind": "tree", "chosen": 10, "predicted_speedup": 1.573, "pilot": {"3": 1.61}}},
    }


def _run(tmp_path, capsys, report) -> tuple[Path, str]:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(report))
    assert load_script("bench_tables").main([str(path)]) == 0
    return path, capsys.readouterr().out


def test_tables_hold_the_reports_numbers(tmp_path, capsys):
    report = _report()
    path, out = _run(tmp_path, capsys, report)
    speedups, throughput, curve, sizes = md_tables(out)

    # every table has a caption naming the file and the command that wrote it
    captions = [line for line in out.splitlines() if line.startswith("*")]
    assert len(captions) == 4
    assert all(path.as_posix() in c and COMMAND in c for c in captions)

    # (a) speedup (tau) for every engine/drafter but plain decoding, per category and "all"
    cells = {(r["engine"], r["drafter"], r["category"]): r for r in report["runs"] + report["overall"]}
    assert [row[0] for row in speedups] == ["specbook / ngram", "specbook / eagle", "transformers / ngram"]
    for row in speedups:
        engine, drafter = row[0].split(" / ")
        for category, cell in zip(["code", "chat", "all"], row[1:]):
            got = re.fullmatch(r"([\d.]+)x \(([\d.]+)\)", cell)
            r = cells[(engine, drafter, category)]
            assert float(got[1]) == round(r["speedup_vs_autoregressive"], 2)
            assert float(got[2]) == round(r["tau"], 2)

    # (b) tokens/s, roofline fraction, tau, and the ratio to transformers' plain tokens/s
    overall = {(r["engine"], r["drafter"]): r for r in report["overall"]}
    assert len(throughput) == len(overall)
    for name, tok_s, roof, tau, vs_hf in throughput:
        r = overall[tuple(name.split(" / "))]
        assert float(tok_s) == round(r["tokens_per_s"], 1)
        assert float(roof) == round(r["roofline_fraction"], 2)
        assert float(tau) == round(r["tau"], 2)
        assert float(vs_hf.rstrip("x")) == round(r["tokens_per_s"] / 40.0, 2)
    assert "1.41x (range 1.39-1.44, 2 prompts)" in out

    # (c) v(n) at n = 2, 3, 5, 9, 17 and t(1)
    (engine, t1, *vs), = curve
    c = report["verify_cost"]["specbook"]
    assert engine == "specbook" and float(t1) == round(1000 * c["seconds"][0], 1)
    assert [float(v) for v in vs] == [round(c["v"][n - 1], 2) for n in (2, 3, 5, 9, 17)]

    # (d) the draft sizes chosen
    assert [(r[0], r[1], int(r[2]), float(r[3].rstrip("x"))) for r in sizes] == [
        ("ngram", "chain", 4, 2.02), ("eagle", "tree", 10, 1.57)]
    assert [r[4] for r in sizes] == ["alpha: 0.56, tau@1/2/4/8/16: 1.01/1.02/1.04/1.08/1.16", "3: 1.61"]


def test_one_engine_has_no_transformers_column(tmp_path, capsys):
    report = _report()
    report["runs"] = [r for r in report["runs"] if r["engine"] == "specbook"]
    report["overall"] = [r for r in report["overall"] if r["engine"] == "specbook"]
    report.pop("engine_ratio")
    _, out = _run(tmp_path, capsys, report)
    assert "vs transformers plain" not in out
    assert all(len(row) == 4 for row in md_tables(out)[1])


def test_block_verification_rows_are_a_drafter_of_their_own(tmp_path, capsys):
    """``--verifier token,block``: two rows per drafter, told apart by the verifier, neither overwriting the other."""
    report = _report()
    for key in ("runs", "overall"):
        ours = [r for r in report[key] if (r["engine"], r["drafter"]) == ("specbook", "ngram")]
        report[key] = [dict(r, verifier="token") if r in ours else r for r in report[key]]
        report[key] += [dict(r, verifier="block", tau=r["tau"] + 0.5) for r in ours]
    _, out = _run(tmp_path, capsys, report)
    speedup = {row[0]: row for row in md_tables(out)[0]}
    assert speedup["specbook / ngram"][-1] == "1.64x (1.51)" and speedup["specbook / ngram [block]"][-1] == "1.64x (2.01)"


def test_the_compiled_engines_kernel_times_get_a_table(tmp_path, capsys):
    report = _report()
    report["verify_cost"]["compiled"] = {**report["verify_cost"]["specbook"], "kernels": {
        "1": {"chosen": "autotuned", "ms": {"autotuned": 25.24, "library": 27.98}},
        "3": {"chosen": "library", "ms": {"autotuned": 36.215, "library": 32.816}},
        "5": {"chosen": None, "ms": None}}}  # not timed: no row
    _, out = _run(tmp_path, capsys, report)
    assert out.count("*The compiled engine's product kernels") == 1
    table = next(t for t in md_tables(out) if t[0][-1] in ("autotuned", "library"))
    assert table == [["1", "25.24", "27.98", "autotuned"], ["3", "36.22", "32.82", "library"]]
    report["verify_cost"]["compiled"].pop("kernels")
    _, out = _run(tmp_path, capsys, report)
    assert "product kernels" not in out


def test_another_engine_gets_a_table_of_its_own(tmp_path, capsys):
    """(f): a report that ran llama.cpp beside specbook: both tokens/s, the ratio and its range, equal tokens."""
    report = _report()
    llama = {"none": (150.0, 1.0), "ngram": (120.0, 0.8)}
    for drafter, (tok_s, speedup) in llama.items():
        report["overall"].append({"engine": "llamacpp", "drafter": drafter, "category": "all", "tokens_per_s": tok_s,
                                  "tau": 1.0, "speedup_vs_autoregressive": speedup, "roofline_fraction": 0.8})
    report["engine_ratios"] = [
        {"engine": "llamacpp", "drafter": "none", "specbook_over_engine_tokens_per_s_median": 0.4133, "min": 0.39,
         "max": 0.45, "prompts": 2, "identical_to_specbook_plain": 1, "differences_are_near_ties": True},
        {"engine": "llamacpp", "drafter": "ngram", "specbook_over_engine_tokens_per_s_median": 0.81, "min": 0.7,
         "max": 0.9, "prompts": 2, "identical_to_specbook_plain": 2, "differences_are_near_ties": None}]
    _, out = _run(tmp_path, capsys, report)
    assert out.count("*specbook against another engine") == 1
    assert md_tables(out)[-1] == [["llamacpp / none", "62.4", "150.0", "0.41x (0.39-0.45)", "1/2 (others: near ties)"],
                                  ["llamacpp / ngram", "96.5", "120.0", "0.81x (0.70-0.90)", "2/2"]]
    report.pop("engine_ratios")
    _, out = _run(tmp_path, capsys, report)
    assert "another engine" not in out


@pytest.mark.parametrize("content", [
    {"rows": []},                                           # some other JSON object
    [1, 2, 3],                                              # not an object
    {"runs": [{"engine": "specbook"}], "overall": [], "settings": {}},  # rows without the fields
])
def test_a_non_bench_json_is_refused_naming_the_file(tmp_path, content):
    path = tmp_path / "other.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ValueError, match=re.escape(str(path))):
        load_script("bench_tables").main([str(path)])


def test_unreadable_json_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match=re.escape(str(path))):
        load_script("bench_tables").main([str(path)])


def test_the_caption_says_which_bandwidth_the_roofline_fraction_divides_by(tmp_path, capsys):
    """A report with both bandwidths gets a column for each fraction; an older one is captioned as summed-buffer."""
    old = _report()
    _, out = _run(tmp_path, capsys, old)
    assert "roofline at the rate of summing a large buffer" in out and "LM head" not in out
    new = _report()
    new["roofline"] = {"bandwidth_bytes_per_s": 4e10, "sum_read_bandwidth_bytes_per_s": 6e10}
    for r in new["overall"]:
        r["roofline_fraction_sum_read"] = round(r["roofline_fraction"] * 4 / 6, 4)
    _, out = _run(tmp_path, capsys, new)
    assert "the bandwidth the LM head's batch-1 product reaches" in out
    throughput = md_tables(out)[1]
    overall = {(r["engine"], r["drafter"]): r for r in new["overall"]}
    for name, _, roof, roof_sum, tau, _ in throughput:
        r = overall[tuple(name.split(" / "))]
        assert float(roof) == round(r["roofline_fraction"], 2)
        assert float(roof_sum) == round(r["roofline_fraction_sum_read"], 2)
        assert float(tau) == round(r["tau"], 2)


def test_repeats_table_holds_the_median_and_range_of_each_cell(tmp_path, capsys):
    runs = []
    for i, factor in enumerate((1.0, 0.5, 2.0)):  # the second and third run a drafter at half and twice the speedup
        report = _report()
        for r in report["runs"] + report["overall"]:
            r["alpha"] = None if r["drafter"] == "none" else 0.8
            if r["drafter"] != "none":
                r["speedup_vs_autoregressive"] *= factor
        path = tmp_path / f"run{i}.json"
        path.write_text(json.dumps(report))
        runs.append(path)
    assert load_script("bench_tables").main(["--repeats", *map(str, runs)]) == 0
    out = capsys.readouterr().out
    assert all(p.as_posix() in out for p in runs) and "median of 3 runs" in out and COMMAND in out
    (table,) = md_tables(out)
    cells = {(r["engine"], r["drafter"], r["category"]): r for r in _report()["runs"] + _report()["overall"]}
    assert [row[0] for row in table] == ["specbook / ngram", "specbook / eagle", "transformers / ngram"]
    for row in table:
        engine, drafter = row[0].split(" / ")
        for category, cell in zip(["code", "chat", "all"], row[1:]):
            got = re.fullmatch(r"([\d.]+)x \[([\d.]+), ([\d.]+)\], α ([\d.]+)", cell)
            s = cells[(engine, drafter, category)]["speedup_vs_autoregressive"]
            assert (float(got[1]), float(got[2]), float(got[3])) == (round(s, 2), round(s / 2, 2), round(2 * s, 2))
            assert float(got[4]) == 0.8
    other = _report()
    other["settings"]["max_new_tokens"] = 32
    (tmp_path / "other.json").write_text(json.dumps(other))
    with pytest.raises(ValueError, match="other.json: not a repeat"):
        load_script("bench_tables").main(["--repeats", str(runs[0]), str(tmp_path / "other.json")])


def test_the_fastest_configuration_per_category_is_held_against_llamacpp(tmp_path, capsys):
    """(h): per category the fastest specbook or compiled row by mean tokens/s over its prompts, over llama.cpp's
    plain decoding and prompt lookup; the mean of the ratios last; the compiled engine's own sizes marked in (d)."""
    report = _report()
    speeds = {  # (engine, drafter): tokens/s of the two prompts of each category
        ("specbook", "none"): {"code": (20, 22), "chat": (20, 20)},
        ("specbook", "ngram"): {"code": (40, 44), "chat": (18, 20)},
        ("compiled", "none"): {"code": (30, 30), "chat": (35, 33)},  # chat: compiled plain is fastest (34)
        ("llamacpp", "none"): {"code": (40, 40), "chat": (40, 40)},
        ("llamacpp", "ngram"): {"code": (30, 30), "chat": (20, 20)},
    }
    report["per_prompt"] = [{"engine": e, "drafter": d, "verifier": None, "category": cat, "id": f"{cat}{i}",
                             "new_tokens": tok, "seconds": 1.0} for (e, d), cats in speeds.items()
                            for cat, pair in cats.items() for i, tok in enumerate(pair)]
    report["compiled_draft_sizes"] = {"ngram": {"kind": "chain", "chosen": 8, "predicted_speedup": 1.3,
                                                "pilot": {"alpha": 0.56}}}
    _, out = _run(tmp_path, capsys, report)
    tables = md_tables(out)
    assert ["ngram (compiled)", "chain", "8", "1.30x", "alpha: 0.56"] in tables[3]
    assert tables[-1] == [
        ["code", "specbook / ngram", "42.0", "40.0", "1.05x", "30.0", "1.40x"],
        ["chat", "compiled / none", "34.0", "40.0", "0.85x", "20.0", "1.70x"],
        ["mean over categories", "", "", "", "0.95x", "", "1.55x"]]
    assert "fastest lossless configuration per category" in out
    # (g): per prompt over llama.cpp plain: specbook plain 0.5, 0.55, 0.5, 0.5; ngram 1.0, 1.1, 0.45, 0.5
    assert tables[-2] == [["specbook / none", "0.50x", "0.50-0.55", "4"],
                          ["specbook / ngram", "0.75x", "0.45-1.10", "4"],
                          ["compiled / none", "0.79x", "0.75-0.88", "4"]]
    report["per_prompt"] = [r for r in report["per_prompt"] if r["engine"] != "llamacpp"]
    _, out = _run(tmp_path, capsys, report)
    assert "fastest lossless" not in out  # nothing to hold it against
