"""Small helpers the lessons share: a step-by-step trace of the speculative loop, the
single-position rules the proof lesson compares, and a toy pair with constant acceptance.

Shape legend: B batch, K draft length, V vocab, N samples.

Nothing here is a second implementation of the library.  :func:`trace_speculative`
drives the public pieces (``Drafter.propose``, ``Target.forward``,
:func:`specbook.verify.verify_chain`, ``Target.rollback``) in the same order as
:func:`specbook.decode.speculative_generate`, so with the same seed it produces the
same tokens; it only *records* what happened at every position so a lesson can
colour it (accepted, rejected, corrected, bonus).  The lessons assert the match.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from .laws import accept_prob, conditional_emission_law
from .naive import NAIVE_RULES
from .protocols import Draft, Drafter, Target
from .sampling import SamplingParams, logits_to_probs, sample
from .toy import MarkovLM, make_toy_pair
from .verify import verify_chain, verify_greedy

# ----------------------------------------------------------------------------- the loop, traced

KIND_COLOURS = {  # background, text decoration
    "accepted": ("#b7e4c7", "none"),
    "rejected": ("#f4a3a3", "line-through"),
    "unverified": ("#e0e0e0", "line-through"),
    "corrected": ("#ffd6a5", "none"),
    "bonus": ("#a9d6f5", "none"),
    "prompt": ("#ffffff", "none"),
}


@dataclass(frozen=True)
class StepTrace:
    """One draft-verify-accept round of a single sequence.

    draft_tokens:  the K proposed tokens
    target_probs:  (K+1, V) p at each draft position and the bonus position
    draft_probs:   (K, V) q the drafts were sampled from (one-hot for deterministic drafts)
    accept_probs:  min(1, p(x_i) / q(x_i)) for each draft (the chance it survives, if reached)
    num_accepted:  drafts accepted (0..K); the next draft, if any, was rejected
    final_token:   the corrected token (after a rejection) or the bonus token (all accepted)
    """

    draft_tokens: tuple[int, ...]
    target_probs: torch.Tensor
    draft_probs: torch.Tensor
    accept_probs: tuple[float, ...]
    num_accepted: int
    final_token: int

    @property
    def final_kind(self) -> str:
        return "bonus" if self.num_accepted == len(self.draft_tokens) else "corrected"

    @property
    def emitted(self) -> tuple[int, ...]:
        return self.draft_tokens[: self.num_accepted] + (self.final_token,)

    def kinds(self) -> list[tuple[int, str]]:
        """Every token shown for this step, with its fate, in order."""
        out = [(t, "accepted") for t in self.draft_tokens[: self.num_accepted]]
        if self.num_accepted < len(self.draft_tokens):
            out.append((self.draft_tokens[self.num_accepted], "rejected"))
            out += [(t, "unverified") for t in self.draft_tokens[self.num_accepted + 1:]]
        out.append((self.final_token, self.final_kind))
        return out


@dataclass
class Trace:
    """A whole speculative generation, step by step.  ``tokens`` are the new tokens (length max_new_tokens)."""

    prompt: list[int]
    steps: list[StepTrace]
    tokens: list[int]
    token_names: Sequence[str] | None = field(default=None, repr=False)

    @property
    def target_passes(self) -> int:
        return len(self.steps)

    @property
    def accepted_per_step(self) -> list[int]:
        return [s.num_accepted for s in self.steps]

    def count(self, kind: str) -> int:
        return sum(k == kind for s in self.steps for _, k in s.kinds())

    def _repr_html_(self) -> str:
        return trace_html(self, self.token_names)


def trace_speculative(
    target: Target,
    drafter: Drafter,
    prompt,
    max_new_tokens: int,
    params: SamplingParams = SamplingParams(),
    gamma: int = 4,
    generator: torch.Generator | None = None,
    token_names: Sequence[str] | None = None,
) -> Trace:
    """Run speculative decoding on one sequence and record every step.

    Same calls, in the same order, as :func:`specbook.decode.speculative_generate`, so the
    tokens agree with it for the same seed.  ``prompt`` is a 1-D token sequence (one row).
    """
    prompt_t = torch.as_tensor(prompt, dtype=torch.long)
    if prompt_t.ndim != 1 or prompt_t.numel() == 0:
        raise ValueError(f"prompt must be a non-empty 1-D token sequence, got shape {tuple(prompt_t.shape)}")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
    if not isinstance(gamma, int) or gamma < 0:
        raise ValueError(f"gamma must be an int >= 0, got {gamma!r}")
    V = target.vocab_size
    target.reset(1)
    if prompt_t.numel() > 1:
        target.forward(prompt_t[None, :-1])
    pending = prompt_t[None, -1:]  # (1, 1): every emitted token but the last is in the cache
    observe = getattr(drafter, "observe", None)  # drafters that read the target's state (EAGLE-style)
    if observe is not None:
        observe(target, [list(range(prompt_t.numel() - 1))])
    emitted: list[int] = []
    steps: list[StepTrace] = []
    while len(emitted) < max_new_tokens:
        context = torch.tensor(prompt_t.tolist() + emitted, dtype=torch.long)
        draft = drafter.propose([context], gamma, params, generator)
        if draft.parents is not None:
            raise ValueError("trace_speculative traces chains only; this drafter proposed a tree")
        K = draft.num_tokens
        before = target.cache_lengths  # (1,)
        logits = target.forward(torch.cat([pending, draft.tokens], dim=1))  # (1, K+1, V)
        if params.greedy:
            tokens, num_emitted = verify_greedy(logits, draft.tokens)
            target_probs = logits_to_probs(logits[0], params)  # (K+1, V) one-hot argmax
        else:
            target_probs = logits_to_probs(logits, params)  # (1, K+1, V)
            tokens, num_emitted = verify_chain(target_probs, draft.probs, draft.tokens, generator)
            target_probs = target_probs[0]
        target.rollback(before + num_emitted)
        if observe is not None:
            observe(target, [list(range(int(num_emitted[0])))])
        drafts = [int(t) for t in draft.tokens[0]]
        if draft.probs is None:
            q = torch.nn.functional.one_hot(draft.tokens[0].long(), V).to(target_probs.dtype)  # (K, V)
        else:
            q = draft.probs[0]  # (K, V)
        acc = tuple(float(accept_prob(float(target_probs[i, x]), float(q[i, x]))) for i, x in enumerate(drafts))
        n = int(num_emitted[0])
        steps.append(StepTrace(tuple(drafts), target_probs.detach().cpu(), q.detach().cpu(), acc, n - 1,
                               int(tokens[0, n - 1])))
        emitted.extend(tokens[0, :n].tolist())
        pending = tokens[:, n - 1 : n]  # (1, 1)
    return Trace(prompt_t.tolist(), steps, emitted[:max_new_tokens], token_names)


def _token_span(token: int, kind: str, names: Sequence[str] | None, title: str = "") -> str:
    bg, deco = KIND_COLOURS[kind]
    label = html.escape(names[token] if names is not None else str(token))
    tip = f' title="{html.escape(title)}"' if title else ""
    return (f'<span class="specbook-token specbook-{kind}" data-kind="{kind}"{tip} style="background:{bg};'
            f'text-decoration:{deco};padding:1px 5px;margin:1px;border-radius:3px;'
            f'font-family:monospace;display:inline-block;color:#111">{label}</span>')


def legend_html() -> str:
    items = [("accepted", "draft accepted"), ("rejected", "draft rejected"),
             ("unverified", "after a rejection: never checked"), ("corrected", "drawn from the residual"),
             ("bonus", "bonus token from p")]
    return '<div class="specbook-legend">' + " ".join(
        _token_span(0, k, [label]) for k, label in items) + "</div>"


def trace_html(trace: Trace, token_names: Sequence[str] | None = None, max_steps: int | None = None) -> str:
    """An HTML table, one row per target pass, colouring each token by its fate."""
    names = token_names if token_names is not None else trace.token_names
    rows = []
    for i, step in enumerate(trace.steps[:max_steps]):
        cells = []
        for j, (tok, kind) in enumerate(step.kinds()):
            title = ""
            if kind in ("accepted", "rejected"):
                title = (f"p(x)={float(step.target_probs[j, tok]):.3f}, q(x)={float(step.draft_probs[j, tok]):.3f}, "
                         f"accept prob {step.accept_probs[j]:.3f}")
            cells.append(_token_span(tok, kind, names, title))
        rows.append(f'<tr><td style="text-align:right;padding-right:8px">{i + 1}</td>'
                    f'<td style="text-align:left">{"".join(cells)}</td>'
                    f'<td style="text-align:right">{len(step.emitted)}</td></tr>')
    prompt = "".join(_token_span(t, "prompt", names) for t in trace.prompt)
    return (legend_html() + f'<div>prompt: {prompt}</div>'
            '<table class="specbook-trace"><tr><th>pass</th><th style="text-align:left">drafts and verdicts</th>'
            '<th>emitted</th></tr>' + "".join(rows) + "</table>")


# ----------------------------------------------------------------------------- one position, many rules

@dataclass(frozen=True)
class PositionSetup:
    """One position of a toy pair, after sampling parameters.

    target_probs: (V,) p at temperature T (what the output must follow)
    draft_probs:  (V,) q at temperature T (what the drafts are drawn from)
    raw_draft_probs: (V,) q before temperature (what a verifier that forgets the draft's
                  sampling parameters would divide by)
    """

    target_probs: torch.Tensor
    draft_probs: torch.Tensor
    raw_draft_probs: torch.Tensor


def position_setup(match: float = 0.3, temperature: float = 0.6, vocab_size: int = 8, seed: int = 2,
                   context: Sequence[int] = (0,)) -> PositionSetup:
    """p and q at one context of :func:`specbook.toy.make_toy_pair` (float64)."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 for sampling, got {temperature!r}")
    target, draft = make_toy_pair(vocab_size, 1, match=match, seed=seed)
    params = SamplingParams(temperature=float(temperature))
    return PositionSetup(target.next_probs(list(context), params), draft.next_probs(list(context), params),
                         draft.next_probs(list(context)))


