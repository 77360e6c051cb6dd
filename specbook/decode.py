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
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from tqdm.auto import tqdm

from .protocols import CountsPasses, Draft, Drafter, SupportsKeep, SupportsObserve, SupportsPrefill, Target
from .sampling import SamplingParams, logits_to_probs, sample
from .verify import verify_chain, verify_greedy
from .verify_tree import keep_indices, verify_tree, verify_tree_greedy


@dataclass
class DecodeStats:
    """Counters of one generation.

    Two acceptance figures, because they answer different questions:

    * ``alpha`` = accepted / proposed: the share of all drafted tokens that survived.  Drafts
      after the first rejection were never tested, and count as lost work.
    * ``acceptance_rate`` = accepted / verified: the chance that a draft that *was* tested
      survives.  This estimates the alpha of Leviathan et al.'s E[tokens] formula, which
      assumes every position is accepted independently with the same probability.
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
    def alpha(self) -> float:
        return self.accepted / self.proposed if self.proposed else float("nan")

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.verified if self.verified else float("nan")

    @property
    def tau(self) -> float:
        """Mean tokens per target pass per row (bonus included); 1.0 for plain decoding."""
        rows_passes = len(self.accepted_per_step)
        return self.emitted / rows_passes if rows_passes else float("nan")

    @property
    def position_acceptance(self) -> list[float]:
        """P(accept draft i | draft i was verified), for each depth i."""
        return [a / p if p else float("nan") for a, p in zip(self.position_accepted, self.position_proposed)]

    def record(self, num_drafts: int, num_emitted: torch.Tensor, depth: int | None = None) -> None:
        """Count one verification pass.  ``depth``: for a tree of ``num_drafts`` nodes, its longest
        path; a tree is then counted per level (a level is verified when every level above it was
        accepted, and accepted when one of its nodes was), so ``verified`` counts levels."""
        self.target_passes += 1
        levels = num_drafts if depth is None else depth
        for n in num_emitted.tolist():
            accepted = n - 1
            self.proposed += num_drafts
            self.accepted += accepted
            self.emitted += n
            self.accepted_per_step.append(accepted)
            # depth i was verified iff all earlier drafts were accepted
            verified = min(accepted + 1, levels)
            self.verified += verified
            while len(self.position_proposed) < levels:
                self.position_proposed.append(0)
                self.position_accepted.append(0)
            for i in range(verified):
                self.position_proposed[i] += 1
                self.position_accepted[i] += int(i < accepted)

    def summary(self) -> str:
        return (f"target passes {self.target_passes}, draft passes {self.draft_passes}, "
                f"alpha {self.alpha:.3f} (accepted/proposed), acceptance rate {self.acceptance_rate:.3f} "
                f"(accepted/verified), tau {self.tau:.3f} tokens/pass")


@dataclass(frozen=True)
class DecodeStep:
    """One verification pass of :func:`speculative_generate`, handed to its ``on_step`` hook.

    draft:         the drafter's :class:`~specbook.protocols.Draft` (tokens (B, K), probs, parents)
    target_logits: (B, K+1, V) the target's logits at the pending token and at every draft node
    target_probs:  (B, K+1, V) the laws the verifier compared against (after SamplingParams),
                   or None with greedy verification (temperature 0), which reads the logits
    tokens:        (B, K+1) the emitted tokens, left-aligned; row b's first ``num_emitted[b]`` count
    num_emitted:   (B,) accepted drafts + 1 (the corrected or bonus token)
    path:          (B, depth) the accepted root-to-node path of a tree draft (-1 padded); None for a chain
    """

    draft: Draft
    target_logits: torch.Tensor
    target_probs: torch.Tensor | None
    tokens: torch.Tensor
    num_emitted: torch.Tensor
    path: torch.Tensor | None = None


@dataclass
class GenerateResult:
    tokens: torch.Tensor  # (B, T + max_new_tokens) prompt followed by the generated tokens
    new_tokens: torch.Tensor  # (B, max_new_tokens)
    stats: DecodeStats


def _check_prompt(prompt, vocab_size: int) -> torch.Tensor:
    prompt = torch.as_tensor(prompt)
    if prompt.ndim == 1:
        prompt = prompt[None]
    if prompt.ndim != 2 or prompt.shape[1] == 0 or prompt.shape[0] == 0:
        raise ValueError(f"prompt must be a non-empty (T,) or (B, T) token tensor, got shape {tuple(prompt.shape)}")
    if prompt.is_floating_point():
        raise ValueError(f"prompt must hold integer token ids, got dtype {prompt.dtype}")
    if prompt.min() < 0 or prompt.max() >= vocab_size:
        raise ValueError(f"prompt has token ids outside [0, {vocab_size}): min {int(prompt.min())}, max {int(prompt.max())}")
    return prompt.long()


def _check_common(max_new_tokens: int, params: SamplingParams) -> None:
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
    if not isinstance(params, SamplingParams):
        raise ValueError(f"params must be a SamplingParams, got {type(params).__name__}")


def _start(target: Target, prompt: torch.Tensor) -> torch.Tensor:
    """Prefill all prompt tokens but the last; return the pending token (B, 1)."""
    target.reset(prompt.shape[0])
    if prompt.shape[1] > 1:
        if isinstance(target, SupportsPrefill):  # fills the cache without computing logits
            target.prefill(prompt[:, :-1])
        else:
            target.forward(prompt[:, :-1])
    return prompt[:, -1:]


def generate(
    target: Target,
    prompt,
    max_new_tokens: int,
    params: SamplingParams = SamplingParams(),
    generator: torch.Generator | None = None,
    progress: bool = False,
) -> GenerateResult:
    """Plain autoregressive decoding: one target pass per token."""
    _check_common(max_new_tokens, params)
    prompt = _check_prompt(prompt, target.vocab_size)
    stats = DecodeStats()
    pending = _start(target, prompt)  # (B, 1)
    out = []
    for _ in tqdm(range(max_new_tokens), disable=not progress, desc="generate"):
        logits = target.forward(pending)[:, -1]  # (B, V)
        nxt = logits.argmax(-1) if params.greedy else sample(logits_to_probs(logits, params), generator)  # (B,)
        stats.record(0, torch.ones(prompt.shape[0], dtype=torch.long))
        pending = nxt[:, None]
        out.append(pending)
    new = torch.cat(out, dim=1)
    return GenerateResult(torch.cat([prompt, new], dim=1), new, stats)


def _draft_passes(drafter: Drafter) -> int:
    return int(drafter.passes) if isinstance(drafter, CountsPasses) else 0


def _verify_step(target: Target, pending: torch.Tensor, draft: Draft, params: SamplingParams,
                 generator: torch.Generator | None, stats: DecodeStats) -> tuple[DecodeStep, list[list[int]]]:
    """One target pass over ``pending`` (B, 1) + the draft, verification, and the cache update.

    Returns what happened (a :class:`DecodeStep`) and ``kept``: per row, the indices of the new
    tokens that stayed in the cache (for :class:`~specbook.protocols.SupportsObserve`).
    """
    K = draft.num_tokens
    lengths_before = target.cache_lengths  # (B,)
    draft_tokens = draft.tokens.to(pending.device)  # a drafter may build its tokens on another device
    fed = torch.cat([pending, draft_tokens], dim=1)  # (B, K+1)
    target_probs = path = None
    if draft.parents is None:
        logits = target.forward(fed)  # (B, K+1, V)
        if params.greedy:
            tokens, num_emitted = verify_greedy(logits, draft_tokens)
        else:
            target_probs = logits_to_probs(logits, params)  # (B, K+1, V)
            tokens, num_emitted = verify_chain(target_probs, draft.probs, draft_tokens, generator)
        # keep the pending token and the accepted drafts; the last emitted token becomes pending
        target.rollback(lengths_before + num_emitted)
        kept = [list(range(n)) for n in num_emitted.tolist()]
        stats.record(K, num_emitted)
    else:
        if not isinstance(target, SupportsKeep):
            raise ValueError(f"the drafter proposed a tree, but the target ({type(target).__name__}) has no "
                             "keep(indices) (specbook.protocols.SupportsKeep)")
        # the pending token is the tree's root: node i becomes index i+1, root children hang off it
        parents = draft.parents.to(pending.device).long()  # (K,)
        fed_parents = torch.cat([parents.new_full((1,), -1), torch.where(parents < 0, 0, parents + 1)])  # (K+1,)
        logits = target.forward(fed, parents=fed_parents)  # (B, K+1, V)
        if params.greedy:
            tokens, num_emitted, path = verify_tree_greedy(logits, draft_tokens, parents)
        else:
            target_probs = logits_to_probs(logits, params)  # (B, K+1, V)
            tokens, num_emitted, path = verify_tree(target_probs, draft.probs, draft_tokens, parents, generator)
        # keep the pending token and the accepted path, packed into place
        kept = keep_indices(path, num_emitted)
        target.keep(kept)
        stats.record(K, num_emitted, depth=path.shape[1])
    return DecodeStep(draft, logits, target_probs, tokens, num_emitted, path), kept


def speculative_generate(
    target: Target,
    drafter: Drafter,
    prompt,
    max_new_tokens: int,
    params: SamplingParams = SamplingParams(),
    gamma: int = 4,
    generator: torch.Generator | None = None,
    progress: bool = False,
    on_step: Callable[[DecodeStep], None] | None = None,
) -> GenerateResult:
    """Speculative decoding with any drafter; the output law equals :func:`generate`'s exactly.

    ``gamma`` is the number of drafts requested per step (a drafter may return fewer, e.g. an
    n-gram drafter without a match, or adapt it).  With ``params.temperature == 0`` verification is
    greedy and the output equals greedy autoregressive decoding token for token.

    A drafter that returns ``Draft.parents`` proposes a tree (Medusa, EAGLE): the target needs
    ``forward(tokens, parents)`` and ``keep(indices)``; ``Draft.probs`` row i is the law node i was
    drawn from (None for deterministic candidates such as top-k lists).  Stats then count
    ``proposed`` = tree nodes and ``accepted`` = accepted path length, per row and pass.

    ``on_step``: called with a :class:`DecodeStep` after every verification pass (None: nothing
    is recorded).  It must not change the target or the drafter.
    """
    _check_common(max_new_tokens, params)
    if not isinstance(gamma, int) or gamma < 0:
        raise ValueError(f"gamma must be an int >= 0, got {gamma!r}")
    if on_step is not None and not callable(on_step):
        raise ValueError(f"on_step must be a callable or None, got {type(on_step).__name__}")
    prompt = _check_prompt(prompt, target.vocab_size)
    B = prompt.shape[0]
    stats = DecodeStats()
    draft_passes_before = _draft_passes(drafter)
    pending = _start(target, prompt)  # (B, 1)
    observes = isinstance(drafter, SupportsObserve)
    if observes:
        drafter.observe(target, [list(range(prompt.shape[1] - 1))] * B)  # the prefilled prompt, pending excluded
    emitted: list[list[int]] = [[] for _ in range(B)]
    prompt_rows = prompt.tolist()
    bar = tqdm(total=max_new_tokens, disable=not progress, desc="speculative")
    while min(len(e) for e in emitted) < max_new_tokens:
        contexts = [torch.tensor(prompt_rows[b] + emitted[b], device=prompt.device) for b in range(B)]
        draft: Draft = drafter.propose(contexts, gamma, params, generator)
        step, kept = _verify_step(target, pending, draft, params, generator, stats)
        if observes:
            drafter.observe(target, kept)
        stats.draft_passes = _draft_passes(drafter) - draft_passes_before
        if on_step is not None:
            on_step(step)
        done = min(len(e) for e in emitted)
        for row, new, n in zip(emitted, step.tokens.tolist(), step.num_emitted.tolist()):
            row.extend(new[:n])
        pending = step.tokens.gather(1, (step.num_emitted - 1)[:, None])  # (B, 1)
        bar.update(min(len(e) for e in emitted) - done)
    bar.close()
    new = torch.tensor([e[:max_new_tokens] for e in emitted], dtype=torch.long, device=prompt.device)
    return GenerateResult(torch.cat([prompt, new], dim=1), new, stats)
