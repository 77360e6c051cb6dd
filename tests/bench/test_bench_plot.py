"""The benchmark's speedup chart: the bars drawn are the report's speedups, nothing else.

A small synthetic report (two engines, three drafters, two categories plus ``all``, one
combination missing) is drawn; the test reads the heights and x positions back from the
figure's bar containers and compares them with the JSON, and checks the written file is a PNG.
"""
from __future__ import annotations

import json
import math

import pytest

from specbook.bench import cli as bench
from specbook.bench.plot import draw_speedups, save_speedup_plot, speedup_bars

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _row(engine, drafter, category, speedup):
    return {"engine": engine, "drafter": drafter, "category": category, "dtype": "float32",
            "speedup_vs_autoregressive": speedup}


def _report() -> dict:
    speedups = {  # (engine, drafter) -> {category: speedup}; transformers has no eagle
        ("specbook", "none"): {"chat": 1.0, "math": 1.0, "all": 1.0},
        ("specbook", "ngram"): {"chat": 0.91, "math": 1.37, "all": 1.12},
        ("specbook", "eagle"): {"chat": 1.25, "math": 1.83, "all": 1.41},
        ("transformers", "none"): {"chat": 1.0, "math": 1.0, "all": 1.0},
        ("transformers", "ngram"): {"chat": 0.88, "math": 1.19, "all": 1.02},
    }
    runs = [_row(e, d, c, v) for (e, d), cats in speedups.items() for c, v in cats.items() if c != "all"]
    overall = [_row(e, d, "all", cats["all"]) for (e, d), cats in speedups.items()]
    return {"machine": {"cpu": "Test CPU", "torch_threads": 2, "device": "cpu"}, "target": "TinyTarget",
            "settings": {"dtype": "float32", "limit": 2, "max_new_tokens": 64, "temperature": 0.0},
            "runs": runs, "overall": overall}


def test_bars_are_the_reports_speedups(tmp_path):
    report = _report()
    bars = speedup_bars(report)
    assert bars.categories == ["chat", "math", "all"]
    assert bars.series == {"specbook/ngram": [0.91, 1.37, 1.12], "specbook/eagle": [1.25, 1.83, 1.41],
                           "transformers/ngram": [0.88, 1.19, 1.02]}  # 'none' is the line at 1.0, not bars
    assert "TinyTarget" in bars.title and "float32" in bars.title and "Test CPU" in bars.title

    fig = save_speedup_plot(report, tmp_path / "sub" / "speedup.png")
    data = (tmp_path / "sub" / "speedup.png").read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 10_000

    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["chat", "math", "all"]
    drawn = {c.get_label(): c for c in ax.containers}
    assert set(drawn) == set(bars.series)
    expected = {(e, d, r["category"]): r["speedup_vs_autoregressive"]
                for r in report["runs"] + report["overall"] for e, d in [(r["engine"], r["drafter"])] if d != "none"}
    seen = set()
    for label, container in drawn.items():
        engine, drafter = label.split("/")
        for patch in container.patches:
            category = ["chat", "math", "all"][round(patch.get_x() + patch.get_width() / 2)]
            assert patch.get_height() == pytest.approx(expected[(engine, drafter, category)], abs=1e-12)
            seen.add((engine, drafter, category))
    assert seen == set(expected)  # every speedup drawn once, and the missing transformers/eagle not at all
    assert any(math.isclose(line.get_ydata()[0], 1.0) for line in ax.get_lines())  # the plain-decoding line


def test_one_engine_labels_bars_by_drafter_and_bad_reports_are_refused():
    report = _report()
    report["runs"] = [r for r in report["runs"] if r["engine"] == "specbook"]
    report["overall"] = [r for r in report["overall"] if r["engine"] == "specbook"]
    fig = draw_speedups(report)
    assert [c.get_label() for c in fig.axes[0].containers] == ["ngram", "eagle"]
    for bad, words in [({}, "no 'runs'"), ([], "no 'runs'"), ({"runs": [{"engine": "x"}]}, "lacks one of"),
                       ({"runs": [_row("specbook", "none", "chat", 1.0)]}, "plain decoding only")]:
        with pytest.raises(ValueError, match=words):
            speedup_bars(bad)


def test_cli_draws_from_a_report_without_loading_the_model(tmp_path, monkeypatch, capsys):
    import specbook.models.smollm2 as smollm2

    def no_loading(*a, **k):
        raise AssertionError("--from-json loaded the model")

    monkeypatch.setattr(smollm2, "load_smollm2", no_loading)
    run = tmp_path / "run.json"
    run.write_text(json.dumps(_report()))
    out = tmp_path / "speedup.png"
    assert bench.main(["--from-json", str(run), "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert bench.main(["--from-json", str(run)]) == 2  # nothing to draw to
    assert "needs --plot" in capsys.readouterr().err
    assert bench.main(["--from-json", str(run), "--plot", str(out), "--drafters", "eagle"]) == 2
    assert "--drafters would not apply" in capsys.readouterr().err
    (tmp_path / "broken.json").write_text("{not json")
    assert bench.main(["--from-json", str(tmp_path / "broken.json"), "--plot", str(out)]) == 2
    assert "not a readable JSON file" in capsys.readouterr().err
    (tmp_path / "other.json").write_text(json.dumps({"points": [1, 2]}))
    assert bench.main(["--from-json", str(tmp_path / "other.json"), "--plot", str(out)]) == 2
    assert "not a bench report" in capsys.readouterr().err
    assert bench.main(["--drafters", "none", "--plot", str(out)]) == 2  # refused before any run
    assert "add a drafter" in capsys.readouterr().err