@dataclass(frozen=True)
class Rule:
    """A single-position acceptance rule: its exact emitted law and a batched sampler."""

    name: str
    description: str
    law: Callable[[PositionSetup], torch.Tensor]  # -> (V,)
    sample: Callable[[PositionSetup, int, torch.Generator | None], torch.Tensor]  # -> (N,) long
    lossless: bool


def _drafts(setup: PositionSetup, n: int, generator) -> torch.Tensor:
    return torch.multinomial(setup.draft_probs, n, replacement=True, generator=generator)  # (N,)


def _chain_first(target_probs, draft_probs, drafts, generator) -> torch.Tensor:
    """The first token verify_chain emits for K = 1 drafts, n rows at once."""
    n, V = drafts.shape[0], target_probs.shape[0]
    p = target_probs.expand(n, 2, V)  # (N, 2, V) (the bonus position is never the first token)
    q = draft_probs.expand(n, 1, V)  # (N, 1, V)
    tokens, _ = verify_chain(p, q, drafts[:, None], generator)
    return tokens[:, 0]  # (N,)


def _correct_law(s: PositionSetup) -> torch.Tensor:
    return s.target_probs.clone()


def _correct_sample(s: PositionSetup, n: int, generator) -> torch.Tensor:
    return _chain_first(s.target_probs, s.draft_probs, _drafts(s, n, generator), generator)


