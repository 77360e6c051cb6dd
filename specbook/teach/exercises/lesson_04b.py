"""Graders of lesson 4b, "write the loop": drafting, one verify round, the loop, a batch round, a round
and a loop on a real KV cache, and the concept checks.

Shape legend: V vocab, K drafts in one round.

Each grader runs the reader's function on inputs it builds itself and compares the result with the
library's loop (:mod:`specbook.decode`, on the same toy or tiny model) or with an exact law (a
chi-square test on raw counts, :mod:`specbook.stats`).  A law test that fails is run once more with a
second seed, so a correct answer is called wrong with probability below ``ALPHA ** 2`` = 1e-8; the
seeds are fixed, so the instructor's solution gets the same verdict on every run.

The real-model graders (part (c)) run the reader's code against :mod:`.loop_fixtures`, as assignment
8's hidden tests do: a tiny random Llama (a real KV cache, in well under a second), a target that
remembers which tokens its cache holds, and a drafter that errs at every position in turn.
"""
from __future__ import annotations

from collections import Counter
from typing import Callable

import torch

from ... import stats
from ...decode import speculative_generate, speculative_steps
from ...drafters.draft_model import DraftModelDrafter
from ...sampling import GREEDY, SamplingParams
from ...toy import make_toy_pair
from . import Wrong, grader, register
from ._answers import call, pair, pick
from .loop_fixtures import CacheWatch, ScriptedDrafter, tiny_case

ALPHA = 1e-4  # level of each law test; a failure is rerun once with the second seed
SEEDS = (40_201, 40_202)
TOY_GAMMA = 3  # drafts per round in the deterministic (temperature 0) comparisons
LAW_GAMMA = 2  # drafts per round in the law tests: a bonus token is the 3rd token, inside the tested length
LAW_LENGTH = 3  # tokens per tested sequence (6**3 = 216 outcomes at most)


# --------------------------------------------------------------------------- helpers

def toy_pair():
    """The lesson's toy target and draft (6 tokens, first order, the draft 70% the target)."""
    return make_toy_pair(vocab_size=6, order=1, match=0.7, seed=0)


def law_pair():
    """The pair of the law tests: a poorer draft (30% the target), so that a wrong refill after a
    rejection moves the law far enough to be seen in 800 sequences (p below 1e-5 for a refill from p)."""
    return make_toy_pair(vocab_size=6, order=1, match=0.3, seed=0)


def _token_list(what: str, value) -> list[int]:
    """A list of ints from a list, tuple or 1-D integer tensor, else Wrong."""
    if torch.is_tensor(value):
        if value.is_floating_point() or value.dim() > 1:
            raise Wrong(f"{what} must be a list of token ids, got a tensor of shape {tuple(value.shape)} "
                        f"and dtype {value.dtype}")
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise Wrong(f"{what} must be a list of token ids, got {type(value).__name__}")
    try:
        return [int(t) for t in value]
    except (TypeError, ValueError):
        raise Wrong(f"{what} must hold token ids (ints), got {value!r}") from None


TARGET_HINT = "Check the acceptance test, the distribution after a rejection and the row the bonus token comes from"


