"""What one benchmark run's records become: per-category aggregates, engine ratios, the table.

The measuring is in :mod:`specbook.bench.cli`; this module only summarises what it measured
(medians of per-prompt ratios, explained greedy differences); the machine it ran on is
:func:`specbook.machine.machine_info`.  The acceptance figures of a row are
:func:`specbook.metrics.engine_metrics` of its prompts' counters summed (never ratios averaged),
under the same names as the rows of ``specbook batch``; a figure with no drafting step to divide by
(plain decoding) is None, and so is every per-position figure of a row where one prompt's counters
are unknown (a transformers run its passes did not explain: :func:`specbook.bench.engines.stats_from_calls`).
``alpha`` is accepted / verified drafts (docs/glossary.md), the verified ones counted per depth:
a draft is verified when every draft before it was accepted.
"""
from __future__ import annotations

import hashlib
import statistics

from ..decode_stats import DecodeStats
from ..metrics import engine_metrics
from .crosscheck import explain_divergence

PER_POSITION = ("drafting_steps", "accepted_tokens_per_position", "mean_acceptance_length", "alpha",
                "acceptance_per_position", "acceptance_per_position_unconditional", "accepted_length_histogram")

def ids_sha256(ids: list[int]) -> str:
    """SHA-256 hex digest of token ids written as comma-separated decimal integers."""
    return hashlib.sha256(",".join(str(int(i)) for i in ids).encode("ascii")).hexdigest()


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def explain_differences(model, records: list[dict], outputs: dict, prompt_ids: dict) -> None:
    """Greedy runs: give every record whose output differs from its engine's plain output a
    ``divergence`` entry (first differing token, the target's top-2 logit gap there, and whether
    that is a near tie for the model's dtype: ``crosscheck.tie_gap_for``).  A tree or chain pass
    sums in a different order than a one-token pass, so where the top two logits nearly tie the
    argmax can flip; anything else would be a bug.  Differences are explained, never hidden."""
    for r in records:
        plain = outputs.get((r["engine"], "none", None, r["id"]))
        if r["drafter"] == "none" or plain is None:
            continue
        d = explain_divergence(model, prompt_ids[r["id"]], plain,
                               outputs[(r["engine"], r["drafter"], r.get("verifier"), r["id"])])
        if d is not None:
            r["divergence"] = {"position": d.position, "gap": d.gap, "spread": d.spread, "near_tie": d.is_tie,
                               "description": d.describe()}


def _clean(x):
    """A figure for the JSON: rounded, NaN (nothing to divide by) as None, lists element by element."""
    if isinstance(x, list):
        return [_clean(v) for v in x]
    if isinstance(x, float):
        return None if x != x else round(x, 4)
    return x


def _sum_lists(lists: list[list[int]]) -> list[int]:
    return [sum(xs[i] for xs in lists if i < len(xs)) for i in range(max(map(len, lists), default=0))]


def acceptance(group: list[dict]) -> dict:
    """engine_metrics of the group's summed counters (module docstring): every figure by its batch-row name."""
    proposed, accepted = sum(r["proposed"] for r in group), sum(r["accepted"] for r in group)
    figures = {"draft_tokens": proposed, "accepted_tokens": accepted,
               "draft_acceptance_rate": round(accepted / proposed, 4) if proposed else None,
               **dict.fromkeys(PER_POSITION)}
    if all(r.get("position_proposed") is not None for r in group):
        total = DecodeStats(proposed=proposed, accepted=accepted,
                            position_proposed=_sum_lists([r["position_proposed"] for r in group]),
                            position_accepted=_sum_lists([r["position_accepted"] for r in group]))
        figures.update({k: _clean(v) for k, v in engine_metrics(total).items()})
        verified = sum(total.position_proposed)  # [i]: drafting steps that verified draft i
        figures["alpha"] = round(accepted / verified, 4) if verified else None
    return figures


