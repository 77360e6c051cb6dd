"""Cross-checks of speculative decoding on a real model, against transformers and against exact laws.

Shape legend: B rows, N new tokens, V vocab, L layers, Hkv key/value heads, Dh head width.

Greedy.  Plain decoding, speculative decoding and transformers' ``generate`` (plain
and prompt-lookup assisted) must agree token for token.  Two implementations can still
part ways where the two best logits (nearly) tie, because a different summation order
moves a logit by a few units of its last place: about 1e-6 in float32, but steps of 0.25
in bfloat16 at SmolLM2's logit sizes (8 mantissa bits; top logits of 30-40).
:func:`explain_divergence` finds the first differing token, measures the top-2 logit gap
there with a full uncached forward, and says whether the difference is such a tie for
the model's dtype (:func:`tie_gap_for`).  A difference anywhere else is a bug.

Sampling.  The first two generated tokens must follow the target's exact joint law
p(x1) p(x2 | x1) (Leviathan et al. 2023, Theorem 1, applied twice), computed from two
forwards (:func:`joint_law`) on a support truncated to the top tokens plus one "rest"
bin per position (-1).  Many rows share one prompt, so :class:`SharedPrefixTarget`
computes its prefill once and copies the keys and values into every row.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..decode import generate, speculative_generate
from ..drafters import DraftModelDrafter, NGramDrafter
from ..models import LlamaModel, LlamaTarget
from ..sampling import GREEDY, SamplingParams, logits_to_probs
from ..stats import chisquare_gof

TIE_GAP = 1e-4  # float32: SmolLM2's logits are O(10-30); summing in another order moves them by up to ~1e-4
# The near-tie threshold per dtype: a few last-place steps of a logit in [32, 64), where
# SmolLM2's top logits reach (up to ~40), after 30 layers of rounding.  float32 keeps 24 bits
# (a step of 4e-6 there; 1e-4 leaves room for the accumulated error), float16 11 bits (a step
# of 0.03; 4 steps), bfloat16 8 bits (a step of 0.25; 4 steps).  Measured against transformers
# at the same dtype on SmolLM2: up to 9e-5 (float32) and 0.47 (bfloat16) per logit.  The
# cross-checks against transformers state these as their tolerances.
TIE_GAPS = {torch.float32: TIE_GAP, torch.float16: 0.125, torch.bfloat16: 1.0}


def tie_gap_for(dtype: torch.dtype) -> float:
    """The largest top-2 logit gap that still counts as a near tie for a model run in ``dtype``."""
    if dtype not in TIE_GAPS:
        raise ValueError(f"dtype must be one of {', '.join(map(str, TIE_GAPS))}, got {dtype}")
    return TIE_GAPS[dtype]


# --------------------------------------------------------------------------- greedy

@dataclass(frozen=True)
class Divergence:
    position: int  # index of the first differing new token
    reference_token: int
    other_token: int
    gap: float  # top-1 minus top-2 logit of the reference model at that position
    top2: tuple[int, int]
    tie_gap: float
    dtype: str = "float32"
    spread: float = 0.0  # top-1 logit minus the lower of the two differing tokens' logits

    @property
    def is_tie(self) -> bool:
        """Both differing tokens sit within ``tie_gap`` of the best logit.  In float32 that means
        they are the top two; in bfloat16, with logits in steps of 0.25, three tokens can tie."""
        return self.spread < self.tie_gap

    def describe(self) -> str:
        kind = f"a {self.dtype} near-tie" if self.is_tie else "NOT a tie: a real difference"
        return (f"first difference at new token {self.position} ({self.reference_token} vs {self.other_token}); "
                f"top-2 logit gap {self.gap:.2e}, both tokens within {self.spread:.2e} of the best "
                f"(tie threshold {self.tie_gap:g}), top-2 tokens {list(self.top2)}: {kind}")


@torch.no_grad()
def next_logits(model: LlamaModel, ids: list[int]) -> torch.Tensor:
    """The float32 next-token logits (V,) after ``ids``, from one uncached forward."""
    device = model.embed.weight.device
    return model(torch.tensor([ids], device=device), logits_to_keep=1)[0, -1].float()


def explain_divergence(model: LlamaModel, prompt: list[int], reference: list[int], other: list[int],
                       tie_gap: float | None = None) -> Divergence | None:
    """None if ``other`` equals ``reference`` on their common length, else the first divergence.

    ``tie_gap`` defaults to the threshold of the model's dtype (:func:`tie_gap_for`)."""
    j = next((i for i, (a, b) in enumerate(zip(reference, other)) if a != b), None)
    if j is None:
        return None
    dtype = model.embed.weight.dtype
    threshold = tie_gap_for(dtype) if tie_gap is None else tie_gap
    logits = next_logits(model, list(prompt) + list(reference[:j]))  # (V,)
    values, tokens = logits.topk(2)
    spread = float(values[0] - torch.minimum(logits[reference[j]], logits[other[j]]))
    return Divergence(j, int(reference[j]), int(other[j]), float(values[0] - values[1]), tuple(tokens.tolist()),
                      threshold, str(dtype).removeprefix("torch."), spread)