def _law_tests(what: str, draw: Callable, laws: list[dict], n: int, whose: str = "the target's",
               hint: str = TARGET_HINT) -> list[float]:
    """p-values of ``n`` draws of ``draw(generator)`` (one outcome per law) against ``laws``.

    Each law is tested at ALPHA / len(laws) (Bonferroni); if any test fails, all run again once with
    the second seed and that verdict stands.  An outcome of probability 0 is wrong at once."""
    level = ALPHA / len(laws)
    for attempt, seed in enumerate(SEEDS):
        g = torch.Generator().manual_seed(seed)
        counts = [Counter() for _ in laws]
        for _ in range(n):
            for c, outcome in zip(counts, draw(g)):
                c[outcome] += 1
        pvalues = []
        for row, (law, c) in enumerate(zip(laws, counts)):
            impossible = [o for o in c if law.get(o, 0.0) == 0.0]
            if impossible:
                where = f" (row {row})" if len(laws) > 1 else ""
                raise Wrong(f"{what} emitted {list(impossible[0])}{where}, a sequence of probability 0 under "
                            f"{whose} law, so some token came from the wrong distribution")
            outcomes = sorted(set(law) | set(c))
            result = stats.chisquare_gof([c.get(o, 0) for o in outcomes], [law.get(o, 0.0) for o in outcomes])
            pvalues.append(result.pvalue)
        if all(p >= level for p in pvalues):
            return pvalues
        if attempt == len(SEEDS) - 1:
            worst = min(range(len(pvalues)), key=pvalues.__getitem__)
            where = f" in row {worst}" if len(laws) > 1 else ""
            raise Wrong(f"the sequences {what} emits{where} do not follow {whose} law: a chi-square test on "
                        f"{n} of them gives p = {pvalues[worst]:.1e}, with two different seeds. {hint}")
    raise AssertionError("unreachable")


def _complete(target, context: list[int], block: list[int], length: int, params, g) -> tuple[int, ...]:
    """``block`` cut or completed to ``length`` tokens with draws from the target's exact conditionals: if the
    block follows the target's law, so does the result."""
    seq = list(block[:length])
    while len(seq) < length:
        seq.append(int(torch.multinomial(target.next_probs(context + seq, params), 1, generator=g)))
    return tuple(seq)


def library_round(target, draft_model, contexts: list[list[int]], gamma: int) -> list[list[int]]:
    """What the library's loop emits in its first round at temperature 0, per row."""
    steps = speculative_steps(target, DraftModelDrafter(draft_model), [list(c) for c in contexts], gamma + 1,
                              params=GREEDY, gamma=gamma)
    step = next(steps)
    return [row[:n] for row, n in zip(step.tokens.tolist(), step.num_emitted.tolist())]


# --------------------------------------------------------------------------- part (a): one row, toy models

@grader("04b.1")
def _draft_tokens(draft_tokens):
    _, draft_model = toy_pair()
    params, context, V = SamplingParams(), [2, 3], draft_model.vocab_size
    given = list(context)
    result = call(draft_tokens, draft_model, given, TOY_GAMMA, params, torch.Generator().manual_seed(1))
    if given != context:
        raise Wrong("draft_tokens changed the context it was given: build a new list (context + drafts) instead")
    if not (isinstance(result, tuple) and len(result) == 2):
        raise Wrong("draft_tokens must return a pair (tokens, q)")
    tokens, q = _token_list("the drafted tokens", result[0]), result[1]
    if len(tokens) != TOY_GAMMA:
        raise Wrong(f"asked for {TOY_GAMMA} drafts, draft_tokens returned {len(tokens)}")
    if not torch.is_tensor(q) or tuple(q.shape) != (TOY_GAMMA, V):
        raise Wrong(f"q must be a ({TOY_GAMMA}, {V}) tensor, one row per draft, got "
                    f"{tuple(q.shape) if torch.is_tensor(q) else type(q).__name__}")
    for i, x in enumerate(tokens):
        want = draft_model.next_probs(context + tokens[:i], params)  # (V,)
        if not torch.allclose(q[i].double(), want, atol=1e-6):
            raise Wrong(f"q[{i}] is not the law draft {i} was drawn from: that is the draft model's next-token "
                        f"probabilities after the context and the {i} draft(s) before it")
        if want[x] == 0:
            raise Wrong(f"draft {i} is token {x}, which the draft model gives probability 0 there")
    law = draft_model.sequence_law(context, 2, params)

    def draw(g):
        tokens, _ = call(draft_tokens, draft_model, list(context), 2, params, g)
        return [tuple(_token_list("the drafted tokens", tokens))]

    (pvalue,) = _law_tests("draft_tokens", draw, [law], 1000, whose="the draft model's",
                           hint="Draw each draft from the law after the context and the drafts before it")
    print(f"  1000 two-token drafts against the draft model's exact law: chi-square p = {pvalue:.2f}")


