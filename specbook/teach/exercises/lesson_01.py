"""Graders of lesson 1 (the loop): exercises ``01.1``-``01.3``, concept checks ``01.c1``-``01.c5``.

What is right is computed by running the library: the decode loop on toy models, ``verify_chain``
on a round built to end in a known way, and :mod:`specbook.roofline`.
"""
from __future__ import annotations

import math

import torch

from ... import roofline
from . import Wrong, grader, register
from ._answers import call, count, near, number, pick, short, whole

# ---------------------------------------------------------------------------- exercises

H100 = "H100 SXM"


@grader("01.1")
def perfect_draft(alpha, tau, passes, n_tokens, gamma) -> None:
    """q = p: predicted α, τ and target passes for ``n_tokens`` at ``gamma``, against the loop itself."""
    from specbook.decode import speculative_generate
    from specbook.drafters import DraftModelDrafter
    from specbook.toy import make_toy_pair

    n_tokens, gamma = whole(n_tokens, "the token budget"), whole(gamma, "γ")
    alpha, tau, passes = number(alpha, "α"), number(tau, "τ"), number(passes, "the number of target passes")
    target = make_toy_pair(vocab_size=8, order=1, match=0.7, seed=0)[0]
    twin = make_toy_pair(vocab_size=8, order=1, match=0.7, seed=0)[0]  # an identical copy: q = p
    run = speculative_generate(target, DraftModelDrafter(twin), torch.tensor([0]), n_tokens, gamma=gamma,
                               generator=torch.Generator().manual_seed(1)).stats
    if abs(alpha - run.acceptance_rate) > 1e-9:
        raise Wrong("α: what is the keep-probability min(1, p(x)/q(x)) of every guess when q = p?")
    if abs(passes - run.target_passes) > 1e-9:
        if passes == n_tokens:
            raise Wrong("that many passes is plain decoding; with speculation a pass can emit several tokens")
        if passes == math.ceil(n_tokens / gamma):
            raise Wrong("a round that keeps all γ guesses emits one more token: the bonus")
        raise Wrong("passes: how many tokens does each round emit when nothing is rejected, and how many "
                    "rounds cover the budget (the loop never drafts past it)?")
    if abs(tau - run.tau) > 0.005:
        if abs(tau - gamma) < 0.005:
            raise Wrong("τ counts every token a pass emits, the bonus token included")
        raise Wrong("τ is tokens per target pass: the budget divided by the passes you found")


@grader("01.2")
def rates_from_steps(fn, trace) -> None:
    """``fn(steps) -> (α, draft efficiency)`` on the lesson's trace and on a second one, against the loop's stats."""
    from specbook.drafters import DraftModelDrafter
    from specbook.sampling import SamplingParams
    from specbook.teach.trace import trace_speculative
    from specbook.toy import make_toy_pair

    target, draft = make_toy_pair(vocab_size=6, order=1, match=0.4, seed=3)
    other = trace_speculative(target, DraftModelDrafter(draft), [1], 40, SamplingParams(), gamma=3,
                              generator=torch.Generator().manual_seed(5))
    for name, tr in (("the lesson's trace", trace), ("a second trace (γ = 3, a poorer draft)", other)):
        got = call(fn, tr.steps)
        if not (isinstance(got, (tuple, list)) and len(got) == 2):
            raise Wrong(f"return two numbers, (α, draft efficiency); got {short(got)}")
        alpha, efficiency = number(got[0], "α"), number(got[1], "the draft efficiency")
        if abs(efficiency - tr.stats.draft_efficiency) > 1e-9:
            raise Wrong(f"on {name} your draft efficiency is {efficiency:.4f}, not accepted / proposed: every "
                        "drafted guess counts as proposed, checked or not")
        if abs(alpha - tr.stats.acceptance_rate) > 1e-9:
            if abs(alpha - tr.stats.draft_efficiency) < 1e-9:
                raise Wrong("your α equals the draft efficiency: guesses after the first rejection were never "
                            "verified, so they do not belong in α's denominator")
            raise Wrong(f"on {name} your α is {alpha:.4f}: count as verified every guess up to and including "
                        "the first rejection of each round (all of them when none is rejected)")


