"""One decoding loop for every drafter: plain autoregressive and speculative generation.

Shape legend: B batch, T prompt length, K draft length, V vocab.

    prompt ─► drafter.propose(contexts) ─► Draft(tokens, probs or None, parents or None)
           ─► target.forward([pending token] + drafts)      one pass, K+1 positions
           ─► verify (sampling: modified rejection sampling; temperature 0: greedy)
           ─► target.rollback(to the accepted prefix)       per row
           ─► emit accepted drafts + one corrected/bonus token

A tree draft (``Draft.parents`` given) takes the same path: the pending token is the
root of the tree, one forward scores every node under the tree mask,
:func:`specbook.verify_tree.verify_tree` (or its greedy form) picks one root-to-node
path, and ``target.keep`` packs that path's cache entries into place.

The target's cache always holds every emitted token except the last one (the
"pending" token), which is fed at the start of the next pass.  That keeps
plain decoding and speculation the same loop: plain decoding is the K = 0 case.

Drafters that read the target's internals (Medusa and EAGLE heads read its hidden
states) implement :class:`specbook.protocols.SupportsObserve`.  The loop calls
``observe(target, kept)`` after the prefill and after every verification, once the cache
is final: ``kept[b]`` lists, in order, the indices of the last forward's new tokens that
stayed in row b's cache, so the drafter can read ``target.last_hidden[b, kept[b]]``.
Every optional capability the loop uses is a Protocol in :mod:`specbook.protocols`.

``on_step``, if given, receives one :class:`DecodeStep` per verification pass: what was
drafted, what the target said, what was emitted.  The lessons' step-by-step traces
(:mod:`specbook.teach.trace`) are built on it, so they cannot drift from this loop.
:func:`speculative_steps` and :func:`generate_steps` are the same loops as Python generators,
one pass per ``next``.

Rows are independent: prompts may have different lengths (one padded prefill, then each row
rolled back to its own length), each row stops at its own budget or end token, and a row that
ends leaves the batch (``select_rows`` on the target and the drafter), so it costs nothing more.
Every Draft and every block of target logits is checked on arrival (:mod:`specbook.validate`).
"""
from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Callable

import torch
from tqdm.auto import tqdm

from .protocols import CountsPasses, Draft, Drafter, SupportsKeep, SupportsObserve, Target
from .rows import PAD, Rows, drop_rows, pending_tokens, prefill, prompt_device
from .sampling import SamplingParams, logits_to_probs, sample
from .validate import (check_budget, check_draft, check_gamma, check_max_new_tokens, check_target_logits, eos_ids,
                       prompt_rows)
from .verify import verify_chain, verify_greedy
from .verify_tree import keep_indices, verify_tree, verify_tree_greedy


__all__ = ["PAD", "DecodeStats", "DecodeStep", "GenerateResult", "generate", "generate_steps", "speculative_generate",
           "speculative_steps"]


