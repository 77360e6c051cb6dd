# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false}
# # Assignment 9: prompt lookup, and the workloads where it pays
#
# Prompt lookup (Saxena 2023, "Prompt Lookup Decoding") drafts without any model: it looks for
# the last few tokens of the context earlier in the context, and proposes the tokens that followed
# them there.  Lesson 4 ran the library's version on SmolLM2; here you write the drafter yourself,
# replay SmolLM2's own greedy replies against it, and find out on which workloads it pays.
#
# **Grading.** 10 points: the drafter (4), the replay (2), the figures (2) and your answers (2).
# Hidden tests compare your drafter with specbook's `NGramDrafter`, whose rules these are, on
# random and adversarial contexts (repeated tokens, no match at all, matches that
# overlap the suffix, contexts of one or two tokens); they
# test the replay with the reference drafter and the figures on step lists of their own, so one
# mistake costs points once.  Write each function yourself: one that calls specbook's own n-gram
# drafter (`NGramDrafter`, `NGramIndex`) or its greedy replay (`simulate_greedy`) scores nothing on
# that part.  Plain Python lists are enough; no model runs in this assignment.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false}
import torch

# What the library already does, so the graded functions must not call it.
_NGRAM_LIBRARY = ("specbook.drafters.ngram.NGramDrafter.lookup", "specbook.drafters.ngram.NGramDrafter.propose",
                  "specbook.drafters.ngram.NGramIndex.extend", "specbook.drafters.ngram.NGramIndex.lookup")
_REPLAY_LIBRARY = ("specbook.bench.measure.simulate_greedy",)

# %% [markdown] nbgrader={"grade": false, "grade_id": "lookup_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 1: the drafter
#
# Write `prompt_lookup(context, gamma, max_ngram=3, min_ngram=1)`.  `context` is a list of token
# ids or a 1-D tensor: the prompt and everything generated so far, its last token included.  It
# returns a list of at most `gamma` ints:
#
# 1. Try suffix lengths n = `max_ngram`, `max_ngram - 1`, ..., `min_ngram`, longest first.  The
#    suffix is the context's last n tokens.
# 2. An *earlier occurrence* of the suffix is a start s with `context[s : s + n] == suffix` and
#    `s + n < len(context)`: the occurrence must have a token after it, so the suffix does not
#    match itself, but an occurrence that overlaps the suffix counts.
# 3. At the first (longest) n that has an earlier occurrence, take the **most recent** one (the
#    largest s) and return the tokens that followed it, `context[s + n : s + n + gamma]`: at most
#    `gamma` of them, fewer when the context ends first (never copy past the end of the context).
# 4. When no n has an earlier occurrence, return `[]`: nothing to propose, the loop then makes a
#    plain decoding step.  `gamma = 0` also returns `[]`.
#
# Raise `ValueError` when `gamma` is not an int >= 0, when `1 <= min_ngram <= max_ngram` does not
# hold (both ints), or when `context` is a tensor that is not 1-D.
#
# Example: in `[5, 1, 2, 3, 9, 1, 2]` the suffix `[9, 1, 2]` never occurred before, `[1, 2]` did
# (at s = 1), so with `gamma = 3` the drafts are `[3, 9, 1]`.

# %% nbgrader={"grade": false, "grade_id": "prompt_lookup", "locked": false, "schema_version": 3, "solution": true}
def prompt_lookup(context, gamma: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """Up to gamma tokens that followed the most recent earlier occurrence of the longest matching suffix."""
    ### BEGIN SOLUTION
    if isinstance(context, torch.Tensor) and context.ndim != 1:
        raise ValueError(f"context must be a list or a 1-D tensor, got a tensor of shape {tuple(context.shape)}")
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 0:
        raise ValueError(f"gamma must be an int >= 0, got {gamma!r}")
    if not (isinstance(min_ngram, int) and isinstance(max_ngram, int) and 1 <= min_ngram <= max_ngram):
        raise ValueError(f"need ints 1 <= min_ngram <= max_ngram, got min_ngram={min_ngram!r}, max_ngram={max_ngram!r}")
    tokens = [int(t) for t in context]
    length = len(tokens)
    for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):
        suffix = tokens[length - n:]
        for start in range(length - n - 1, -1, -1):  # latest first; the occurrence needs a token after it
            if tokens[start:start + n] == suffix:
                return tokens[start + n:start + n + gamma]
    return []
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "lookup_tests", "locked": true, "points": 4, "schema_version": 3, "solution": false}
### BEGIN HIDDEN TESTS
# A failing visible test shows its own line only, not the hidden lines above it.
# %xmode Plain
# The references of every hidden test of this notebook, defined before a test calls your code: a failing
# assertion cannot leave them undefined for the later parts (one mistake costs points once).  specbook's
# own versions where it has them, else written apart from the solution.
import random as _random

from specbook.decode_stats import DecodeStats
from specbook.drafters.ngram import NGramDrafter
from specbook.grading.own_work import assert_own_work


