"""A drafter with the sampling-parameter bug, for the proof lesson.

Shape legend: B batch, K draft length, V vocab.

Real implementations shipped it: the drafts are sampled after temperature / top-k / top-p,
but the verifier is handed q *before* that processing.  The rejection rule of Leviathan et al.
2023 (Algorithm 1) is then computed with the wrong q, and the output law is no longer the
target's, although every sample still reads well.
"""
from __future__ import annotations

import torch

from ..protocols import Draft
from ..sampling import SamplingParams, logits_to_probs, sample
from ..toy import MarkovLM


class MismatchedDraftProbs:
    """A drafter with the sampling-parameter bug, for the proof lesson: it samples its drafts
    with the sampling parameters, but hands the verifier the *unprocessed* q (temperature 1,
    no top-k/top-p).  Any output looks plausible; only a distribution test notices.

    Toy models only: it reads the draft model's exact conditionals (``next_logits``) row by row.
    """

    def __init__(self, model: MarkovLM):
        self.model = model
        self.passes = 0

    def propose(self, contexts: list[torch.Tensor], gamma: int, params: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        rows = [c.tolist() for c in contexts]
        if gamma == 0:  # the loop asks for no drafts when one token of budget is left
            return Draft(torch.zeros(len(rows), 0, dtype=torch.long), torch.zeros(len(rows), 0, self.model.vocab_size))
        tokens, raw = [], []
        for _ in range(gamma):
            logits = torch.stack([self.model.next_logits(r) for r in rows])  # (B, V)
            self.passes += 1
            nxt = sample(logits_to_probs(logits, params), generator)  # (B,) drawn from the processed q
            raw.append(logits_to_probs(logits))  # the bug: the verifier is given q before processing
            tokens.append(nxt)
            for r, t in zip(rows, nxt.tolist()):
                r.append(t)
        return Draft(torch.stack(tokens, 1), torch.stack(raw, 1))  # (B, K), (B, K, V)
