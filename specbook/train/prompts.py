"""Training prompts: one record type, one held-out split, one digest, for every drafter we train.

Two generators write prompts (:mod:`specbook.train.data`: the standard library's code and
docstrings; :mod:`specbook.train.heads_data`: templates crossed with subjects, passages,
word problems).  Both hand out :class:`Prompt` records and split them here, so a prompt id
is held out (or not) whichever trainer sees it.

The split is a fixed hash of the id, about ``HELDOUT_PERCENT`` % held out: adding prompts
never moves an old one between splits, and the split never depends on list order.  Held-out
prompts only report acceptance after training (Medusa, Cai et al. 2024, sec. 2.3.2 and
EAGLE, Li et al. 2024, sec. 4.3 train on the target's own replies; we keep a part of them
away from every gradient step and from every choice of tree).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

HELDOUT_PERCENT = 10
# The benchmark's prompts (read with full checks by specbook.bench.workloads): training text must never contain them.
BENCHMARK_PROMPTS = Path(__file__).resolve().parent.parent / "data" / "bench_prompts.jsonl"


@dataclass(frozen=True)
class Prompt:
    id: str  # stable across runs and releases: generator / template / source indices, never reused
    category: str  # e.g. code-edit, summarize, chat, math
    text: str  # the user turn (the chat template is applied by models.chat.chat_ids)

    @property
    def heldout(self) -> bool:
        return is_heldout(self.id)


def is_heldout(prompt_id: str) -> bool:
    """The split of an id: sha256(id) mod 100 < HELDOUT_PERCENT, independent of list order."""
    return int.from_bytes(hashlib.sha256(prompt_id.encode()).digest()[:4], "big") % 100 < HELDOUT_PERCENT


def split(prompts: list[Prompt]) -> tuple[list[Prompt], list[Prompt]]:
    """(train, heldout), each in the order of ``prompts``."""
    return [p for p in prompts if not p.heldout], [p for p in prompts if p.heldout]


def prompts_digest(prompts: list[Prompt]) -> str:
    """sha256 over ids and texts, in order (recorded next to trained weights)."""
    h = hashlib.sha256()
    for p in prompts:
        h.update(p.id.encode() + b"\0" + p.text.encode() + b"\0")
    return h.hexdigest()


def benchmark_texts(path: str | Path = BENCHMARK_PROMPTS) -> list[str]:
    """The user turns of a benchmark prompt file (JSON lines with a ``prompt`` key), for disjointness checks."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["prompt"] for line in lines if line.strip()]
