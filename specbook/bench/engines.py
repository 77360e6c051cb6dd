"""The engines the benchmark runs every drafter on, and what one run cost (the optional third,
llama.cpp, is :mod:`specbook.bench.llamacpp`).

Shape legend: T prompt length, N new tokens.

``specbook`` runs :func:`specbook.decode.generate` / :func:`~specbook.decode.speculative_generate`
on the readable Llama (:class:`~specbook.models.LlamaTarget`); ``compiled`` runs the same loop with
the passes compiled (:class:`~specbook.models.compiled.CompiledTarget`); ``transformers`` runs
transformers' own ``generate`` on ``LlamaForCausalLM`` with the same weights.  Both stop right
after the end-of-turn token when given ``eos_token_id`` (the benchmark's default: the reply,
nothing the model invents after it), or produce exactly ``max_new_tokens`` tokens when it is
None (as serving benchmarks do with "ignore EOS").  Drafters are
looked up in :mod:`specbook.bench.registry`; the verify-cost curve is :mod:`specbook.bench.timing`'s.

Every run hands back its :class:`~specbook.decode_stats.DecodeStats`, from which
:func:`specbook.metrics.engine_metrics` reads vLLM's and SGLang's acceptance figures.  specbook's
loop counts them itself.  transformers' are rebuilt from what its target was fed
(:func:`stats_from_calls`): a pass feeds the last kept token and K drafts, the drafts it accepted
are the longest prefix of them that the output repeats (a rejected draft is never the token
emitted in its place: greedy picks another token, a sampled match picks another token, and the
residual max(0, p - q) is 0 at a rejected draft), and each later pass must start with the token
this reading says was kept last; a run where that does not hold keeps ``stats = None``.

``verifier`` (specbook, sampled chain drafts): ``"token"`` is
:func:`specbook.verify.accept_chain`, ``"block"`` :func:`specbook.verify_block.accept_block`
(Sun et al., ICLR 2025).  :attr:`RunResult.verified_by` says what judged the drafts in fact:
``"greedy"`` at temperature 0 (both rules are greedy matching there), ``"tree"`` for tree drafts
(:func:`specbook.verify_tree.accept_tree`; the chain verifier is not used), None without drafts.
"""
from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..decode import generate, speculative_generate
from ..decode_stats import DecodeStats
from ..drafters.eagle import shipped_feature_layers
from ..models import LlamaTarget
from ..models.compiled import CompiledTarget
from ..sampling import SamplingParams
from ..verify import accept_chain
from ..verify_block import accept_block
from .timing import synchronize

VERIFIERS = {"token": accept_chain, "block": accept_block}  # --verifier: how sampled chain drafts are judged


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
    stats: DecodeStats | None = None  # the counters engine_metrics reads; None when they could not be rebuilt
    verified_by: str | None = None  # "greedy", "token", "block", "tree"; None when nothing was drafted

    def counters(self) -> dict:
        """The per-depth counters of a bench record (None when unknown), summed into a row's
        engine_metrics by :func:`specbook.bench.results.acceptance`."""
        s = self.stats
        return {"position_proposed": None if s is None else list(s.position_proposed),
                "position_accepted": None if s is None else list(s.position_accepted)}


class SpecbookEngine:
    """specbook's own decoding loop on the readable Llama."""

    name = "specbook"

    def __init__(self, model, max_length: int):
        self.target = LlamaTarget(model, max_length=max_length)
        self.device = self.target.device

    def run(self, prompt_ids: list[int], drafter, params: SamplingParams, max_new_tokens: int, gamma: int,
            generator: torch.Generator | None = None, eos_token_id: int | None = None,
            verifier: str = "token") -> RunResult:
        prompt = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
        trees = []  # one flag per pass: was the draft a tree (then accept_tree ran, not the chain verifier)
        synchronize(self.device)
        t0 = time.perf_counter()
        if drafter is None:
            out = generate(self.target, prompt, max_new_tokens, params=params, generator=generator, eos_token_id=eos_token_id)
        else:
            out = speculative_generate(self.target, drafter, prompt, max_new_tokens, params=params, gamma=gamma, generator=generator,
                                       eos_token_id=eos_token_id, chain_verifier=VERIFIERS[verifier],
                                       on_step=lambda step: trees.append(step.draft.parents is not None))
        new = out.new_tokens[0].tolist()  # .tolist() waits for the device
        seconds = time.perf_counter() - t0
        s = out.stats
        return RunResult(new, seconds, len(s.accepted_per_step), s.emitted, s.proposed, s.accepted, s.verified, s,
                         verified_by(s, params, "tree" if any(trees) else verifier))


