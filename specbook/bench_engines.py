"""What the benchmark runs: a registry of drafters, two engines, and the verify-cost curve.

Shape legend: T prompt length, N new positions in one forward, V vocab.

* **Drafters** are looked up by name in :data:`DRAFTERS`.  An entry knows how to build
  specbook's drafter for a target model and, where transformers has the same idea built
  in, which ``generate`` keyword arguments switch it on there.  ``none`` is plain
  decoding.  A new drafter only registers a factory::

      register_drafter("mine", make=lambda model, tokenizer, *, gamma, target=None, **_: MyDrafter(model))

* **Engines**: ``specbook`` runs :func:`specbook.decode.generate` /
  :func:`~specbook.decode.speculative_generate` on the readable Llama
  (:class:`~specbook.models.LlamaTarget`); ``transformers`` runs transformers' own
  ``generate`` on ``LlamaForCausalLM`` with the same weights.  Both produce exactly
  ``max_new_tokens`` tokens and do not stop at the end-of-turn token (as serving
  benchmarks do with "ignore EOS"), so every run does the same amount of work.

* **Verify cost** v(n) = time of one target forward over n new positions (on top of a
  cached context) / time over 1 position: the ``verify_cost`` of
  :func:`specbook.theory.speedup`.  Leviathan et al. (2023, Section 3.4) take v = 1;
  on a CPU it is a measurement.
"""
from __future__ import annotations

import inspect
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from .decode import generate, speculative_generate
from .drafters import NGramDrafter
from .drafters.adaptive import make_draft_adaptive, make_ngram_adaptive
from .drafters.eagle import DynamicTree, make_eagle
from .drafters.layer_skip import DEFAULT_EXIT_LAYER, make_layer_skip
from .drafters.medusa import make_medusa
from .drafters.small_model import make_distilled
from .models import LlamaTarget
from .sampling import SamplingParams


# Tree sizes for the benchmark.  The "-large" ones show how many tokens one target pass can
# yield; the others were the fastest in a sweep on a 2-core x86 CPU, where verifying n
# positions costs v(n) = 1.1 (n = 2), 1.45 (n = 5), 1.9 (n = 9) one-position passes
# (docs/heads.md).  The shipped weights' own default trees (EAGLE 24 nodes, Medusa 16) sit
# in between and serve the lessons and tests.
LARGE_EAGLE_TREE = DynamicTree(depth=8, top_k=8, num_nodes=64)
CPU_EAGLE_TREE = DynamicTree(depth=2, top_k=2, num_nodes=3)
CPU_MEDUSA_TREE = 4


@dataclass(frozen=True)
class DrafterSpec:
    """make(model, tokenizer, *, gamma, device, dtype, target) -> Drafter, or None for plain decoding.

    ``target`` is the ``LlamaTarget`` the loop decodes with (a drafter may share its cache);
    factories should accept and ignore keyword arguments they do not use (``**_``).

    transformers_kwargs(hf_model, tokenizer, *, gamma) -> extra ``generate`` kwargs, or None
    when transformers has no equivalent (that engine then skips this drafter).
    """

    name: str
    make: Callable
    transformers_kwargs: Callable | None = None
    description: str = ""


DRAFTERS: dict[str, DrafterSpec] = {}


def register_drafter(name: str, make: Callable, *, transformers_kwargs: Callable | None = None,
                     description: str = "", replace: bool = False) -> DrafterSpec:
    if not isinstance(name, str) or not name or "," in name:
        raise ValueError(f"name must be a non-empty string without commas, got {name!r}")
    if name in DRAFTERS and not replace:
        raise ValueError(f"drafter {name!r} is already registered (pass replace=True to override)")
    DRAFTERS[name] = spec = DrafterSpec(name, make, transformers_kwargs, description)
    return spec


def get_drafter(name: str) -> DrafterSpec:
    if name not in DRAFTERS:
        raise ValueError(f"unknown drafter {name!r}; available: {', '.join(DRAFTERS)}")
    return DRAFTERS[name]


register_drafter("none", lambda model, tokenizer, **_: None, transformers_kwargs=lambda hf, tok, **_: {},
                 description="plain autoregressive decoding (the baseline)")
register_drafter("ngram", lambda model, tokenizer, **_: NGramDrafter(max_ngram=3),
                 transformers_kwargs=lambda hf, tok, *, gamma, **_: {"prompt_lookup_num_tokens": gamma,
                                                                     "max_matching_ngram_size": 3},
                 description="prompt lookup: longest suffix match of up to 3 tokens (no model)")
