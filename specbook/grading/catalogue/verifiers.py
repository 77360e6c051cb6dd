"""Chain verifiers the checker is judged by: ``verifier(p, q, x, g) -> emitted tokens``.

Correct ones (the modified rejection sampler over a chain, with a bonus token), lossless but
non-standard ones, and broken ones.  Shape legend: K draft length, V vocab; p is (K+1, V), q is
(K, V), x is (K,).  Which is which, and which checks must catch each bug: the tables in
:mod:`specbook.grading.catalogue`.
"""
from __future__ import annotations

import torch

from ...verify import verify_chain
from ...verify_block import verify_block
from .common import positive_part, uniform


# =========================================================================== verifiers: correct

def verifier_reference(p, q, x, g):
    tokens, n = verify_chain(p[None], q[None], x[None], g)
    return tokens[0, : n[0]]


def verifier_block(p, q, x, g):
    """Block verification (Sun et al. 2025, specbook.verify_block): lossless, keeps more than the standard rule."""
    tokens, n = verify_block(p[None], q[None], x[None], g)
    return tokens[0, : n[0]]


def verifier_loop(p, q, x, g):
    K = len(x)
    out = []
    for j in range(K):
        if uniform(g, p) * q[j, x[j]] < p[j, x[j]]:
            out.append(int(x[j]))
            continue
        out.append(int(torch.multinomial(positive_part(p[j], q[j]), 1, generator=g)))
        return torch.tensor(out)
    out.append(int(torch.multinomial(p[K], 1, generator=g)))
    return torch.tensor(out)


def verifier_upfront(p, q, x, g):
    K = len(x)
    u = torch.rand(K + 1, generator=g, dtype=torch.float64)  # K acceptance draws + one for the last token
    ratio = p[:K].gather(1, x[:, None]).squeeze(1) / q.gather(1, x[:, None]).squeeze(1)  # (K,)
    m = int((u[:K] < ratio).long().cumprod(0).sum())
    dist = p[K] if m == K else positive_part(p[m], q[m])
    cdf = dist.double().cumsum(0)
    z = min(int(torch.searchsorted(cdf, u[K] * cdf[-1], right=True)), len(cdf) - 1)
    return torch.cat([x[:m], torch.tensor([z])])


def verifier_gumbel(p, q, x, g):
    K = len(x)
    q_pad = torch.cat([q, torch.zeros_like(q[:1])])  # (K+1, V): the bonus is the residual against q = 0
    m = 0
    while m < K and 1 - uniform(g, p) <= p[m, x[m]] / q[m, x[m]]:
        m += 1
    gumbel = -torch.log(-torch.log(torch.rand(p.shape[1], generator=g, dtype=torch.float64)))
    z = torch.argmax(torch.log(positive_part(p[m], q_pad[m]).double()) + gumbel)
    return torch.cat([x[:m], z.reshape(1)])


# =========================================================================== verifiers: broken

def _chain(p, q, x, g, *, accept=None, last=None, shared_u=False, stop=True, bonus_row=None):
    """A loop verifier with hooks: accept(j, u) -> bool, last(j) -> token after a rejection at j."""
    K = len(x)
    out = []
    u0 = uniform(g, p)
    for j in range(K):
        u = u0 if shared_u else (u0 if j == 0 else uniform(g, p))
        ok = accept(j, u) if accept else bool(u * q[j, x[j]] < p[j, x[j]])
        if ok:
            out.append(int(x[j]))
            continue
        out.append(last(j) if last else int(torch.multinomial(positive_part(p[j], q[j]), 1, generator=g)))
        if stop:
            return torch.tensor(out)
    row = K if bonus_row is None else bonus_row
    out.append(int(torch.multinomial(p[row], 1, generator=g)))
    return torch.tensor(out)


def vbug_no_stop(p, q, x, g):
    K, out = len(x), []
    for j in range(K):  # keeps every draft that passes, skipping the rejected ones
        if uniform(g, p) * q[j, x[j]] < p[j, x[j]]:
            out.append(int(x[j]))
    if len(out) < K:
        j = len(out)
        return torch.tensor(out + [int(torch.multinomial(positive_part(p[j], q[j]), 1, generator=g))])
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
    return _chain(p, q, x, g, last=lambda j: int(torch.multinomial(positive_part(p[j], q[0]) + 1e-12 * p[j], 1,
                                                                     generator=g)))


def vbug_cumulative_ratio(p, q, x, g):
    ratio = (p[:-1].gather(1, x[:, None]) / q.gather(1, x[:, None])).clamp(max=1).squeeze(1).cumprod(0)  # (K,)
    return _chain(p, q, x, g, accept=lambda j, u: bool(u < ratio[j]))


def vbug_greedy_bonus(p, q, x, g):
    out = _chain(p, q, x, g)
    if len(out) == len(x) + 1:
        out[-1] = int(torch.argmax(p[len(x)]))
    return out


def vbug_residual_next_row(p, q, x, g):
    return _chain(p, q, x, g, last=lambda j: int(torch.multinomial(positive_part(p[j + 1], q[min(j + 1, len(x) - 1)])
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