def _ref_lookup(context, gamma, max_ngram=3, min_ngram=1):
    """Part 1's rules are NGramDrafter's, copying from the latest occurrence and never past the context."""
    return NGramDrafter(max_ngram, min_ngram, prefer="latest", overlap=False).lookup([int(t) for t in context], gamma)


def _ref_replay(prompt, reply, gamma, draft_fn):
    steps, done = [], 0
    while done < len(reply):
        draft = list(draft_fn(list(prompt) + list(reply[:done]), min(gamma, len(reply) - done - 1)))
        accepted = next((i for i, (d, r) in enumerate(zip(draft, reply[done:])) if d != r), len(draft))
        steps.append((len(draft), accepted))
        done += accepted + 1
    return steps


def _ref_figures(steps, verify_cost):
    """alpha and tau are DecodeStats' acceptance_rate (accepted / verified drafts) and tau (tokens per pass)."""
    stats = DecodeStats()
    for drafted, accepted in steps:
        stats.record(drafted, torch.tensor([accepted + 1]))
    return {"alpha": stats.acceptance_rate if stats.verified else 0.0, "tau": stats.tau,
            "speedup": stats.emitted / sum(verify_cost[k + 1] for k, _ in steps)}
### END HIDDEN TESTS
assert prompt_lookup([5, 1, 2, 3, 9, 1, 2], 3) == [3, 9, 1], "the worked example above"
assert prompt_lookup([4, 8, 15, 16], 2) == [], "no token repeats: nothing to propose"
assert prompt_lookup(torch.tensor([1, 2, 7, 1, 2, 8, 1, 2]), 1) == [8], "several occurrences: copy from the most recent"
assert prompt_lookup([1, 2, 3, 1, 2], 5) == [3, 1, 2], "stop at the end of the context"
for _bad in (-1, 1.5):
    try:
        prompt_lookup([1, 2, 1], _bad)
    except ValueError:
        pass
    else:
        raise AssertionError(f"gamma={_bad!r} should raise ValueError")
### BEGIN HIDDEN TESTS
# Short tracebacks: the feedback shows the assertion message, not this cell's source.
# %xmode Minimal
assert_own_work(prompt_lookup, forbidden=_NGRAM_LIBRARY,
                calls=[([5, 1, 2, 3, 9, 1, 2], 3), ([1, 2, 7, 1, 2, 8, 1, 2], 2, 4, 2), (torch.tensor([3, 3, 3]), 2)])


def _check(context, gamma, max_ngram, min_ngram, hint):
    got = prompt_lookup(context, gamma, max_ngram, min_ngram)
    want = _ref_lookup(context, gamma, max_ngram, min_ngram)
    assert isinstance(got, list) and all(isinstance(t, int) for t in got), (
        f"prompt_lookup must return a list of ints, got {got!r}")
    assert got == want, (f"prompt_lookup({list(context)}, gamma={gamma}, max_ngram={max_ngram}, "
                         f"min_ngram={min_ngram}) = {got}: {hint}")


_check([7], 3, 3, 1, "a context of one token has no earlier occurrence of anything")
_check([], 3, 3, 1, "an empty context proposes nothing")
_check([7, 7], 3, 3, 1, "the suffix may not match itself, but an occurrence with a token after it counts")
_check([1, 2, 9, 1, 2, 8, 1, 2], 2, 3, 1, "with several occurrences of the same suffix, copy from the most recent")
_check([3, 3, 3, 3, 3], 4, 3, 1, "an occurrence may overlap the suffix; copy only tokens that exist")
_check([1, 2, 3, 4, 1, 2, 3, 5, 9, 3], 4, 3, 1, "try the longest suffix first, then shorter ones")
_check([1, 2, 3, 4, 2, 3, 5, 1, 2, 3], 3, 3, 1, "a longer match wins over a more recent shorter one")
_check([6, 1, 2, 6, 4, 2], 2, 3, 2, "no suffix of min_ngram tokens or more occurs earlier: nothing to propose")
_check([1, 2, 3, 1, 2, 3], 0, 3, 1, "gamma = 0 proposes nothing")
_check([5, 6, 5, 6, 5], 10, 1, 1, "max_ngram = 1: only the last token is looked up")
_check(torch.tensor([4, 5, 4, 5, 4]), 2, 3, 1, "a 1-D tensor is a context like a list")
_rng = _random.Random(9)
for _ in range(400):
    _vocab = _rng.choice([2, 3, 5, 30])
    _context = [_rng.randrange(_vocab) for _ in range(_rng.randint(0, 40))]
    _max = _rng.randint(1, 5)
    _check(_context, _rng.randint(0, 6), _max, _rng.randint(1, _max),
           "compare with the rules above: longest suffix first, the most recent earlier occurrence, "
           "at most gamma tokens that exist")