def differences_are_near_ties(model: LlamaModel, prompts: list[list[int]], plain: list[list[int]],
                              other: list[list[int]]) -> bool | None:
    """None if every row equals plain decoding's; else whether each differing row leaves it at a near
    tie for the model's dtype (:func:`explain_divergence`: a pass over several positions sums
    in another order, so the argmax may flip where the two best logits are that close)."""
    found = [explain_divergence(model, p, a, b) for p, a, b in zip(prompts, plain, other) if a != b]
    return None if not found else all(d is not None and d.is_tie for d in found)


def greedy_four_ways(model: LlamaModel, hf_model, tokenizer, prompt: list[int], new_tokens: int,
                     gamma: int = 4, target: LlamaTarget | None = None) -> dict[str, list[int]]:
    """Greedy continuations of ``prompt`` by specbook (plain, n-gram speculative) and transformers
    (``generate``, prompt lookup).  None of them stops at the end-of-turn token."""
    device = model.embed.weight.device
    target = target or LlamaTarget(model, max_length=len(prompt) + new_tokens + gamma + 2)
    ids = torch.tensor([prompt], device=device)
    out = {"specbook": generate(target, ids, new_tokens, params=GREEDY).new_tokens[0].tolist(),
           "specbook n-gram": speculative_generate(target, NGramDrafter(), ids, new_tokens, params=GREEDY,
                                                   gamma=gamma).new_tokens[0].tolist()}
    common = dict(attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False, temperature=None,
                  top_p=None, top_k=None, eos_token_id=None, pad_token_id=tokenizer.eos_token_id)
    with torch.no_grad():
        out["transformers"] = hf_model.generate(ids, **common)[0, len(prompt):].tolist()
        out["transformers prompt lookup"] = hf_model.generate(ids, prompt_lookup_num_tokens=gamma,
                                                              max_matching_ngram_size=3, **common)[0, len(prompt):].tolist()
    return out


# --------------------------------------------------------------------------- sampling

class _Wrapped:
    """A Target that passes reset, cache lengths and rollback to the one it wraps (``self.inner``)."""

    inner: object

    def reset(self, batch_size: int) -> None:
        self.inner.reset(batch_size)

    @property
    def cache_lengths(self) -> torch.Tensor:
        return self.inner.cache_lengths

    def rollback(self, lengths) -> None:
        self.inner.rollback(lengths)


class SharedPrefixTarget(_Wrapped):
    """A ``LlamaTarget`` whose first forward of identical rows runs once (batch 1), then is copied.

    Everything else is the wrapped target's (same cache, same rollback); the copy goes
    through the cache's own ``plan`` / ``update`` / ``advance``.
    """

    def __init__(self, model: LlamaModel, max_length: int):
        self.inner, self.one = LlamaTarget(model, max_length), LlamaTarget(model, max_length)
        self.vocab_size = self.inner.vocab_size
        self._memo: dict[tuple, tuple] = {}

    def forward(self, tokens: torch.Tensor, parents: torch.Tensor | None = None) -> torch.Tensor:
        cache = self.inner.cache
        if parents is not None or max(cache.length_list()) > 0 or not bool((tokens == tokens[:1]).all()):
            return self.inner.forward(tokens, parents)
        key = tuple(tokens[0].tolist())
        if key not in self._memo:
            self.one.reset(1)
            logits = self.one.forward(tokens[:1])  # (1, N, V)
            n = tokens.shape[1]
            self._memo[key] = (logits, self.one.cache.k[:, :, :, :n].clone(), self.one.cache.v[:, :, :, :n].clone())
        logits, k, v = self._memo[key]  # k, v: (L, 1, Hkv, N, Dh)
        plan = cache.plan(tokens.shape[1])
        for layer in range(k.shape[0]):
            cache.update(layer, k[layer], v[layer], plan)  # broadcast over the B rows
        cache.advance(plan)
        return logits.expand(tokens.shape[0], -1, -1)  # (B, N, V)


