"""The rows of one generation: what each has emitted, when it ends, and how it leaves the batch.

Shape legend: B batch (live rows), T prompt length, W prefill width.

Rows are independent.  Prompts of different lengths share one prefill, padded on the right, and
each row is then rolled back to its own length.  :mod:`specbook.decode` drives these helpers.
"""
from __future__ import annotations

import torch

from .protocols import SupportsObserve, SupportsPrefill, SupportsSelectRows, Target

PAD = -1


class Rows:
    """Per-row bookkeeping: what each row has emitted and which rows are live (``live[s]`` is the
    original row index in batch slot ``s``).  A row ends at ``max_new_tokens`` new tokens or right
    after an end token; what a pass produced past that point is dropped (never emitted, never
    counted), and the row leaves the batch so it costs nothing more."""

    def __init__(self, prompts: list[list[int]], max_new_tokens: int, eos: frozenset[int]):
        self.prompts = prompts
        self.max_new_tokens = max_new_tokens
        self.eos = eos
        self.emitted: list[list[int]] = [[] for _ in prompts]
        self.live = list(range(len(prompts)))

    def contexts(self, device) -> list[torch.Tensor]:
        return [torch.tensor(self.prompts[b] + self.emitted[b], dtype=torch.long, device=device) for b in self.live]

    def fewest_emitted(self) -> int:
        """New tokens of the live row that has emitted fewest (the budget once no row is live)."""
        return min((len(self.emitted[b]) for b in self.live), default=self.max_new_tokens)

    def room(self) -> int:
        """The most new tokens any live row may still emit."""
        return max(self.max_new_tokens - len(self.emitted[b]) for b in self.live)

    def extend(self, tokens: list[list[int]], counts: list[int]) -> tuple[list[int], list[int]]:
        """Append each live slot's ``tokens[s][:counts[s]]``, cut at the budget and after an end token;
        returns (number kept per slot, slots whose row has now ended)."""
        num_kept, ended = [], []
        for s, (b, row, n) in enumerate(zip(self.live, tokens, counts)):
            new = row[: min(n, self.max_new_tokens - len(self.emitted[b]))]
            for i, t in enumerate(new):
                if t in self.eos:
                    new = new[: i + 1]
                    break
            self.emitted[b].extend(new)
            num_kept.append(len(new))
            if len(self.emitted[b]) >= self.max_new_tokens or (new and new[-1] in self.eos):
                ended.append(s)
        return num_kept, ended

    def result(self, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(tokens, new_tokens, lengths) of a finished generation, right-padded with PAD."""
        lengths = torch.tensor([len(e) for e in self.emitted], dtype=torch.long, device=device)
        width = max(len(e) for e in self.emitted)
        full = max(len(p) + len(e) for p, e in zip(self.prompts, self.emitted))
        new = torch.tensor([e + [PAD] * (width - len(e)) for e in self.emitted], dtype=torch.long, device=device)
        seqs = [p + e for p, e in zip(self.prompts, self.emitted)]
        tokens = torch.tensor([s + [PAD] * (full - len(s)) for s in seqs], dtype=torch.long, device=device)
        return tokens, new.reshape(len(seqs), width), lengths


def prompt_device(prompt) -> torch.device:
    first = prompt[0] if isinstance(prompt, (list, tuple)) and prompt else prompt
    return first.device if isinstance(first, torch.Tensor) else torch.device("cpu")


def prefill(target: Target, rows: list[list[int]], device) -> list[list[int]]:
    """Reset ``target`` to ``len(rows)`` rows and cache every token of each row but its last (one
    prefill, rows padded on the right with their own last token, then rolled back to their lengths).
    Returns, per row, the indices of that forward's tokens that stayed in the cache (for ``observe``)."""
    target.reset(len(rows))
    width = max(len(r) for r in rows) - 1
    if width > 0:
        padded = torch.tensor([r[:-1] + [r[-1]] * (width - len(r) + 1) for r in rows], device=device)  # (B, W)
        if isinstance(target, SupportsPrefill):
            target.prefill(padded)
        else:
            target.forward(padded)
        if any(len(r) - 1 != width for r in rows):
            target.rollback(torch.tensor([len(r) - 1 for r in rows], dtype=torch.long))
    return [list(range(len(r) - 1)) for r in rows]


def drop_rows(target: Target, drafter, rows: Rows, ended: list[int], device) -> None:
    """Take the ended slots out of the batch: ``select_rows`` shrinks caches in place; a target without
    it is rebuilt from the live rows' histories (one prefill), a drafter without it re-synchronises."""
    gone = set(ended)
    keep = [s for s in range(len(rows.live)) if s not in gone]
    rows.live = [rows.live[s] for s in keep]
    if not rows.live:
        return
    if isinstance(target, SupportsSelectRows):
        target.select_rows(keep)
    else:
        kept_indices = prefill(target, [rows.prompts[b] + rows.emitted[b] for b in rows.live], device)
    if isinstance(drafter, SupportsSelectRows):
        drafter.select_rows(keep)
    if not isinstance(target, SupportsSelectRows) and isinstance(drafter, SupportsObserve):
        drafter.observe(target, kept_indices)


def pending_tokens(rows: Rows, device) -> torch.Tensor:
    """Each live row's last token, the one fed first in the next pass (B, 1)."""
    return torch.tensor([[(rows.emitted[b] or rows.prompts[b])[-1]] for b in rows.live], dtype=torch.long,
                        device=device)