for _args in (([1, 2, 1], 2, 1, 2), ([1, 2, 1], 2, 0, 0), ([1, 2, 1], True, 3, 1)):
    try:
        prompt_lookup(*_args)
    except ValueError:
        pass
    else:
        raise AssertionError(f"prompt_lookup{_args} should raise ValueError (see the rules for gamma and the n-gram sizes)")
try:
    prompt_lookup(torch.tensor([[1, 2, 1]]), 2)
except ValueError:
    pass
else:
    raise AssertionError("a 2-D tensor context should raise ValueError")
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "replay_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 2: replaying greedy decoding without the model
#
# Under greedy verification the output is the target's greedy reply, whatever the drafter
# proposes, and a draft survives exactly as long as it agrees with that reply.  So once the reply
# is known, a whole speculative run can be replayed without running the target.
#
# Write `replay(prompt, reply, gamma, draft_fn)`: one `(drafted, accepted)` pair per target pass.
# Start with `context = prompt` and nothing of the reply emitted.  At every pass:
#
# * with m reply tokens not yet emitted, ask `draft_fn(context, k)` for k = min(gamma, m - 1)
#   drafts (the pass always emits one token of its own, so the loop never drafts past the reply);
#   `draft_fn` returns at most k tokens, possibly none;
# * the accepted drafts are the leading drafts equal to the next reply tokens;
# * the pass emits the accepted drafts and one more reply token (the target's own, after a
#   rejection or as the bonus); they are appended to the context.
#
# Stop when the whole reply has been emitted.  `draft_fn` may be any function with the signature of
# your `prompt_lookup(context, gamma)`.

# %% nbgrader={"grade": false, "grade_id": "replay", "locked": false, "schema_version": 3, "solution": true}
def replay(prompt: list[int], reply: list[int], gamma: int, draft_fn) -> list[tuple[int, int]]:
    """(drafted, accepted) per target pass of greedy speculative decoding that writes ``reply``."""
    ### BEGIN SOLUTION
    context, emitted, steps = list(prompt), 0, []
    while emitted < len(reply):
        draft = list(draft_fn(context, min(gamma, len(reply) - emitted - 1)))
        accepted = 0
        while accepted < len(draft) and draft[accepted] == reply[emitted + accepted]:
            accepted += 1
        context += reply[emitted:emitted + accepted + 1]
        emitted += accepted + 1
        steps.append((len(draft), accepted))
    return steps
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "replay_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_nothing = lambda context, k: []  # noqa: E731 - a drafter that never proposes
assert replay([1, 2], [3, 4, 5], 4, _nothing) == [(0, 0), (0, 0), (0, 0)], "no drafts: one token per pass"
_oracle_reply = [3, 4, 5, 6, 7, 8]
_oracle = lambda context, k: _oracle_reply[len(context) - 2:len(context) - 2 + k]  # noqa: E731 - always right
assert replay([1, 2], _oracle_reply, 2, _oracle) == [(2, 2), (2, 2)], "right drafts: gamma + 1 tokens per pass"
### BEGIN HIDDEN TESTS
# %xmode Minimal
assert_own_work(replay, forbidden=_REPLAY_LIBRARY, calls=[([1, 2, 1], [2, 1, 2, 1, 3], 3, _ref_lookup)])
_asked = []
replay([9], [1, 2, 3], 5, lambda context, k: _asked.append((list(context), k)) or [])
assert [k for _, k in _asked] == [2, 1, 0], (
    f"replay asked the drafter for {[k for _, k in _asked]} drafts on a 3-token reply at gamma = 5: "
    "with m tokens left to emit, ask for min(gamma, m - 1)")
assert [c for c, _ in _asked] == [[9], [9, 1], [9, 1, 2]], (
    f"replay showed the drafter the contexts {[c for c, _ in _asked]}: after each pass the context "
    "is the prompt followed by every reply token emitted so far")


def _wrong_after(reply, prompt_length, right):
    """A drafter whose first ``right`` drafts are right and the next one wrong (when it can)."""
    def draft(context, k):
        upcoming = reply[len(context) - prompt_length:][:k]
        return upcoming[:right] + [t + 1 for t in upcoming[right:right + 1]]
    return draft


_got = replay([5, 5], [1, 2, 3, 4, 5, 6, 7], 3, _wrong_after([1, 2, 3, 4, 5, 6, 7], 2, 1))
_want = _ref_replay([5, 5], [1, 2, 3, 4, 5, 6, 7], 3, _wrong_after([1, 2, 3, 4, 5, 6, 7], 2, 1))
assert _got == _want, (f"replay with a drafter that is right once, then wrong: {_got}; a pass emits its "
                       "accepted drafts plus one token of the target's own, so the next pass starts after them")