@grader("04b.2")
def _toy_round(toy_round):
    target, draft_model = toy_pair()
    g = torch.Generator().manual_seed(2)
    counts = set()
    for context in ([0], [1], [2], [3], [4], [5], [1, 4], [2, 3, 5]):
        want = library_round(target, draft_model, [context], TOY_GAMMA)[0]
        before = target.forward_calls
        got = _token_list("toy_round's result",
                          call(toy_round, target, draft_model, list(context), TOY_GAMMA, GREEDY, g))
        passes = target.forward_calls - before
        if passes != 1:
            raise Wrong(f"a round makes exactly one target pass, over the context and all {TOY_GAMMA} drafts "
                        f"at once; yours made {passes}")
        if got != want:
            raise Wrong(f"at temperature 0 (every draw is an argmax) your round after the context {context} emits "
                        f"{got}; the library's loop emits {want}. Which rows of the target pass hold p after "
                        "the context, after each draft, and after the last one?")
        counts.add(len(want))
    params, (target, draft_model) = SamplingParams(), law_pair()
    law = target.sequence_law([0], LAW_LENGTH, params)

    def draw(g):
        block = _token_list("toy_round's result",
                            call(toy_round, target, draft_model, [0], LAW_GAMMA, params, g))
        if not 1 <= len(block) <= LAW_GAMMA + 1:
            raise Wrong(f"a round with {LAW_GAMMA} drafts emits 1 to {LAW_GAMMA + 1} tokens; "
                        f"yours emitted {len(block)}")
        return [_complete(target, [0], block, LAW_LENGTH, params, g)]

    (pvalue,) = _law_tests("toy_round", draw, [law], 800)
    print(f"  at temperature 0: the library's tokens after {len(counts)} different numbers of accepted drafts; "
          f"800 rounds (completed to {LAW_LENGTH} tokens) against the target's exact law: chi-square p = {pvalue:.2f}")


@grader("04b.3")
def _toy_generate(toy_generate):
    target, draft_model = toy_pair()
    g = torch.Generator().manual_seed(3)
    for prompt in ([0], [3, 1]):
        want = speculative_generate(target, DraftModelDrafter(draft_model), torch.tensor(prompt), 10, params=GREEDY,
                                    gamma=TOY_GAMMA).new_tokens[0].tolist()
        got = _token_list("toy_generate's result",
                          call(toy_generate, target, draft_model, list(prompt), 10, TOY_GAMMA,
                                GREEDY, g))
        if len(got) != 10:
            raise Wrong(f"asked for 10 tokens, toy_generate returned {len(got)}: keep the first n when the last "
                        "round overshoots")
        if got != want:
            raise Wrong(f"at temperature 0 your loop from {prompt} gives {got}; speculative_generate gives {want}. "
                        "Each round must continue from the prompt and everything emitted so far")
    params, (target, draft_model) = SamplingParams(), law_pair()
    law = target.sequence_law([0], LAW_LENGTH, params)

    def draw(g):
        out = call(toy_generate, target, draft_model, [0], LAW_LENGTH, LAW_GAMMA, params, g)
        return [tuple(_token_list("toy_generate's result", out))]

    (pvalue,) = _law_tests("toy_generate", draw, [law], 800)
    print(f"  at temperature 0: equal to speculative_generate; 800 sequences of {LAW_LENGTH} tokens against the "
          f"target's exact law: chi-square p = {pvalue:.2f}")


# --------------------------------------------------------------------------- part (b): a batch

BATCH_CONTEXTS = ([0], [1, 2, 3], [4, 5], [2])