class CompiledEngine(SpecbookEngine):
    """specbook's decoding loop, plain and with every drafter, its passes compiled
    (:class:`specbook.models.compiled.CompiledTarget`, batch 1, ahead of time): one compiled
    package per pass width in ``widths``."""

    name = "compiled"
    AUTOTUNE = True  # inductor times its matrix-product templates against oneDNN's (tests switch it off)
    # each width exported and compiled by AOTInductor, called without torch.compile's guards and Python wrapper: on a
    # 2-core AMD EPYC, 64 tokens of plain decoding ran 93.0 against 72.6 tokens/s in bfloat16, 65.0 against 61.6 in
    # float32 (medians of 5, side by side; docs/bench.md, "Compiled ahead of time")
    AHEAD_OF_TIME = True

    def __init__(self, model, max_length: int, widths: Sequence[int] = (1,)):
        # compiles on first use; warm_up times each width's passes on both kinds of product kernels.  The earlier
        # blocks the shipped EAGLE head reads (if any) are compiled in: returning them costs no work
        self.target = CompiledTarget(model, max_length, widths, autotune=self.AUTOTUNE, products="timed",
                                     hidden_layers=shipped_feature_layers() or None, ahead_of_time=self.AHEAD_OF_TIME)
        self.device = self.target.device

    def run(self, *args, **kwargs) -> RunResult:
        wide = self.target.wide_passes
        res = super().run(*args, **kwargs)
        if self.target.wide_passes > wide:
            warnings.warn(f"the compiled engine ran {self.target.wide_passes - wide} verify passes eagerly: "
                          f"drafts wider than its compiled widths {self.target.widths}", stacklevel=2)
        return res


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
        self._calls: list[list[int]] | None = None  # the ids fed to each target pass of the current run
        self._layers = hf_model.config.num_hidden_layers
        hf_model.register_forward_pre_hook(self._count, with_kwargs=True)

    def _count(self, module, args, kwargs):
        # transformers' early-exit assistant is this same model, called while its config says
        # fewer layers (``assistant_early_exit``): those calls are drafts, not target passes
        if module.config.num_hidden_layers < self._layers:
            return
        if self._calls is not None:
            ids = kwargs.get("input_ids", args[0] if args else None)
            if ids is not None:
                self._calls.append(ids[0].tolist())

    def run(self, prompt_ids: list[int], generate_kwargs: dict, params: SamplingParams, max_new_tokens: int,
            gamma: int, generator: torch.Generator | None = None, eos_token_id: int | None = None,
            verifier: str = "token") -> RunResult:
        # transformers' sampling draws from torch's global generator; `generator` cannot be passed in.
        # It has one rule of its own (token-wise, or matching a sample for drafts without a law): `verifier`
        # is not used
        prompt = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
        if params.greedy:
            sampling = dict(do_sample=False, temperature=None, top_k=None, top_p=None)
        else:
            sampling = dict(do_sample=True, temperature=params.temperature, top_k=params.top_k, top_p=params.top_p)
        self._calls = []
        synchronize(self.device)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = self.model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=max_new_tokens,
                                      min_new_tokens=None, eos_token_id=eos_token_id,
                                      pad_token_id=self.tokenizer.eos_token_id,
                                      **sampling, **generate_kwargs)
        new = out[0, len(prompt_ids):].tolist()
        seconds = time.perf_counter() - t0
        calls, self._calls = self._calls, None
        if eos_token_id is not None and eos_token_id in new:
            new = new[:new.index(eos_token_id) + 1]  # generate() pads nothing at batch 1, but be sure
        elif len(new) != max_new_tokens:
            raise RuntimeError(f"transformers generated {len(new)} tokens without an end token, expected "
                               f"{max_new_tokens}")
        return result_from_calls(prompt_ids, calls, new, seconds, params, drafted=bool(generate_kwargs))


def result_from_calls(prompt_ids: list[int], calls: list[list[int]], new: list[int], seconds: float,
                      params: SamplingParams, drafted: bool) -> RunResult:
    """The :class:`RunResult` of an engine whose target passes were recorded as the ids fed to each
    (:func:`stats_from_calls`); when they do not explain ``new``, the totals only (``stats`` None).
    ``drafted``: whether the run had a drafter (else nothing fed past the prompt is a draft)."""
    stats = stats_from_calls(prompt_ids, calls, new)
    if stats is not None:
        return RunResult(new, seconds, len(calls), stats.emitted, stats.proposed, stats.accepted, stats.verified,
                         stats, verified_by(stats, params, "token"))
    widths = [len(c) for c in calls]
    proposed = (widths[0] - len(prompt_ids)) + sum(w - 1 for w in widths[1:]) if drafted else 0
    return RunResult(new, seconds, len(widths), len(new), proposed, len(new) - len(widths),
                     verified_by=None if not proposed else "greedy" if params.greedy else "token")


def verified_by(stats: DecodeStats, params: SamplingParams, rule: str) -> str | None:
    """What judged a run's drafts: None if it drafted nothing, "greedy" at temperature 0, else ``rule``."""
    if not stats.proposed:
        return None
    return "greedy" if params.greedy else rule


def stats_from_calls(prompt_ids: list[int], calls: list[list[int]], new: list[int]) -> DecodeStats | None:
    """The :class:`DecodeStats` of a batch-1 chain run, rebuilt from the ids fed to each target pass
    (the first: the prompt and K drafts; each later one: the last kept token and K drafts) and the
    tokens the run kept (``new``, cut after an end token).  None when the passes do not fit ``new``."""
    stats, done = DecodeStats(), 0  # done: tokens of `new` accounted for by the passes so far
    for i, fed in enumerate(calls):
        if i == 0:
            if fed[: len(prompt_ids)] != list(prompt_ids):
                return None
            drafts = fed[len(prompt_ids):]
        else:
            if done == 0 or fed[:1] != [new[done - 1]]:  # a pass starts with the token kept last
                return None
            drafts = fed[1:]
        left = new[done:]
        if not left:  # a pass that kept nothing
            return None
        accepted = 0
        while accepted < min(len(drafts), len(left)) and drafts[accepted] == left[accepted]:
            accepted += 1
        cut = accepted == len(left)  # the run ended inside the accepted drafts (budget or end token)
        kept = accepted if cut else accepted + 1
        stats.record(len(drafts), torch.tensor([accepted + 1]), num_kept=torch.tensor([kept]))
        done += kept
    return stats if done == len(new) else None