_rng = _random.Random(11)
for _ in range(150):
    _vocab = _rng.choice([2, 3, 6])
    _prompt = [_rng.randrange(_vocab) for _ in range(_rng.randint(1, 15))]
    _reply = [_rng.randrange(_vocab) for _ in range(_rng.randint(1, 30))]
    _gamma = _rng.randint(1, 5)
    _got = replay(_prompt, _reply, _gamma, _ref_lookup)
    assert [tuple(s) for s in _got] == _ref_replay(_prompt, _reply, _gamma, _ref_lookup), (
        f"replay({_prompt}, {_reply}, {_gamma}, reference prompt lookup) = {_got}: follow the three rules of a pass "
        "(the test passes a correct drafter, so only the replay is graded here)")
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "figures_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 3: acceptance, tokens per pass and speedup
#
# Write `acceptance_figures(steps, verify_cost)`, where `steps` is a list of `(drafted, accepted)`
# pairs as `replay` returns them and `verify_cost` a dict n -> v(n), the cost of one target pass
# over n positions relative to one position.  Return a dict with three floats:
#
# * `"alpha"`: accepted drafts over **verified** drafts.  A pass that accepted a of its k drafts,
#   a < k, verified a + 1 of them (the (a+1)-th was rejected, those after it were never tested);
#   one that accepted all k verified k.  0.0 when nothing was verified.
# * `"tau"`: tokens emitted per target pass (each pass emits its accepted drafts plus one).
# * `"speedup"`: tokens emitted over the cost of the passes in plain decoding steps.  A pass with k
#   drafts verifies k + 1 positions and costs v(k + 1); prompt lookup drafts for free (c = 0).  Plain
#   decoding costs v(1) = 1 per token, so this is the speedup over it.

# %% nbgrader={"grade": false, "grade_id": "acceptance_figures", "locked": false, "schema_version": 3, "solution": true}
def acceptance_figures(steps: list[tuple[int, int]], verify_cost: dict[int, float]) -> dict[str, float]:
    """{"alpha": accepted / verified, "tau": tokens per pass, "speedup": tokens / sum of v(k + 1)}."""
    ### BEGIN SOLUTION
    passes = len(steps)
    accepted = sum(a for _, a in steps)
    verified = sum(k if a == k else a + 1 for k, a in steps)
    cost = sum(verify_cost[k + 1] for k, _ in steps)
    return {"alpha": accepted / verified if verified else 0.0, "tau": (accepted + passes) / passes,
            "speedup": (accepted + passes) / cost}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "figures_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_flat = {n: 1.0 for n in range(1, 10)}
_figures = acceptance_figures([(0, 0), (0, 0)], _flat)
assert _figures == {"alpha": 0.0, "tau": 1.0, "speedup": 1.0}, f"no drafts is plain decoding: {_figures}"
_figures = acceptance_figures([(4, 4)], _flat)
assert abs(_figures["alpha"] - 1.0) < 1e-12 and abs(_figures["tau"] - 5.0) < 1e-12, _figures
### BEGIN HIDDEN TESTS
# %xmode Minimal
_curve = {1: 1.0, 2: 1.2, 3: 1.25, 4: 1.5, 5: 1.6, 6: 2.0}
_hints = {"alpha": "alpha divides the accepted drafts by the verified ones: a pass that stopped at a rejection "
                   "verified one draft more than it accepted, and drafts after the rejection were never tested",
          "tau": "every pass emits its accepted drafts and one token of the target's own",
          "speedup": "a pass with k drafts costs v(k + 1), the pending position and the k drafts"}
_rng = _random.Random(13)
_cases = [[(3, 1)], [(2, 2), (3, 0)], [(0, 0), (4, 2), (1, 1)], [(5, 0)]]
for _ in range(60):
    _cases.append([(k, _rng.randint(0, k)) for k in (_rng.randint(0, 5) for _ in range(_rng.randint(1, 12)))])
for _steps in _cases:
    _got, _want = acceptance_figures(_steps, _curve), _ref_figures(_steps, _curve)
    assert isinstance(_got, dict) and set(_want) <= set(_got), f"acceptance_figures must return a dict with keys {sorted(_want)}"
    for _key in ("alpha", "tau", "speedup"):
        assert abs(_got[_key] - _want[_key]) < 1e-9, (
            f"acceptance_figures({_steps}, v)[{_key!r}] = {_got[_key]!r}, expected {_want[_key]!r}: {_hints[_key]}")
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "data_text", "locked": true, "schema_version": 3, "solution": false}
# ## The measurements
#
# `WORKLOADS` holds, for three workloads of the benchmark prompts (`specbook/data/bench_prompts.jsonl`,
# the ids are theirs), the chat-template token ids of three prompts and SmolLM2-135M-Instruct's
# greedy reply to each (at most 96 tokens, the end-of-turn token `<|im_end|>` = 2 included where the
# reply reached it), generated in float32 on the CPU with `specbook.decode.generate` by
# `python scripts/measure_assignment_data.py`:
#
# * `code_edit`: a short function and an edit that leaves most of it unchanged;
# * `summarize_quote`: a passage to summarise, quoting one sentence of it verbatim;
# * `chat`: an open question with no source text.
#
# `VERIFY_COST` is the verify-cost curve v(n) of SmolLM2 in float32 on the course's 2-core CPU, from
# the committed benchmark report `docs/data/bench_float32_limit1.json` (`verify_cost`).  Decode the
# tokens with SmolLM2's tokenizer if you have it (`specbook.models.load_smollm2()`); nothing below
# needs it.

