"""The measured blocks of docs/batching.md, from the JSON ``python -m specbook batch --json`` wrote.

    python scripts/batch_tables.py docs/data/batch.json [more.json ...]          # print the blocks
    python scripts/batch_tables.py --write docs/batching.md docs/data/batch.json  # replace them in place

For each report: the command that wrote it, the machine as the run found it, one table row per
run (throughput, latency, tau, positions per pass, waste, identical to plain decoding), the
crossover measured and predicted, the scheduler's throughput over the better of plain and fixed
speculation (medians, and each policy's fastest repeat where the report has it), the measured
roofline, and the cost tables the scheduler priced its steps with.  Every number is the report's,
only rounded; nothing is recomputed.  ``--write`` replaces the text between
``<!-- batch_tables: PATH -->`` and ``<!-- end batch_tables -->`` in the page, one pair per report.
Reads JSON only: no model, no torch.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # this checkout's specbook, as the other scripts do
from specbook.markdown import markdown_table, read_json  # noqa: E402

ROW_FIELDS = ("drafter", "policy", "batch_size", "tokens_per_s", "ms_per_token", "tau", "positions_per_pass",
              "wasted_fraction", "outputs_identical_to_plain")


def load(path: str | Path) -> dict:
    """The report at ``path``; ValueError naming the file when it is not a batch report."""
    path = Path(path)
    report = read_json(path)
    missing = [k for k in ("command", "machine", "settings", "runs", "costs", "crossover", "roofline")
               if not isinstance(report, dict) or k not in report]
    if missing:
        raise ValueError(f"{path}: not a report of python -m specbook batch --json (no {missing})")
    for run in report["runs"]:
        lacking = [k for k in ROW_FIELDS if k not in run]
        if lacking:
            raise ValueError(f"{path}: a run without {lacking}: {str(run)[:100]}")
    return report


def _identical(run: dict) -> str:
    if run["outputs_identical_to_plain"] is None:
        return "n/a (sampled)"
    if run["outputs_identical_to_plain"]:
        return "yes"
    return "near ties" if run.get("differences_are_near_ties") else "no"


def runs_table(report: dict) -> str:
    head = ["drafter", "policy", "B", "tokens/s", "ms per token", "tau", "positions per pass", "wasted",
            "identical to plain"]
    rows = [[r["drafter"], r["policy"], r["batch_size"], f"{r['tokens_per_s']:.1f}", f"{r['ms_per_token']:.1f}",
             f"{r['tau']:.2f}", f"{r['positions_per_pass']:.1f}", f"{r['wasted_fraction']:.2f}", _identical(r)]
            for r in report["runs"]]
    return markdown_table(head, rows, "llrrrrrrl")


def _ratios(table: dict) -> str:
    return ", ".join(f"B={b} {v:.2f}" for b, v in sorted(table.items(), key=lambda kv: int(kv[0])))


def bullets(report: dict) -> str:
    roof, out = report["roofline"], []
    for d, measured in report["crossover"].items():
        pred = roof.get("predicted", {}).get(d)
        said = f"measured at B = {measured}" if measured is not None else "not reached"
        if pred:
            said += f", predicted by the roofline at B = {pred['crossover']} (alpha {pred['alpha']:.2f})"
        out.append(f"- crossover, {d}: {said}")
    for key, what in (("adaptive_vs_best_paired", "median of the ratios within each repeat"),
                      ("adaptive_vs_best", "ratio of the medians"),
                      ("adaptive_vs_best_fastest", "each policy's fastest repeat")):
        for d, table in (report.get(key) or {}).items():
            out.append(f"- adaptive over the better of plain and fixed ({what}), {d}: {_ratios(table)}")
    shape = " x ".join(str(x) for x in roof.get("matmul_shape", []))
    out.append(f"- measured roofline: {roof['matmul_flop_per_s'] / 1e9:.0f} GFLOP/s ({roof['dtype']}, the model's "
               f"{shape} projection; a {roof['matmul_size']}-square product "
               f"{roof['square_matmul_flop_per_s'] / 1e9:.0f}), {roof['memory_bytes_per_s'] / 1e9:.1f} GB/s read, "
               f"ridge {roof['ridge_flop_per_byte']:.1f} flop/byte")
    return "\n".join(out)


def costs_table(report: dict) -> str:
    """Forward timings (v_B, c_B) and, where the run timed them, the loop's step ratios T_B(gamma)."""
    costs = report["costs"]
    n = max(len(v) for v in costs["v"].values())
    loop = costs.get("loop") or {}
    head = ["B", "t(B, 1) ms"] + [f"v_B({k})" for k in range(2, n + 1)]
    head += [f"c_B ({d})" for d in costs.get("c", {})]
    for d, timed in loop.items():
        head += [f"T_B({g}) {d}" for g in range(1, len(next(iter(timed["step"].values()))) + 1)]
    rows = []
    for b in sorted(costs["v"], key=int):
        cells = [b, f"{costs['t1_seconds'][b] * 1000:.1f}"] + [f"{x:.2f}" for x in costs["v"][b][1:]]
        cells += [f"{c[b]:.3f}" for c in costs.get("c", {}).values()]
        for timed in loop.values():
            cells += [f"{x:.2f}" for x in timed["step"][b]]
        rows.append(cells)
    return markdown_table(head, rows, "r")


def caption(path: str | Path, report: dict) -> str:
    m, s = report["machine"], report["settings"]
    load_avg = m.get("load_average_start")
    machine = (f"{m.get('cpu')}, {m.get('logical_cores')} cores, torch {m.get('torch')}, {m.get('torch_threads')} "
               f"threads, {s.get('dtype')}" + (f"; load average {load_avg:.2f} at the start" if load_avg is not None
                                               else ""))
    name = Path(path).name
    return (f"Command: `{report['command']}`  \nReport: [{name}](data/{name}). Machine: {machine}.")


def render(path: str | Path, report: dict) -> str:
    parts = [caption(path, report), runs_table(report), bullets(report)]
    parts.append("Costs measured before the runs: t(B, 1) and v_B(n) = t(B, n) / t(B, 1) time the target's "
                 "forward alone, c_B one draft-model step over one target step; T_B(gamma) is one step of the "
                 "decode loop drafting gamma tokens over one drafting none (fitted to the passes the loop timed), "
                 "the cost the scheduler priced its steps with." if report["costs"].get("loop") else
                 "Costs measured before the runs: t(B, 1) and v_B(n) = t(B, n) / t(B, 1) time the target's "
                 "forward alone, c_B one draft-model step over one target step.")
    parts.append(costs_table(report))
    return "\n\n".join(parts)


def write(page: Path, paths: list[str]) -> None:
    """Replace each report's block in ``page`` (between its markers); ValueError if a marker is missing."""
    text = page.read_text()
    for path in paths:
        begin, end = f"<!-- batch_tables: {path} -->", "<!-- end batch_tables -->"
        pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.S)
        if not pattern.search(text):
            raise ValueError(f"{page}: no block {begin} ... {end} to replace")
        block = f"{begin}\n{render(path, load(path))}\n{end}"
        text = pattern.sub(lambda _: block, text, count=1)
    page.write_text(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("reports", nargs="+", help="JSON files written by python -m specbook batch --json")
    p.add_argument("--write", metavar="PAGE", help="replace the reports' blocks in this markdown page")
    args = p.parse_args(argv)
    try:
        if args.write:
            write(Path(args.write), args.reports)
        else:
            print("\n\n".join(render(path, load(path)) for path in args.reports))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
