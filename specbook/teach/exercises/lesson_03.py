"""Graders of lesson 3 (yield and speedup): exercises ``03.1``-``03.3``, concept checks ``03.c1``-``03.c5``.

What is right is computed from :mod:`specbook.theory`; the givens of each question (α = 0.6,
c = 0.1, γ = 4, ...) are the ones the lesson states.
"""
from __future__ import annotations

from specbook import theory

from . import Wrong, grader, register
from ._answers import call, near, number, pick

# ---------------------------------------------------------------------------- exercises


@grader("03.1")
def speedup_by_hand(answer) -> None:
    """α = 0.6, c = 0.1, γ = 4: the speedup E[tokens] / (γc + 1)."""
    alpha, c, gamma = 0.6, 0.1, 4
    value = number(answer, "the speedup")
    right = theory.speedup(alpha, gamma, c)
    if abs(value - right) <= 0.006:  # two decimals are enough
        return
    e = theory.expected_tokens(alpha, gamma)
    if abs(value - e) < 0.01:
        raise Wrong("that is E[tokens], the tokens one round yields; the speedup divides it by what a round "
                    "costs in target passes")
    if abs(value - theory.expected_tokens(alpha, gamma - 1) / (gamma * c + 1)) < 0.006:
        raise Wrong("your E[tokens] stops one term short: a round that keeps all γ guesses adds the bonus token, "
                    "so the sum runs up to α^γ")
    if abs(value - e / (c + 1)) < 0.006:
        raise Wrong("a round runs the draft model γ times, each step costing c of a target pass")
    if abs(value - theory.expected_tokens_limit(alpha) / (gamma * c + 1)) < 0.006:
        raise Wrong("1/(1 − α) is the yield of an endless draft; with γ = 4 the sum stops")
    raise Wrong(f"{value:.3f} is not the speedup at α = {alpha}, c = {c}, γ = {gamma}: work out "
                "E[tokens] = 1 + α + … + α^γ and the cost of a round, γc + 1, then divide")


@grader("03.2")
def break_even_curve(fn) -> None:
    """break_even_c(alpha, gamma) = (E(α, γ) − 1) / γ, checked against theory.break_even_cost."""
    for gamma in (1, 2, 4, 7):
        for alpha in (0.0, 0.1, 0.37, 0.5, 0.9, 1.0):
            got = number(call(fn, alpha, gamma), f"break_even_c({alpha}, {gamma})")
            right = float(theory.break_even_cost(alpha, gamma))
            if abs(got - right) > 1e-9:
                if alpha == 0.0:
                    raise Wrong(f"at α = 0 no guess survives: a round yields 1 token, exactly what plain decoding "
                                f"yields, so only a free draft breaks even; your c*(0) at γ = {gamma} is {got:.4f}")
                if alpha == 1.0:
                    raise Wrong(f"at α = 1 a round yields γ + 1 tokens: where does that break even with γc + 1? "
                                f"Your c*(1) at γ = {gamma} is {got:.4f}")
                raise Wrong(f"at α = {alpha}, γ = {gamma} your c* is {got:.4f}; at the break-even cost the round's "
                            "yield E[tokens] equals its cost γc + 1")


@grader("03.3")
def adaptive_gamma_prediction(answer) -> None:
    """The γ that maximises the speedup at α = 0.4, c = 0.2 (what AdaptiveGamma should settle on)."""
    alpha, c = 0.4, 0.2
    value = number(answer, "γ")
    if value != int(value):
        raise Wrong("γ is a whole number of guesses")
    right = theory.optimal_gamma(alpha, c)[0]
    if int(value) == right:
        return
    if int(value) == 8:
        raise Wrong("8 is only the ceiling the loop allows; the drafter picks the γ that maximises "
                    "E(α, γ) / (γc + 1), and at α = 0.4 deep guesses are rarely reached")
    if int(value) > right:
        raise Wrong(f"at γ = {int(value)} the last guess adds 0.4^{int(value)} tokens for a cost of c = {c}: "
                    "compare the speedup of neighbouring γ")
    raise Wrong(f"γ = {int(value)} is not the best: compute E(0.4, γ) / ({c}γ + 1) for γ = 0, 1, 2, 3 "
                "(γ = 0 is plain decoding, speedup 1)")


# ---------------------------------------------------------------------------- concept check


def _better_change() -> str:
    """c2, at γ = 4, α = 0.7: raising α to 0.8 (a) or drafting γ = 8 (b), whichever yields more."""
    return "a" if theory.expected_tokens(0.8, 4) > theory.expected_tokens(0.7, 8) else "b"


def _not_break_even(alpha: float) -> str:
    """c4's hint for a wrong α: the speedup there, which is not 1."""
    if not 0 <= alpha <= 1:
        return f"α is a probability, between 0 and 1; got {alpha:g}"
    return (f"at α = {alpha:.3f} the speedup is {theory.speedup(alpha, 4, 0.05):.3f}, not 1: solve "
            "E(α, 4) = 4c + 1, numerically if you like")


register({
    # The limit of E[tokens] as γ grows, at α = 0.8.
    "03.c1": near(float(theory.expected_tokens_limit(0.8)), "the limit", tol=0.01,
                  traps=lambda right: {right - 1: "that counts the accepted guesses only: every round also emits "
                                                  "one corrected or bonus token"},
                  hint="E[tokens] = 1 + α + α² + …: the sum of an endless geometric series"),
    # At γ = 4, α = 0.7: raise α to 0.8 (a) or draft γ = 8 (b)?
    "03.c2": pick(_better_change, **dict.fromkeys("ab", "compare E[tokens] for both changes: (1 − α^(γ+1)) / (1 − α), "
                                                        "or the table at the top of the lesson's yield section")),
    # Why the k-th guess adds α^k to E[tokens].
    "03.c3": pick("b", a="a checked guess survives with probability α whatever its depth; the question is how "
                         "often the k-th guess is checked at all",
                  c="the formula assumes the same α at every depth (lesson 3's toy pairs are built that way); the "
                    "power comes from something else"),
    # The acceptance rate at which γ = 4 with c = 0.05 breaks even.
    "03.c4": near(theory.break_even_alpha(4, 0.05), "α", tol=0.005, traps={
        0.05: "α = c is the chord, a straight line; the break-even curve (α + α² + α³ + α⁴)/4 = c is not straight",
    }, hint=_not_break_even),
    # A drafter that makes decoding slower: what happens to the text?
    "03.c5": pick("a", b="lesson 2 proved the output law is the target's whatever the draft q: a poor draft is "
                         "rejected more often, and the rejections are what make it exact",
                  c="α and c decide the speed only; losslessness holds for every α, which is why only a "
                    "measurement of α or of the time shows the loss"),
})