@grader("04b.4")
def _toy_batch_round(toy_batch_round):
    target, draft_model = toy_pair()
    contexts = [list(c) for c in BATCH_CONTEXTS]
    want = library_round(target, draft_model, contexts, TOY_GAMMA)
    before = target.forward_calls
    got = call(toy_batch_round, target, draft_model, [list(c) for c in contexts], TOY_GAMMA,
                GREEDY, torch.Generator().manual_seed(4))
    passes = target.forward_calls - before
    if not isinstance(got, (list, tuple)) or len(got) != len(contexts):
        raise Wrong(f"toy_batch_round must return one list of tokens per row ({len(contexts)} rows)")
    got = [_token_list(f"row {b}'s tokens", row) for b, row in enumerate(got)]
    if passes != 1:
        raise Wrong(f"the batch shares one target pass (all rows, padded to one width); yours made {passes}")
    for b, (mine, theirs) in enumerate(zip(got, want)):
        if mine != theirs:
            raise Wrong(f"at temperature 0 row {b} (context {contexts[b]}, {len(contexts[b])} tokens) emits {mine}; "
                        f"the library's loop emits {theirs}. Each row's γ + 1 rows of the pass start at its own "
                        "last context token, not at a position shared by the batch")
    params, (target, draft_model) = SamplingParams(), law_pair()
    rows = [[0], [1, 2, 3]]
    laws = [target.sequence_law(c, LAW_LENGTH, params) for c in rows]

    def draw(g):
        blocks = call(toy_batch_round, target, draft_model, [list(c) for c in rows], LAW_GAMMA,
                       params, g)
        return [_complete(target, c, _token_list("a row's tokens", blk), LAW_LENGTH, params, g)
                for c, blk in zip(rows, blocks)]

    pvalues = _law_tests("toy_batch_round", draw, laws, 600)
    print(f"  at temperature 0: every row equals the library's ({sorted({len(w) for w in want})} tokens per row); "
          f"600 batches of rows of 1 and 3 tokens against their exact laws: chi-square p = "
          + ", ".join(f"{p:.2f}" for p in pvalues))


# --------------------------------------------------------------------------- part (c): a real KV cache

CACHED_GAMMA = 3


@grader("04b.5")
def _cached_round(cached_round):
    target, prompt, truth = tiny_case(0, CACHED_GAMMA)
    watch = CacheWatch(target)
    cases = [(j, truth[:CACHED_GAMMA]) for j in range(CACHED_GAMMA + 1)] + [(None, [])]
    for wrong_at, drafts in cases:
        drafts = list(drafts)
        if wrong_at is not None and wrong_at < CACHED_GAMMA:
            drafts[wrong_at] = (drafts[wrong_at] + 1) % watch.vocab_size
        accepted = next((i for i, (d, t) in enumerate(zip(drafts, truth)) if d != t), len(drafts))
        expected = truth[:accepted + 1]
        watch.reset(1)
        watch.forward(torch.tensor([prompt[:-1]]))
        watch.passes = 0
        got = _token_list("cached_round's result", call(cached_round, watch, prompt[-1], list(drafts)))
        if watch.passes != 1:
            raise Wrong(f"a round makes one target pass over [pending] + drafts; yours made {watch.passes}")
        if got != expected:
            raise Wrong(f"with drafts {drafts} (the target's greedy text goes on with {truth[:len(drafts) + 1]}) your "
                        f"round emits {got}; it should emit the drafts up to the first one the target disagrees "
                        "with, then the target's own token there (or, if it agrees with all, the bonus)")
        kept = prompt + expected[:-1]
        if watch.held != kept:
            extra = len(watch.held) - len(kept)
            raise Wrong(f"after a round that kept {accepted} of {len(drafts)} drafts the cache must hold the context "
                        f"and those {accepted} drafts ({len(kept)} tokens); yours holds {len(watch.held)}"
                        + (f": {extra} written {'entry' if extra == 1 else 'entries'} too many, which the next "
                           "pass would attend to" if extra > 0
                           else "") + ". The new last token is not cached yet: the next pass feeds it first")
    print(f"  on a tiny random Llama's cache: the right tokens and cache after 0..{CACHED_GAMMA} accepted drafts "
          "and after an empty draft")


