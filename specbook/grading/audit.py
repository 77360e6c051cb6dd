"""Auditing a sampler you did not write: transformers' own speculative sampling, checked as it ships.

Shape legend: K draft length, V vocab, L emitted tokens.

``transformers.generation.utils._speculative_sampling`` is the rejection step of
transformers' assisted generation (Leviathan et al. 2023, Algorithm 1).  It takes
logits and the candidate ids, draws from torch's *global* RNG, and returns the
accepted candidates plus one token.  :class:`TransformersVerifier` adapts it to the
checker's signature and nothing more: probabilities go in as their logarithms
(log 0 = -inf, which its softmax maps back to 0), the global CPU generator is
lent the state of the checker's generator for the call and hands it back after
(so the draws come from the checker's generator, runs replay, and the caller's
global RNG is untouched), and the function itself is imported from the installed
package and called, never copied.

Its "ensemble" mode (``assistant_ensemble_weight=w`` in (0, 1), static ensemble
verification) accepts a draft with probability min(1, 1 - w + w p(x)/q(x)), more
often than min(1, p/q), and keeps the usual residual: by its own docstring it
trades "controlled distributional bias" for acceptance, so it must come out
lossy.  ``python -m specbook.grading audit`` prints both verdicts for both modes.

To audit any other sampler, write a wrapper with the checker's signature and call
:func:`specbook.grading.check_verifier` on it (docs/grading.md shows three lines).
"""
from __future__ import annotations

import torch

from .tables import audit_text
from .verifier import check_verifier


class TransformersVerifier:
    """``fn(target_probs (K+1, V), draft_probs (K, V), draft_tokens (K,), generator) -> (L,)`` around transformers.

    ensemble_weight: None for the standard rule, or w in (0, 1) for static ensemble verification.
    A class (not a closure) so that it pickles when the checker's worker is started by spawn.
    """

    def __init__(self, ensemble_weight: float | None = None):
        if ensemble_weight is not None and not 0 < ensemble_weight < 1:
            raise ValueError(f"ensemble_weight must be None or lie in (0, 1), got {ensemble_weight!r}")
        # Imported here, in the checker's process, so that a forked worker inherits the loaded module
        # (a first import inside the worker takes seconds and would count against the first call).
        from transformers.generation.utils import _speculative_sampling

        self.speculative_sampling = _speculative_sampling
        self.ensemble_weight = ensemble_weight
        self.__qualname__ = ("transformers _speculative_sampling" if ensemble_weight is None
                             else f"transformers _speculative_sampling, assistant_ensemble_weight={ensemble_weight:g}")

    def __call__(self, target_probs, draft_probs, draft_tokens, generator):
        K = draft_tokens.shape[0]
        global_rng = torch.default_generator
        saved = global_rng.get_state()
        global_rng.set_state(generator.get_state())  # its torch.rand_like / torch.multinomial now draw from ours
        try:
            tokens, _ = self.speculative_sampling(
                draft_tokens[None],  # (1, K): the candidate ids; it reads the last K of them
                draft_probs.log()[None],  # (1, K, V) candidate logits
                K,
                target_probs.log()[None],  # (1, K+1, V) the target's logits
                assistant_ensemble_weight=self.ensemble_weight,
            )
        finally:
            generator.set_state(global_rng.get_state())  # the draws it made advance our generator
            global_rng.set_state(saved)
        return tokens[0]  # (L,)


AUDITED = (
    ("transformers _speculative_sampling", None),
    ("transformers _speculative_sampling, ensemble w = 0.5", 0.5),
)


def audit_results(seeds: int = 1) -> dict:
    """Check both modes over ``seeds`` seeds: per sampler, how many seeds passed each verdict, the
    first seed's failures and the mean seconds per check (the ``audit`` section of the JSON report)."""
    import transformers

    rows = []
    for name, weight in AUDITED:
        # require="lossless" with fail_fast: a run stops once lossless has failed (then standard has too)
        # and otherwise runs in full, so both verdicts are exact.
        reports = [check_verifier(TransformersVerifier(weight), seed=s, require="lossless", fail_fast=True)
                   for s in range(seeds)]
        rows.append({"sampler": name, "ensemble_weight": weight, "seeds": seeds,
                     "lossless_passed": sum(r.lossless for r in reports),
                     "standard_passed": sum(r.standard for r in reports),
                     "failures_first_seed": [f"{c.case}: {c.name}" for c in reports[0].failures],
                     "seconds_per_check": sum(r.seconds for r in reports) / seeds})
    return {"transformers": transformers.__version__, "seeds": seeds, "rows": rows}


def audit(seeds: int = 1) -> str:
    """Check both modes over ``seeds`` seeds; a markdown table of both verdicts."""
    return audit_text(audit_results(seeds))
