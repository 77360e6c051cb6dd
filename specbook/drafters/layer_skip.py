"""Self-speculation by layer skipping: the target's first L blocks draft for the whole target.

Shape legend: B batch, K draft length, T sequence, V vocab, D width, L exit layer.

Draft & Verify (Zhang et al., 2023, arXiv:2309.08168) and LayerSkip (Elhoushi et al.,
2024, arXiv:2404.16710, sec. 4) draft with a cheaper pass of the target itself.  The
simplest version is an early exit: run blocks 0..L-1, then the target's own final
RMSNorm and LM head (``LlamaModel.forward(..., exit_layer=L)``).  No new weights, the
same tokenizer by construction, cost per draft step about (L * block + head) / (n_layers
* block + head) of a target step.

Sharing the KV cache.  Blocks 0..L-1 of the draft *are* blocks 0..L-1 of the target,
so the keys and values the target already cached for the context in those layers are
exactly the ones the draft needs: with ``share_cache=True`` the drafter writes its
draft tokens into the target's cache (layers < L), then rolls the cache back to where
it was.  The verification pass that follows overwrites those slots in every layer, so
nothing the draft wrote survives; the draft never prefills and never catches up.  This
relies on the decode loop's invariant (the target's cache holds the context minus its
last token, see ``decode.py``), which ``propose`` checks row by row.  ``share_cache=False``
runs the same early exit with a cache of its own (L layers), synced like any draft model.

Choosing L.  Along the target's own greedy trajectory, draft token i is verified only if
drafts 1..i-1 were accepted, i.e. its context *is* the trajectory; so the greedy
acceptance rate of exit layer L is the share of positions where the exit-L argmax equals
the full model's.  :func:`exit_layer_agreement` measures it for every L with one forward
per sequence; ``python -m specbook.bench.exit_layers`` combines it with the measured cost of
each L (:func:`choose_exit_layer`).
"""
from __future__ import annotations

import torch

from ..models.cache import KVCache
from ..models.llama import LlamaModel
from ..protocols import Draft
from ..sampling import SamplingParams, logits_to_probs, sample
from ..theory import speedup
from .draft_model import DraftModelDrafter


def _check_exit_layer(model: LlamaModel, exit_layer: int) -> None:
    n = model.config.n_layers
    if not isinstance(exit_layer, int) or isinstance(exit_layer, bool) or not 1 <= exit_layer < n:
        raise ValueError(f"exit_layer must be an int in [1, {n - 1}] (the target has {n} blocks), got {exit_layer!r}")


class EarlyExitModel:
    """First ``exit_layer`` blocks of a ``LlamaModel`` + its final norm and head, with its own cache.

    Implements the Target protocol, so it can draft through ``DraftModelDrafter``.
    """

    def __init__(self, model: LlamaModel, exit_layer: int, max_length: int = 2048):
        _check_exit_layer(model, exit_layer)
        self.model, self.exit_layer, self.max_length = model.eval(), exit_layer, max_length
        self.vocab_size = model.config.vocab_size
        self.cache: KVCache | None = None

    def reset(self, batch_size: int) -> None:
        c, w = self.model.config, self.model.embed.weight
        if self.cache is None or self.cache.batch_size != batch_size or self.cache.k.dtype != w.dtype:
            self.cache = KVCache(self.exit_layer, batch_size, c.n_kv_heads, c.head_dim, self.max_length,
                                 dtype=w.dtype, device=w.device)
        else:
            self.cache.reset()

    @property
    def cache_lengths(self) -> torch.Tensor:
        if self.cache is None:
            return torch.zeros(0, dtype=torch.long)
        return self.cache.lengths

    def select_rows(self, rows: list[int]) -> None:
        if self.cache is not None:
            self.cache.select_rows(rows)

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, parents: torch.Tensor | None = None) -> torch.Tensor:
        if parents is not None:
            raise ValueError("EarlyExitModel drafts chains only (parents must be None)")
        if self.cache is None:
            raise ValueError("call reset(batch_size) before forward")
        tokens = tokens.to(self.model.embed.weight.device)
        return self.model(tokens, self.cache, exit_layer=self.exit_layer).float()  # (B, N, V)

    def rollback(self, lengths: torch.Tensor) -> None:
        self.cache.rollback(lengths)


