"""The two engines the benchmark runs every drafter on, and what one run cost.

Shape legend: T prompt length, N new tokens.

``specbook`` runs :func:`specbook.decode.generate` / :func:`~specbook.decode.speculative_generate`
on the readable Llama (:class:`~specbook.models.LlamaTarget`); ``transformers`` runs
transformers' own ``generate`` on ``LlamaForCausalLM`` with the same weights.  Both stop right
after the end-of-turn token when given ``eos_token_id`` (the benchmark's default: the reply,
nothing the model invents after it), or produce exactly ``max_new_tokens`` tokens when it is
None (as serving benchmarks do with "ignore EOS").  Drafters are
looked up in :mod:`specbook.bench.registry`; the verify-cost curve is :mod:`specbook.bench.timing`'s.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ..decode import generate, speculative_generate
from ..models import LlamaTarget
from ..sampling import SamplingParams
from .timing import synchronize


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


class SpecbookEngine:
    """specbook's own decoding loop on the readable Llama."""

    name = "specbook"

    def __init__(self, model, max_length: int):
        self.target = LlamaTarget(model, max_length=max_length)
        self.device = self.target.device

    def run(self, prompt_ids: list[int], drafter, params: SamplingParams, max_new_tokens: int, gamma: int,
            generator: torch.Generator | None = None, eos_token_id: int | None = None) -> RunResult:
        prompt = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
        synchronize(self.device)
        t0 = time.perf_counter()
        if drafter is None:
            out = generate(self.target, prompt, max_new_tokens, params=params, generator=generator, eos_token_id=eos_token_id)
        else:
            out = speculative_generate(self.target, drafter, prompt, max_new_tokens, params=params, gamma=gamma, generator=generator,
                                       eos_token_id=eos_token_id)
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
            gamma: int, generator: torch.Generator | None = None, eos_token_id: int | None = None) -> RunResult:
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
                                      min_new_tokens=None, eos_token_id=eos_token_id,
                                      pad_token_id=self.tokenizer.eos_token_id,
                                      **sampling, **generate_kwargs)
        new = out[0, len(prompt_ids):].tolist()
        seconds = time.perf_counter() - t0
        widths, self._widths = self._widths, None
        if eos_token_id is not None and eos_token_id in new:
            new = new[:new.index(eos_token_id) + 1]  # generate() pads nothing at batch 1, but be sure
        elif len(new) != max_new_tokens:
            raise RuntimeError(f"transformers generated {len(new)} tokens without an end token, expected "
                               f"{max_new_tokens}")
        proposed = (widths[0] - len(prompt_ids)) + sum(w - 1 for w in widths[1:]) if generate_kwargs else 0
        passes = len(widths)
        return RunResult(new, seconds, passes, len(new), proposed, len(new) - passes)
