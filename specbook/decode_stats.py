"""The counters of one generation: passes, proposed, verified and accepted drafts, per depth.

Shape legend: B batch (live rows).  The decode loop records one verification pass at a time.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class DecodeStats:
    """Counters of one generation, with two acceptance figures that answer different questions:

    * ``acceptance_rate`` = accepted / verified: the chance that a draft that *was* tested survives,
      the estimate of alpha in Leviathan et al.'s E[tokens] (2023, eq. 1);
    * ``draft_efficiency`` = accepted / proposed: the share of all drafted tokens that survived;
      drafts after the first rejection were never tested, so it is not alpha (docs/glossary.md).
    """

    target_passes: int = 0  # verification passes (prefill not counted)
    draft_passes: int = 0  # forward passes of a draft model, as reported by the drafter
    proposed: int = 0  # draft tokens proposed, summed over rows
    accepted: int = 0  # draft tokens accepted, summed over rows
    verified: int = 0  # draft tokens actually tested (up to and including the first rejection)
    emitted: int = 0  # tokens emitted (accepted + corrected/bonus), summed over rows
    accepted_per_step: list[int] = field(default_factory=list)  # per (step, row): accepted drafts
    position_proposed: list[int] = field(default_factory=list)  # [i]: drafts proposed at depth i
    position_accepted: list[int] = field(default_factory=list)  # [i]: of those, accepted

    @property
    def acceptance_rate(self) -> float:
        """Accepted / verified drafts: the estimate of alpha."""
        return self.accepted / self.verified if self.verified else float("nan")

    @property
    def draft_efficiency(self) -> float:
        """Accepted / proposed drafts: the share of the drafting work that survived (not alpha)."""
        return self.accepted / self.proposed if self.proposed else float("nan")

    @property
    def tau(self) -> float:
        """Mean tokens per target pass per row (bonus included); 1.0 for plain decoding."""
        rows_passes = len(self.accepted_per_step)
        return self.emitted / rows_passes if rows_passes else float("nan")

    @property
    def position_acceptance(self) -> list[float]:
        """P(accept draft i | draft i was verified), for each depth i."""
        return [a / p if p else float("nan") for a, p in zip(self.position_accepted, self.position_proposed)]

    def record(self, num_drafts: int, num_emitted: torch.Tensor, depth: int | None = None,
               num_kept: torch.Tensor | None = None) -> None:
        """Count one verification pass.  ``depth``: a tree's longest path; a tree is counted per level
        (verified when every level above was accepted, accepted when one of its nodes was).
        ``num_kept[b]`` (default ``num_emitted``): how many tokens row b kept; fewer when it reached its
        budget or an end token, and the dropped tokens are neither emitted nor counted."""
        self.target_passes += 1
        levels = num_drafts if depth is None else depth
        kept_list = num_emitted.tolist() if num_kept is None else num_kept.tolist()
        for n, k in zip(num_emitted.tolist(), kept_list):
            if k < n:  # cut short: k accepted drafts kept, no rejection among them
                accepted, verified = k, min(k, levels)
            else:
                accepted = n - 1
                verified = min(accepted + 1, levels)  # depth i was verified iff all earlier drafts were accepted
            self.proposed += num_drafts
            self.accepted += accepted
            self.emitted += k
            self.accepted_per_step.append(accepted)
            self.verified += verified
            while len(self.position_proposed) < levels:
                self.position_proposed.append(0)
                self.position_accepted.append(0)
            for i in range(verified):
                self.position_proposed[i] += 1
                self.position_accepted[i] += int(i < accepted)

    def summary(self) -> str:
        return (f"target passes {self.target_passes}, draft passes {self.draft_passes}, "
                f"acceptance rate (alpha) {self.acceptance_rate:.3f} (accepted/verified), "
                f"draft efficiency {self.draft_efficiency:.3f} (accepted/proposed), tau {self.tau:.3f} tokens/pass")
