"""What the data of a failed case point to: signatures of verifier bugs that shipped in serving engines.

Shape legend: K draft length, V vocab, n calls in one case.

A failed law test says *that* an emitted law is wrong; a signature says *which* mistake made it,
by testing the case's data against the law that mistake gives, or against a property no correct
verifier breaks.  Signatures only choose the hint of a case's failed checks (the first one that
holds, in the order below, replaces them all, as the float32 hint does); none changes a verdict.
An alternative law "fits" when its test gives p above ``FIT``, and counts only when the data
could tell it from the correct law (expected chi-square distance at the observed counts, the
noncentrality, at least ``SEPARATION``).

Chain verifiers, :func:`chain_hint` (drafts x ~ q):

1. *looks ahead* / *looks back*: whether draft j is kept depends on the drafts after it (or
   before it), given x_j: a stratified trend test against the standard acceptance of those
   drafts, p below ``ALARM``.  A token-wise verifier with a fresh uniform per position never
   does: the other drafts are drawn apart from everything it uses at j.
2. *a rejected draft came back*: a block stops at j < K - 1 with the draft x_j as its last
   token.  Impossible for a correct verifier: it rejects x_j only where p_j(x_j) < q_j(x_j),
   and the residual max(0, p_j - q_j) is 0 there.  When the keep rates are min(1, p/q) and the
   other corrected tokens follow the residual, the count and the tokens came from two draws.
3. *same token or ratio*: the keep rates fit 1 - (1 - p(x))(1 - min(1, p/q)), "the target's own
   sample equals the draft, or u q(x) < p(x)".
4. *residual at the draft only*: keep rates min(1, p/q), and the token after a rejection fits
   p with the rejected draft removed, i.e. max(0, p - q(x) e_x).
5. *another q*: keep rates that are not min(1, p/q) but are min(1, p/q') for a q' with
   q'(x) <= 1 and sum q' <= 1: a valid test against the wrong distribution.

Token rules, :func:`token_hint`: the emitted token does not depend on the draft although the
correct law does (independence not rejected); then signature 4.
"""
from __future__ import annotations

import numpy as np
from scipy import stats as _sps

from ..laws import conditional_emission_law
from ..stats import chisquare_gof

FIT = 1e-4  # an alternative law fits when its test gives p above this
SEPARATION = 60.0  # ... and the data could tell it from the correct law (expected chi-square distance)
ALARM = 1e-6  # dependence on the other drafts is declared below this p-value

HINT_LOOKS_AHEAD = (
    "Whether draft j is kept depends on the drafts after it: this verifier judges the block as a whole. Token-wise "
    "verification keeps x_j with probability min(1, p_j(x_j)/q_j(x_j)) whatever follows. Block verification (Sun et "
    "al. 2025, specbook.verify_block) may look ahead, but it is lossless only with its own coins h_i = Z_i/(Z_i + 1 - "
    "w_i) and its block residual max(0, w_i p_i - q_i); comparing a running product of clamped ratios with a running "
    "product of uniforms, then sampling the token-wise residual, is not (vllm-ascend #7807; #7839 for n-gram drafts).")
HINT_LOOKS_BACK = (
    "Whether draft j is kept depends on the drafts before it: the positions share their randomness (one uniform for "
    "the whole block, or a running product of ratios). Draw a fresh uniform for each position and keep x_j with "
    "probability min(1, p_j(x_j)/q_j(x_j)) alone.")
HINT_CAME_BACK = (
    "{count} blocks stopped at a position j < K - 1 and ended with the draft x_j itself, which the verifier had just "
    "rejected. A correct verifier never does that: it rejects x_j only where p_j(x_j) < q_j(x_j), and there the "
    "residual max(0, p_j - q_j) is 0. So either drafts are rejected that should always be kept, or the token after a "
    "rejection is not drawn from that residual, or the count of accepted drafts and the emitted tokens come from two "
    "different random draws (vLLM #17498).")
HINT_TWO_DRAWS = (
    "{count} blocks stopped at a position j and ended with the draft x_j itself, which the verifier had just "
    "rejected; otherwise every draft is kept with probability min(1, p/q) and the tokens after a rejection follow the "
    "residual. The count of accepted drafts and the emitted tokens come from two different random draws: vLLM "
    "#17498, where tensor-parallel ranks each drew their own uniforms and one rank's count was combined with another "
    "rank's tokens. Draw the decisions of one step once, from one generator, and take every token from that draw.")
