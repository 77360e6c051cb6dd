"""One decoding loop for every drafter; plain decoding is the same loop with no drafter (K = 0).

Shape legend: B batch (live rows), K draft length (chain tokens or tree nodes), V vocab.

    prompt ─► drafter.propose(contexts) ─► Draft(tokens, probs or None, parents or None)
           ─► target.forward([pending token] + drafts)      one pass, K+1 positions
           ─► verify (sampling: modified rejection sampling; temperature 0: greedy)
           ─► target.rollback / target.keep(the accepted path), per row
           ─► emit accepted drafts + one corrected or bonus token

The target's cache holds every emitted token but the last (the *pending* token, fed first in the next
pass; the root of a tree draft).  Rows are independent (:mod:`specbook.rows`); what a drafter and a
target hand back is checked once, at the loop's door (:mod:`specbook.validate`).  ``on_step`` gets one
:class:`DecodeStep` per pass; the ``*_steps`` forms yield them one ``next`` at a time.
"""
from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Callable

import torch
from tqdm.auto import tqdm

from .protocols import CountsPasses, Draft, Drafter, SupportsAttach, SupportsKeep, SupportsObserve, Target
from .rows import PAD, Rows, drop_rows, pending_tokens, prefill, prompt_device
from .sampling import SamplingParams, warp
from .decode_stats import DecodeStats
from .validate import check_budget, check_count, check_draft, check_target_logits, eos_ids, prompt_rows
from .verify import accept_chain, accept_greedy
from .verify_tree import accept_tree, accept_tree_greedy, keep_indices

@dataclass(frozen=True)
class DecodeStep:
    """One verification pass, handed to ``on_step`` and yielded by the ``*_steps`` generators.

    rows:          the original row index (in the prompt) of each batch slot; ended rows are gone
    draft:         the drafter's :class:`~specbook.protocols.Draft` (tokens (B, K); K = 0 with no drafter)
    target_logits: (B, K+1, V) at the pending token and at every draft node
    target_probs:  (B, K+1, V) what the verifier compared against (after SamplingParams); None if greedy
    tokens:        (B, K+1) the verified tokens, left-aligned; row b's first ``num_emitted[b]`` count
    num_emitted:   (B,) accepted drafts + 1 (the corrected or bonus token)
    kept:          (B,) how many of those the row kept: fewer at its budget or an end token
    path:          (B, depth) the accepted root-to-node path of a tree draft (-1 padded); None for a chain
    """

    rows: tuple[int, ...]
    draft: Draft
    target_logits: torch.Tensor
    target_probs: torch.Tensor | None
    tokens: torch.Tensor
    num_emitted: torch.Tensor
    kept: torch.Tensor
    path: torch.Tensor | None = None


@dataclass
class GenerateResult:
    """What a generation returns; rows of different lengths are right-padded with ``PAD = -1``."""

    tokens: torch.Tensor  # (B, max_b(T_b + L_b)) prompt followed by the new tokens, right-padded with PAD
    new_tokens: torch.Tensor  # (B, max_b L_b) the new tokens, right-padded with PAD
    stats: DecodeStats
    lengths: torch.Tensor  # (B,) new tokens per row (the end token included when a row met one)

    def sequences(self) -> list[list[int]]:
        """The new tokens of each row, without padding."""
        return [row[:n] for row, n in zip(self.new_tokens.tolist(), self.lengths.tolist())]


def speculative_generate(target: Target, drafter: Drafter | None, prompt, max_new_tokens: int, *,
                         params: SamplingParams = SamplingParams(), gamma: int = 4,
                         generator: torch.Generator | None = None, progress: bool = False,
                         eos_token_id: int | Sequence[int] | None = None, chain_verifier: Callable = accept_chain,
                         on_step: Callable[[DecodeStep], None] | None = None) -> GenerateResult:
    """Speculative decoding with any drafter (None: plain decoding); the output law equals :func:`generate`'s.

    ``prompt``: a (T,) or (B, T) token tensor, or a list of rows of any lengths; a row stops at
    ``max_new_tokens`` or right after a token of ``eos_token_id``.  ``gamma``: drafts requested per
    pass (none past the longest remaining budget).  Temperature 0: the output equals greedy
    decoding token for token.  A tree draft needs a target with ``keep`` (SupportsKeep).
    ``on_step`` is called after every pass and must not change the target or the drafter.
    ``chain_verifier`` (sampled chains): ``verify.accept_chain`` (token-wise) or ``verify_block.accept_block``.
    """
    steps = speculative_steps(target, drafter, prompt, max_new_tokens, params=params, gamma=gamma, generator=generator,
                              progress=progress, eos_token_id=eos_token_id, chain_verifier=chain_verifier)
    if on_step is not None and not callable(on_step):
        raise TypeError(f"on_step must be a callable or None, got {type(on_step).__name__}")
    while True:
        try:
            step = next(steps)
        except StopIteration as stop:
            return stop.value
        if on_step is not None:
            on_step(step)


