"""Exact laws of one verification step, token-wise or block, on small models whose next-token law
depends on the context.

Shape legend: K draft length, V vocab.

A *model* here is a function ``prefix -> V probabilities``: the law of the next token after the
tokens emitted so far in this step (a tuple).  Rows of a fixed (K+1, V) table are the
context-free case (:func:`table`).  With ``fractions.Fraction`` probabilities every law below is
exact, so "block verification is lossless" and "it keeps at least as many drafts as token-wise
verification" are checked to the last bit (Sun et al., ICLR 2025, Theorems 1 and 2):

* :func:`step_law`: the law of the emitted block, drafts x_j ~ q(x_{<j}) drawn one by one,
  then verified by ``rule`` ("token": :mod:`specbook.verify`; "block": :mod:`specbook.verify_block`);
* :func:`completed_law`: that block completed to K+1 tokens by sampling the target itself;
  lossless means it equals :func:`target_law`, the target's own law of K+1 tokens;
* :func:`expected_kept`: the expected number of drafts kept per step.
"""
from __future__ import annotations

from itertools import product
from typing import Callable, Sequence

from .laws import Number, block_law, residual_list

Model = Callable[[tuple], Sequence[Number]]


def table(rows: Sequence[Sequence[Number]]) -> Model:
    """The context-free model whose law at position j is ``rows[j]`` (a (K+1, V) or (K, V) table)."""
    rows = [list(r) for r in rows]
    return lambda prefix: rows[len(prefix)]


def block_weights(p_rows, q_rows, x) -> list:
    """w_0..w_K of :mod:`specbook.verify_block`, q(x) = 0 read as "1 if w p(x) > 0 else 0"."""
    w = [p_rows[0][0] * 0 + 1]
    for i, token in enumerate(x):
        paid = w[-1] * p_rows[i][token]
        w.append(min(paid / q_rows[i][token], 1) if q_rows[i][token] > 0 else (1 if paid > 0 else 0) + 0 * paid)
    return w


def block_coins(p_rows, q_rows, w) -> list:
    """h_1..h_K: h_i = Z_i / (Z_i + 1 - w_i) for i < K (1 when that is 0/0), h_K = w_K."""
    K = len(q_rows)
    h = []
    for i in range(1, K):
        Z = sum(max(w[i] * pz - qz, 0 * pz) for pz, qz in zip(p_rows[i], q_rows[i]))
        h.append(Z / (Z + 1 - w[i]) if Z + 1 - w[i] > 0 else 1 + 0 * Z)
    return h + [w[K]] if K else []


def block_rule_law(p_rows, q_rows, x) -> dict[tuple, Number]:
    """Law of the block that block verification emits given the drafts x (p_rows: K+1 rows, q_rows: K)."""
    K = len(x)
    w = block_weights(p_rows, q_rows, x)
    h = block_coins(p_rows, q_rows, w)
    law: dict[tuple, Number] = {}
    for tau in range(K + 1):  # the longest prefix whose coin came up: coin tau heads, every later one tails
        chance = h[tau - 1] if tau else 1
        for later in h[tau:]:
            chance = chance * (1 - later)
        if chance == 0:
            continue
        q_tau = q_rows[tau] if tau < K else [0 * v for v in p_rows[K]]
        scaled = [w[tau] * pz for pz in p_rows[tau]]
        tail = residual_list(scaled, q_tau)
        if sum(tail) == 0:
            raise ArithmeticError(f"prefix {tau} is kept with probability {chance} but its residual has no mass")
        for z, rz in enumerate(tail):
            if rz > 0:
                block = tuple(x[:tau]) + (z,)
                law[block] = law.get(block, 0 * rz) + chance * rz / sum(tail)
    return law


def rows_along(model: Model, x: Sequence[int], n: int) -> list:
    """The model's laws after each prefix x_{<j}, j = 0..n-1."""
    return [list(model(tuple(x[:j]))) for j in range(n)]


def step_law(target: Model, draft: Model | None, K: int, rule: str = "block",
             drafts: Sequence[int] | None = None) -> dict[tuple, Number]:
    """Law of one step's emitted block: drafts x_j ~ draft(x_{<j}) (or the fixed ``drafts``, with
    ``draft=None`` meaning one-hot q on them), verified by ``rule`` ("token" or "block")."""
    if rule not in ("token", "block"):
        raise ValueError(f"rule must be 'token' or 'block', got {rule!r}")
    V = len(target(()))
    if drafts is not None:
        choices = [(tuple(drafts), 1)]
    else:
        choices = []
        for x in product(range(V), repeat=K):
            chance = 1
            for j, token in enumerate(x):
                chance = chance * draft(x[:j])[token]
            if chance != 0:
                choices.append((x, chance))
    law: dict[tuple, Number] = {}
    for x, chance in choices:
        p_rows = rows_along(target, x, K + 1)
        if draft is None:
            q_rows = [[int(v == token) for v in range(V)] for token in x]
        else:
            q_rows = rows_along(draft, x, K)
        given = block_rule_law(p_rows, q_rows, x) if rule == "block" else block_law(p_rows, q_rows, list(x))
        for block, pr in given.items():
            law[block] = law.get(block, 0 * pr) + chance * pr
    return law


def target_law(target: Model, K: int) -> dict[tuple, Number]:
    """The target's own law of K+1 tokens, sampled one at a time."""
    law = {(): 1}
    for _ in range(K + 1):
        law = {s + (z,): pr * pz for s, pr in law.items() for z, pz in enumerate(target(s)) if pz != 0}
    return law


def completed_law(law: dict[tuple, Number], target: Model, K: int) -> dict[tuple, Number]:
    """Each emitted block continued to K+1 tokens by the target itself: equals ``target_law`` iff lossless."""
    done: dict[tuple, Number] = {}
    for block, pr in law.items():
        partial = {block: pr}
        for _ in range(K + 1 - len(block)):
            partial = {s + (z,): c * pz for s, c in partial.items() for z, pz in enumerate(target(s)) if pz != 0}
        for s, c in partial.items():
            done[s] = done.get(s, 0 * c) + c
    return done


def expected_kept(law: dict[tuple, Number]) -> Number:
    """Expected drafts kept per step (emitted tokens minus the one residual or bonus token)."""
    return sum(pr * (len(block) - 1) for block, pr in law.items())