# %% nbgrader={"grade": false, "grade_id": "data", "locked": true, "schema_version": 3, "solution": false}
GAMMA = 4  # drafts per pass, as in lesson 4
VERIFY_COST = {1: 1.0, 2: 1.122, 3: 1.075, 4: 1.106, 5: 1.122}  # n positions -> v(n)
WORKLOADS = {
    'code_edit': [
        {'id': 'code_edit-01',
         'prompt': [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018,
                    411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 66, 4236, 260, 8709, 2179, 24907, 80,
                    288, 2179, 6347, 80, 9564, 281, 451, 1517, 30, 13632, 260, 2444, 1517, 30, 198, 198,
                    3725, 198, 1604, 3049, 24, 24907, 727, 472, 585, 441, 36470, 42, 448, 1003, 216, 32,
                    30, 32, 472, 2719, 446, 216, 32, 472, 327, 1792, 281, 36470, 42, 448, 2719, 4519,
                    1792, 472, 1003, 2719, 2272, 3858, 24, 24907, 25, 198, 3725, 2, 198, 1, 520, 9531,
                    198],
         'reply': [3725, 5367, 198, 1604, 3049, 24, 24907, 727, 472, 585, 441, 36470, 42, 448, 1003, 216,
                   32, 30, 32, 472, 1003, 2028, 24, 24907, 25, 2272, 3858, 24, 24907, 25, 198, 3725, 2]},
        {'id': 'code_edit-02',
         'prompt': [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018,
                    411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 7684, 1502, 24247, 288, 897, 8709, 284,
                    288, 260, 1003, 1685, 282, 451, 1517, 30, 5545, 3117, 1745, 260, 1142, 284, 1003,
                    260, 2444, 1517, 30, 198, 198, 3725, 198, 1604, 16905, 79, 22328, 24, 7298, 28, 1796,
                    727, 472, 21284, 446, 5314, 24, 7298, 25, 472, 327, 1646, 28, 985, 281, 1796, 30,
                    8416, 3734, 448, 21284, 75, 2393, 77, 446, 21284, 30, 726, 24, 2393, 28, 216, 32, 25,
                    1232, 985, 472, 1003, 21284, 198, 3725, 2, 198, 1, 520, 9531, 198],
         'reply': [3725, 5367, 198, 1604, 16905, 79, 22328, 24, 7298, 28, 1796, 727, 472, 1003, 5314, 24,
                   7298, 25, 1232, 5314, 24, 12247, 25, 198, 3725, 2]},
        {'id': 'code_edit-03',
         'prompt': [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018,
                    411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 66, 846, 16064, 260, 8762, 281, 451,
                    1517, 347, 253, 1398, 9647, 30, 13632, 260, 2444, 1517, 30, 198, 198, 3725, 198,
                    1604, 16207, 79, 1714, 79, 9934, 24, 28707, 727, 472, 966, 446, 4389, 472, 327, 304,
                    281, 2966, 42, 448, 585, 304, 2471, 216, 34, 1758, 216, 32, 42, 629, 966, 30, 3137,
                    24, 94, 1672, 304, 25, 472, 1003, 966, 198, 3725, 2, 198, 1, 520, 9531, 198],
         'reply': [3725, 5367, 198, 1604, 16207, 79, 1714, 79, 9934, 24, 28707, 727, 472, 1003, 933, 94,
                   1672, 304, 327, 304, 281, 1845, 24, 33, 28, 464, 24, 8898, 30, 16166, 24, 94, 1292,
                   1232, 216, 33, 25, 585, 304, 2471, 216, 34, 1758, 216, 32, 77, 198, 3725, 2]},
    ],
    'summarize_quote': [
        {'id': 'summarize_quote-01',
         'prompt': [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018,
                    411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 13764, 3298, 836, 260, 1695, 2524, 281,
                    827, 355, 1296, 8545, 30, 3069, 1520, 260, 768, 1070, 6330, 282, 260, 2524, 2229,
                    327, 2229, 28, 281, 27437, 8029, 30, 198, 198, 504, 3102, 11940, 282, 11702, 10901,
                    17845, 335, 14801, 288, 2800, 7184, 7216, 288, 5989, 335, 30946, 429, 2405, 288,
                    4448, 30, 5237, 10840, 1137, 260, 1363, 736, 1303, 20879, 266, 1830, 8158, 335, 260,
                    3398, 284, 919, 260, 7280, 10145, 327, 1122, 30, 30308, 5139, 592, 6066, 42, 634,
                    1959, 540, 7803, 335, 3374, 28, 979, 1449, 3696, 338, 7037, 386, 487, 523, 441, 3470,
                    601, 30, 378, 11940, 13145, 288, 2523, 260, 5992, 281, 4451, 30, 476, 1882, 359, 441,
                    31736, 5989, 28, 392, 359, 23971, 260, 7280, 288, 701, 327, 827, 2009, 253, 2605,
                    1627, 1137, 265, 47991, 270, 35765, 42442, 307, 30, 2, 198, 1, 520, 9531, 198],
         'reply': [504, 11702, 10901, 3102, 11940, 17845, 335, 14801, 288, 2800, 7184, 7216, 288, 5989,
                   335, 30946, 429, 2405, 288, 4448, 28, 351, 1199, 429, 634, 14402, 284, 1449, 35824,
                   338, 7037, 386, 487, 1124, 441, 3470, 601, 30, 5237, 10840, 18461, 260, 1363, 28, 979,
                   1449, 592, 6193, 563, 260, 1645, 335, 1122, 506, 2950, 30, 378, 11940, 13145, 288,
                   2523, 260, 5992, 281, 4451, 284, 13145, 288, 2523, 260, 3062, 281, 216, 34, 32, 34,
                   35, 30, 2]},
        {'id': 'summarize_quote-02',
         'prompt': [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018,
                    411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 13764, 3298, 836, 260, 1695, 2524, 281,
                    827, 355, 1296, 8545, 30, 3069, 1520, 260, 768, 1070, 6330, 282, 260, 2524, 2229,
                    327, 2229, 28, 281, 27437, 8029, 30, 198, 198, 11493, 418, 253, 7915, 1955, 5729,
                    17288, 21797, 2307, 18079, 335, 1296, 1165, 8588, 327, 3772, 929, 30, 378, 1230, 282,
                    29215, 254, 18079, 6641, 411, 253, 3464, 690, 260, 7255, 28, 979, 46638, 18079,
                    14692, 8553, 260, 1142, 30, 378, 2299, 5150, 260, 6683, 288, 13692, 913, 28, 527,
                    24287, 260, 1165, 2698, 338, 29215, 927, 2645, 288, 480, 26572, 2030, 429, 260,
                    10393, 30, 476, 504, 2652, 359, 9135, 6757, 347, 1869, 327, 260, 1142, 6960, 1627,
                    260, 1022, 1919, 4150, 30, 378, 5729, 4406, 288, 3230, 7522, 4255, 351, 1420, 9524,
                    12082, 1867, 4018, 30, 2, 198, 1, 520, 9531, 198],
         'reply': [504, 2524, 9041, 253, 2609, 2843, 281, 260, 4949, 282, 46272, 28, 4170, 260, 6683,
                   282, 29215, 254, 18079, 284, 260, 1645, 282, 13692, 913, 335, 260, 1165, 2698, 338,
                   29215, 927, 2645, 288, 480, 26572, 30, 378, 2299, 418, 253, 7915, 1955, 5729, 281,
                   260, 10834, 553, 22678, 260, 6683, 282, 29215, 254, 18079, 284, 983, 253, 2795, 288,
                   13692, 913, 28, 527, 6569, 260, 2359, 338, 260, 2652, 359, 9135, 6757, 347, 1869, 327,
                   260, 1142, 6960, 30, 378, 1391, 7331, 288, 1453, 253, 1507, 1230, 282, 29215, 254,
                   18079, 284, 523, 1453, 253]},
        {'id': 'summarize_quote-03',
         'prompt': [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018,
                    411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 13764, 3298, 836, 260, 1695, 2524, 281,
                    827, 355, 1296, 8545, 30, 3069, 1520, 260, 768, 1070, 6330, 282, 260, 2524, 2229,
                    327, 2229, 28, 281, 27437, 8029, 30, 198, 198, 49, 32339, 281, 260, 1573, 2342, 9516,
                    553, 2841, 9417, 6956, 411, 2613, 2489, 282, 411, 260, 42126, 30, 45743, 3525, 253,
                    17061, 429, 253, 986, 31902, 42126, 284, 2290, 327, 3869, 732, 502, 1188, 30, 378,
                    7615, 28, 312, 4815, 452, 12159, 28, 1921, 260, 2359, 2422, 429, 7956, 701, 10899,
                    2025, 2745, 29, 85, 16855, 3092, 2080, 30, 476, 46844, 868, 457, 288, 4571, 253,
                    32509, 282, 6956, 288, 820, 253, 25940, 1627, 384, 1137, 30, 4311, 260, 1363, 28,
                    260, 32339, 4631, 338, 357, 278, 1154, 6694, 3092, 2080, 971, 5738, 564, 26064, 2743,
                    511, 282, 601, 411, 13747, 655, 30, 2, 198, 1, 520, 9531, 198],
         'reply': [49, 32339, 281, 260, 1573, 2342, 9516, 553, 2841, 9417, 6956, 411, 2613, 2489, 282,
                   411, 260, 42126, 28, 284, 260, 7615, 28, 312, 4815, 452, 12159, 28, 553, 4727, 253,
                   1363, 288, 2482, 24831, 2745, 29, 85, 16855, 3092, 2080, 30, 378, 32339, 4631, 338,
                   357, 278, 1154, 6694, 3092, 2080, 971, 5738, 28, 564, 260, 5139, 359, 1209, 9417,
                   2743, 511, 282, 601, 411, 13747, 655, 30, 2]},
    ],
    'chat': [
        {'id': 'chat-01',
         'prompt': [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018,
                    411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 1780, 359, 634, 1123, 1853, 288, 2951,
                    4782, 645, 4836, 418, 1478, 47, 2, 198, 1, 520, 9531, 198],
         'reply': [2427, 4836, 418, 1478, 28, 357, 506, 2807, 288, 820, 3590, 281, 469, 17066, 28, 564,
                   665, 359, 1853, 288, 2951, 4782, 338, 416, 724, 30, 1963, 282, 260, 768, 2430, 314,
                   288, 932, 253, 5636, 1108, 1898, 30, 669, 2761, 982, 1441, 253, 1678, 3589, 28, 564,
                   253, 8354, 28, 3646, 1557, 837, 346, 416, 1593, 1355, 19801, 30, 198, 198, 4809, 1109,
                   970, 288, 2951, 4782, 314, 288, 722, 253, 5636, 1108, 1898, 30, 669, 2761, 982, 1441,
                   253, 1678, 3589, 28, 564, 253, 5636, 1557, 837, 346, 416, 1593, 1355, 19801, 30, 669]},
        {'id': 'chat-02',
         'prompt': [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018,
                    411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 7306, 346, 3556, 1701, 260, 6376, 5117,
                    4461, 981, 260, 1194, 47, 2, 198, 1, 520, 9531, 198],
         'reply': [504, 6376, 5117, 4461, 981, 260, 1194, 975, 282, 253, 980, 1217, 13739, 43464, 24484,
                   30, 669, 7613, 4149, 645, 1420, 13242, 5383, 6756, 282, 1512, 28, 715, 347, 9004, 284,
                   4983, 28, 284, 314, 13490, 281, 511, 8939, 30, 1423, 28, 645, 1420, 12517, 429, 260,
                   2388, 28, 357, 13242, 6756, 282, 1512, 338, 359, 282, 253, 896, 2380, 28, 3431, 4461,
                   30, 669, 24484, 282, 1420, 4149, 975, 282, 260, 3547, 282, 1420, 284, 260, 2203, 282,
                   260, 6756, 30, 198, 198, 2427, 1420, 12517, 429, 260, 2388, 28, 357, 13242, 253, 1507,
                   1230]},
        {'id': 'chat-03',
         'prompt': [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018,
                    411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 57, 1277, 288, 1120, 4108, 564, 339,
                    820, 12364, 990, 2531, 3487, 30, 6049, 5042, 47, 2, 198, 1, 520, 9531, 198],
         'reply': [2427, 4108, 28, 357, 506, 2807, 288, 820, 1147, 4782, 335, 260, 1867, 8427, 28, 564,
                   357, 506, 597, 2807, 288, 820, 12364, 30, 3726, 506, 634, 5042, 42, 1116, 33, 30,
                   1903, 8084, 982, 17169, 260, 980, 4253, 4250, 982, 1576, 288, 1658, 253, 35709, 281,
                   1181, 670, 216, 35, 32, 3487, 30, 669, 416, 325, 253, 11594, 327, 8189, 30, 1116, 34,
                   30, 1903, 11117, 351, 253, 3091, 29, 1110, 4253, 6993, 346, 1120, 469, 1658, 28, 919,
                   2090, 346, 2316, 4421, 288, 685, 30, 669, 2978, 14320, 28, 7001, 614, 469, 5501, 28]},
    ],
}

