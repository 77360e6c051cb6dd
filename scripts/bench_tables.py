"""Markdown tables from a benchmark report written by ``python -m specbook bench --json``.

    python scripts/bench_tables.py docs/data/bench_bfloat16_limit1.json [more.json ...]
    python scripts/bench_tables.py --repeats run1.json run2.json run3.json   # one table over repeated runs

Prints, for each report, four tables, each under a one-line caption that names the JSON file
and the command that wrote it (the report's ``settings.command``), so that every table pasted
into docs/ can be traced to the file committed beside it:

(a) speedup over the same engine's plain decoding, per workload category and ``all``
    (``speedup_vs_autoregressive``: median over prompts of plain seconds / drafter seconds),
    with tau (tokens emitted per target pass) in parentheses;
(b) plain decoding and every drafter over all categories: tokens/s (median over prompts),
    the fraction of the weight-streaming roofline reached (at the bandwidth the LM head's
    batch-1 product reaches; a report written before that measurement divided by the rate of
    summing a large buffer, and its caption says so), the same fraction at the summed-buffer
    rate when the report has both, tau, and tokens/s over transformers' plain decoding when the
    report ran both engines;
(c) the verify-cost curve v(n) = t(n) / t(1) per engine, at a few n (the cost of verifying
    n positions in one pass relative to one; Leviathan et al. 2023, sec. 3.4);
(d) the draft sizes ``--gamma auto`` chose (``draft_sizes``);
(f) when the report ran another engine beside specbook (llama.cpp: ``engine_ratios``), per drafter
    both ran: each engine's tokens/s, specbook's over the other's (median of per-prompt ratios, with
    the lowest and highest), and on how many prompts the other's greedy tokens equal specbook's plain
    ones (the others starting at a near tie, when the report says so);
(g) when the report ran llama.cpp: every specbook and compiled row's tokens/s over llama.cpp's plain
    decoding on the same prompt (median of the per-prompt ratios, lowest-highest);
(h) when the report ran llama.cpp: per category, specbook's fastest configuration (eager or compiled,
    any drafter, by mean tokens/s over the category's prompts from ``per_prompt``) over llama.cpp's
    plain decoding and its prompt lookup, and the mean of those ratios over the categories.

``--repeats`` reads several reports of one command (the same settings, each written by its own
run) and prints one table instead:

(e) per engine/drafter and category, the median over the runs of ``speedup_vs_autoregressive``
    with the lowest and highest in brackets, and the median ``alpha`` (accepted / verified drafts;
    a greedy run repeats its tokens, so its alpha is the same every time).

Every number is copied from the report, only rounded; nothing is recomputed except the ratio
of (b)'s last column, which divides two of the report's tokens/s, (e)'s and (g)'s medians and (h)'s
means.  Reads JSON only: no model, no torch.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # this checkout's specbook, as the other scripts do
from specbook.bench.results import label  # noqa: E402
from specbook.markdown import markdown_table, read_json  # noqa: E402

BASELINE = "none"  # plain decoding: the drafter every speedup is relative to
CURVE_N = (2, 3, 5, 9, 17)  # positions per pass shown from the verify-cost curve
ROW_FIELDS = ("engine", "drafter", "category", "tokens_per_s", "tau", "speedup_vs_autoregressive",
              "roofline_fraction")


def load_report(path: str | Path) -> dict:
    """The report at ``path``; ValueError naming the file when it is not a bench report."""
    path = Path(path)
    report = read_json(path)
    if not isinstance(report, dict) or not isinstance(report.get("runs"), list) or not report["runs"]:
        raise ValueError(f"{path}: not a bench report (no 'runs' list; write one with "
                         "python -m specbook bench --json)")
    for key in ("overall", "settings"):
        if key not in report:
            raise ValueError(f"{path}: not a bench report (no {key!r})")
    for row in report["runs"] + report["overall"]:
        missing = [k for k in ROW_FIELDS if not isinstance(row, dict) or k not in row]
        if missing:
            raise ValueError(f"{path}: not a bench report (a row lacks {missing}: {str(row)[:100]})")
    return report


def caption(path: str | Path, report: dict, what: str) -> str:
    command = report["settings"].get("command") or "command not recorded"
    return f"*{what}. From `{Path(path).as_posix()}`, written by `{command}`.*"


def _num(x, nd: int = 2, suffix: str = "") -> str:
    return "-" if x is None else f"{x:.{nd}f}{suffix}"


def _pairs(report: dict) -> list[tuple[str, str]]:
    """(engine, drafter) in the report's order, plain decoding first within each engine; a drafter verified
    block-wise is a drafter of its own (``ngram [block]``, :func:`specbook.bench.results.label`)."""
    pairs = list(dict.fromkeys((r["engine"], label(r)) for r in report["runs"] + report["overall"]))
    engines = list(dict.fromkeys(e for e, _ in pairs))
    return sorted(pairs, key=lambda p: (engines.index(p[0]), p[1] != BASELINE))


def speedup_table(report: dict) -> str:
    """(a): speedup (tau) per engine and drafter (plain decoding left out: 1.0 by definition)."""
    categories = list(dict.fromkeys(r["category"] for r in report["runs"]))
    cells = {(r["engine"], label(r), r["category"]): r for r in report["runs"] + report["overall"]}
    rows = []
    for engine, drafter in _pairs(report):
        if drafter == BASELINE:
            continue
        row = [f"{engine} / {drafter}"]
        for cat in categories + ["all"]:
            r = cells.get((engine, drafter, cat))
            row.append("-" if r is None else
                       f"{_num(r['speedup_vs_autoregressive'], suffix='x')} ({_num(r['tau'])})")
        rows.append(row)
    return markdown_table(["engine / drafter"] + categories + ["all"], rows, "lr")


def sum_read_only(report: dict) -> bool:
    """True for a report whose ``roofline_fraction`` divides by the rate of summing a large buffer (written
    before the bench measured the LM head's product; its roofline block has no ``sum_read_bandwidth_bytes_per_s``)."""
    return "sum_read_bandwidth_bytes_per_s" not in (report.get("roofline") or {})


def throughput_table(report: dict) -> str:
    """(b): over all categories, tokens/s, roofline fraction(s), tau, and tokens/s over transformers' plain."""
    overall = {(r["engine"], label(r)): r for r in report["overall"]}
    hf_plain = overall.get(("transformers", BASELINE))
    both = hf_plain is not None and len({e for e, _ in overall}) > 1
    sum_read = not sum_read_only(report) and all("roofline_fraction_sum_read" in r for r in overall.values())
    head = (["engine / drafter", "tok/s", "roofline fraction"] + (["at summed-buffer rate"] if sum_read else [])
            + ["tau"] + (["vs transformers plain"] if both else []))
    rows = []
    for engine, drafter in _pairs(report):
        r = overall.get((engine, drafter))
        if r is None:
            continue
        row = ([f"{engine} / {drafter}", _num(r["tokens_per_s"], 1), _num(r["roofline_fraction"])]
               + ([_num(r["roofline_fraction_sum_read"])] if sum_read else []) + [_num(r["tau"])])
        if both:
            row.append(_num(r["tokens_per_s"] / hf_plain["tokens_per_s"], suffix="x"))
        rows.append(row)
    text = markdown_table(head, rows, "lr")
    ratio = report.get("engine_ratio")
    if ratio:
        text += (f"\n\nPlain decoding, specbook over transformers, median of per-prompt tokens/s ratios: "
                 f"{ratio['specbook_over_transformers_tokens_per_s_median']:.2f}x "
                 f"(range {ratio['min']:.2f}-{ratio['max']:.2f}, {ratio['prompts']} prompts).")
    return text


def verify_cost_table(report: dict) -> str:
    """(c): v(n) per engine at the n of CURVE_N the curve reaches, and t(1) in milliseconds."""
    curves = report.get("verify_cost") or {}
    n_max = max((len(c["v"]) for c in curves.values()), default=0)
    ns = [n for n in CURVE_N if n <= n_max]
    rows = []
    for engine, c in curves.items():
        at = dict(zip(c["n"], c["v"]))
        rows.append([engine, _num(1000 * c["seconds"][0], 1)] + [_num(at.get(n)) for n in ns])
    return markdown_table(["engine", "t(1) ms"] + [f"v({n})" for n in ns], rows, "lr")


def kernels_table(report: dict) -> str:
    """Each compiled width's passes timed on both kinds of product kernels (ms), and the kind kept."""
    kernels = ((report.get("verify_cost") or {}).get("compiled") or {}).get("kernels") or {}
    rows = [[w, _num(k["ms"]["autotuned"]), _num(k["ms"]["library"]), k["chosen"]]
            for w, k in kernels.items() if k.get("ms")]
    return markdown_table(["width", "autotuned ms", "library ms", "kept"], rows, "rrrl")


REPLAYED_GAMMAS = (1, 2, 4, 8, 16)  # the taus of a replayed chain the table shows (the JSON has every gamma)


def _pilot_text(pilot: dict) -> str:
    """"alpha: 0.42, 6: 1.81" as recorded; a replayed chain's 16 taus shortened to "tau@1/2/4/8/16: ..."."""
    taus = {int(k[4:]): v for k, v in pilot.items() if str(k).startswith("tau@")}
    rest = ", ".join(f"{k}: {v}" for k, v in pilot.items() if not str(k).startswith("tau@"))
    if not taus:
        return rest
    shown = [g for g in REPLAYED_GAMMAS if g in taus]
    return ", ".join(filter(None, [rest, f"tau@{'/'.join(map(str, shown))}: "
                                         + "/".join(f"{taus[g]:.2f}" for g in shown)]))


def draft_sizes_table(report: dict) -> str:
    """(d): the chain length or tree budget chosen per drafter, and the pilot behind it; the compiled
    engine's own choices (``compiled_draft_sizes``) as rows marked "(compiled)"."""
    rows = []
    for key, engine in (("draft_sizes", ""), ("compiled_draft_sizes", " (compiled)")):
        for drafter, s in (report.get(key) or {}).items():
            pilot = _pilot_text(s.get("pilot") or {})
            rows.append([drafter + engine, s.get("kind", "-"), str(s.get("chosen", "-")),
                         _num(s.get("predicted_speedup"), suffix="x"), pilot or "-"])
    return markdown_table(["drafter", "kind", "chosen", "predicted speedup",
                           "pilot (alpha; tau per gamma replayed, or per tree budget)"], rows, "llr")


def versus_table(report: dict) -> str:
    """(f): specbook against each other engine (``engine_ratios``), per drafter both ran."""
    overall = {(r["engine"], label(r)): r for r in report["overall"]}
    rows = []
    for v in report.get("engine_ratios") or []:
        sb, other = overall.get(("specbook", v["drafter"])), overall.get((v["engine"], v["drafter"]))
        same = v.get("identical_to_specbook_plain")
        same = "-" if same is None else f"{same}/{v['prompts']}" + (" (others: near ties)"
                                                                    if v.get("differences_are_near_ties") else "")
        rows.append([f"{v['engine']} / {v['drafter']}", _num(sb and sb["tokens_per_s"], 1),
                     _num(other and other["tokens_per_s"], 1),
                     f"{v['specbook_over_engine_tokens_per_s_median']:.2f}x ({v['min']:.2f}-{v['max']:.2f})", same])
    return markdown_table(["engine / drafter", "specbook tok/s", "its tok/s", "specbook / it (range)",
                           "tokens = specbook plain"], rows, "lr")


def _per_prompt_speeds(report: dict) -> dict:
    """{(engine, drafter, category, prompt id): tokens/s} from the report's ``per_prompt`` records."""
    return {(r["engine"], label(r), r["category"], r["id"]): r["new_tokens"] / r["seconds"]
            for r in report.get("per_prompt") or [] if r.get("seconds")}


def against_llamacpp_table(report: dict) -> str:
    """(g): every specbook and compiled row over llama.cpp's plain decoding on the same prompt: the median
    of the per-prompt tokens/s ratios (lowest-highest).  Empty without llama.cpp rows."""
    speed = _per_prompt_speeds(report)
    base = {(cat, pid): t for (e, d, cat, pid), t in speed.items() if (e, d) == ("llamacpp", BASELINE)}
    rows = []
    for engine, drafter in dict.fromkeys((e, d) for e, d, _, _ in speed):
        if engine not in ("specbook", "compiled"):
            continue
        ratios = [t / base[(cat, pid)] for (e, d, cat, pid), t in speed.items()
                  if (e, d) == (engine, drafter) and (cat, pid) in base]
        if ratios:
            rows.append([f"{engine} / {drafter}", f"{statistics.median(ratios):.2f}x",
                         f"{min(ratios):.2f}-{max(ratios):.2f}", str(len(ratios))])
    return markdown_table(["engine / drafter", "over llama.cpp plain (median)", "range", "prompts"], rows, "lr")


def best_table(report: dict) -> str:
    """(h): per category, specbook's fastest configuration (any drafter, eager or compiled engine) by mean
    tokens/s over the category's prompts, over llama.cpp's plain decoding and prompt lookup on the same
    prompts; the last row averages the ratios over the categories.  Empty without llama.cpp rows."""
    speed: dict = {}  # (engine, drafter, category) -> [tokens/s per prompt]
    for (engine, drafter, cat, _), t in _per_prompt_speeds(report).items():
        speed.setdefault((engine, drafter, cat), []).append(t)
    mean = {k: statistics.mean(v) for k, v in speed.items()}
    rows, ratios = [], []
    for cat in dict.fromkeys(c for _, _, c in speed):
        ours = {(e, d): t for (e, d, c), t in mean.items() if c == cat and e in ("specbook", "compiled")}
        plain, lookup = mean.get(("llamacpp", BASELINE, cat)), mean.get(("llamacpp", "ngram", cat))
        if not ours or plain is None:
            continue
        (engine, drafter), best = max(ours.items(), key=lambda kv: kv[1])
        ratio = (best / plain, None if lookup is None else best / lookup)
        ratios.append(ratio)
        rows.append([cat, f"{engine} / {drafter}", _num(best, 1), _num(plain, 1), _num(ratio[0], suffix="x"),
                     _num(lookup, 1), _num(ratio[1], suffix="x")])
    if not rows:
        return ""
    lookups = [b for _, b in ratios if b is not None]
    rows.append(["mean over categories", "", "", "", _num(statistics.mean(a for a, _ in ratios), suffix="x"), "",
                 _num(statistics.mean(lookups) if lookups else None, suffix="x")])
    return markdown_table(["category", "fastest specbook configuration", "its tok/s", "llama.cpp plain tok/s",
                           "over llama.cpp plain", "llama.cpp lookup tok/s", "over llama.cpp lookup"], rows, "llr")


def throughput_caption(report: dict) -> str:
    if sum_read_only(report):
        roof = "fraction of the weight-streaming roofline at the rate of summing a large buffer"
    else:
        roof = ("fraction of the weight-streaming roofline at the bandwidth the LM head's batch-1 product reaches "
                "(and at the rate of summing a large buffer)")
    return (f"All categories: tokens/s (median over prompts), {roof}, tau; the last column divides tokens/s by "
            "transformers' plain tokens/s")


def render(path: str | Path, report: dict) -> str:
    parts = [
        (speedup_table, "Speedup over the same engine's plain decoding (median over prompts), tau in parentheses"),
        (throughput_table, throughput_caption(report)),
        (verify_cost_table, "Verify cost v(n): one pass over n new positions relative to one position"),
        (kernels_table, "The compiled engine's product kernels: a pass of each width timed in its warm-up on "
                        "inductor's autotuned kernels and on MKL's and oneDNN's alone (median ms), the faster kept"),
        (draft_sizes_table, "Draft sizes chosen by --gamma auto"),
        (versus_table, "specbook against another engine, same drafter: tokens/s (median over prompts), specbook's "
                       "over the other's (median of per-prompt ratios, lowest-highest), prompts whose greedy tokens "
                       "equal specbook's plain decoding"),
        (against_llamacpp_table, "specbook and its compiled engine against llama.cpp's plain decoding, prompt by "
                                 "prompt: tokens/s over llama.cpp's on the same prompt"),
        (best_table, "The fastest lossless configuration per category against llama.cpp: mean tokens/s over the "
                     "category's prompts (picking the fastest from the same run flatters it)"),
    ]
    blocks = []
    for make, what in parts:
        body = make(report)
        if body.count("\n") >= 2:  # a table with at least one row
            blocks.append(caption(path, report, what) + "\n\n" + body)
    return "\n\n".join(blocks)


def repeats_table(paths: list, reports: list[dict]) -> str:
    """(e): median speedup [lowest, highest] over repeated runs of one command, and median alpha, per
    engine/drafter and category; ValueError naming the files when their settings differ."""
    def settings(report):
        return {k: v for k, v in report["settings"].items() if k != "command"}

    for path, report in zip(paths[1:], reports[1:]):
        if settings(report) != settings(reports[0]):
            raise ValueError(f"{path}: not a repeat of {paths[0]} (the settings differ)")
    categories = list(dict.fromkeys(r["category"] for r in reports[0]["runs"])) + ["all"]
    cells: dict = {}
    for report in reports:
        for r in report["runs"] + report["overall"]:
            cells.setdefault((r["engine"], label(r), r["category"]), []).append(r)
    rows = []
    for engine, drafter in _pairs(reports[0]):
        if drafter == BASELINE:
            continue
        row = [f"{engine} / {drafter}"]
        for cat in categories:
            runs = cells.get((engine, drafter, cat), [])
            speedups = [r["speedup_vs_autoregressive"] for r in runs if r["speedup_vs_autoregressive"] is not None]
            alphas = [r["alpha"] for r in runs if r.get("alpha") is not None]
            alpha = f", α {statistics.median(alphas):.2f}" if alphas else ""
            row.append("-" if not speedups else f"{statistics.median(speedups):.2f}x "
                       f"[{min(speedups):.2f}, {max(speedups):.2f}]{alpha}")
        rows.append(row)
    files = ", ".join(f"`{Path(p).as_posix()}`" for p in paths)
    command = reports[0]["settings"].get("command") or "command not recorded"
    what = (f"Speedup over the same engine's plain decoding, median of {len(reports)} runs [lowest, highest], and "
            f"alpha (accepted / verified drafts). From {files}, each written by `{command}` with its own --json")
    return f"*{what}.*\n\n" + markdown_table(["engine / drafter"] + categories, rows, "lr")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reports", nargs="+", metavar="REPORT.json", help="written by python -m specbook bench --json")
    ap.add_argument("--repeats", action="store_true",
                    help="the reports are repeated runs of one command: one table of medians over them")
    args = ap.parse_args(argv)
    if args.repeats:
        print(repeats_table(args.reports, [load_report(p) for p in args.reports]))
        return 0
    out = [render(p, load_report(p)) for p in args.reports]
    print("\n\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
