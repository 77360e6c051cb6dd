# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false}
# # Assignment 8: write the speculative decoding loop, with its KV-cache rollback
#
# Lesson 4b built the loop in steps.  Here you write it in one function, for one row, against
# the same interfaces the library's loop uses, so that it runs unchanged on a toy Markov chain
# and on a real transformer with a KV cache.  One round:
#
# 1. the target's cache holds the prompt and every token emitted so far **but the last**, the
#    *pending* token;
# 2. ask the drafter for k drafts (the law q each was drawn from comes with them);
# 3. **one** target forward over `[pending] + drafts` (k + 1 positions) gives the target's law p at
#    every draft and one position beyond;
# 4. walk the drafts with the rule of lesson 2: keep draft x while u·q(x) < p(x), with a fresh
#    uniform u per position; at the first rejection emit a token from max(0, p − q)
#    (renormalised) and stop; if every draft is kept, emit the **bonus** token from the last row;
# 5. **roll the cache back**: the forward wrote keys and values for all k + 1 fed tokens, but only
#    the pending token and the kept drafts belong to the text.  The token just emitted is not
#    cached: it is the next pending token.
#
# **Grading.** 10 points: properties of your function, visible below (2); a hidden test on a
# real model at temperature 0, where your tokens must equal plain greedy decoding and the cache
# must never hold a rejected draft when a pass begins (4); a hidden chi-square test of your
# sequences against the toy target's exact law at temperature 0.7 (4; a second seed only if the
# first fails).  A function that hands the loop's work to `specbook`'s own loop or verifiers
# scores nothing on the hidden tests (see the list below).

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false}
import torch

from specbook.drafters import DraftModelDrafter
from specbook.sampling import GREEDY, SamplingParams, logits_to_probs, sample
from specbook.toy import make_toy_pair

# The toy models' tensors are tiny: one thread avoids the threading overhead that dominates them
# (on a busy 2-core machine, tenfold), and the small real model of the hidden test barely notices.
torch.set_num_threads(1)

# %% [markdown] nbgrader={"grade": false, "grade_id": "contract", "locked": true, "schema_version": 3, "solution": false}
# ## The contract
#
# `speculative_decode(target, drafter, prompt, max_new_tokens, gamma, params, generator)` returns
# the `max_new_tokens` new tokens (a list of ints) of one row that starts with `prompt` (a list of
# at least one token id).
#
# * `target` has `vocab_size`, `reset(1)`, `forward(tokens)` (tokens: a `(1, N)` long tensor,
#   appended to the cache; returns logits `(1, N, V)`), `cache_lengths` (a `(1,)` tensor) and
#   `rollback(lengths)` (keep only the first `lengths[0]` cached tokens).  Nothing else.
# * `drafter.propose([context], k, params, generator)` takes the row's text so far as a list with
#   one 1-D long tensor and returns a `Draft`: `.tokens` of shape `(1, K)` with K ≤ k, and `.probs`
#   of shape `(1, K, V)`, the law each draft was drawn from, or `None` for deterministic drafts
#   (then q is one-hot on the drafted token).
# * Prefill the cache with the prompt but its last token (nothing, for a one-token prompt).
# * Never ask for more than `min(gamma, tokens still to emit − 1)` drafts: a draft past the budget
#   could never be emitted, and its entry would stay in the cache.  So when the function returns,
#   the cache holds the prompt and every returned token but the last.
# * Turn the target's logits into probabilities with `logits_to_probs(logits, params)`, the same
#   processing the drafter applied to its own logits.  At temperature 0 (`GREEDY`) it gives one-hot
#   laws, and the same rule then keeps a draft exactly when it is the target's argmax.
# * Draw every random number from `generator` (`torch.rand(..., generator=generator)`,
#   `sample(probs, generator)` or `torch.multinomial`).
#
# **You may call** the target's and the drafter's methods, `specbook.sampling` (`logits_to_probs`,
# `sample`) and torch.  **Not**: `specbook.decode` (`speculative_generate`, `speculative_steps`,
# `generate`, ...), the verifiers of `specbook.verify`, `verify_block`, `verify_serving` and
# `verify_tree` (`verify_chain`, `accept_chain`, `verify_greedy`, ...), or `specbook.rows`.

