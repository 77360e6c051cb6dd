"""Benchmark workloads: prompts by category, read from JSON lines (``models.chat.chat_ids`` makes their ids).

Shape legend: T prompt length (tokens).

Acceptance depends on the workload far more than on anything else (Saxena 2023,
"Prompt Lookup Decoding"; Leviathan et al. 2023, Section 4): a reply that copies its
prompt (edited code, quoted sources, answers lifted from a context, a fixed JSON
schema) drafts well by lookup, open chat and arithmetic do not.  The built-in set,
``specbook/data/bench_prompts.jsonl``, holds 66 prompts written for this project,
11 in each of six categories:

==================  ==============================================================
code_edit           a short source file and an edit that leaves most of it unchanged
summarize_quote     a news-style passage to summarise, quoting one sentence verbatim
rag_qa              a context passage and a question answered from it
json_extract        a product description to extract into one fixed JSON schema
chat                an open question with no source text
math                an arithmetic word problem, solved step by step
==================  ==============================================================

``specbook/data/heldout_prompts.jsonl`` (:data:`HELDOUT_PROMPTS`) holds 18 more, three per category,
written after the benchmark's and the batch scheduler's settings were chosen: pass it as
``--prompts`` to see those settings on text they were not tuned on.

A user's own file has the same format: one JSON object per line with ``id``,
``category`` and ``prompt`` (the user turn; the tokenizer's chat template is applied).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..train.prompts import BENCHMARK_PROMPTS as BUILTIN_PROMPTS
HELDOUT_PROMPTS = BUILTIN_PROMPTS.with_name("heldout_prompts.jsonl")
CATEGORIES = ("code_edit", "summarize_quote", "rag_qa", "json_extract", "chat", "math")


@dataclass(frozen=True)
class BenchPrompt:
    id: str
    category: str
    prompt: str  # the user turn, before the chat template


def load_prompts(path: str | Path | None = None) -> list[BenchPrompt]:
    """Read a JSON-lines prompt file (default: the built-in set); ValueError on any bad line."""
    path = BUILTIN_PROMPTS if path is None else Path(path)
    if not path.is_file():
        raise ValueError(f"prompts file {str(path)!r} does not exist")
    prompts, seen = [], set()
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path.name} line {lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}: not valid JSON ({err.msg})") from None
        if not isinstance(obj, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        missing = [k for k in ("id", "category", "prompt") if k not in obj]
        if missing:
            raise ValueError(f"{where}: missing key(s) {missing}; each line needs id, category and prompt")
        for key in ("id", "category", "prompt"):
            if not isinstance(obj[key], str) or not obj[key].strip():
                raise ValueError(f"{where}: {key!r} must be a non-empty string, got {obj[key]!r}")
        if obj["id"] in seen:
            raise ValueError(f"{where}: duplicate id {obj['id']!r}")
        seen.add(obj["id"])
        prompts.append(BenchPrompt(obj["id"], obj["category"], obj["prompt"]))
    if not prompts:
        raise ValueError(f"prompts file {str(path)!r} holds no prompts")
    return prompts


def select(prompts: list[BenchPrompt], categories: list[str] | None = None, limit: int = 0) -> list[BenchPrompt]:
    """Keep the listed categories (None = all) and the first ``limit`` prompts of each (0 = all)."""
    if not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit must be an int >= 0 (0 = all), got {limit!r}")
    present = list(dict.fromkeys(p.category for p in prompts))
    if categories:
        unknown = [c for c in categories if c not in present]
        if unknown:
            raise ValueError(f"categories {unknown} not in the prompts; available: {present}")
    keep, taken = [], {}
    for p in prompts:
        if categories and p.category not in categories:
            continue
        if limit and taken.get(p.category, 0) >= limit:
            continue
        taken[p.category] = taken.get(p.category, 0) + 1
        keep.append(p)
    return keep


def first_of_each_category(prompts: list[BenchPrompt], prompt_ids: list[list[int]]) -> list[list[int]]:
    """The token ids of the first prompt of every category, in order of first appearance (the pilots')."""
    first: dict[str, list[int]] = {}
    for p, ids in zip(prompts, prompt_ids):
        first.setdefault(p.category, ids)
    return list(first.values())