def _target_only_law(s: PositionSetup) -> torch.Tensor:
    law = torch.zeros_like(s.target_probs)
    for x, qx in enumerate(s.draft_probs.tolist()):
        if qx > 0:
            law += qx * conditional_emission_law(s.target_probs, s.raw_draft_probs, x)
    return law


def _target_only_sample(s: PositionSetup, n: int, generator) -> torch.Tensor:
    return _chain_first(s.target_probs, s.raw_draft_probs, _drafts(s, n, generator), generator)


def _naive(rule) -> Rule:
    def law(s: PositionSetup) -> torch.Tensor:
        return rule.law(s.target_probs, s.draft_probs)

    def sampler(s: PositionSetup, n: int, generator) -> torch.Tensor:
        drafts = _drafts(s, n, generator).tolist()
        return torch.tensor([rule.sampler(s.target_probs, s.draft_probs, x, generator) for x in drafts])

    return Rule(rule.name, rule.description, law, sampler, False)


CORRECT = "modified rejection sampling"
TARGET_ONLY = "temperature on target only"

RULES: dict[str, Rule] = {
    CORRECT: Rule(CORRECT, "accept with min(1, p/q), else draw from the residual max(0, p - q)",
                  _correct_law, _correct_sample, True),
    **{r.name: _naive(r) for r in NAIVE_RULES},
    TARGET_ONLY: Rule(TARGET_ONLY, "the draft is sampled at temperature T, but the verifier divides by "
                      "the draft's unprocessed q (temperature applied on the target side only)",
                      _target_only_law, _target_only_sample, False),
}


def rule(name: str) -> Rule:
    if name not in RULES:
        raise ValueError(f"rule must be one of {list(RULES)}, got {name!r}")
    return RULES[name]


# ----------------------------------------------------------------------------- a sequence-level bug

