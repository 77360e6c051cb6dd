"""Graders of lesson 2 (the rule and its proof): exercises ``02.1``-``02.3``, concept checks ``02.c1``-``02.c5``.

What is right is computed exactly with :mod:`specbook.laws` and :mod:`specbook.naive` (fractions),
and, for the sampling-parameter trap, with the exact laws of :mod:`specbook.teach.rules`.
"""
from __future__ import annotations

from fractions import Fraction as F

from specbook import laws, naive

from . import Wrong, grader, register
from ._answers import call, near, number, pick, whole

# Pairs, besides the lesson's worked example, on which a reader's law is compared with the library's.
_MORE_PAIRS = (
    ([F(1, 2), F(1, 2)], [F(1), F(0)]),
    ([F(1, 10), F(3, 10), F(6, 10)], [F(1, 2), F(3, 10), F(1, 5)]),
    ([F(1, 3), F(1, 3), F(1, 3)], [F(1, 3), F(1, 3), F(1, 3)]),
    ([F(0), F(1, 4), F(3, 4)], [F(1, 2), F(1, 2), F(0)]),
)


def _as_law(value, size: int, what: str) -> list[float]:
    try:
        out = [float(v) for v in value]
    except TypeError:
        raise Wrong(f"{what} should be a list of {size} probabilities, got {type(value).__name__}") from None
    if len(out) != size:
        raise Wrong(f"{what} should have one probability per token ({size}), got {len(out)}")
    return out


@grader("02.1")
def token_the_draft_never_proposes(prob, route, p_ex, q_ex) -> None:
    """Token 3 of the worked example (q = 0, p = 1/4): P(emit it), and by which route."""
    z = 3
    value = number(prob, "the probability")
    right = laws.emission_law(p_ex, q_ex)[z]
    kept = min(p_ex[z], q_ex[z])  # emitted as an accepted guess
    refilled = max(F(0), p_ex[z] - q_ex[z])  # emitted by the residual after a rejection
    routes = {"a": kept > 0 and refilled == 0, "b": kept == 0 and refilled > 0, "c": kept > 0 and refilled > 0,
              "d": kept == 0 and refilled == 0}
    if abs(value - float(right)) > 1e-12:
        if value == 0:
            raise Wrong("it is never guessed, but a guess is not the only way a token comes out of a round")
        reject = 1 - sum(min(a, b) for a, b in zip(p_ex, q_ex))
        if abs(value - float(refilled / reject)) < 1e-12:
            raise Wrong("that is the residual's chance of token 3 once a rejection has happened; how often does "
                        "a rejection happen?")
        raise Wrong(f"{value:.4f} is not it: add what accepted guesses emit and what the residual emits after a "
                    "rejection (step 3 of the proof)")
    wrong_route = "the probability is right; now the route: compare min(p, q) and max(0, p − q) at token 3"
    pick({k for k, ok in routes.items() if ok}, **dict.fromkeys(routes, wrong_route))(route)


@grader("02.2")
def right_test_wrong_refill(fn, over_produced, p_ex, q_ex) -> None:
    """``fn(p, q)``: the law of "min(1, p/q), refill from p", on the worked example and other pairs."""
    for p, q in ((p_ex, q_ex), *_MORE_PAIRS):
        got = _as_law(call(fn, p, q), len(p), "the law")
        right = [float(v) for v in naive.resample_from_p_law(p, q)]
        if max(abs(a - b) for a, b in zip(got, right)) > 1e-12:
            if max(abs(a - float(b)) for a, b in zip(got, p)) < 1e-12:
                raise Wrong(f"on p = {[str(v) for v in p]}, q = {[str(v) for v in q]} your law is p itself, the "
                            "correct rule's law; this rule refills from p, not from the residual")
            if abs(sum(got) - 1) > 1e-9:
                raise Wrong(f"your law sums to {sum(got):.4f} on p = {[str(v) for v in p]}, q = "
                            f"{[str(v) for v in q]}: the accepted guesses and the refill together emit one token")
            raise Wrong(f"on p = {[str(v) for v in p]}, q = {[str(v) for v in q]} your law is "
                        f"{[round(v, 4) for v in got]}: follow the proof's steps with the refill drawing from p")
    law = naive.resample_from_p_law(p_ex, q_ex)
    right = sorted(z for z in range(len(p_ex)) if law[z] > p_ex[z])
    try:
        picked = sorted(whole(z, "a token index") for z in over_produced)
    except TypeError:
        raise Wrong("the over-produced tokens should be a list of token indices, such as [0, 4]") from None
    if picked != right:
        raise Wrong("your law is right; the over-produced tokens are those where it exceeds p: compare it with p "
                    "token by token (indices count from 0)")


