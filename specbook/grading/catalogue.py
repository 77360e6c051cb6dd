"""Implementations the checker is judged by: correct ones that must pass, broken ones that must fail.

Three kinds: CORRECT_* (the modified rejection sampler: lossless and standard),
LOSSLESS_* (lossless but not the standard algorithm: lossless=True, standard=False)
and BROKEN_* (lossy: lossless=False, and so standard=False).

Shape legend: K draft length, V vocab.

The correct implementations use randomness in different ways (inverse CDF,
``torch.multinomial``, Gumbel-max, an unnormalised residual, uniforms drawn up
front), so passing cannot depend on reproducing the reference's exact draws.
The broken ones are bugs students and real implementations make; each must fail
with probability >= 0.99 (see ``python -m specbook.grading --detection-table``).
They are written the way a student would write them, one position at a time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..naive import accept_if_target_prefers, accept_p_then_p, resample_from_p
from ..verify import verify_chain, verify_token


@dataclass(frozen=True)
class Entry:
    """name, one-line description, the function, and (for bugs) words of the check names that should fail."""

    name: str
    description: str
    fn: Callable
    expect: tuple[str, ...] = ()


def _u(g, like: torch.Tensor) -> torch.Tensor:
    return torch.rand((), generator=g, dtype=like.dtype)


def _res(p, q):
    return (p - q).clamp(min=0)


# =========================================================================== token rules: correct

def rule_inverse_cdf(p, q, x, g):
    if _u(g, p) * q[x] < p[x]:
        return x
    r = _res(p, q)
    cdf = r.cumsum(0)
    z = int(torch.searchsorted(cdf, _u(g, p) * cdf[-1], right=True))
    return min(z, len(p) - 1)


def rule_multinomial(p, q, x, g):
    if _u(g, p) < p[x] / q[x]:
        return x
    r = _res(p, q)
    return int(torch.multinomial(r / r.sum(), 1, generator=g))


def rule_gumbel(p, q, x, g):
    if 1 - _u(g, p) <= p[x] / q[x]:  # 1 - u is uniform on (0, 1]; "<=" keeps p(x) = 0 rejected
        return x
    gumbel = -torch.log(-torch.log(torch.rand(p.shape, generator=g, dtype=torch.float64)))
    return int(torch.argmax(torch.log(_res(p, q).double()) + gumbel))


def rule_unnormalised(p, q, x, g):
    u = torch.rand(1, generator=g, dtype=torch.float64)
    if u.item() < min(1.0, (p[x] / q[x]).item()):
        return x
    return torch.multinomial(_res(p, q), 1, generator=g)  # a one-element tensor; multinomial normalises


CORRECT_TOKEN_RULES = (
    Entry("reference (specbook.verify.verify_token)", "the library's rule", verify_token),
    Entry("inverse CDF", "u * q(x) < p(x); residual by searchsorted on its CDF", rule_inverse_cdf),
    Entry("multinomial", "u < p(x)/q(x); normalised residual to torch.multinomial", rule_multinomial),
    Entry("Gumbel-max", "1 - u <= p/q; residual by argmax(log r + Gumbel noise)", rule_gumbel),
    Entry("unnormalised residual", "unnormalised max(0, p - q) to torch.multinomial; returns a tensor",
          rule_unnormalised),
)


# =========================================================================== token rules: broken

def bug_ratio_swapped(p, q, x, g):
    if _u(g, p) < q[x] / p[x]:
        return x
    r = _res(p, q)
    return int(torch.multinomial(r, 1, generator=g))


def bug_residual_swapped(p, q, x, g):
    if _u(g, p) * q[x] < p[x]:
        return x
    return int(torch.multinomial(_res(q, p), 1, generator=g))


def bug_residual_abs(p, q, x, g):
    if _u(g, p) * q[x] < p[x]:
        return x
    return int(torch.multinomial((p - q).abs(), 1, generator=g))


def bug_exclude_draft(p, q, x, g):
    if _u(g, p) * q[x] < p[x]:
        return x
    r = p.clone()
    r[x] = 0  # "anything but the rejected token"
    return int(torch.multinomial(r, 1, generator=g))


def bug_reuse_uniform(p, q, x, g):
    u = _u(g, p)
    if u * q[x] < p[x]:
        return x
    cdf = _res(p, q).cumsum(0)
    return min(int(torch.searchsorted(cdf, u * cdf[-1], right=True)), len(p) - 1)  # the same u again


def bug_resample_q(p, q, x, g):
    if _u(g, p) * q[x] < p[x]:
        return x
    return int(torch.multinomial(q, 1, generator=g))  # "draft again"


def bug_always_accept(p, q, x, g):
    return x


def rule_ignore_draft(p, q, x, g):
    return int(torch.multinomial(p, 1, generator=g))  # lossless, but never keeps a draft on purpose


def rule_draft_certain(p, q, x, g):
    """Treat the draft as certain: keep x w.p. p(x), else sample p with x removed (renormalised).

    P(emit z) = p(x) [z = x] + (1 - p(x)) p(z) [z != x] / (1 - p(x)) = p(z) for every x: lossless
    whatever the draft, but it keeps x with probability p(x) <= min(1, p(x)/q(x)).
    """
    if _u(g, p) < p[x]:
        return x
    rest = p.clone()
    rest[x] = 0
    return int(torch.multinomial(rest, 1, generator=g))  # rest has mass 1 - p(x) > 0 here


def bug_greedy_residual(p, q, x, g):
    if _u(g, p) * q[x] < p[x]:
        return x
    return int(torch.argmax(_res(p, q)))


def bug_accept_p_residual(p, q, x, g):
    if _u(g, p) < p[x]:
        return x
    return int(torch.multinomial(_res(p, q), 1, generator=g))


def bug_global_seed(p, q, x, g):
    torch.manual_seed(0)  # "for reproducibility"
    if torch.rand(()) * q[x] < p[x]:
        return x
    return int(torch.multinomial(_res(p, q), 1))


def bug_epsilon_normaliser(p, q, x, g):
    if _u(g, p) * q[x] < p[x]:
        return x
    r = _res(p, q)
    cdf = (r / (r.sum() + 1e-6)).cumsum(0)  # "avoid division by zero"
    return min(int(torch.searchsorted(cdf, _u(g, p), right=True)), len(p) - 1)


BROKEN_TOKEN_RULES = (
    Entry("naive: accept w.p. p(x), else sample p", "ignores q; rejection draws from p", accept_p_then_p,
          ('acceptance',)),
    Entry("naive: resample from p", "right acceptance, rejection draws from p", resample_from_p,
          ('residual',)),
    Entry("naive: accept iff p(x) >= q(x)", "deterministic acceptance", accept_if_target_prefers,
          ('acceptance',)),
    Entry("ratio swapped", "accepts with min(1, q/p)", bug_ratio_swapped,
          ('p = 0', 'acceptance')),
    Entry("residual swapped", "rejection draws from max(0, q - p)", bug_residual_swapped,
          ('p = 0', 'residual')),
    Entry("residual |p - q|", "abs instead of clamp at 0", bug_residual_abs,
          ('p = 0', 'residual')),
    Entry("resample p without the draft", "rejection draws from p with x removed", bug_exclude_draft,
          ('residual',)),
    Entry("uniform reused for the residual", "the acceptance uniform also picks the residual token", bug_reuse_uniform,
          ('residual',)),
    Entry("resample from q", "rejection draws a fresh draft", bug_resample_q,
          ('p = 0', 'residual')),
    Entry("always accept", "no verification at all", bug_always_accept,
          ('p = 0', 'acceptance')),
    Entry("greedy residual", "argmax of the residual instead of a sample", bug_greedy_residual,
          ('residual',)),
    Entry("accept w.p. p(x), residual", "acceptance ignores q; residual right", bug_accept_p_residual,
          ('acceptance',)),
    Entry("global seed in the rule", "torch.manual_seed(0) on every call", bug_global_seed,
          ('acceptance',)),
    Entry("epsilon in the normaliser", "r / (sum + 1e-6) then inverse CDF", bug_epsilon_normaliser,
          ('p = 0',)),
)


LOSSLESS_TOKEN_RULES = (
    Entry("draft treated as certain", "keep x w.p. p(x), else sample p without x", rule_draft_certain,
          ('acceptance',)),
    Entry("ignore the draft", "always samples p: lossless but never speculative", rule_ignore_draft,
          ('acceptance',)),
)


# =========================================================================== verifiers: correct

def verifier_reference(p, q, x, g):
    tokens, n = verify_chain(p[None], q[None], x[None], g)
    return tokens[0, : n[0]]


def verifier_loop(p, q, x, g):
    K = len(x)
    out = []
    for j in range(K):
        if _u(g, p) * q[j, x[j]] < p[j, x[j]]:
            out.append(int(x[j]))
            continue
        out.append(int(torch.multinomial(_res(p[j], q[j]), 1, generator=g)))
        return torch.tensor(out)
    out.append(int(torch.multinomial(p[K], 1, generator=g)))
    return torch.tensor(out)


def verifier_upfront(p, q, x, g):
    K = len(x)
    u = torch.rand(K + 1, generator=g, dtype=torch.float64)  # K acceptance draws + one for the last token
    ratio = p[:K].gather(1, x[:, None]).squeeze(1) / q.gather(1, x[:, None]).squeeze(1)  # (K,)
    m = int((u[:K] < ratio).long().cumprod(0).sum())
    dist = p[K] if m == K else _res(p[m], q[m])
    cdf = dist.double().cumsum(0)
    z = min(int(torch.searchsorted(cdf, u[K] * cdf[-1], right=True)), len(cdf) - 1)
    return torch.cat([x[:m], torch.tensor([z])])


def verifier_gumbel(p, q, x, g):
    K = len(x)
    q_pad = torch.cat([q, torch.zeros_like(q[:1])])  # (K+1, V): the bonus is the residual against q = 0
    m = 0
    while m < K and 1 - _u(g, p) <= p[m, x[m]] / q[m, x[m]]:
        m += 1
    gumbel = -torch.log(-torch.log(torch.rand(p.shape[1], generator=g, dtype=torch.float64)))
    z = torch.argmax(torch.log(_res(p[m], q_pad[m]).double()) + gumbel)
    return torch.cat([x[:m], z.reshape(1)])


CORRECT_VERIFIERS = (
    Entry("reference (specbook.verify.verify_chain)", "the library's batched verifier, one row", verifier_reference),
    Entry("loop + multinomial", "one position at a time", verifier_loop),
    Entry("uniforms up front + inverse CDF", "K+1 uniforms in one call; cumprod stop", verifier_upfront),
    Entry("Gumbel-max, bonus as residual vs q = 0", "1 - u <= p/q; last token by Gumbel-max", verifier_gumbel),
)


# =========================================================================== verifiers: broken

def _chain(p, q, x, g, *, accept=None, last=None, shared_u=False, stop=True, bonus_row=None):
    """A loop verifier with hooks: accept(j, u) -> bool, last(j) -> token after a rejection at j."""
    K = len(x)
    out = []
    u0 = _u(g, p)
    for j in range(K):
        u = u0 if shared_u else (u0 if j == 0 else _u(g, p))
        ok = accept(j, u) if accept else bool(u * q[j, x[j]] < p[j, x[j]])
        if ok:
            out.append(int(x[j]))
            continue
        out.append(last(j) if last else int(torch.multinomial(_res(p[j], q[j]), 1, generator=g)))
        if stop:
            return torch.tensor(out)
    row = K if bonus_row is None else bonus_row
    out.append(int(torch.multinomial(p[row], 1, generator=g)))
    return torch.tensor(out)


def vbug_no_stop(p, q, x, g):
    K, out = len(x), []
    for j in range(K):  # keeps every draft that passes, skipping the rejected ones
        if _u(g, p) * q[j, x[j]] < p[j, x[j]]:
            out.append(int(x[j]))
    if len(out) < K:
        j = len(out)
        return torch.tensor(out + [int(torch.multinomial(_res(p[j], q[j]), 1, generator=g))])
    return torch.tensor(out + [int(torch.multinomial(p[K], 1, generator=g))])


def vbug_shared_uniform(p, q, x, g):
    return _chain(p, q, x, g, shared_u=True)


def vbug_bonus_row(p, q, x, g):
    return _chain(p, q, x, g, bonus_row=len(x) - 1)


def verifier_no_bonus(p, q, x, g):
    out = _chain(p, q, x, g)
    return out[: len(x)] if len(out) == len(x) + 1 else out  # lossless: the next step samples p_K itself


def verifier_draft_certain(p, q, x, g):
    """Each draft treated as certain (EAGLE's tree rule, vLLM's n-gram path, transformers' sample-and-match)."""
    def last(j):
        rest = p[j].clone()
        rest[x[j]] = 0
        return int(torch.multinomial(rest, 1, generator=g))

    return _chain(p, q, x, g, accept=lambda j, u: bool(u < p[j, x[j]]), last=last)


def vbug_off_by_one(p, q, x, g):
    return _chain(p, q, x, g, accept=lambda j, u: bool(u * q[j, x[j]] < p[j + 1, x[j]]))


def vbug_resample_p(p, q, x, g):
    return _chain(p, q, x, g, last=lambda j: int(torch.multinomial(p[j], 1, generator=g)))


def vbug_residual_q0(p, q, x, g):
    return _chain(p, q, x, g, last=lambda j: int(torch.multinomial(_res(p[j], q[0]) + 1e-12 * p[j], 1, generator=g)))


def vbug_cumulative_ratio(p, q, x, g):
    ratio = (p[:-1].gather(1, x[:, None]) / q.gather(1, x[:, None])).clamp(max=1).squeeze(1).cumprod(0)  # (K,)
    return _chain(p, q, x, g, accept=lambda j, u: bool(u < ratio[j]))


def vbug_greedy_bonus(p, q, x, g):
    out = _chain(p, q, x, g)
    if len(out) == len(x) + 1:
        out[-1] = int(torch.argmax(p[len(x)]))
    return out


def vbug_residual_next_row(p, q, x, g):
    return _chain(p, q, x, g, last=lambda j: int(torch.multinomial(_res(p[j + 1], q[min(j + 1, len(x) - 1)])
                                                                     + 1e-12 * p[j + 1], 1, generator=g)))


def vbug_naive_per_position(p, q, x, g):
    return _chain(p, q, x, g, accept=lambda j, u: bool(u < p[j, x[j]]),
                  last=lambda j: int(torch.multinomial(p[j], 1, generator=g)))


def vbug_global_seed(p, q, x, g):
    torch.manual_seed(1234)
    return _chain(p, q, x, None)


def vbug_padded(p, q, x, g):
    tokens, _ = verify_chain(p[None], q[None], x[None], g)
    return tokens[0]  # keeps the -1 padding


BROKEN_VERIFIERS = (
    Entry("not stopping at the first rejection", "skips rejected drafts and keeps going", vbug_no_stop,
          ('well-formed',)),
    Entry("one uniform shared across positions", "u drawn once per call", vbug_shared_uniform,
          ('number of accepted', 'acceptance')),
    Entry("bonus from the wrong row", "bonus sampled from target_probs[K-1]", vbug_bonus_row,
          ('bonus', 'well-formed')),
    Entry("draft/target off by one", "draft j judged by target_probs[j+1]", vbug_off_by_one,
          ('acceptance', 'well-formed')),
    Entry("resample from p", "rejection draws from p_j, not the residual", vbug_resample_p,
          ('corrected',)),
    Entry("residual with q_0 at every position", "max(0, p_j - q_0)", vbug_residual_q0,
          ('corrected',)),
    Entry("cumulative acceptance ratio", "draft j kept iff u_j < prod_{i<=j} min(1, p_i/q_i)", vbug_cumulative_ratio,
          ('number of accepted', 'acceptance')),
    Entry("greedy bonus", "argmax of target_probs[K] instead of a sample", vbug_greedy_bonus,
          ('bonus',)),
    Entry("corrected token from the next row", "residual of position j+1 after rejecting j", vbug_residual_next_row,
          ('corrected', 'well-formed')),
    Entry("naive rule per position", "accept w.p. p_j(x), else sample p_j", vbug_naive_per_position,
          ('acceptance', 'corrected')),
    Entry("global seed in the verifier", "torch.manual_seed on every call, global RNG", vbug_global_seed,
          ('acceptance',)),
    Entry("padded output", "returns the (K+1,) row with -1 padding", vbug_padded,
          ('well-formed',)),
)


LOSSLESS_VERIFIERS = (
    Entry("drafts treated as certain", "keep x_j w.p. p_j(x_j), else sample p_j without x_j (the one-hot "
          "n-gram rule on sampled drafts)", verifier_draft_certain,
          ('acceptance',)),
    Entry("no bonus token", "returns only the K drafts when all are accepted", verifier_no_bonus,
          ('number of accepted',)),
)