register_drafter("ngram-adaptive", make_ngram_adaptive, description="prompt lookup (n <= 6), draft length chosen "
                 "per step from recent acceptance per match length and the measured verify cost")
register_drafter("layerskip", make_layer_skip, description=f"the target's first {DEFAULT_EXIT_LAYER} blocks + its "
                 "norm and head draft (early exit); shares the target's cache when given target=",
                 transformers_kwargs=lambda hf, tok, *, gamma, **_: {"assistant_early_exit": DEFAULT_EXIT_LAYER,
                                                                     "num_assistant_tokens": gamma,
                                                                     "num_assistant_tokens_schedule": "constant"})
register_drafter("draft", make_distilled, description="2-block distilled draft model, 8192-token head (shipped)")
register_drafter("draft-adaptive", make_draft_adaptive, description="the distilled draft with the adaptive policy")
register_drafter("medusa", lambda model, tokenizer=None, **_: make_medusa(model, tree=CPU_MEDUSA_TREE),
                 description=f"4 Medusa heads on the last hidden state, their {CPU_MEDUSA_TREE}-node measured tree "
                 "(the size that was fastest on a 2-core CPU)")
register_drafter("medusa-chain", lambda model, tokenizer=None, **_: make_medusa(model, tree=None),
                 description="the Medusa heads as a chain (one guess per head)")
register_drafter("eagle", lambda model, tokenizer=None, **_: make_eagle(model, tree=CPU_EAGLE_TREE),
                 description="EAGLE feature head, EAGLE-2 dynamic tree of 3 nodes, depth 2 (the size that was "
                 "fastest on a 2-core CPU)")
register_drafter("eagle-chain", lambda model, tokenizer=None, **_: make_eagle(model, tree=None),
                 description="the EAGLE head as a chain of gamma drafts")
register_drafter("medusa-large", lambda model, tokenizer=None, **_: make_medusa(model, tree=64),
                 description="the Medusa heads with their measured 64-node tree (tokens per pass, not speed)")
register_drafter("eagle-large", lambda model, tokenizer=None, **_: make_eagle(model, tree=LARGE_EAGLE_TREE),
                 description="the EAGLE head with a 64-node dynamic tree, depth 8 (tokens per pass, not speed)")


# --------------------------------------------------------------------------- engines

@dataclass
class RunResult:
    """One generation: the new tokens and what it cost."""

    new_ids: list[int]
    seconds: float
    passes: int  # target forwards that emitted tokens (specbook: prefill excluded; see tau)
    emitted: int  # tokens emitted by those passes (can exceed len(new_ids) at the last step)
    proposed: int  # draft tokens sent to verification
    accepted: int  # draft tokens accepted
    verified: int | None = None  # drafts actually tested (up to the first rejection); None if unknown


def synchronize(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


class SpecbookEngine:
    """specbook's own decoding loop on the readable Llama."""

    name = "specbook"

    def __init__(self, model, max_length: int):
        self.target = LlamaTarget(model, max_length=max_length)
        self.device = self.target.device

    def run(self, prompt_ids: list[int], drafter, params: SamplingParams, max_new_tokens: int, gamma: int,
            generator: torch.Generator | None = None) -> RunResult:
        prompt = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
        synchronize(self.device)
        t0 = time.perf_counter()
        if drafter is None:
            out = generate(self.target, prompt, max_new_tokens, params, generator)
        else:
            out = speculative_generate(self.target, drafter, prompt, max_new_tokens, params, gamma, generator)
        new = out.new_tokens[0].tolist()  # .tolist() waits for the device
        seconds = time.perf_counter() - t0
        s = out.stats
        return RunResult(new, seconds, len(s.accepted_per_step), s.emitted, s.proposed, s.accepted, s.verified)


class TransformersEngine:
    """transformers' ``generate`` (plain, prompt lookup, assistant model) on ``LlamaForCausalLM``.

    Passes and drafts are counted from the target's forward calls: the first call holds the
    prompt plus K drafts, every later call the last emitted token plus K drafts.
    """

    name = "transformers"

    def __init__(self, hf_model, tokenizer):
        self.model = hf_model.eval()
        self.tokenizer = tokenizer
        self.device = next(hf_model.parameters()).device
        self._widths: list[int] | None = None
        self._layers = hf_model.config.num_hidden_layers
        hf_model.register_forward_pre_hook(self._count, with_kwargs=True)

    def _count(self, module, args, kwargs):
        # transformers' early-exit assistant is this same model, called while its config says
        # fewer layers (``assistant_early_exit``): those calls are drafts, not target passes
        if module.config.num_hidden_layers < self._layers:
            return
        if self._widths is not None:
            ids = kwargs.get("input_ids", args[0] if args else None)
            if ids is not None:
                self._widths.append(int(ids.shape[1]))

    def run(self, prompt_ids: list[int], generate_kwargs: dict, params: SamplingParams, max_new_tokens: int,
            gamma: int, generator: torch.Generator | None = None) -> RunResult:
        # transformers' sampling draws from torch's global generator; `generator` cannot be passed in
        prompt = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
        if params.greedy:
            sampling = dict(do_sample=False, temperature=None, top_k=None, top_p=None)
        else:
            sampling = dict(do_sample=True, temperature=params.temperature, top_k=params.top_k, top_p=params.top_p)
        self._widths = []
        synchronize(self.device)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = self.model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=max_new_tokens,
                                      min_new_tokens=None, eos_token_id=None, pad_token_id=self.tokenizer.eos_token_id,
                                      **sampling, **generate_kwargs)
        new = out[0, len(prompt_ids):].tolist()
        seconds = time.perf_counter() - t0
        widths, self._widths = self._widths, None
        if len(new) != max_new_tokens:
            raise RuntimeError(f"transformers generated {len(new)} tokens, expected {max_new_tokens} "
                               "(did it stop at an end token?)")
        proposed = (widths[0] - len(prompt_ids)) + sum(w - 1 for w in widths[1:]) if generate_kwargs else 0
        passes = len(widths)
        return RunResult(new, seconds, passes, len(new), proposed, len(new) - passes)