class ScaledLogitsTarget(_Wrapped):
    """Any Target with its logits multiplied by ``scale``: the same model at temperature 1/scale.

    A draft whose q overlaps p well but not perfectly (for SmolLM2 at scale 0.6 about
    80% of the mass), so accepted drafts, rejections and the residual all occur often.
    An early exit of SmolLM2 is no use here: its first 6 to 20 blocks put under 10% of
    their mass where the full model does, so nearly every draft is rejected.
    """

    def __init__(self, target, scale: float):
        if not scale > 0:
            raise ValueError(f"scale must be > 0, got {scale!r}")
        self.inner, self.scale = target, float(scale)
        self.vocab_size = target.vocab_size

    def forward(self, tokens: torch.Tensor, parents: torch.Tensor | None = None) -> torch.Tensor:
        return self.inner.forward(tokens, parents) * self.scale  # (B, N, V)


class GreedyDraftSoftmaxReported(DraftModelDrafter):
    """Broken on purpose: drafts q's argmax but reports q itself, not the one-hot it drafted from.

    The verifier's min(1, p/q) then uses the wrong q and the output is biased toward the
    draft's favourite; only a distribution test can see it.
    """

    def draw(self, logits, params, generator):
        return logits.argmax(-1), logits_to_probs(logits, params)  # the argmax, reported as if drawn from q


@torch.no_grad()
def joint_law(model: LlamaModel, prompt: list[int], params: SamplingParams, k1: int = 8, k2: int = 6):
    """Exact law {(x1, x2): prob} of the first two tokens on a truncated support, and the map
    (x1, x2) -> outcome.  -1 stands for "any other token"; a rest bin is exactly 0 when the
    sampling support (top-p) lies inside the top set, so tokens outside it count as impossible."""
    device = model.embed.weight.device
    p1 = logits_to_probs(model(torch.tensor([prompt], device=device))[0, -1].double(), params)  # (V,)
    first = [t for t in p1.topk(k1).indices.tolist() if p1[t] > 0]
    rows = torch.tensor([list(prompt) + [a] for a in first], device=device)
    p2 = logits_to_probs(model(rows)[:, -1].double(), params)  # (k1, V)
    rest1 = p1.clone()
    rest1[first] = 0
    law, seconds = {(-1, -1): float(rest1.sum())}, {}
    for i, a in enumerate(first):
        top = [t for t in p2[i].topk(k2).indices.tolist() if p2[i, t] > 0]
        seconds[a] = set(top)
        rest2 = p2[i].clone()
        rest2[top] = 0
        for b in top:
            law[(a, b)] = float(p1[a] * p2[i, b])
        law[(a, -1)] = float(p1[a] * rest2.sum())

    def outcome(x1: int, x2: int) -> tuple[int, int]:
        if x1 not in seconds:
            return (-1, -1)
        return (x1, x2 if x2 in seconds[x1] else -1)

    return law, outcome


def sample_first_two(model: LlamaModel, prompt: list[int], params: SamplingParams, *, rows: int, chunk: int,
                     gamma: int, generator: torch.Generator, drafter_cls=DraftModelDrafter,
                     draft_scale: float | None = 0.6) -> list[tuple[int, int]]:
    """First two tokens of ``rows`` independent generations, batched ``chunk`` rows at a time.

    ``draft_scale=None`` samples plainly (no speculation); otherwise ``drafter_cls`` drafts
    with ``model`` whose logits are scaled by ``draft_scale`` (:class:`ScaledLogitsTarget`).
    """
    if rows % chunk:
        raise ValueError(f"rows ({rows}) must be a multiple of chunk ({chunk})")
    device = model.embed.weight.device
    length = len(prompt) + 2 + gamma + 2
    target = SharedPrefixTarget(model, length)
    drafter = None if draft_scale is None else drafter_cls(ScaledLogitsTarget(SharedPrefixTarget(model, length), draft_scale))
    batch = torch.tensor([prompt], device=device).expand(chunk, -1)
    pairs: list[tuple[int, int]] = []
    for _ in range(rows // chunk):
        if drafter is None:
            out = generate(target, batch, 2, params=params, generator=generator)
        else:
            out = speculative_generate(target, drafter, batch, 2, params=params, gamma=gamma, generator=generator)
        pairs += [tuple(r) for r in out.new_tokens.tolist()]
    return pairs


def law_pvalue(law: dict, observed: list) -> float:
    """Chi-square p-value of observed outcomes against an exact law (raw counts, pooled bins)."""
    outcomes = sorted(set(law) | set(observed))
    index = {o: i for i, o in enumerate(outcomes)}
    counts = np.zeros(len(outcomes), dtype=np.int64)
    for o in observed:
        counts[index[o]] += 1
    probs = np.array([law.get(o, 0.0) for o in outcomes], dtype=np.float64)
    return chisquare_gof(counts, probs / probs.sum()).pvalue