def aggregate(records: list[dict], greedy: bool) -> tuple[list[dict], list[dict]]:
    """Per-prompt records -> one row per (engine, drafter, verifier, category) and one per (engine, drafter,
    verifier)."""
    base = {(r["engine"], r["id"]): r for r in records if r["drafter"] == "none"}

    def row(group: list[dict], category: str) -> dict:
        first = group[0]
        new = sum(r["new_tokens"] for r in group)
        secs = sum(r["seconds"] for r in group)
        passes = sum(r["passes"] for r in group)
        figures = acceptance(group)  # counters summed, not ratios averaged
        ar = [base.get((r["engine"], r["id"])) for r in group]
        identical = all(a is not None and a["sha256"] == r["sha256"] for a, r in zip(ar, group)) if greedy else None
        differing = [r for a, r in zip(ar, group) if a is not None and a["sha256"] != r["sha256"]]
        ties = (all(r.get("divergence", {}).get("near_tie") for r in differing) if greedy and differing else None)
        return {"engine": first["engine"], "drafter": first["drafter"], "verifier": first.get("verifier"),
                "verified_by": _same(r.get("verified_by") for r in group), "category": category,
                "dtype": first["dtype"], "gamma": first["gamma"], "tree_budget": first["tree_budget"],
                "prompts": len(group), "new_tokens": new, "seconds": round(secs, 4),
                "tokens_per_s": round(_median(r["new_tokens"] / r["seconds"] for r in group), 3),
                "tokens_per_s_total": round(new / secs, 3),
                "tau": round(sum(r["emitted"] for r in group) / passes, 4),
                "draft_efficiency": figures["draft_acceptance_rate"], **figures,
                "speedup_vs_autoregressive": _round(_median(a["seconds"] / r["seconds"] if a else None
                                                            for a, r in zip(ar, group))),
                "roofline_fraction": _round(_median(r["roofline_fraction"] for r in group)),
                "roofline_fraction_sum_read": _round(_median(r.get("roofline_fraction_sum_read") for r in group)),
                "weight_streaming_limit_tokens_per_s": _round(_median(r["limit_tokens_per_s"] for r in group), 2),
                "outputs_identical_to_autoregressive": identical,
                "differences_are_near_ties": ties, "lookup_share": _lookup_share(group),
                "output_ids_sha256": [r["sha256"] for r in group]}

    groups: dict[tuple, list[dict]] = {}
    overall: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((r["engine"], r["drafter"], r.get("verifier"), r["category"]), []).append(r)
        overall.setdefault((r["engine"], r["drafter"], r.get("verifier")), []).append(r)
    return ([row(g, key[3]) for key, g in groups.items()], [row(g, "all") for g in overall.values()])


def draft_split(drafter) -> tuple[int, int] | None:
    """How many drafts a two-way drafter (prompt lookup, else a model: LookupFirst) has made each way so far."""
    if hasattr(drafter, "lookups") and hasattr(drafter, "fallbacks"):
        return drafter.lookups, drafter.fallbacks
    return None


def split_since(drafter, before: tuple[int, int] | None) -> dict:
    """The drafts each way since ``before`` (one prompt's), as record fields; none for other drafters.
    :func:`aggregate` sums them into a row's ``lookup_share``."""
    if before is None:
        return {}
    lookups, fallbacks = draft_split(drafter)
    return {"lookup_drafts": lookups - before[0], "fallback_drafts": fallbacks - before[1]}


def _lookup_share(group: list[dict]) -> float | None:
    """The share of a two-way drafter's drafts that prompt lookup made (None for other drafters)."""
    if any("lookup_drafts" not in r for r in group):
        return None
    lookups = sum(r["lookup_drafts"] for r in group)
    total = lookups + sum(r["fallback_drafts"] for r in group)
    return round(lookups / total, 4) if total else None


def _same(values):
    """The one value all records share (a prompt with no drafts says None: skipped), or "mixed"."""
    seen = {v for v in values if v is not None}
    return seen.pop() if len(seen) == 1 else ("mixed" if seen else None)


def label(row: dict) -> str:
    """The drafter's name, with the verifier when it is block verification (``ngram [block]``)."""
    return row["drafter"] if row.get("verifier") in (None, "token") else f"{row['drafter']} [{row['verifier']}]"


def _round(x, nd=4):
    return None if x is None else round(x, nd)


def engine_ratio(records: list[dict], greedy: bool = True) -> dict | None:
    """specbook vs transformers plain decoding, median of per-prompt tokens/s ratios, side by side."""
    sb = {r["id"]: r for r in records if r["engine"] == "specbook" and r["drafter"] == "none"}
    tf = {r["id"]: r for r in records if r["engine"] == "transformers" and r["drafter"] == "none"}
    both = [i for i in sb if i in tf]
    if not both:
        return None
    ratios = [tf[i]["seconds"] / sb[i]["seconds"] for i in both]
    same = sum(sb[i]["sha256"] == tf[i]["sha256"] for i in both) if greedy else None  # sampled outputs differ
    return {"specbook_over_transformers_tokens_per_s_median": round(statistics.median(ratios), 4),
            "min": round(min(ratios), 4), "max": round(max(ratios), 4), "prompts": len(both),
            "identical_plain_outputs": same}