@grader("02.3")
def alpha_from_the_picture(answer, p, q) -> None:
    """α = Σ min(p, q) of the lesson's pair, read off the picture of the proof."""
    import torch

    value = number(answer, "α")
    p, q = torch.as_tensor(p, dtype=torch.float64), torch.as_tensor(q, dtype=torch.float64)
    right = float(torch.minimum(p, q).sum())
    if abs(value - right) <= 0.006:
        return
    if abs(value - (1 - right)) <= 0.006:
        raise Wrong("that is the rejected (hatched) mass, Σ max(0, q − p)")
    if abs(value - float((p * q).sum())) <= 0.006:
        raise Wrong("Σ p(x) q(x) is how often 'accept if the target's own draw agrees' keeps a guess")
    raise Wrong("α is the green area, min(p, q) summed over the tokens: the figure's title prints it")


# ---------------------------------------------------------------------------- concept check

_C_P = [F(1, 5), F(1, 2), F(3, 10)]  # the pair of c2 and c3: p = (0.2, 0.5, 0.3), q = (0.5, 0.25, 0.25)
_C_Q = [F(1, 2), F(1, 4), F(1, 4)]


def _invisible_temperatures() -> set[str]:
    """c5: the options at which the bug "temperature on the target only" leaves the law unchanged
    ("d", none of them, when there is no such temperature)."""
    from specbook.teach import rules

    bug = rules.rule(rules.TARGET_ONLY)
    invisible = set()
    for letter, t in {"a": 0.6, "b": 1.0, "c": 1.5}.items():
        setup = rules.position_setup(match=0.3, temperature=t, seed=2)
        if float((bug.law(setup) - setup.target_probs).abs().max()) < 1e-12:
            invisible.add(letter)
    return invisible or {"d"}


register({
    "02.c1": pick("b", a="sampling from p costs the same as sampling from any other distribution; the reason is "
                         "about which token comes out",
                  c="it is true that the residual never returns the guess just rejected, but that follows from "
                    "something more basic: what have the accepted guesses already emitted?"),
    # The chance that a guess drawn from q is kept.
    "02.c2": near(float(sum(q * laws.accept_prob(p, q) for p, q in zip(_C_P, _C_Q))), "the probability",
                  tol=1e-9, traps={
        float(sum(p * q for p, q in zip(_C_P, _C_Q))): "Σ p(x) q(x) is the keep rate of 'accept if the target's own "
                                                        "draw agrees', not of min(1, p/q)",
    }, hint="add, over the tokens x, q(x) (the guess is x) times min(1, p(x)/q(x)) (it is kept)"),
    # The chance that the token with p = 0.5 is emitted.
    "02.c3": near(float(laws.emission_law(_C_P, _C_Q)[1]), "the probability", tol=1e-9, traps={
        float(min(_C_P[1], _C_Q[1])): "that is what accepted guesses emit of it; a rejection of another guess can "
                                      "still refill it",
    }, hint="the proof of this lesson answers this one without any arithmetic"),
    "02.c4": pick("b", a="block verification is lossless: its completed law equals the target's exactly (the "
                         "lesson checks it in fractions)",
                  c="with one-hot guesses the weight can only fall, so block and token-wise verification keep the "
                    "same: the lesson's last block-verification cell shows it"),
    # The bug "temperature on the target only": at which of 0.6, 1.0, 1.5 is it invisible?
    "02.c5": pick(_invisible_temperatures, **dict.fromkeys("abcd", (
        "at which temperature is the processed draft distribution the same as the unprocessed one? There the "
        "verifier's q is the q the guess came from"))),
})