def generate(target: Target, prompt, max_new_tokens: int, *, params: SamplingParams = SamplingParams(),
             generator: torch.Generator | None = None, progress: bool = False,
             eos_token_id: int | Sequence[int] | None = None,
             on_step: Callable[[DecodeStep], None] | None = None) -> GenerateResult:
    """Plain autoregressive decoding, one target pass per token: the speculative loop with no drafter."""
    return speculative_generate(target, None, prompt, max_new_tokens, params=params, gamma=0, generator=generator,
                                progress=progress, eos_token_id=eos_token_id, on_step=on_step)


def generate_steps(target: Target, prompt, max_new_tokens: int, *, params: SamplingParams = SamplingParams(),
                   generator: torch.Generator | None = None, progress: bool = False,
                   eos_token_id: int | Sequence[int] | None = None) -> Generator[DecodeStep, None, GenerateResult]:
    """:func:`generate` one pass at a time (see :func:`speculative_steps`)."""
    return speculative_steps(target, None, prompt, max_new_tokens, params=params, gamma=0, generator=generator,
                             progress=progress, eos_token_id=eos_token_id)


def speculative_steps(target: Target, drafter: Drafter | None, prompt, max_new_tokens: int, *,
                      params: SamplingParams = SamplingParams(), gamma: int = 4,
                      generator: torch.Generator | None = None, progress: bool = False,
                      eos_token_id: int | Sequence[int] | None = None,
                      chain_verifier: Callable = accept_chain) -> Generator[DecodeStep, None, GenerateResult]:
    """:func:`speculative_generate` as a Python generator: each ``next`` runs one pass and yields its
    :class:`DecodeStep`; the :class:`GenerateResult` is the return value.  Arguments are checked at
    once; the prefill runs with the first pass."""
    if not isinstance(target, Target):
        raise TypeError(f"target must be a model with vocab_size, reset, forward, cache_lengths and rollback "
                        f"(specbook.protocols.Target), got {type(target).__name__}: check the argument order")
    if drafter is not None and not isinstance(drafter, Drafter):
        raise TypeError(f"drafter must have propose(contexts, gamma, params, generator) "
                        f"(specbook.protocols.Drafter) or be None, got {type(drafter).__name__}")
    check_count("max_new_tokens", max_new_tokens, 1)
    check_count("gamma", gamma, 0)
    if not isinstance(params, SamplingParams):
        raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
    if not callable(chain_verifier):  # e.g. "block": pass specbook.verify_block.accept_block itself
        raise TypeError(f"chain_verifier must be a function like accept_chain, got {chain_verifier!r}")
    prompts = prompt_rows(prompt, target.vocab_size)
    eos = eos_ids(eos_token_id, target.vocab_size)
    check_budget(target, prompts, max_new_tokens)
    return _loop(target, drafter, Rows(prompts, max_new_tokens, eos), params, gamma, generator, progress,
                 prompt_device(prompt), chain_verifier)