# %% nbgrader={"grade": false, "grade_id": "speculative_decode", "locked": false, "schema_version": 3, "solution": true}
def speculative_decode(target, drafter, prompt: list[int], max_new_tokens: int, gamma: int = 4,
                       params: SamplingParams = SamplingParams(),
                       generator: torch.Generator | None = None) -> list[int]:
    """The max_new_tokens new tokens of one row, by speculative decoding on the target's cache."""
    ### BEGIN SOLUTION
    target.reset(1)
    if len(prompt) > 1:
        target.forward(torch.tensor([prompt[:-1]]))  # the last prompt token is the first pending token
    out: list[int] = []
    while len(out) < max_new_tokens:
        text = prompt + out
        k = min(gamma, max_new_tokens - len(out) - 1)
        draft = drafter.propose([torch.tensor(text)], k, params, generator)
        drafts = draft.tokens[0].tolist()
        before = int(target.cache_lengths[0])
        logits = target.forward(torch.tensor([[text[-1]] + drafts]))  # (1, K + 1, V): one pass
        p = logits_to_probs(logits[0], params)  # (K + 1, V)
        if draft.probs is None:  # deterministic drafts: q is one-hot
            q = torch.nn.functional.one_hot(torch.tensor(drafts, dtype=torch.long), p.shape[-1]).to(p.dtype)
        else:
            q = draft.probs[0].to(p.dtype)  # (K, V)
        kept = 0
        while kept < len(drafts):
            x = drafts[kept]
            if torch.rand((), generator=generator, dtype=p.dtype) * q[kept, x] < p[kept, x]:
                kept += 1
                continue
            break
        if kept < len(drafts):  # the first rejection: the leftover law max(0, p - q)
            last = int(sample((p[kept] - q[kept]).clamp(min=0), generator))
        else:  # every draft kept: the bonus token from the last row of the pass
            last = int(sample(p[len(drafts)], generator))
        target.rollback(torch.tensor([before + kept + 1]))  # the pending token and the kept drafts
        out += drafts[:kept] + [last]
    return out
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "properties", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Second-order toy chains: the next token depends on the last two, so a pass that starts from a cache
# still holding a rejected draft gets the wrong law.  The draft is poor (30% the target): rejections are common.
_toy_target, _toy_draft = make_toy_pair(vocab_size=6, order=2, match=0.3, seed=1)
_g = torch.Generator().manual_seed(0)
for _prompt, _n, _gamma, _params in (([0, 3], 9, 3, SamplingParams()), ([4], 5, 2, SamplingParams(temperature=0.7)),
                                     ([2, 5, 1], 7, 4, GREEDY)):
    _out = speculative_decode(_toy_target, DraftModelDrafter(_toy_draft), list(_prompt), _n, _gamma, _params, _g)
    assert isinstance(_out, list) and all(isinstance(t, int) for t in _out), \
        f"speculative_decode must return a list of ints, got {type(_out).__name__}"
    assert len(_out) == _n, f"asked for {_n} new tokens, got {len(_out)}"
    assert all(0 <= t < 6 for t in _out), f"token ids must be in [0, 6): {_out}"
    _held = _toy_target.cache_lengths.tolist()
    assert _held == [len(_prompt) + _n - 1], (
        f"when speculative_decode returns, the target's cache must hold the prompt and every returned token but the "
        f"last ({len(_prompt) + _n - 1} tokens); it holds {_held[0]}. Roll the cache back after every pass, and "
        "never draft past the budget")
print("properties: passed")

# %% [markdown] nbgrader={"grade": false, "grade_id": "check_text", "locked": true, "schema_version": 3, "solution": false}
# ## Check your work
#
# At temperature 0 your tokens must equal plain greedy decoding (`specbook.decode.generate`), and
# at any temperature your sequences must follow the target's exact law (`target.sequence_law`).
# The cell below compares both on the toy models; the hidden tests do the same on a real model and
# with seeds you do not know.

# %% nbgrader={"grade": false, "grade_id": "check_your_work", "locked": true, "schema_version": 3, "solution": false}
from collections import Counter

from specbook import stats
from specbook.decode import generate

_plain = generate(_toy_target, torch.tensor([0, 3]), 12, params=GREEDY).new_tokens[0].tolist()
_mine = speculative_decode(_toy_target, DraftModelDrafter(_toy_draft), [0, 3], 12, 3, GREEDY)
print("temperature 0:", "equal to plain decoding" if _mine == _plain else f"yours {_mine}, plain decoding {_plain}")
_warm = SamplingParams(temperature=0.7)
_law = _toy_target.sequence_law([0, 3], 3, _warm)
_g = torch.Generator().manual_seed(1)
_seen = Counter(tuple(speculative_decode(_toy_target, DraftModelDrafter(_toy_draft), [0, 3], 3, 2, _warm, _g))
                for _ in range(800))
_outcomes = sorted(set(_law) | set(_seen))
_test = stats.chisquare_gof([_seen.get(o, 0) for o in _outcomes], [_law.get(o, 0.0) for o in _outcomes])
print(f"temperature 0.7: 800 sequences of 3 tokens against the exact law: chi-square p = {_test.pvalue:.3g} "
      "(a correct loop is below 0.001 one time in a thousand)")

# %% nbgrader={"grade": true, "grade_id": "greedy_equality", "locked": true, "points": 4, "schema_version": 3, "solution": false}
# Hidden test: temperature 0 on a real model, drafts wrong at every position in turn.
### BEGIN HIDDEN TESTS
# Short tracebacks: the feedback shows the assertion's message, not this cell's source.
# %xmode Minimal
from specbook.grading.own_work import VERIFIERS, assert_own_work
from specbook.models import LlamaTarget
from specbook.models.smollm2 import is_fetched, load_smollm2
from specbook.teach.exercises.loop_fixtures import CacheWatch, ScriptedDrafter, greedy_truth, tiny_llama

