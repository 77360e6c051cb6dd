"""What a reader's KV-cache loop is run against: a tiny random Llama, its greedy text, a target that
watches its cache and a drafter that errs on purpose.

Lesson 4b's graders (04b.5, 04b.6) and assignment 8's hidden tests both use them:

* :func:`tiny_llama`: a small random Llama (a real KV cache, decoding in milliseconds);
* :func:`greedy_truth`: the target's greedy continuation, by the library's plain ``generate``;
* :class:`CacheWatch`: a one-row target that remembers which tokens its cache holds, and says so the
  first time it holds anything but a prefix of the true text;
* :class:`ScriptedDrafter`: drafts the true greedy continuation with one deliberate error whose
  position cycles, so that every number of accepted drafts occurs;
* :func:`tiny_case`: lesson 4b's case, the tiny Llama as a target, a fixed prompt and its greedy text.
"""
from __future__ import annotations

import torch

from ...decode import generate
from ...models import LlamaConfig, LlamaModel, LlamaTarget
from ...protocols import Draft
from ...sampling import GREEDY


def tiny_llama(seed: int = 0) -> LlamaModel:
    """A small random Llama (97 tokens, 2 layers): a real KV cache, decoding in milliseconds."""
    config = LlamaConfig(vocab_size=97, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, intermediate_size=96,
                         max_position_embeddings=256, rope_theta=500.0, tie_embeddings=True)
    return LlamaModel(config).init_weights(std=0.3, generator=torch.Generator().manual_seed(seed)).eval()


def greedy_truth(target, prompt: list[int], length: int) -> list[int]:
    """The target's greedy continuation of ``prompt`` (plain decoding, the library's ``generate``)."""
    return generate(target, torch.tensor(prompt), length, params=GREEDY).new_tokens[0].tolist()


class CacheWatch:
    """A one-row Target that passes every call to ``inner`` and remembers which tokens its cache holds.

    ``held``: the tokens in the cache now; ``passes``: forward calls since the last reset.  With
    ``truth`` (a sequence the cache may only ever hold a prefix of: the prompt and its greedy
    continuation), every forward first checks that the cache holds nothing else, and the first time it
    does not, a sentence saying so is appended to ``violations``.  Anything but ``vocab_size``,
    ``reset``, ``forward``, ``cache_lengths`` and ``rollback`` is refused (the Target protocol).
    """

    def __init__(self, inner, truth: list[int] | None = None):
        self.inner = inner
        self.vocab_size = inner.vocab_size
        self.truth = None if truth is None else list(truth)
        self.held: list[int] = []
        self.violations: list[str] = []
        self.passes = 0

    def reset(self, batch_size: int) -> None:
        if batch_size != 1:
            raise ValueError(f"batch_size must be 1 (one row is decoded here), got {batch_size}")
        self.inner.reset(1)
        self.held, self.passes = [], 0

    @property
    def cache_lengths(self) -> torch.Tensor:
        return self.inner.cache_lengths

    def forward(self, tokens: torch.Tensor, parents: torch.Tensor | None = None) -> torch.Tensor:
        if parents is not None:
            raise ValueError("parents must be None: this loop verifies chains")
        if not torch.is_tensor(tokens) or tokens.dim() != 2 or tokens.shape[0] != 1:
            raise ValueError(f"tokens must be a (1, N) tensor, got {getattr(tokens, 'shape', type(tokens).__name__)}")
        if self.truth is not None and not self.violations and self.held != self.truth[:len(self.held)]:
            first = next((i for i, (a, b) in enumerate(zip(self.held, self.truth)) if a != b), len(self.truth))
            self.violations.append(
                f"pass {self.passes + 1} began with {len(self.held)} tokens in the cache, and the one at position "
                f"{first} is not the text's token there. Before a pass the cache must hold exactly the prompt and "
                "the tokens emitted so far but the last: no rejected draft left behind, nothing fed twice")
        logits = self.inner.forward(tokens)
        self.held += [int(t) for t in tokens[0].tolist()]
        self.passes += 1
        return logits

    __call__ = forward

    def rollback(self, lengths) -> None:
        self.inner.rollback(lengths)
        self.held = self.held[: int(self.inner.cache_lengths[0])]

    def __getattr__(self, name: str):
        raise AttributeError(f"the target offers vocab_size, reset, forward, cache_lengths and rollback; "
                             f"{name!r} is not one of them")


class ScriptedDrafter:
    """Drafts for one row from a known text (the prompt and its greedy continuation): the next ``gamma``
    tokens of the text, with one deliberate error whose position cycles over 0..gamma from call to call
    (gamma: no error, so the round ends with a bonus token).  ``requested`` lists the gamma of each call."""

    def __init__(self, text: list[int], vocab_size: int):
        self.text, self.vocab_size = list(text), vocab_size
        self.requested: list[int] = []

    def propose(self, contexts, gamma: int, params=GREEDY, generator=None) -> Draft:
        if len(contexts) != 1:
            raise ValueError(f"contexts must hold one row (a list with one 1-D tensor), got {len(contexts)}")
        n = len(contexts[0])
        drafts = self.text[n:n + gamma]
        drafts += [0] * (gamma - len(drafts))
        wrong_at = len(self.requested) % (gamma + 1)
        if wrong_at < gamma:
            drafts[wrong_at] = (drafts[wrong_at] + 1) % self.vocab_size
        self.requested.append(gamma)
        return Draft(torch.tensor(drafts, dtype=torch.long).reshape(1, gamma), None)


def tiny_case(n: int, gamma: int):
    """(LlamaTarget, prompt, greedy continuation of n + gamma + 1 tokens) on the tiny Llama."""
    target = LlamaTarget(tiny_llama(), max_length=64)
    prompt = torch.randint(97, (6,), generator=torch.Generator().manual_seed(7)).tolist()
    return target, prompt, greedy_truth(target, prompt, n + gamma + 1)