HINT_SAME_TOKEN = (
    "Drafts are kept as often as 'the target's own sample equals the draft, OR u * q(x) < p(x)': probability "
    "1 - (1 - p(x))(1 - min(1, p(x)/q(x))), more than min(1, p(x)/q(x)). An exact-match shortcut next to the "
    "rejection test counts a draft twice (rtp-llm PR #1295). With sampling on, use the ratio test alone; after a "
    "rejection the target's own sample is no fresh draw either (it was conditioned on differing from the draft): "
    "sample the residual max(0, p - q).")
HINT_DRAFT_ONLY = (
    "Drafts are kept with probability min(1, p/q), but after a rejection the emitted tokens follow p with the rejected "
    "draft removed: the residual subtracts the draft's probability at the drafted token only, max(0, p - q(x) e_x), "
    "as if q were 0 elsewhere (xLLM PR #2175). Subtract the whole draft distribution, max(0, p - q), then normalise.")
HINT_OTHER_Q = (
    "The keep rates fit min(1, p/q') for a distribution q' that is not draft_probs ({example}): the acceptance test "
    "divides by the wrong q. q must be the law the drafts were drawn from, after the same temperature, top-k and "
    "top-p (transformers #47932: drafts sampled from processed logits, q from the raw ones; #32867: a greedy "
    "assistant's softmax passed as q), and the same q goes into the residual.")
HINT_IGNORES_DRAFT = (
    "The emitted token does not depend on draft_token: its law is the same whichever draft the rule is given. If the "
    "emitted tokens do not follow p either, the rule decides as if it had proposed its own draft (argmax(draft_probs) "
    "in transformers #32867, where the assistant decoded greedily while its softmax was used as q). Keep the draft you "
    "are given with probability min(1, p(x)/q(x)), else sample the residual max(0, p - q).")


# --------------------------------------------------------------------------- small tests

def _distance(n: float, law: np.ndarray, other: np.ndarray) -> float:
    """n * sum (law - other)^2 / law: the noncentrality of testing data from ``other`` against ``law``."""
    if np.any((law == 0) & (other > 0)):
        return float("inf")
    keep = law > 0
    return float(n * np.sum((law[keep] - other[keep]) ** 2 / law[keep]))


def _binom(k: int, n: int, rate: float) -> float:
    """Two-sided exact binomial p-value of k keeps in n against ``rate`` (0 or 1: any contrary count gives 0)."""
    if rate <= 0 or rate >= 1:
        return float(k == round(n * rate))
    return float(_sps.binomtest(k, n, rate).pvalue)


def _rates_fit(tried: list[dict], kept: list[dict], rate, level: float = FIT) -> bool:
    """Do the keep counts fit ``rate(j, x)`` (exact binomial tests, Bonferroni over every (j, x), at ``level``)?"""
    pvals = [_binom(kept[j][x], n, rate(j, x)) for j in range(len(tried)) for x, n in tried[j].items()]
    return bool(pvals) and min(1.0, len(pvals) * min(pvals)) > level


def _without(p_row: np.ndarray, token: int) -> np.ndarray:
    rest = p_row.copy()
    rest[token] = 0
    return rest / rest.sum() if rest.sum() > 0 else p_row


def _residual_fits(p_rows, residuals, stopped, alternative: bool) -> bool:
    """The tokens after rejections, ``stopped[j] = (rejected drafts, tokens)``, against the residual
    (``alternative=False``) or against p_j without the rejected draft, when the data could tell that law
    both from the residual and from p_j itself (summed over positions)."""
    stat, dof, from_residual, from_p = 0.0, 0, 0.0, 0.0
    for j, (x, z) in enumerate(stopped):
        if residuals[j] is None or x.size == 0:
            continue
        V, n = p_rows[j].size, float(x.size)
        law = residuals[j] * n
        if alternative:
            law = sum(np.count_nonzero(x == v) * _without(p_rows[j], v) for v in np.unique(x))  # (V,) expected
            from_residual += _distance(n, law / n, residuals[j])
            from_p += _distance(n, law / n, p_rows[j])
        res = chisquare_gof(np.bincount(z, minlength=V), law / law.sum(), min_expected=10.0)
        if res.impossible:
            return False
        stat, dof = stat + res.statistic, dof + res.dof
    separated = not alternative or min(from_residual, from_p) >= SEPARATION
    return separated and (dof == 0 or float(_sps.chi2.sf(stat, dof)) > FIT)