@grader("01.3")
def first_costly_width(answer) -> None:
    """The first number of positions whose verify pass on the H100 at batch 1 costs more than one pass."""
    n = whole(answer, "the number of positions")
    right = next(k for k in range(1, 100_000) if roofline.verify_time_ratio(k, batch=1, hw=H100) > 1.0)
    if n == right:
        return
    ridge = roofline.ridge(H100, "bfloat16")
    if n == right - 1:
        raise Wrong(f"at {n} positions the intensity does not exceed the ridge ({ridge:.1f}): the pass still "
                    "waits on memory, so it costs one pass")
    if n < right:
        raise Wrong(f"a pass over {n} positions has intensity {n} flop per weight byte, below the ridge: it is "
                    "memory-bound and costs exactly one pass (roofline.verify_time_ratio says 1.0)")
    raise Wrong(f"{n} positions is past the ridge, but so is a smaller pass: find the first one")


# ---------------------------------------------------------------------------- concept check


def _known_round(gamma: int, kept: int) -> int:
    """verify_chain on a round whose first ``kept`` guesses must survive and the next must be rejected."""
    from specbook.verify import verify_chain

    V = 4
    guesses = torch.tensor([[1] * gamma])  # (1, γ)
    draft_probs = torch.full((1, gamma, V), 1.0 / V, dtype=torch.float64)  # (1, γ, V)
    target_probs = draft_probs.new_full((1, gamma + 1, V), 1.0 / V)  # (1, γ+1, V): p = q, always kept
    target_probs[0, kept] = torch.tensor([0.5, 0.0, 0.25, 0.25])  # p(guess) = 0 at depth kept: always rejected
    _, n_emitted = verify_chain(target_probs, draft_probs, guesses, torch.Generator().manual_seed(0))
    return int(n_emitted[0])


C1 = dict(gamma=4, kept=2)  # the round of concept checks c1 and c2: two guesses kept, the third rejected

register({
    # γ = 4, the first two guesses kept, the third rejected: tokens emitted.
    "01.c1": count(lambda: _known_round(C1["gamma"], C1["kept"]), "the number of tokens", traps={
        2: "after a rejection the round still emits one token of its own, drawn from the residual",
    }, hint="count the kept guesses, then what follows the first rejection; the guesses after it are dropped"),
    # The same round: how many of its four guesses were verified? Each up to and including the first rejection.
    "01.c2": count(min(C1["kept"] + 1, C1["gamma"]), "the number of verified guesses", traps={
        C1["gamma"]: "guesses after the first rejection are proposed, but the walk stops before it reaches them",
        C1["kept"]: "the rejected guess was verified too: the test was run on it, and it failed",
    }, hint="verified means the accept test was run on the guess"),
    "01.c3": pick("b", a="accepted / proposed is the draft efficiency: it counts guesses nobody checked",
                  c="tokens per target pass is τ; α is about single guesses"),
    # Arithmetic intensity of a verify pass at batch 64, γ = 4 (flop per weight byte, bfloat16).
    "01.c4": near(lambda: roofline.roofline_rows(batches=(64,), gammas=(4,), hw=H100)[0]["intensity"],
                  "the intensity", tol=1e-6, traps={
                      64 * 4: "each row verifies its γ guesses plus one more position (the corrected or bonus token)",
                      5: "that is one row; every row of the batch reuses the same weight bytes",
                  }, hint="the intensity of a pass, in flop per weight byte, is the number of positions it "
                          "processes: batch × positions per row"),
    "01.c5": pick("b", a="the cache saves recomputing the context, but the γ + 1 new positions are all computed in "
                         "this pass",
                  c="a guessed token costs the target exactly what any token costs; the saving is in how the pass "
                    "spends its time"),
})
