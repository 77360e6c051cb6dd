"""Verifier bugs that shipped in serving engines, rewritten as small samplers in specbook's terms.

Shape legend: K draft length, V vocab; p is (K+1, V) or (V,), q is (K, V) or (V,), x is (K,) or an int.

Each function reproduces the *arithmetic* of one public bug report (not its code), in one of the
two signatures the checker takes:

* a token rule ``fn(target_probs (V,), draft_probs (V,), draft_token, generator) -> int``;
* a chain verifier ``fn(target_probs (K+1, V), draft_probs (K, V), draft_tokens (K,), generator)
  -> LongTensor (L,)``.

The checker draws every draft from ``draft_probs`` itself, so ``draft_probs`` is always the law
the drafts were really drawn from.  A bug that lives in the drafter (a draft law and a q that do
not match) is therefore written as a sampler that re-derives, from its inputs, the draft or the q
the buggy drafter would have handed the verifier, and then verifies correctly.  Which is which,
the public source of each bug, and which checks must catch it: ``ENGINE_BUGS`` in
:mod:`specbook.grading.catalogue`.
"""
from __future__ import annotations

import torch

from .common import positive_part, uniform

_TEMPERATURE = 0.7  # the sampling temperature the drafter applied (transformers' examples use 0.7)
_TOP_K_KEPT = 0.9  # the share of the raw softmax mass that top-k kept (drafts never leave the top k)


def _sample(weights: torch.Tensor, g) -> int:
    """One token from unnormalised non-negative ``weights`` (V,)."""
    return int(torch.multinomial(weights, 1, generator=g))


def _residual_or_p(p_j: torch.Tensor, q_j: torch.Tensor) -> torch.Tensor:
    """max(0, p_j - q_j), or p_j where that has no mass (as specbook.verify.residual does)."""
    r = positive_part(p_j, q_j)
    return r if float(r.sum()) > 0 else p_j


# =========================================================================== bugs in the drafter

def greedy_assistant_rule(p, q, x, g):
    """transformers #32867 (fixed by PR #33534): the assistant decoded greedily, its softmax was used as q.

    The assistant model always proposed argmax(q) (a point mass), while ``_speculative_sampling``
    judged that token with the assistant's softmax q: keep it with probability min(1, p/q), else
    sample max(0, p - q).  The rule below ignores the token sampled from q and re-derives the
    assistant's own greedy draft.  Given any draft the output law is a(x*) at x* = argmax q plus
    (1 - a(x*)) of the residual, which is not p unless q happens to be a point mass.
    """
    greedy = int(torch.argmax(q))  # the draft the greedy assistant proposed, whatever was sampled
    if uniform(g, p) * q[greedy] < p[greedy]:
        return greedy
    return _sample(_residual_or_p(p, q), g)


def raw_from_processed(q_row: torch.Tensor, temperature: float = _TEMPERATURE,
                       kept: float = _TOP_K_KEPT) -> torch.Tensor:
    """The raw-logits softmax a drafter returned as q, for the processed law ``q_row`` (V,) it sampled from.

    Processing was a temperature T, then top-k: on the kept tokens the processed law is
    softmax(logits / T), so the raw softmax there is proportional to q_row ** T; top-k removed
    the tokens outside the support, which held 1 - ``kept`` of the raw mass (spread evenly here).
    A row with full support lost nothing to top-k.  (V,), in q_row's dtype.
    """
    support = q_row > 0
    raw = torch.where(support, q_row.double() ** temperature, torch.zeros_like(q_row, dtype=torch.float64))
    raw = raw / raw.sum()
    outside = int((~support).sum())
    if outside:
        raw = kept * raw + (1 - kept) * (~support).double() / outside
    return raw.to(q_row.dtype)


def processed_draft_raw_q_verifier(p, q, x, g):
    """transformers #47932 (PR #47961): drafts sampled from processed logits, q from the raw logits.

    DFlash and MTP candidate generators drew each token from the logits after the logits
    processors (top-k, temperature) but returned the raw logits as ``candidate_logits``, which
    ``_speculative_sampling`` uses as q.  On the likely tokens the raw q is smaller (top-k took
    its share 1 - Z away, and a temperature below 1 sharpened the processed law), so their ratio
    p/q is inflated, by up to 1/Z; on unlikely ones the temperature works the other way; and the
    residual max(0, p - q) subtracts mass on tokens the drafter can never propose.  The checker's
    ``draft_probs`` is the processed law the drafts came from; this verifier re-derives the raw
    q from it (:func:`raw_from_processed`) and then runs the modified rejection sampler with it.
    """
    raw = torch.stack([raw_from_processed(q[j]) for j in range(len(x))])  # (K, V) what the verifier was handed
    return _token_wise(p, raw, x, g)


# =========================================================================== bugs in the verifier

def _token_wise(p, q, x, g, *, residual=None):
    """Leviathan et al. (2023) Algorithm 1 over a chain; ``residual(j)`` -> the law after rejecting draft j."""
    K = len(x)
    out = []
    for j in range(K):
        xj = int(x[j])
        if uniform(g, p) * q[j, xj] < p[j, xj]:
            out.append(xj)
            continue
        out.append(_sample(residual(j) if residual else _residual_or_p(p[j], q[j]), g))
        return torch.tensor(out)
    out.append(_sample(p[K], g))
    return torch.tensor(out)