def _depends_on_others(drafts: np.ndarray, m: np.ndarray, accept: np.ndarray, later: bool) -> bool:
    """Signature 1: a stratified trend test (Mantel 1963) of "draft j kept" against the product of the standard
    acceptance probabilities of the drafts after j (``later``) or before it, within each (j, x_j); two-sided."""
    K = drafts.shape[1]
    score = variance = 0.0
    for j in range(K - 1) if later else range(1, K):
        reached = m >= j
        kept, xj = (m[reached] > j).astype(float), drafts[reached, j]
        others = range(j + 1, K) if later else range(j)
        feature = np.prod([accept[i, drafts[reached, i]] for i in others], axis=0)  # (reached,)
        for v in np.unique(xj):
            k, r = kept[xj == v], feature[xj == v]
            if k.size > 1:
                score += float(((k - k.mean()) * (r - r.mean())).sum())
                variance += float(k.var() * r.var()) * k.size ** 2 / (k.size - 1)  # its permutation variance
    return variance > 0 and float(_sps.chi2.sf(score ** 2 / variance, 1)) < ALARM


def came_back(drafts: np.ndarray, blocks: np.ndarray, lengths: np.ndarray) -> int:
    """Signature 2: blocks that stop at j < K - 1 with the draft x_j as their last token (at K - 1 a block of K
    drafts is also what a verifier without the bonus token returns)."""
    m = lengths - 1
    stop = np.flatnonzero(m < drafts.shape[1] - 1)
    return int(np.count_nonzero(blocks[stop, m[stop]] == drafts[stop, m[stop]]))


# --------------------------------------------------------------------------- the hints

def _keeps(drafts: np.ndarray, m: np.ndarray, V: int) -> tuple[list[dict], list[dict]]:
    """Per position j: {x: times x_j = x was reached} and {x: times it was kept}."""
    tried, kept = [], []
    for j in range(drafts.shape[1]):
        xs, n_x = np.unique(drafts[m >= j, j], return_counts=True)
        tried.append(dict(zip(xs.tolist(), n_x.tolist())))
        kept.append(dict(zip(xs.tolist(), np.bincount(drafts[m > j, j], minlength=V)[xs].tolist())))
    return tried, kept


def came_back_hint(p, drafts, blocks, lengths, accept, residuals, count: int) -> str:
    """HINT_TWO_DRAWS when the keep rates and the other corrected tokens are right, else HINT_CAME_BACK."""
    m = lengths - 1
    tried, kept = _keeps(drafts, m, p.shape[1])
    rest = [(m == j) & (blocks[:, j] != np.pad(drafts, ((0, 0), (0, 1)))[:, j]) for j in range(drafts.shape[1])]
    if _rates_fit(tried, kept, lambda j, x: accept[j, x]) and _residual_fits(
            p, residuals, [(drafts[r, j], blocks[r, j]) for j, r in enumerate(rest)], alternative=False):
        return HINT_TWO_DRAWS.format(count=count)
    return HINT_CAME_BACK.format(count=count)