@grader("04b.6")
def _cached_decode(cached_decode):
    n = 12
    target, prompt, truth = tiny_case(n, CACHED_GAMMA)
    watch = CacheWatch(target, truth=prompt + truth)
    drafter = ScriptedDrafter(prompt + truth, watch.vocab_size)
    try:
        got = _token_list("cached_decode's result", call(cached_decode, watch, drafter, list(prompt), n, CACHED_GAMMA))
    except Wrong:
        if watch.violations:  # a failure after a dirty cache is explained by the cache
            raise Wrong(watch.violations[0]) from None
        raise
    if watch.violations:
        raise Wrong(watch.violations[0])
    if len(got) != n:
        raise Wrong(f"asked for {n} tokens, cached_decode returned {len(got)}")
    if got != truth[:n]:
        first = next(i for i, (a, b) in enumerate(zip(got, truth)) if a != b)
        raise Wrong(f"your tokens differ from plain greedy decoding (the library's generate) from token {first} on. "
                    "Greedy speculative decoding must give exactly the same text")
    if watch.held != prompt + got[:-1]:
        raise Wrong(f"when the loop returns, the cache must hold the prompt and every returned token but the last "
                    f"({len(prompt) + n - 1} tokens); yours holds {len(watch.held)}. A round must never draft past "
                    "the budget: ask for at most (tokens still to emit - 1) drafts")
    print(f"  on a tiny random Llama with drafts that go wrong at every position in turn: equal to generate, "
          f"a clean cache at each of {watch.passes - 1} passes, and the right cache at the end")


# --------------------------------------------------------------------------- concept checks

C1 = dict(cached=40, gamma=4, accepted=2)  # the numbers of concept check c1 (also in the lesson's text)
C4 = dict(lengths=(30, 25), gamma=4, accepted=(1, 3))
C5 = dict(cached=30, nodes=6, path=2)


@grader("04b.c1")
def _c1(answer):
    after_forward, after_rollback = pair(answer, "c1")
    if after_forward != C1["cached"] + C1["gamma"] + 1:
        raise Wrong("right after the forward, every fed token has its keys and values written: count the pending "
                    "token as well as the drafts")
    if after_rollback != C1["cached"] + C1["accepted"] + 1:
        raise Wrong("after the rollback the cache keeps what was fed and accepted: the pending token and the "
                    "accepted drafts, nothing of the rejected one or those after it")


@grader("04b.c4")
def _c4(answer):
    got = pair(answer, "c4")
    if got != tuple(n + a + 1 for n, a in zip(C4["lengths"], C4["accepted"])):
        raise Wrong("each row keeps its own pending token and its own accepted drafts, from its own length; "
                    "the rows are never cut to a common length")


@grader("04b.c5")
def _c5(answer):
    length, discarded = pair(answer, "c5")
    if length != C5["cached"] + 1 + C5["path"]:
        raise Wrong("keep packs the root (the pending token) and the accepted path's nodes into place after the "
                    "cached context")
    if discarded != C5["nodes"] - C5["path"]:
        raise Wrong("the pass wrote one entry per fed token (the root and every node); count those not on the path")


register({
    "04b.c2": pick("c", a="the pending token was fed first in this pass: its keys and values were written then",
                   b="an accepted draft was fed in this pass and its entry survives the rollback",
                   d="one token of every round was never fed to the target in that round's pass"),
    "04b.c3": pick("b", a="the next pass attends to every entry below the row's length, rejected drafts included",
                   c="nothing fails loudly: the cache simply holds more entries than the text"),
})