# %% [markdown] nbgrader={"grade": false, "grade_id": "answers_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 4: where prompt lookup pays, and why
#
# Replay every reply of `WORKLOADS` with your `prompt_lookup` at `GAMMA` drafts (default n-gram
# sizes), pool each workload's replies (concatenate their step lists) and set:
#
# * `FIGURES`: `{workload: acceptance_figures(pooled steps, VERIFY_COST)}` for the three workloads;
# * `PAYS_LEAST`: the workload with the smallest speedup;
# * `WHY`: the statement of `WHY_OPTIONS` that explains why the other two pay more;
# * `CHAT_WHY`: the statement of `CHAT_WHY_OPTIONS` that explains why chat, whose prompts hold nothing
#   to copy, still keeps some drafts.  To find out rather than guess, record for each pass whether
#   the copied tokens came from the prompt or from the reply written so far.
#
# Before you run it, predict the order of the three workloads.

# %% nbgrader={"grade": false, "grade_id": "why_options", "locked": true, "schema_version": 3, "solution": false}
WHY_OPTIONS = (
    "a longer prompt always holds more matches, and more matches always mean more accepted drafts",
    "their replies copy long spans of their prompts, so the tokens after the latest match are the ones the target writes next",
    "the target is more confident on those workloads, and prompt lookup drafts the target's most likely tokens",
    "their prompts are written in English, whose frequent words make every lookup find a match",
)
CHAT_WHY_OPTIONS = (
    "the system prompt of the chat template is in every context, and the chat replies quote it",
    "prompt lookup proposes the most frequent token of the context when no suffix matches",
    "the replies repeat their own earlier phrases, and the lookup searches the reply written so far as well as the prompt",
    "chat prompts are short, so the suffix of one token always has an earlier occurrence",
)