@dataclass
class DecodeStats:
    """Counters of one generation.

    Two acceptance figures, because they answer different questions:

    * ``acceptance_rate`` = accepted / verified: the chance that a draft that *was* tested
      survives.  This estimates alpha, the acceptance rate of Leviathan et al.'s E[tokens]
      formula (2023, eq. 1), which assumes every position is accepted independently with the
      same probability.
    * ``draft_efficiency`` = accepted / proposed: the share of all drafted tokens that
      survived.  Drafts after the first rejection were never tested and count as lost work,
      so it is below the acceptance rate whenever a round stops early.  It is not alpha
      (docs/glossary.md).
    """

    target_passes: int = 0  # verification passes (prefill not counted)
    draft_passes: int = 0  # forward passes of a draft model, as reported by the drafter
    proposed: int = 0  # draft tokens proposed, summed over rows
    accepted: int = 0  # draft tokens accepted, summed over rows
    verified: int = 0  # draft tokens actually tested (up to and including the first rejection)
    emitted: int = 0  # tokens emitted (accepted + corrected/bonus), summed over rows
    accepted_per_step: list[int] = field(default_factory=list)  # per (step, row): accepted drafts
    position_proposed: list[int] = field(default_factory=list)  # [i]: drafts proposed at depth i
    position_accepted: list[int] = field(default_factory=list)  # [i]: of those, accepted

    @property
    def acceptance_rate(self) -> float:
        """Accepted / verified drafts: the estimate of alpha."""
        return self.accepted / self.verified if self.verified else float("nan")

    @property
    def draft_efficiency(self) -> float:
        """Accepted / proposed drafts: the share of the drafting work that survived (not alpha)."""
        return self.accepted / self.proposed if self.proposed else float("nan")

    @property
    def tau(self) -> float:
        """Mean tokens per target pass per row (bonus included); 1.0 for plain decoding."""
        rows_passes = len(self.accepted_per_step)
        return self.emitted / rows_passes if rows_passes else float("nan")

    @property
    def position_acceptance(self) -> list[float]:
        """P(accept draft i | draft i was verified), for each depth i."""
        return [a / p if p else float("nan") for a, p in zip(self.position_accepted, self.position_proposed)]

    def record(self, num_drafts: int, num_emitted: torch.Tensor, depth: int | None = None,
               kept: torch.Tensor | None = None) -> None:
        """Count one verification pass.  ``depth``: for a tree of ``num_drafts`` nodes, its longest
        path; a tree is then counted per level (a level is verified when every level above it was
        accepted, and accepted when one of its nodes was), so ``verified`` counts levels.

        ``kept[b]`` (default ``num_emitted``): how many of row b's tokens the row kept.  A row that
        reached its budget or an end token keeps fewer; the tokens it dropped are neither emitted
        nor counted, and every kept token before the cut was an accepted draft."""
        self.target_passes += 1
        levels = num_drafts if depth is None else depth
        kept_list = num_emitted.tolist() if kept is None else kept.tolist()
        for n, k in zip(num_emitted.tolist(), kept_list):
            if k < n:  # cut short: k accepted drafts kept, no rejection among them
                accepted, verified = k, min(k, levels)
            else:
                accepted = n - 1
                verified = min(accepted + 1, levels)  # depth i was verified iff all earlier drafts were accepted
            self.proposed += num_drafts
            self.accepted += accepted
            self.emitted += k
            self.accepted_per_step.append(accepted)
            self.verified += verified
            while len(self.position_proposed) < levels:
                self.position_proposed.append(0)
                self.position_accepted.append(0)
            for i in range(verified):
                self.position_proposed[i] += 1
                self.position_accepted[i] += int(i < accepted)

    def summary(self) -> str:
        return (f"target passes {self.target_passes}, draft passes {self.draft_passes}, "
                f"acceptance rate (alpha) {self.acceptance_rate:.3f} (accepted/verified), "
                f"draft efficiency {self.draft_efficiency:.3f} (accepted/proposed), tau {self.tau:.3f} tokens/pass")