class MismatchedDraftProbs:
    """A drafter with the sampling-parameter bug, for the proof lesson: it samples its drafts
    with the sampling parameters, but hands the verifier the *unprocessed* q (temperature 1,
    no top-k/top-p).  Any output looks plausible; only a distribution test notices.

    Toy models only: it reads the draft model's exact conditionals (``next_logits``) row by row.
    """

    def __init__(self, model: MarkovLM):
        self.model = model
        self.passes = 0

    def propose(self, contexts: list[torch.Tensor], gamma: int, params: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        rows = [c.tolist() for c in contexts]
        tokens, raw = [], []
        for _ in range(gamma):
            logits = torch.stack([self.model.next_logits(r) for r in rows])  # (B, V)
            self.passes += 1
            nxt = sample(logits_to_probs(logits, params), generator)  # (B,) drawn from the processed q
            raw.append(logits_to_probs(logits))  # the bug: the verifier is given q before processing
            tokens.append(nxt)
            for r, t in zip(rows, nxt.tolist()):
                r.append(t)
        return Draft(torch.stack(tokens, 1), torch.stack(raw, 1))  # (B, K), (B, K, V)


# ----------------------------------------------------------------------------- constant acceptance

def constant_acceptance_pair(vocab_size: int = 8, alpha: float = 0.7, seed: int = 0) -> tuple[MarkovLM, MarkovLM]:
    """A target and draft whose acceptance probability is exactly ``alpha`` in every context.

    In each context the target p lives on half the vocabulary, and the draft is
    q = alpha * p + (1 - alpha) * o with o on the other half, so sum_z min(p, q) = alpha
    whatever the context: the i.i.d. acceptance assumption behind E[tokens]
    (Leviathan et al. 2023, Sec. 3.1) holds exactly at temperature 1.
    """
    if not isinstance(vocab_size, int) or vocab_size < 2 or vocab_size % 2:
        raise ValueError(f"vocab_size must be an even int >= 2, got {vocab_size!r}")
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    g = torch.Generator().manual_seed(seed)
    V, half = vocab_size, vocab_size // 2
    order = torch.stack([torch.randperm(V, generator=g) for _ in range(V)])  # (V, V)
    w = -torch.rand(V, V, generator=g, dtype=torch.float64).clamp_min(1e-12).log() + 0.05  # (V, V) > 0
    inside = torch.zeros(V, V, dtype=torch.bool).scatter(1, order[:, :half], True)  # (V, V) p's support
    p = torch.where(inside, w, 0.0)
    p = p / p.sum(-1, keepdim=True)
    o = torch.where(inside, 0.0, w)
    o = o / o.sum(-1, keepdim=True)
    q = alpha * p + (1 - alpha) * o
    return MarkovLM(p, 1), MarkovLM(q / q.sum(-1, keepdim=True), 1)


def accepted_count_law(alpha: float, gamma: int) -> list[float]:
    """P(k drafts accepted in one step), k = 0..gamma, when each survives independently with alpha.

    Truncated geometric: alpha^k (1 - alpha) for k < gamma, alpha^gamma for k = gamma.  Its
    mean plus one (the corrected or bonus token) is E[tokens] = (1 - alpha^(gamma+1)) / (1 - alpha).
    """
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    if not isinstance(gamma, int) or gamma < 0:
        raise ValueError(f"gamma must be an int >= 0, got {gamma!r}")
    return [alpha**k * (1 - alpha) for k in range(gamma)] + [alpha**gamma]


def overlap(target: MarkovLM, draft: MarkovLM, params: SamplingParams = SamplingParams()) -> torch.Tensor:
    """sum_z min(p(z|s), q(z|s)) for every state s: (S,).  The acceptance probability of a draft
    sampled from q in context s (Leviathan et al. 2023, Definition 3.1 and Lemma 3.3)."""
    if target.order != draft.order or target.vocab_size != draft.vocab_size:
        raise ValueError("target and draft must have the same order and vocabulary")
    p = logits_to_probs(target.log_transitions, params)  # (S, V)
    q = logits_to_probs(draft.log_transitions, params)  # (S, V)
    return torch.minimum(p, q).sum(-1)  # (S,)


def acceptance_by_previous_token(trace: Trace) -> tuple[list[int], list[int]]:
    """Per context (the token just before each draft): how many drafts were verified and accepted.

    For an order-1 Markov pair the previous token is the whole context, so ``accepted[s] / verified[s]``
    estimates sum_z min(p(z|s), q(z|s)) (see :func:`overlap`).  Drafts after a rejection are not counted.
    """
    if not trace.steps:
        raise ValueError("trace has no steps")
    V = int(trace.steps[0].target_probs.shape[-1])
    verified, accepted = [0] * V, [0] * V
    history = list(trace.prompt)
    for step in trace.steps:
        previous = history[-1]
        for i, x in enumerate(step.draft_tokens[: step.num_accepted + 1]):
            verified[previous] += 1
            accepted[previous] += int(i < step.num_accepted)
            previous = x
        history.extend(step.emitted)
    return verified, accepted