# %% nbgrader={"grade": false, "grade_id": "answers", "locked": false, "schema_version": 3, "solution": true}
### BEGIN SOLUTION
FIGURES = {}
for name, items in WORKLOADS.items():
    pooled = []
    for item in items:
        pooled += replay(item["prompt"], item["reply"], GAMMA, prompt_lookup)
    FIGURES[name] = acceptance_figures(pooled, VERIFY_COST)
PAYS_LEAST = min(FIGURES, key=lambda name: FIGURES[name]["speedup"])
WHY = WHY_OPTIONS[1]
CHAT_WHY = CHAT_WHY_OPTIONS[2]
### END SOLUTION
for _name, _fig in FIGURES.items():
    print(f"{_name:16s} alpha {_fig['alpha']:.3f}  tau {_fig['tau']:.3f}  speedup {_fig['speedup']:.3f}")
print("pays least:", PAYS_LEAST)

# %% nbgrader={"grade": true, "grade_id": "answers_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert set(FIGURES) == set(WORKLOADS), f"FIGURES needs one entry per workload: {sorted(WORKLOADS)}"
assert PAYS_LEAST in WORKLOADS, "PAYS_LEAST is the name of a workload"
assert WHY in WHY_OPTIONS and CHAT_WHY in CHAT_WHY_OPTIONS, "WHY and CHAT_WHY must be taken from their options"
### BEGIN HIDDEN TESTS
# %xmode Minimal