def chain_hint(p: np.ndarray, q: np.ndarray, drafts: np.ndarray, blocks: np.ndarray, lengths: np.ndarray,
               accept: np.ndarray, residuals: list) -> str | None:
    """The hint for a failed verifier case whose drafts were x ~ q: p (K+1, V), q (K, V), drafts (n, K),
    blocks (n, K+1), lengths (n,), accept (K, V) min(1, p/q), residuals (K entries, (V,) or None)."""
    K, V = q.shape
    m = lengths - 1  # (n,) accepted drafts per call
    if _depends_on_others(drafts, m, accept, later=True):
        return HINT_LOOKS_AHEAD
    if _depends_on_others(drafts, m, accept, later=False):
        return HINT_LOOKS_BACK
    count = came_back(drafts, blocks, lengths)
    if count:
        return came_back_hint(p, drafts, blocks, lengths, accept, residuals, count)
    tried, kept = _keeps(drafts, m, V)
    either = lambda j, x: 1 - (1 - p[j, x]) * (1 - accept[j, x])  # noqa: E731 - same token, or the ratio test
    gap = sum(n * (either(j, x) - accept[j, x]) ** 2 / (accept[j, x] * (1 - accept[j, x]))
              for j in range(K) for x, n in tried[j].items() if 0 < accept[j, x] < 1)
    if gap >= SEPARATION and _rates_fit(tried, kept, either):
        return HINT_SAME_TOKEN
    stopped = [(drafts[m == j, j], blocks[m == j, j]) for j in range(K)]
    if _rates_fit(tried, kept, lambda j, x: accept[j, x]) and _residual_fits(p, residuals, stopped, True):
        return HINT_DRAFT_ONLY
    return _other_q(p, q, tried, kept, accept)


def _other_q(p: np.ndarray, q: np.ndarray, tried: list[dict], kept: list[dict], accept: np.ndarray) -> str | None:
    """Signature 5: keep rates that are not min(1, p/q) but are those of a valid q' (q'(x) <= 1, sum <= 1)."""
    if _rates_fit(tried, kept, lambda j, x: accept[j, x], level=1e-4):
        return None  # the rates could be those of draft_probs itself
    worst = None
    for j in range(len(tried)):
        total = 0.0
        for x, n in tried[j].items():
            k = kept[j][x]
            if p[j, x] == 0:
                if k:
                    return None  # a token of p = 0 kept: no test of the form u q'(x) < p(x) does that
                continue
            if _sps.binomtest(k, n, p[j, x], alternative="less").pvalue < FIT:
                return None  # kept less often than p(x): no q'(x) <= 1 gives that rate
            if k < n:
                implied = min(1.0, p[j, x] * n / k) if k else 1.0
                total += implied
                if worst is None or abs(implied - q[j, x]) > abs(worst[2] - worst[3]):
                    worst = (j, x, implied, q[j, x])
        if total > 1.05 or worst is None:
            return None
    j, x, implied, given = worst
    return HINT_OTHER_Q.format(example=f"draft {x} at position {j} is kept as if q'({x}) = {implied:.3g}, "
                                       f"while draft_probs[{j}, {x}] = {given:.3g}")


def token_hint(p: np.ndarray, q: np.ndarray, drafts: np.ndarray, out: np.ndarray,
               residual: np.ndarray | None) -> str | None:
    """The hint for a failed token-rule case whose drafts were x ~ q: p, q (V,), drafts, out (n,),
    residual (V,) the normalised max(0, p - q) or None when p == q."""
    V = p.size
    xs, n_x = np.unique(drafts, return_counts=True)
    laws = np.stack([np.asarray(conditional_emission_law(p.tolist(), q.tolist(), int(x)), dtype=float)
                     for x in xs])  # (drafts, V) the correct law given each draft
    if xs.size >= 2:
        table = np.zeros((xs.size, V))
        np.add.at(table, (np.searchsorted(xs, drafts), out), 1)
        table = table[:, table.sum(0) > 0]
        independent = True
        if table.shape[1] > 1:
            expected = np.outer(table.sum(1), table.sum(0)) / table.sum()
            stat = float(((table - expected) ** 2 / expected).sum())
            independent = float(_sps.chi2.sf(stat, (table.shape[0] - 1) * (table.shape[1] - 1))) > FIT
        mixture = (n_x[:, None] * laws).sum(0) / n_x.sum()  # (V,)
        if independent and sum(_distance(n, mixture, law) for n, law in zip(n_x, laws)) >= SEPARATION:
            return HINT_IGNORES_DRAFT
    tried = [dict(zip(xs.tolist(), n_x.tolist()))]
    kept = [{x: int(np.count_nonzero(out[drafts == x] == x)) for x in xs.tolist()}]
    rate = {x: laws[i, x] for i, x in enumerate(xs.tolist())}
    rejected = out != drafts
    if residual is not None and _rates_fit(tried, kept, lambda j, x: rate[x]) and _residual_fits(
            p[None], [residual], [(drafts[rejected], out[rejected])], alternative=True):
        return HINT_DRAFT_ONLY
    return None
