"""Token rules the checker is judged by: one position, ``rule(p, q, x, g) -> token``.

Correct ones (the modified rejection sampler, each drawing its randomness its own way),
lossless but non-standard ones, and broken ones (the bugs students and real implementations
make).  Shape legend: V vocab; p, q are (V,), x a token id.  Which is which, and which checks
must catch each bug: the tables in :mod:`specbook.grading.catalogue`.
"""
from __future__ import annotations

import torch

from .common import positive_part, uniform


# =========================================================================== token rules: correct

def rule_inverse_cdf(p, q, x, g):
    if uniform(g, p) * q[x] < p[x]:
        return x
    r = positive_part(p, q)
    cdf = r.cumsum(0)
    z = int(torch.searchsorted(cdf, uniform(g, p) * cdf[-1], right=True))
    return min(z, len(p) - 1)


def rule_multinomial(p, q, x, g):
    if uniform(g, p) < p[x] / q[x]:
        return x
    r = positive_part(p, q)
    return int(torch.multinomial(r / r.sum(), 1, generator=g))


def rule_gumbel(p, q, x, g):
    if 1 - uniform(g, p) <= p[x] / q[x]:  # 1 - u is uniform on (0, 1]; "<=" keeps p(x) = 0 rejected
        return x
    gumbel = -torch.log(-torch.log(torch.rand(p.shape, generator=g, dtype=torch.float64)))
    return int(torch.argmax(torch.log(positive_part(p, q).double()) + gumbel))


def rule_unnormalised(p, q, x, g):
    u = torch.rand(1, generator=g, dtype=torch.float64)
    if u.item() < min(1.0, (p[x] / q[x]).item()):
        return x
    return torch.multinomial(positive_part(p, q), 1, generator=g)  # a one-element tensor; multinomial normalises


# =========================================================================== token rules: broken

def bug_ratio_swapped(p, q, x, g):
    if uniform(g, p) < q[x] / p[x]:
        return x
    r = positive_part(p, q)
    return int(torch.multinomial(r, 1, generator=g))


def bug_residual_swapped(p, q, x, g):
    if uniform(g, p) * q[x] < p[x]:
        return x
    return int(torch.multinomial(positive_part(q, p), 1, generator=g))


def bug_residual_abs(p, q, x, g):
    if uniform(g, p) * q[x] < p[x]:
        return x
    return int(torch.multinomial((p - q).abs(), 1, generator=g))


def bug_exclude_draft(p, q, x, g):
    if uniform(g, p) * q[x] < p[x]:
        return x
    r = p.clone()
    r[x] = 0  # "anything but the rejected token"
    return int(torch.multinomial(r, 1, generator=g))


def bug_reuse_uniform(p, q, x, g):
    u = uniform(g, p)
    if u * q[x] < p[x]:
        return x
    cdf = positive_part(p, q).cumsum(0)
    return min(int(torch.searchsorted(cdf, u * cdf[-1], right=True)), len(p) - 1)  # the same u again


def bug_resample_q(p, q, x, g):
    if uniform(g, p) * q[x] < p[x]:
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
    if uniform(g, p) < p[x]:
        return x
    rest = p.clone()
    rest[x] = 0
    return int(torch.multinomial(rest, 1, generator=g))  # rest has mass 1 - p(x) > 0 here


def bug_greedy_residual(p, q, x, g):
    if uniform(g, p) * q[x] < p[x]:
        return x
    return int(torch.argmax(positive_part(p, q)))


def bug_accept_p_residual(p, q, x, g):
    if uniform(g, p) < p[x]:
        return x
    return int(torch.multinomial(positive_part(p, q), 1, generator=g))


def bug_global_seed(p, q, x, g):
    torch.manual_seed(0)  # "for reproducibility"
    if torch.rand(()) * q[x] < p[x]:
        return x
    return int(torch.multinomial(positive_part(p, q), 1))


def bug_epsilon_normaliser(p, q, x, g):
    if uniform(g, p) * q[x] < p[x]:
        return x
    r = positive_part(p, q)
    cdf = (r / (r.sum() + 1e-6)).cumsum(0)  # "avoid division by zero"
    return min(int(torch.searchsorted(cdf, uniform(g, p), right=True)), len(p) - 1)