def _measure(lookup, replay_fn, figures_fn):
    out = {}
    for name, items in WORKLOADS.items():
        pooled = []
        for item in items:
            pooled += [tuple(s) for s in replay_fn(item["prompt"], item["reply"], GAMMA, lookup)]
        out[name] = figures_fn(pooled, VERIFY_COST)
    return out


def _same(a, b):
    return set(a) == set(b) and all(abs(a[n][k] - b[n][k]) < 1e-6 for n in b for k in ("alpha", "tau", "speedup"))


_reference = _measure(_ref_lookup, _ref_replay, _ref_figures)
# Your figures must be the reference's, or what your own three functions give on this data: a mistake in
# parts 1 to 3 has already cost its points there, so it is not counted again here.
try:
    _yours = _measure(prompt_lookup, replay, acceptance_figures)
except Exception:  # noqa: BLE001 - your functions are graded above
    _yours = None
assert _same(FIGURES, _reference) or (_yours is not None and _same(FIGURES, _yours)), (
    "FIGURES: replay every reply of a workload with prompt_lookup at GAMMA, concatenate the step lists of "
    "the workload, then call acceptance_figures once with VERIFY_COST")
assert PAYS_LEAST == min(_reference, key=lambda name: _reference[name]["speedup"]), (
    f"PAYS_LEAST = {PAYS_LEAST!r}: compare the workloads' speedups, not their acceptance alone")
assert WHY == WHY_OPTIONS[1], (
    "WHY: compare what the replies of the workloads do with their prompts; a match alone keeps nothing, and "
    "prompt lookup knows nothing of what the target finds likely")
assert CHAT_WHY == CHAT_WHY_OPTIONS[2], (
    "CHAT_WHY: for chat, find where the copied tokens of the accepted drafts came from: the prompt, or the reply "
    "written so far")
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "closing", "locked": true, "schema_version": 3, "solution": false}
# Prompt lookup guesses nothing: it can only propose text that is already in the context.  It pays
# where the reply copies its prompt, and on a small model it also catches the model repeating
# itself.  Where its drafts are wrong they are not free either: on this CPU a pass over k + 1
# positions costs v(k + 1) > 1, so a pass whose drafts are all rejected is slower than a plain step.
# Nine replies are a small sample (compare the speedups of single replies within one workload): they
# say clearly which workload pays least, not which of the other two pays most.
#
# specbook's `NGramDrafter` (`specbook/drafters/ngram.py`) makes the same lookup with an index that is
# extended as the context grows instead of rescanning it, and with `overlap=True` keeps copying past
# the end of the context (a repeated line is drafted whole).  `AdaptiveGamma(..., shadow=True)`
# (`specbook/drafters/adaptive.py`) stops drafting where lookups keep failing; lesson 4 and
# `docs/drafters.md` measure both on the real model.