@dataclass(frozen=True)
class DecodeStep:
    """One verification pass of :func:`speculative_generate` (or one pass of :func:`generate`, with
    an empty draft), handed to the ``on_step`` hook and yielded by the ``*_steps`` generators.

    rows:          the original row index (in the prompt) of each batch slot; rows that have
                   ended are no longer in the batch
    draft:         the drafter's :class:`~specbook.protocols.Draft` (tokens (B, K), probs, parents)
    target_logits: (B, K+1, V) the target's logits at the pending token and at every draft node
    target_probs:  (B, K+1, V) the laws the verifier compared against (after SamplingParams),
                   or None with greedy verification (temperature 0), which reads the logits
    tokens:        (B, K+1) the verified tokens, left-aligned; row b's first ``num_emitted[b]`` count
    num_emitted:   (B,) accepted drafts + 1 (the corrected or bonus token)
    kept:          (B,) how many of those the row kept: fewer when it reached its budget or an end token
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
    """What a generation returns.

    Rows may end at different lengths (ragged prompts, or a row that met ``eos_token_id``): the
    tensors are then right-padded with ``PAD = -1``, which is never a token id.  ``lengths`` holds
    each row's number of new tokens and :meth:`sequences` gives them unpadded.
    """

    tokens: torch.Tensor  # (B, max_b(T_b + L_b)) prompt followed by the new tokens, right-padded with PAD
    new_tokens: torch.Tensor  # (B, max_b L_b) the new tokens, right-padded with PAD
    stats: DecodeStats
    lengths: torch.Tensor  # (B,) new tokens per row (the end token included when a row met one)

    def sequences(self) -> list[list[int]]:
        """The new tokens of each row, without padding."""
        return [row[:n] for row, n in zip(self.new_tokens.tolist(), self.lengths.tolist())]


def _check_common(target: Target, prompt, max_new_tokens, params, eos_token_id):
    check_max_new_tokens(max_new_tokens)
    if not isinstance(params, SamplingParams):
        raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
    prompts = prompt_rows(prompt, target.vocab_size)
    eos = eos_ids(eos_token_id, target.vocab_size)
    check_budget(target, prompts, max_new_tokens)
    return prompts, eos


def generate(
    target: Target,
    prompt,
    max_new_tokens: int,
    *,
    params: SamplingParams = SamplingParams(),
    generator: torch.Generator | None = None,
    progress: bool = False,
    eos_token_id: int | Sequence[int] | None = None,
    on_step: Callable[[DecodeStep], None] | None = None,
) -> GenerateResult:
    """Plain autoregressive decoding: one target pass per token.

    ``prompt``: a (T,) or (B, T) token tensor, or a list of rows of any lengths.  A row stops at
    ``max_new_tokens`` or right after it emits a token of ``eos_token_id``, and then leaves the batch.
    ``on_step``: called after every pass with a :class:`DecodeStep` whose draft is empty (K = 0).
    """
    return _run(generate_steps(target, prompt, max_new_tokens, params=params, generator=generator, progress=progress,
                               eos_token_id=eos_token_id), on_step)


def generate_steps(
    target: Target,
    prompt,
    max_new_tokens: int,
    *,
    params: SamplingParams = SamplingParams(),
    generator: torch.Generator | None = None,
    progress: bool = False,
    eos_token_id: int | Sequence[int] | None = None,
) -> Generator[DecodeStep, None, GenerateResult]:
    """:func:`generate` one pass at a time: a Python generator that yields each pass's
    :class:`DecodeStep` (an empty draft) and returns the :class:`GenerateResult`.  Nothing runs
    until the first ``next``; the prefill runs with the first pass.  Arguments are checked at once."""
    prompts, eos = _check_common(target, prompt, max_new_tokens, params, eos_token_id)
    return _plain_loop(target, prompts, eos, max_new_tokens, params, generator, progress, prompt_device(prompt))


def _plain_loop(target, prompts, eos, max_new_tokens, params, generator, progress, device):
    rows = Rows(prompts, max_new_tokens, eos)
    stats = DecodeStats()
    prefill(target, prompts, device)
    pending = pending_tokens(rows, device)  # (B, 1)
    bar = tqdm(total=max_new_tokens, disable=not progress, desc="generate")
    while rows.live:
        B = len(rows.live)
        logits = target.forward(pending)
        check_target_logits(logits, target, (B, 1, target.vocab_size))
        last = logits[:, -1]  # (B, V)
        probs = None if params.greedy else logits_to_probs(last, params)  # (B, V)
        nxt = last.argmax(-1) if params.greedy else sample(probs, generator)  # (B,)
        slots = tuple(rows.live)
        kept, ended = rows.extend([[t] for t in nxt.tolist()], [1] * B)
        kept = torch.tensor(kept, dtype=torch.long)
        stats.record(0, kept)
        bar.update(1)
        pending = nxt[:, None].to(device)
        yield DecodeStep(slots, Draft(pending.new_empty((B, 0))), logits, None if probs is None else probs[:, None],
                         nxt[:, None], torch.ones(B, dtype=torch.long), kept)
        if ended:
            drop_rows(target, None, rows, ended, device)
            pending = pending_tokens(rows, device) if rows.live else pending
    bar.close()
    tokens, new_tokens, lengths = rows.result(device)
    return GenerateResult(tokens, new_tokens, stats, lengths)


def speculative_generate(
    target: Target,
    drafter: Drafter,
    prompt,
    max_new_tokens: int,
    *,
    params: SamplingParams = SamplingParams(),
    gamma: int = 4,
    generator: torch.Generator | None = None,
    progress: bool = False,
    eos_token_id: int | Sequence[int] | None = None,
    on_step: Callable[[DecodeStep], None] | None = None,
) -> GenerateResult:
    """Speculative decoding with any drafter; the output law equals :func:`generate`'s exactly.

    ``gamma`` is the number of drafts requested per step (a drafter may return fewer, e.g. an
    n-gram drafter without a match, or adapt it); the loop never asks for drafts past the longest
    remaining budget, so speculation needs no more context than plain decoding.  With
    ``params.temperature == 0`` verification is greedy and the output equals greedy autoregressive
    decoding token for token.  ``prompt`` and ``eos_token_id`` work as in :func:`generate`: every
    row stops at its own end and leaves the batch.

    A drafter that returns ``Draft.parents`` proposes a tree (Medusa, EAGLE): the target needs
    ``forward(tokens, parents)`` and ``keep(indices)``; ``Draft.probs`` row i is the law node i was
    drawn from (None for deterministic candidates such as top-k lists).  Stats then count
    ``proposed`` = tree nodes and ``accepted`` = accepted path length, per row and pass.

    ``on_step``: called with a :class:`DecodeStep` after every verification pass (None: nothing
    is recorded).  It must not change the target or the drafter.
    """
    steps = speculative_steps(target, drafter, prompt, max_new_tokens, params=params, gamma=gamma,
                              generator=generator, progress=progress, eos_token_id=eos_token_id)
    return _run(steps, on_step)


def speculative_steps(
    target: Target,
    drafter: Drafter,
    prompt,
    max_new_tokens: int,
    *,
    params: SamplingParams = SamplingParams(),
    gamma: int = 4,
    generator: torch.Generator | None = None,
    progress: bool = False,
    eos_token_id: int | Sequence[int] | None = None,
) -> Generator[DecodeStep, None, GenerateResult]:
    """:func:`speculative_generate` one verification pass at a time: a Python generator that yields
    each pass's :class:`DecodeStep` and returns the :class:`GenerateResult`.  Nothing runs until the
    first ``next``; the prefill runs with the first pass.  Between two passes the caller must not
    change the target or the drafter.

    Stepping lets a caller interleave several generations pass by pass, as
    :mod:`specbook.bench.batch` does to time policies side by side.  Arguments are checked at once."""
    prompts, eos = _check_common(target, prompt, max_new_tokens, params, eos_token_id)
    check_gamma(gamma)
    return _speculative_loop(target, drafter, prompts, eos, max_new_tokens, params, gamma, generator, progress,
                             prompt_device(prompt))


def _speculative_loop(target, drafter, prompts, eos, max_new_tokens, params, gamma, generator, progress, device):
    rows = Rows(prompts, max_new_tokens, eos)
    stats = DecodeStats()
    passes_before = drafter.passes if isinstance(drafter, CountsPasses) else 0
    kept = prefill(target, prompts, device)
    if isinstance(drafter, SupportsObserve):
        drafter.observe(target, kept)  # the prefilled prompt, pending excluded
    pending = pending_tokens(rows, device)  # (B, 1)
    bar = tqdm(total=max_new_tokens, disable=not progress, desc="speculative")
    while rows.live:
        B, V = len(rows.live), target.vocab_size
        done = min(len(rows.emitted[b]) for b in rows.live)
        # drafts past the longest remaining budget could never be emitted: do not ask for them
        draft = drafter.propose(rows.contexts(device), min(gamma, rows.room() - 1), params, generator)
        check_draft(draft, drafter, B, V)
        K = draft.num_tokens
        logits, probs, tokens, num_emitted, kept, path = _verify_step(target, draft, pending, params, generator)
        if isinstance(drafter, SupportsObserve):
            drafter.observe(target, kept)
        if isinstance(drafter, CountsPasses):
            stats.draft_passes = drafter.passes - passes_before
        slots = tuple(rows.live)
        counts, ended = rows.extend(tokens.tolist(), num_emitted.tolist())
        counts = torch.tensor(counts, dtype=torch.long)
        stats.record(K, num_emitted, depth=None if path is None else path.shape[1], kept=counts)
        yield DecodeStep(slots, draft, logits, probs, tokens, num_emitted, counts, path)
        pending = tokens.gather(1, (num_emitted - 1)[:, None]).to(device)  # (B, 1)
        if ended:
            drop_rows(target, drafter, rows, ended, device)
            pending = pending_tokens(rows, device) if rows.live else pending
        bar.update(min((len(rows.emitted[b]) for b in rows.live), default=max_new_tokens) - done)
    bar.close()
    tokens, new_tokens, lengths = rows.result(device)
    return GenerateResult(tokens, new_tokens, stats, lengths)


def _run(steps: Generator[DecodeStep, None, GenerateResult], on_step) -> GenerateResult:
    """Drive a stepping generation to its end, handing each pass to ``on_step``."""
    if on_step is not None and not callable(on_step):
        raise TypeError(f"on_step must be a callable or None, got {type(on_step).__name__}")
    while True:
        try:
            step = next(steps)
        except StopIteration as stop:
            return stop.value
        if on_step is not None:
            on_step(step)


def _verify_step(target: Target, draft: Draft, pending: torch.Tensor, params: SamplingParams,
                 generator: torch.Generator | None):
    """One target pass over ``[pending] + draft``, verification, and the cache cut back to what was kept.

    Returns (target logits (B, K+1, V), target probs or None when greedy, tokens (B, K+1),
    num_emitted (B,), kept cache indices per row, accepted tree path or None)."""
    B, K, V = pending.shape[0], draft.num_tokens, target.vocab_size
    lengths_before = target.cache_lengths  # (B,)
    limit = getattr(target, "max_length", None)
    if limit is not None and int(lengths_before.max()) + K + 1 > limit:
        raise ValueError(f"the drafter proposed {K} tokens, which with the cached context "
                         f"({int(lengths_before.max())} tokens) exceed the target's max_length={limit}: use a "
                         f"smaller tree or a larger max_length")
    draft_tokens = draft.tokens.to(pending.device).long()  # a drafter may build its tokens on another device
    fed = torch.cat([pending, draft_tokens], dim=1)  # (B, K+1)
    if draft.parents is None:
        logits = target.forward(fed)  # (B, K+1, V)
        check_target_logits(logits, target, (B, K + 1, V))
        draft_tokens = draft_tokens.to(logits.device)
        probs = None if params.greedy else logits_to_probs(logits, params)  # (B, K+1, V)
        if params.greedy:
            tokens, num_emitted = verify_greedy(logits, draft_tokens)
        else:
            tokens, num_emitted = verify_chain(probs, draft.probs, draft_tokens, generator)
        # keep the pending token and the accepted drafts; the last emitted token becomes pending
        target.rollback(lengths_before + num_emitted.to(lengths_before.device))
        return logits, probs, tokens, num_emitted, [list(range(n)) for n in num_emitted.tolist()], None
    if not isinstance(target, SupportsKeep):
        raise ValueError(f"the drafter proposed a tree, but the target ({type(target).__name__}) has no "
                         "keep(indices) (specbook.protocols.SupportsKeep)")
    # the pending token is the tree's root: node i becomes index i+1, root children hang off it
    parents = draft.parents.to(pending.device).long()  # (K,)
    fed_parents = torch.cat([parents.new_full((1,), -1), torch.where(parents < 0, 0, parents + 1)])  # (K+1,)
    logits = target.forward(fed, parents=fed_parents)  # (B, K+1, V)
    check_target_logits(logits, target, (B, K + 1, V))
    draft_tokens = draft_tokens.to(logits.device)
    probs = None if params.greedy else logits_to_probs(logits, params)  # (B, K+1, V)
    if params.greedy:
        tokens, num_emitted, path = verify_tree_greedy(logits, draft_tokens, parents.to(logits.device))
    else:
        tokens, num_emitted, path = verify_tree(probs, draft.probs, draft_tokens, parents.to(logits.device), generator)
    # keep the pending token and the accepted path, packed into place
    kept = keep_indices(path, num_emitted)
    target.keep(kept)
    return logits, probs, tokens, num_emitted, kept, path