_LOOPS = tuple(f"specbook.{name}" for name in (
    "decode.speculative_generate", "decode.speculative_steps", "decode.generate", "decode.generate_steps",
    "decode._loop", "decode._verify", "rows.prefill"))
_t, _d = make_toy_pair(vocab_size=6, order=2, match=0.3, seed=3)
assert_own_work(speculative_decode, forbidden=VERIFIERS + _LOOPS,
                calls=[(_t, DraftModelDrafter(_d), [0, 3], 6, 3, SamplingParams(), torch.Generator().manual_seed(0)),
                       (_t, DraftModelDrafter(_d), [1], 5, 2, GREEDY, torch.Generator().manual_seed(0))])
if is_fetched():
    from specbook.models.chat import chat_ids

    _model, _tok = load_smollm2(dtype="float32")
    _prompt, _where = chat_ids(_tok, "Name three colours of the rainbow."), "SmolLM2-135M"
else:
    _model, _where = tiny_llama(seed=3), "a small random Llama"
    _prompt = torch.randint(97, (8,), generator=torch.Generator().manual_seed(3)).tolist()
_n, _gamma = 6, 3
_target = LlamaTarget(_model, max_length=len(_prompt) + 64)
_truth = greedy_truth(_target, _prompt, _n + _gamma + 1)
_watch = CacheWatch(_target, truth=_prompt + _truth)
try:
    _out = speculative_decode(_watch, ScriptedDrafter(_prompt + _truth, _watch.vocab_size), list(_prompt), _n,
                              _gamma, GREEDY, torch.Generator().manual_seed(0))
except Exception as _err:  # noqa: BLE001 - a failure after a dirty cache is explained by the cache
    _out = _err
assert not _watch.violations, f"What went wrong on {_where}: {_watch.violations[0]}"
assert not isinstance(_out, Exception), f"What went wrong: speculative_decode raised {type(_out).__name__}: {_out}"
_out = [int(t) for t in _out]
_first = next((i for i, (a, b) in enumerate(zip(_out, _truth)) if a != b), min(len(_out), _n))
assert _out == _truth[:_n], (
    f"What went wrong: at temperature 0 on {_where}, with drafts that go wrong at every position in turn (and "
    f"sometimes not at all), your tokens differ from plain greedy decoding from token {_first} on. Check which row "
    "of the pass gives the token after a rejection and which gives the bonus token")
print(f"greedy equality on {_where}: passed")
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "sampling_law", "locked": true, "points": 4, "schema_version": 3, "solution": false}
# Hidden test: sequences at temperature 0.7 against the toy target's exact law.
### BEGIN HIDDEN TESTS
# Short tracebacks: the feedback shows the assertion's message, not this cell's source.
# %xmode Minimal
from collections import Counter

from specbook import stats
from specbook.grading.own_work import VERIFIERS, assert_own_work

_LOOPS = tuple(f"specbook.{name}" for name in (
    "decode.speculative_generate", "decode.speculative_steps", "decode.generate", "decode.generate_steps",
    "decode._loop", "decode._verify", "rows.prefill"))
_t, _d = make_toy_pair(vocab_size=5, order=2, match=0.3, seed=2)
_warm = SamplingParams(temperature=0.7)
assert_own_work(speculative_decode, forbidden=VERIFIERS + _LOOPS,
                calls=[(_t, DraftModelDrafter(_d), [1, 2], 4, 2, _warm, torch.Generator().manual_seed(0))])
_law = _t.sequence_law([1, 2], 3, _warm)


def _law_pvalue(seed: int, n: int = 800) -> float:
    g = torch.Generator().manual_seed(seed)
    seen = Counter(tuple(int(x) for x in speculative_decode(_t, DraftModelDrafter(_d), [1, 2], 3, 2, _warm, g))
                   for _ in range(n))
    outcomes = sorted(set(_law) | set(seen))
    return stats.chisquare_gof([seen.get(o, 0) for o in outcomes], [_law.get(o, 0.0) for o in outcomes]).pvalue


# A second seed only if the first one fails: a correct loop then loses these points with probability 1e-6.
_p = _law_pvalue(80_417_003)
if _p < 1e-3:
    _p = _law_pvalue(80_417_011)
assert _p >= 1e-3, (
    f"What went wrong: 800 sequences of 3 tokens from your loop at temperature 0.7 do not follow the target's "
    f"exact law (chi-square p = {_p:.1e}, with two seeds). Check that the target's logits get the same "
    "processing as the drafter's (params), the acceptance test, the law after a rejection, and the rollback")
print("sampling law: passed")
### END HIDDEN TESTS