class LayerSkipDrafter:
    """Draft with the target's first ``exit_layer`` blocks (early exit), chains of up to gamma tokens.

    target: a ``LlamaTarget`` (``share_cache=True`` borrows its cache; the drafter must then be
            used with that same target in ``speculative_generate``), or a bare ``LlamaModel``
            (the drafter keeps its own cache of ``exit_layer`` layers; ``max_length`` sizes it).
    """

    def __init__(self, target, exit_layer: int, share_cache: bool | None = None, max_length: int = 2048):
        model = target if isinstance(target, LlamaModel) else getattr(target, "model", None)
        if not isinstance(model, LlamaModel):
            raise ValueError(f"target must be a LlamaTarget or a LlamaModel, got {type(target).__name__}")
        if share_cache is None:
            share_cache = not isinstance(target, LlamaModel)
        if share_cache and isinstance(target, LlamaModel):
            raise ValueError("share_cache=True needs the LlamaTarget whose cache is shared, not a bare LlamaModel")
        _check_exit_layer(model, exit_layer)
        self.target, self.model, self.exit_layer, self.share_cache = target, model, exit_layer, share_cache
        self.vocab_size = model.config.vocab_size
        own_length = getattr(target, "max_length", max_length)
        self._own = None if share_cache else DraftModelDrafter(EarlyExitModel(model, exit_layer, own_length))
        self.passes = 0  # early-exit forward passes (each costs about exit_layer / n_layers of a target pass)

    def select_rows(self, rows: list[int]) -> None:
        """Rows that ended leave the batch: a shared cache is the target's (the loop shrinks it)."""
        if self._own is not None:
            self._own.select_rows(rows)

    @torch.no_grad()
    def propose(self, contexts: list[torch.Tensor], gamma: int, params: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        if not self.share_cache:
            before = self._own.passes
            draft = self._own.propose(contexts, gamma, params, generator)
            self.passes += self._own.passes - before
            return draft
        B, V = len(contexts), self.vocab_size
        if gamma == 0:
            return Draft(torch.zeros(B, 0, dtype=torch.long), None if params.greedy else torch.zeros(B, 0, V))
        cache = self.target.cache
        if cache is None or cache.batch_size != B:
            raise ValueError("share_cache=True: the target must have been reset to this batch by speculative_generate")
        start = cache.lengths.clone()  # (B,)
        expected = [len(c) - 1 for c in contexts]
        if start.tolist() != expected:
            raise ValueError(f"share_cache=True needs the target's cache to hold each context minus its last token "
                             f"(the decode loop's invariant); cache lengths {start.tolist()}, contexts imply {expected}")
        device = self.model.embed.weight.device
        feed = torch.stack([c[-1:] for c in contexts]).to(device)  # (B, 1) the pending tokens
        tokens, probs = [], []
        try:
            for _ in range(gamma):
                logits = self.model(feed, cache, exit_layer=self.exit_layer)[:, -1].float()  # (B, V)
                self.passes += 1
                if params.greedy:
                    nxt = logits.argmax(-1)  # (B,)
                else:
                    q = logits_to_probs(logits, params)  # (B, V) the distribution the draft is sampled from
                    nxt = sample(q, generator)
                    probs.append(q)
                tokens.append(nxt)
                feed = nxt[:, None]
        finally:
            cache.rollback(start)  # the verification pass rewrites these slots in every layer
        return Draft(torch.stack(tokens, 1), None if params.greedy else torch.stack(probs, 1))


@torch.no_grad()
def exit_layer_agreement(model: LlamaModel, sequences: list[torch.Tensor], start: int | list[int] = 0,
                         layers: list[int] | None = None) -> dict[int, float]:
    """Share of positions where the exit-L argmax equals the full model's argmax, per exit layer L.

    sequences: 1-D token tensors, e.g. prompt + the target's greedy continuation; positions
    before ``start`` (an int or one per sequence, e.g. the prompt lengths) are not scored.
    On a greedy trajectory this is exactly the greedy acceptance rate of exit layer L (see
    the module docstring).  One forward per sequence scores every layer.
    """
    n = model.config.n_layers
    layers = list(range(1, n)) if layers is None else list(layers)
    for L in layers:
        _check_exit_layer(model, L)
    starts = [start] * len(sequences) if isinstance(start, int) else list(start)
    if len(starts) != len(sequences):
        raise ValueError(f"start must be an int or one int per sequence, got {len(starts)} for {len(sequences)}")
    hits = dict.fromkeys(layers, 0)
    total = 0
    for seq, s in zip(sequences, starts):
        seq = seq.to(model.embed.weight.device)[None]  # (1, T)
        logits, hidden = model(seq, return_hidden=layers)
        full = logits[0, s:].argmax(-1)  # (T - s,)
        total += full.numel()
        for L, h in zip(layers, hidden):
            hits[L] += int((model.lm_head(model.norm(h[0, s:])).argmax(-1) == full).sum())
    if total == 0:
        raise ValueError("no positions to score (every sequence shorter than its start)")
    return {L: hits[L] / total for L in layers}


def choose_exit_layer(agreement: dict[int, float], costs: dict[int, float], verify_cost, max_gamma: int = 8):
    """Best (predicted speedup, L, gamma) from measured acceptance and cost per exit layer.

    agreement: {L: alpha_L} (e.g. :func:`exit_layer_agreement`); costs: {L: c_L}
    (``specbook.bench.timing.exit_layer_costs``); verify_cost: v(n) for n = 1.. positions (a list), as in
    :func:`specbook.theory.speedup`.  Returns (speedup, L, gamma, table) with table[L] =
    (best speedup, best gamma) for every L; a best speedup below 1 means no exit layer pays.
    """
    table = {}
    for L, alpha in agreement.items():
        best = max((float(speedup(alpha, g, costs[L], verify_cost[min(g, len(verify_cost) - 1)])), g)
                   for g in range(1, max_gamma + 1))
        table[L] = best
    L = max(table, key=lambda k: table[k][0])
    return table[L][0], L, table[L][1], table


# Measured on SmolLM2-135M (``python -m specbook.bench.exit_layers``; docs/drafters.md): no exit layer
# pays (predicted speedups 0.62-0.75x at their best gamma, 1); the argmax, L = 4, accepts 4.5 % of its
# drafts, and L = 28 is within 1.5 % of it while accepting 53 %, so 28 shows the mechanism at work.
DEFAULT_EXIT_LAYER = 28