def same_token_or_ratio_verifier(p, q, x, g):
    """rtp-llm PR #1295: "accept if the same token, or u * p < q" (exact match mixed with rejection sampling).

    rtp-llm names the draft's probability p and the target's q, so its ``u * p < q`` is the
    correct test u * q_j(x_j) < p_j(x_j) here.  Before the PR its kernel kept draft j when the
    token the target sampled at j (t_j ~ p_j) *equals* the draft, *or* when that test passes:
    acceptance 1 - (1 - p_j(x_j))(1 - min(1, p_j/q_j)), above min(1, p/q).  On a rejection
    while every draft kept so far matched the target's own token, it emitted t_j (the "fast
    path": t_j is a target sample, but one conditioned on t_j != x_j and on the failed test);
    otherwise it sampled the residual max(0, p_j - q_j).  After K acceptances the bonus is
    the target's token at K (t_K ~ p_K, the same law as a fresh sample).
    """
    K = len(x)
    out, all_same = [], True
    for j in range(K):
        xj = int(x[j])
        t = _sample(p[j], g)  # the token the target sampled at position j
        same = t == xj
        if same or uniform(g, p) * q[j, xj] < p[j, xj]:
            out.append(xj)
            all_same = all_same and same
            continue
        out.append(t if all_same else _sample(_residual_or_p(p[j], q[j]), g))
        return torch.tensor(out)
    out.append(_sample(p[K], g))
    return torch.tensor(out)


def draft_token_only_residual_verifier(p, q, x, g):
    """xLLM PR #2175: the residual (p - q)+ subtracted the draft's mass only at the drafted token.

    The draft proposal was carried as (token, probability), so after rejecting x_j the
    recovery law was max(0, p_j - q_j(x_j) e_{x_j}) normalised instead of max(0, p_j - q_j):
    since a rejection means p_j(x_j) < q_j(x_j), that is p_j with x_j removed.  The acceptance
    test min(1, p/q) was right.  (The PR's own measurement: token 1 at 0.29 instead of 0.20.)
    """
    def residual(j):
        only_draft = torch.zeros_like(q[j])
        only_draft[int(x[j])] = q[j, int(x[j])]
        return _residual_or_p(p[j], only_draft)

    return _token_wise(p, q, x, g, residual=residual)


def cumulative_block_verifier(p, q, x, g):
    """vllm-ascend #7807 (fixed by PR #7808) and PR #7839: a "block verify" built from token-wise tests.

    The kernel walked the drafts with a running clamped ratio pi_i = min(1, pi_{i-1} p_i(x_i)/q_i(x_i))
    and a running product of the uniforms U_i = u_1 ... u_i, called prefix i legal when
    q_i(x_i) > 0 and pi_i >= U_i, kept the longest legal prefix, and then emitted a token from
    the token-wise residual max(0, p - q) at the next position (or the bonus when the whole
    block was legal).  Sun et al.'s block verification (:mod:`specbook.verify_block`) instead
    draws one coin per prefix with probability h_i and samples the block residual
    max(0, w_i p_i - q_i).  For n-gram drafts (no draft probabilities) the kernel read q(x) = 1
    and the recovery law p without the draft, which is exactly what this function does on a
    one-hot draft_probs row; #7839 turned block verify off for them.  With K = 1 the rule is the
    token-wise one, so only K >= 2 shows the bug.
    """
    K = len(x)
    pi, running_u, last = 1.0, 1.0, -1
    for i in range(K):
        xi = int(x[i])
        running_u *= float(uniform(g, p))
        q_x = float(q[i, xi])  # > 0: drafts come from q (a fixed draft of q = 0 is never legal)
        pi = min(pi * float(p[i, xi]) / q_x, 1.0) if q_x > 0 else 0.0
        if q_x > 0 and pi >= running_u:
            last = i
    if last == K - 1:
        return torch.cat([x, torch.tensor([_sample(p[K], g)])])
    recovered = _sample(_residual_or_p(p[last + 1], q[last + 1]), g)
    return torch.cat([x[: last + 1], torch.tensor([recovered])])


def _rank_block(p, q, x, g) -> list[int]:
    """One rank's run of the modified rejection sampler: the emitted tokens."""
    return _token_wise(p, q, x, g).tolist()


def unsynced_ranks_verifier(p, q, x, g):
    """vLLM #17498: at temperature > 0 the tensor-parallel ranks accepted different tokens.

    Requests without a seed had no generator, so each rank's rejection sampler drew its own
    uniforms: rank 0 and rank 1 each run a correct verifier on the same drafts, independently.
    The scheduler records rank 0's count of accepted drafts m_0; the token the engine goes on
    from at position m_0 is rank 1's: its own corrected or bonus token when it stopped at m_0
    too, otherwise the draft x_{m_0} that its token buffer still holds from the verification
    pass (rank 0's bonus when m_0 = K and rank 1 stopped earlier, since no draft sits there).
    Each rank alone is lossless; the block stitched from the two is not: a draft rank 0
    rejected comes back whenever rank 1 accepted it.  (Here both ranks draw from ``generator``
    one after the other, as two independent streams.)
    """
    K = len(x)
    rank0, rank1 = _rank_block(p, q, x, g), _rank_block(p, q, x, g)
    m0, m1 = len(rank0) - 1, len(rank1) - 1
    if m1 == m0:
        last = rank1[m0]
    elif m0 < K:
        last = int(x[m0])  # rank 1 accepted x_{m0} (m1 > m0), or left it in its buffer (m1 < m0)
    else:
        last = rank0[K]
    return torch.tensor(x[:m0].tolist() + [last])