def _loop(target, drafter, rows: Rows, params, gamma, generator, progress, device, chain_verifier):
    """Draft, check, verify, roll back or keep, observe, record: one pass per iteration."""
    stats = DecodeStats()
    observes, counts = isinstance(drafter, SupportsObserve), isinstance(drafter, CountsPasses)  # once: not cheap
    passes_before = drafter.passes if counts else 0
    if isinstance(drafter, SupportsAttach):
        drafter.attach(target)  # before the prefill: what the drafter reads must be kept from the first token
    kept_indices = prefill(target, rows.prompts, device)
    if observes:
        drafter.observe(target, kept_indices)  # the prefilled prompt, pending excluded
    pending = pending_tokens(rows, device)  # (B, 1)
    bar = tqdm(total=rows.max_new_tokens, disable=not progress, desc="generate" if drafter is None else "speculative")
    while rows.live:
        B, V, done = len(rows.live), target.vocab_size, rows.fewest_emitted()
        if drafter is None:
            draft = Draft(pending.new_empty((B, 0)))
        else:  # drafts past the longest remaining budget could never be emitted: do not ask for them
            draft = drafter.propose(rows.contexts(device), min(gamma, rows.room() - 1), params, generator)
            check_draft(draft, drafter, B, V)
        logits, probs, tokens, num_emitted, kept_indices, path = _verify(target, draft, pending, params,
                                                                           generator, chain_verifier)
        if observes:
            drafter.observe(target, kept_indices)
        if counts:
            stats.draft_passes = drafter.passes - passes_before
        slots = tuple(rows.live)
        num_kept, ended = rows.extend(tokens.tolist(), num_emitted.tolist())
        num_kept = torch.tensor(num_kept, dtype=torch.long)
        stats.record(draft.num_tokens, num_emitted, depth=None if path is None else path.shape[1], num_kept=num_kept)
        yield DecodeStep(slots, draft, logits, probs, tokens, num_emitted, num_kept, path)
        pending = tokens.gather(1, (num_emitted - 1)[:, None]).to(device)  # (B, 1) the last emitted token
        if ended:
            drop_rows(target, drafter, rows, ended, device)
            pending = pending_tokens(rows, device) if rows.live else pending
        bar.update(rows.fewest_emitted() - done)
    bar.close()
    tokens, new_tokens, lengths = rows.result(device)
    return GenerateResult(tokens, new_tokens, stats, lengths)


def _verify(target: Target, draft: Draft, pending: torch.Tensor, params: SamplingParams, generator, chain_verifier):
    """One target pass over ``[pending] + draft``, verification, and the cache cut back to what was kept:
    (logits (B, K+1, V), probs or None, tokens (B, K+1), num_emitted (B,), kept indices, tree path or None)."""
    B, K, V = pending.shape[0], draft.num_tokens, target.vocab_size
    lengths_before = target.cache_lengths  # (B,)
    limit = getattr(target, "max_length", None)
    if limit is not None and int(lengths_before.max()) + K + 1 > limit:
        raise ValueError(f"the drafter proposed {K} tokens, which with the cached context "
                         f"({int(lengths_before.max())} tokens) exceed the target's max_length={limit}: use a "
                         f"smaller tree or a larger max_length")
    if draft.parents is not None and not isinstance(target, SupportsKeep):
        raise ValueError(f"the drafter proposed a tree, but the target ({type(target).__name__}) has no "
                         "keep(indices) (specbook.protocols.SupportsKeep)")
    fed = torch.cat([pending, draft.tokens.to(pending.device).long()], dim=1)  # (B, K+1)
    if draft.parents is None:
        logits = target.forward(fed)  # (B, K+1, V)
    else:  # the pending token is the tree's root: node i becomes index i+1, root children hang off it
        parents = draft.parents.to(pending.device).long()  # (K,)
        logits = target.forward(fed, parents=torch.cat([parents.new_full((1,), -1), parents + 1]))  # (B, K+1, V)
    check_target_logits(logits, target, (B, K + 1, V), params.greedy)
    x = fed[:, 1:].to(logits.device)  # (B, K) the drafts
    probs = None if params.greedy else warp(logits, params)  # (B, K+1, V)
    if draft.parents is None:
        tokens, num_emitted = (accept_greedy(logits, x) if params.greedy
                               else chain_verifier(probs, draft.probs, x, generator))
        if K:  # keep the pending token and the accepted drafts; the last emitted token becomes pending
            target.rollback(lengths_before + num_emitted.to(lengths_before.device))
        return logits, probs, tokens, num_emitted, [list(range(n)) for n in num_emitted.tolist()], None
    parents = parents.to(logits.device)
    tokens, num_emitted, path = (accept_tree_greedy(logits, x, parents) if params.greedy
                                 else accept_tree(probs, draft.probs, x, parents, generator))
    kept_indices = keep_indices(path, num_emitted)  # the root and the accepted path, packed into place
    target.keep(kept_indices)
    return logits, probs, tokens, num_emitted, kept_indices, path
