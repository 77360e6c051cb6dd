"""Graders of lesson 4 (a real model): exercises ``04.1``-``04.3``, concept checks ``04.c1``-``04.c5``.

The lesson's numbers are measured on the reader's machine, so its check cells hand the graders
the measurements (α, c, the verify-cost curves); what is right is then computed from them with
:mod:`specbook.theory`, and each function the reader writes is also tried on made-up inputs.
"""
from __future__ import annotations

import numpy as np

from specbook import theory

from . import Wrong, grader, register
from ._answers import call, near, number, pick, whole

GAMMA = 4


@grader("04.1")
def ideal_speedup(answer, alpha) -> None:
    """The code-editing category's α with free drafts (c = 0) and a free verify (v = 1), γ = 4."""
    alpha = number(alpha, "α")
    value = number(answer, "the speedup")
    right = float(theory.speedup(alpha, GAMMA, 0.0))
    if abs(value - right) <= 0.01:
        return
    if alpha < 1 and abs(value - float(theory.expected_tokens_limit(alpha))) <= 0.01:
        raise Wrong("1/(1 − α) is the yield of an endless draft; a round here drafts γ = 4")
    if abs(value - float(theory.expected_tokens(alpha, GAMMA - 1))) <= 0.01:
        raise Wrong("one term short: a round that keeps all its guesses adds the bonus token")
    raise Wrong(f"with α = {alpha:.3f}: when drafting is free and the verify pass costs one pass, a round costs "
                "exactly one target pass, so the speedup is what one round yields")


def _flat(n: float) -> float:
    return 1.0


def _gentle(n: float) -> float:
    return 1.0 + 0.08 * (n - 1)


def _steep(n: float) -> float:
    return float(n) ** 0.8


@grader("04.2")
def pays_off(fn, side, v_measured) -> None:
    """``fn(alpha, gamma, c, v) -> bool`` against ``theory.speedup(...) > 1`` on a grid and the measured drafters."""
    cases = [(a, g, c, v) for v in (_flat, _gentle, _steep, v_measured) for a in (0.0, 0.3, 0.6, 0.9, 1.0)
             for g in (1, 3, 4, 6) for c in (0.0, 0.05, 0.3, 1.0)]
    cases += [(m["alpha"], GAMMA, m["c"], v_measured) for m in side.values()]
    wrong = []
    for alpha, gamma, c, v in cases:
        s = float(theory.speedup(alpha, gamma, c, verify_cost=lambda g, v=v: v(g + 1)))
        if abs(s - 1) < 1e-9:
            continue  # a tie: "pays" is a matter of rounding there
        got = call(fn, alpha, gamma, c, v)
        if not isinstance(got, (bool, np.bool_)):
            raise Wrong(f"pays_off should return True or False, got {got!r}")
        if bool(got) != (s > 1):
            wrong.append((alpha, gamma, c, v, bool(got), s))
    if not wrong:
        return
    if all(w[3] is not _flat for w in wrong):  # right whenever the verify pass is free
        raise Wrong("right while the verify pass costs one pass (v = 1), wrong once it costs more: a round's "
                    "verify pass over γ + 1 positions costs v(γ + 1) target passes")
    alpha, gamma, c, v, got, s = wrong[0]
    raise Wrong(f"at α = {alpha}, γ = {gamma}, c = {c}, v(γ + 1) = {v(gamma + 1):.3f} your function says {got}, "
                f"but the predicted speedup is {s:.3f} ({len(wrong)} of {len(cases)} cases disagree)")


def _speedups(alpha: float, c: float, cv: dict) -> dict[int, float]:
    vf = lambda g: float(np.interp(g + 1, cv["n"], cv["v"]))  # noqa: E731
    return {g: float(theory.speedup(alpha, g, c, verify_cost=vf)) for g in range(1, 9)}


@grader("04.3")
def best_gamma_for_a_curve(fn, flatter, draft, curves) -> None:
    """``fn(alpha, c, cv)``: the γ in 1..8 with the highest predicted speedup; then the flatter-curve choice."""
    made_up = {
        "flat (v = 1)": {"n": [1, 17], "v": [1.0, 1.0]},
        "steep": {"n": [1, 2, 5, 9, 17], "v": [1.0, 1.6, 2.4, 3.6, 6.0]},
    }
    trials = [(draft["alpha"], draft["c"], name, cv) for name, cv in curves.items()]
    trials += [(a, c, name, cv) for name, cv in made_up.items() for a, c in ((0.9, 0.02), (0.6, 0.1), (0.3, 0.05))]
    for alpha, c, name, cv in trials:
        got = whole(call(fn, alpha, c, cv), "γ")
        scores = _speedups(alpha, c, cv)
        if got not in scores:
            raise Wrong(f"γ must be one of 1..8, got {got}")
        if scores[got] < max(scores.values()) - 1e-12:
            raise Wrong(f"at α = {alpha:.3f}, c = {c:.3f} with the {name} curve your γ = {got} predicts "
                        f"{scores[got]:.3f}×, and another γ in 1..8 predicts more: evaluate the speedup of every γ "
                        "with v(γ + 1) read off the curve")
    pick("a", b="a flatter curve makes each extra verified position cheaper; which way does that move the best γ?",
         c="the best γ balances what one more guess yields against what it costs, and the curve is part of the "
           "cost")(flatter)


# ---------------------------------------------------------------------------- concept check

register({
    "04.c1": pick("b", a="prompt lookup can only propose text that is already in the context: how much of a chat "
                         "reply is?",
                  c="arithmetic answers are new digits, rarely copied from the prompt"),
    # α = 0.5, γ = 4, c = 0.02, v(5) = 1.3: the predicted speedup.
    "04.c2": near(float(theory.speedup(0.5, 4, 0.02, verify_cost=1.3)), "the speedup", tol=0.01, traps={
        float(theory.speedup(0.5, 4, 0.02)): "that assumes a free verify pass; here it costs 1.3 passes",
    }, hint="speedup = E(α, γ) / (γ·c + v(γ + 1))"),
    "04.c3": pick("b", a="its guesses are often accepted: the exit is only two blocks early",
                  c="greedy speculative decoding returned exactly the plain output for every drafter in the lesson"),
    "04.c4": pick("b", a="v is the time of one target pass over γ + 1 positions against one position: no drafter "
                         "runs in it",
                  c="the workload changes α, not the time of a pass of a given width"),
    "04.c5": pick("b", a="even when every round drafts γ guesses, the deeper counts are smaller: why?",
                  c="the counts are of drafts, not of time"),
})