def versus_specbook(records: list[dict], greedy: bool, model=None, outputs: dict | None = None,
                    prompt_ids: dict | None = None) -> list[dict]:
    """Every other engine but transformers (kept in :func:`engine_ratio`) against specbook, per drafter
    both ran: the median, lowest and highest of per-prompt specbook tokens/s over that engine's tokens/s,
    side by side.  Greedy runs also count the prompts whose output equals specbook's plain output (the
    reference every greedy run must repeat) and, given ``model``, give each other record a
    ``divergence_vs_specbook`` (first differing token, near tie or not: ``explain_divergence``)."""
    sb = {(r["drafter"], r["id"]): r for r in records if r["engine"] == "specbook"}
    plain = {i: r for (d, i), r in sb.items() if d == "none"}  # specbook's plain output of each prompt
    out = []
    for (engine, drafter) in dict.fromkeys((r["engine"], r["drafter"]) for r in records):
        if engine in ("specbook", "transformers"):
            continue
        pairs = [(sb[(drafter, r["id"])], r) for r in records
                 if r["engine"] == engine and r["drafter"] == drafter and (drafter, r["id"]) in sb]
        if not pairs:
            continue
        ratios = [(a["new_tokens"] / a["seconds"]) / (b["new_tokens"] / b["seconds"]) for a, b in pairs]
        row = {"engine": engine, "drafter": drafter, "specbook_over_engine_tokens_per_s_median":
               round(statistics.median(ratios), 4), "min": round(min(ratios), 4), "max": round(max(ratios), 4),
               "prompts": len(pairs), "identical_to_specbook_plain": None, "differences_are_near_ties": None}
        if greedy:
            differing = [b for _, b in pairs if b["id"] in plain and plain[b["id"]]["sha256"] != b["sha256"]]
            row["identical_to_specbook_plain"] = sum(b["id"] in plain for _, b in pairs) - len(differing)
            if model is not None:
                for b in differing:
                    d = explain_divergence(model, prompt_ids[b["id"]], outputs[("specbook", "none", None, b["id"])],
                                           outputs[(engine, drafter, b.get("verifier"), b["id"])])
                    if d is not None:
                        b["divergence_vs_specbook"] = {"position": d.position, "gap": d.gap, "spread": d.spread,
                                                       "near_tie": d.is_tie, "description": d.describe()}
                row["differences_are_near_ties"] = (all(b.get("divergence_vs_specbook", {}).get("near_tie")
                                                        for b in differing) if differing else None)
        out.append(row)
    return out


def format_table(runs: list[dict], overall: list[dict], ratio: dict | None, curves: dict,
                 versus: list[dict] | None = None) -> str:
    w = max([10] + [len(label(r)) + 2 for r in runs + overall])
    head = (f"{'engine':<13}{'drafter':<{w}}{'category':<17}{'n':>3}{'tok/s':>8}{'roof':>6}{'tau':>7}{'eff':>7}"
            f"{'speedup':>9}  same")
    lines = [head, "-" * len(head)]
    for r in sorted(runs + overall, key=lambda r: (r["engine"], label(r), r["category"] == "all", r["category"])):
        eff = "-" if r["draft_efficiency"] is None else f"{r['draft_efficiency']:.2f}"
        same = {True: "yes", False: "NO", None: "-"}[r["outputs_identical_to_autoregressive"]]
        if same == "NO" and r.get("differences_are_near_ties"):
            same = "tie"  # every difference starts at a near-tie (for the dtype) of the target's top-2 logits
        sp = "-" if r["speedup_vs_autoregressive"] is None else f"{r['speedup_vs_autoregressive']:.2f}x"
        roof = "-" if r["roofline_fraction"] is None else f"{r['roofline_fraction']:.2f}"
        lines.append(f"{r['engine']:<13}{label(r):<{w}}{r['category']:<17}{r['prompts']:>3}"
                     f"{r['tokens_per_s']:>8.1f}{roof:>6}{r['tau']:>7.2f}{eff:>7}{sp:>9}  {same}")
    if ratio:
        lines.append(f"\nplain decoding, specbook / transformers tokens/s (median of {ratio['prompts']} prompts): "
                     f"{ratio['specbook_over_transformers_tokens_per_s_median']:.2f} "
                     f"(range {ratio['min']:.2f}-{ratio['max']:.2f})"
                     + ("" if ratio["identical_plain_outputs"] is None else
                        f"; identical outputs on {ratio['identical_plain_outputs']}/{ratio['prompts']} prompts"))
    for v in versus or ():
        same = v["identical_to_specbook_plain"]
        lines.append(f"{v['drafter']}, specbook / {v['engine']} tokens/s (median of {v['prompts']} prompts): "
                     f"{v['specbook_over_engine_tokens_per_s_median']:.2f} (range {v['min']:.2f}-{v['max']:.2f})"
                     + ("" if same is None else f"; {v['engine']}'s output equals specbook's plain on {same}/"
                        f"{v['prompts']} prompts" + (", the others from a near tie" if v["differences_are_near_ties"]
                                                      else "")))
    for engine, c in curves.items():
        v = c["v"]
        pick = [n for n in (2, 3, 5, 9, 17) if n <= len(v)]
        lines.append(f"verify cost {engine:<13} " + "  ".join(f"v({n})={v[n - 1]:.2f}" for n in pick)
                     + f"   (t(1) = {1000 * c['seconds'][0]:.1f} ms, context {c['context']})")
    return "\n".join(lines)