# --------------------------------------------------------------------------- verify cost

class _HFChain:
    """The smallest Target-like wrapper of a transformers model: append a chain, crop back."""

    def __init__(self, hf_model):
        self.model = hf_model
        self.device = next(hf_model.parameters()).device
        self.cache, self.length = None, 0
        # transformers 5 renamed `past_key_values` to `cache`
        self._cache_kwarg = "cache" if "cache" in inspect.signature(hf_model.forward).parameters else "past_key_values"

    def reset(self, batch_size: int = 1) -> None:
        from transformers import DynamicCache

        self.cache, self.length = DynamicCache(), 0

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        positions = torch.arange(self.length, self.length + n, device=self.device)[None]
        out = self.model(input_ids=tokens, position_ids=positions, use_cache=True,
                         **{self._cache_kwarg: self.cache})
        self.length += n
        return out.logits

    def rollback(self, lengths) -> None:
        keep = int(lengths[0])
        if keep < self.length:
            self.cache.crop(keep - self.length)  # negative = tokens to drop (transformers 4 and 5)
        self.length = keep


def verify_cost_curve(target, context_ids: list[int], max_positions: int = 17, reps: int = 5) -> dict:
    """Median time of one forward over n = 1..max_positions new positions after ``context_ids``.

    ``target`` is a :class:`LlamaTarget`, or a transformers causal LM (timed through its own
    ``forward`` with a ``DynamicCache``).  The order of n is rotated every repetition so
    drifting machine load spreads over all n.  Returns {"n": [...], "seconds": [...],
    "v": [t(n) / t(1)], "context": len(context_ids), "reps": reps}.
    """
    if not isinstance(max_positions, int) or max_positions < 1:
        raise ValueError(f"max_positions must be an int >= 1, got {max_positions!r}")
    if not isinstance(reps, int) or reps < 1:
        raise ValueError(f"reps must be an int >= 1, got {reps!r}")
    if not context_ids:
        raise ValueError("context_ids must hold at least one token")
    chain = target if isinstance(target, LlamaTarget) else _HFChain(target)
    device = chain.device
    ctx = torch.tensor([context_ids], dtype=torch.long, device=device)
    chain.reset(1)
    chain.forward(ctx)
    base = torch.tensor([len(context_ids)])
    fresh = ctx[:, -max_positions:].repeat(1, max_positions)[:, :max_positions]  # (1, max_positions) any tokens
    ns = list(range(1, max_positions + 1))
    chain.forward(fresh[:, :1])  # warm-up
    chain.rollback(base)
    times: dict[int, list[float]] = {n: [] for n in ns}
    for rep in range(reps):
        order = ns[rep % len(ns):] + ns[:rep % len(ns)]
        for n in order:
            synchronize(device)
            t0 = time.perf_counter()
            chain.forward(fresh[:, :n])
            synchronize(device)
            times[n].append(time.perf_counter() - t0)
            chain.rollback(base)
    med = [statistics.median(times[n]) for n in ns]
    return {"n": ns, "seconds": med, "v": [m / med[0] for m in med], "context": len(context_ids), "reps": reps}
