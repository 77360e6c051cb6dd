# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lesson 4b — Write the loop: drafts, one verify pass, and the KV cache
#
# Since lesson 1 the speculative loop has been `specbook.decode.speculative_generate`,
# a function we called and traced but never wrote. This lesson has you write it, in
# steps, each followed by a check that says what is wrong:
#
# 1. **One row on the toy models.** Draft γ tokens, score them with *one* target pass
#    over γ + 1 positions, keep or reject them with lesson 2's rule, add the bonus
#    token, and loop. Checked against the exact law of whole sequences and against
#    the library's loop.
# 2. **A batch.** Rows of different lengths share one pass; each row reads its own
#    positions and keeps its own number of drafts.
# 3. **A real KV cache** (SmolLM2-135M, lesson 4's model). A transformer does not
#    re-read the whole text every pass: it keeps each token's keys and values.
#    The verify pass writes them for *every* draft, rejected ones included, so the
#    loop must cut the cache back after each round. Checked by greedy equality with
#    plain decoding.
#
# Then what keeping a tree path does to the cache (lesson 5's trees), a concept
# check, and the lesson's checks.
#
# Each exercise is a cell you complete; the check cell below it runs your code on
# inputs of its own and prints ✓, ✗ with a reason, or "not answered".

# %% tags=["parameters"]
import os

FAST = os.environ.get("SPECBOOK_FAST", "0") == "1"  # the test suite sets SPECBOOK_FAST=1
GAMMA = 4  # drafts per round in the demonstrations
SMOL_NEW = 8 if FAST else 32  # tokens decoded on the real model (its reply to the prompt below is longer)
SEED = 0

# %%
import time

import torch
from matplotlib.patches import Patch, Rectangle
from tqdm.auto import tqdm

import specbook as sb
from specbook.decode import generate, speculative_generate, speculative_steps
from specbook.drafters import DraftModelDrafter, NGramDrafter
from specbook.models import LlamaConfig, LlamaModel, LlamaTarget
from specbook.sampling import GREEDY, SamplingParams, logits_to_probs
from specbook.teach import exercises, plots
from specbook.toy import make_toy_pair
from specbook.verify import verify_greedy

if FAST:  # the test suite shares the machine with other jobs: one thread never waits on a descheduled peer
    torch.set_num_threads(1)
_started = time.perf_counter()


def passed(key: str) -> bool:
    """Whether exercise ``key`` was checked in this kernel and is right (later cells use your code only then)."""
    return any(r.key == key and r.passed for r in exercises.results("04b"))


# %% [markdown]
# ## What the loop must do
#
# One round of the loop, for one row whose text so far is `context`:
#
# 1. the drafter proposes γ tokens x₁ … x_γ, each drawn from its law q_i;
# 2. the target reads the context and the drafts in **one** forward pass. Attention
#    is causal, so the pass returns, at every position, the target's law of the
#    *next* token given everything up to that position. The γ + 1 laws we need
#    are p₀ (after the context), p₁ (after x₁), …, p_γ (after all drafts);
# 3. walk the drafts: keep x_i when u·q_i(x_i) < p_{i-1}(x_i) (a fresh uniform u for
#    each), stop at the first rejection and draw the corrected token from
#    max(0, p_{i-1} − q_i) renormalised; if all γ survive, draw the **bonus** token
#    from p_γ;
# 4. append what was emitted (1 to γ + 1 tokens) and go again.
#
# The toy models of lessons 1 to 3 are back: two first-order Markov chains over 6
# tokens (the draft is 70% the target), whose every probability is known.

# %%
target, draft_model = make_toy_pair(vocab_size=6, order=1, match=0.7, seed=SEED)
params = SamplingParams(temperature=1.0)
print("target p after token 0:", [round(x, 3) for x in target.next_probs([0], params).tolist()])
print("draft  q after token 0:", [round(x, 3) for x in draft_model.next_probs([0], params).tolist()])

# %% [markdown]
# ## 1. One row, no cache yet
#
# **Exercise 04b.1 (code).** Write `draft_tokens`: draw γ tokens from the draft model,
# one after the other (each continues the context *and the drafts before it*), and
# return them with the law each was drawn from, q of shape (γ, V).
# `draft_model.next_probs(tokens, params)` gives the draft's next-token law after a
# list of tokens; draw with `torch.multinomial(q, 1, generator=generator)`.

# %% tags=["solution"]
def draft_tokens(draft_model, context: list[int], gamma: int, params, generator) -> tuple[list[int], torch.Tensor]:
    """γ drafts after ``context`` and their laws: (tokens, q (γ, V))."""
    ### BEGIN SOLUTION
    tokens, laws = [], []
    for _ in range(gamma):
        q = draft_model.next_probs(context + tokens, params)  # (V,) the law this draft is drawn from
        tokens.append(int(torch.multinomial(q, 1, generator=generator)))
        laws.append(q)
    return tokens, torch.stack(laws)  # (γ, V)
    ### END SOLUTION


# %%
exercises.check("04b.1", draft_tokens)

# %% [markdown]
# **Exercise 04b.2 (code).** Write `toy_round`, one round for one row. For now there is
# no cache: reset the target (`target.reset(1)`) and feed it the whole text, context
# and drafts, in one `target.forward` of shape (1, T + γ). Its output has one row of
# logits per fed token, and row j is the law of the token *after* the first j + 1
# tokens. Which γ + 1 rows are p₀ … p_γ? Turn them into probabilities with
# `logits_to_probs(logits, params)`. Then write the walk, `accept_walk`: lesson 2's rule
# along the drafts, ending with the corrected or the bonus token. (It is what
# `specbook.verify.verify_chain` does; write it here, so that you see where the bonus
# comes from.)
#
# The check runs your round at temperature 0, where every draw is an argmax, against
# the library's first round on several contexts, and at temperature 1 tests 800
# rounds against the target's exact law (each round completed to three tokens by
# the target itself).

# %% tags=["solution"]
def accept_walk(p: torch.Tensor, q: torch.Tensor, drafts: list[int], generator) -> list[int]:
    """Lesson 2's rule along one row: p (K + 1, V), q (K, V); the kept drafts, then one corrected or bonus token."""
    ### BEGIN SOLUTION
    out = []
    for i, x in enumerate(drafts):
        if torch.rand((), generator=generator, dtype=p.dtype) * q[i, x] < p[i, x]:
            out.append(x)  # kept
            continue
        leftover = (p[i] - q[i]).clamp(min=0)  # a rejection leaves mass only where p > q
        out.append(int(torch.multinomial(leftover, 1, generator=generator)))
        return out
    out.append(int(torch.multinomial(p[len(drafts)], 1, generator=generator)))  # bonus: the last row of the pass
    return out
    ### END SOLUTION


def toy_round(target, draft_model, context: list[int], gamma: int, params, generator) -> list[int]:
    """One round from ``context``: the accepted drafts, then one corrected or bonus token."""
    drafts, q = draft_tokens(draft_model, context, gamma, params, generator)
    ### BEGIN SOLUTION
    target.reset(1)
    logits = target.forward(torch.tensor([context + drafts]))  # (1, T + γ, V): one pass
    p = logits_to_probs(logits[0, len(context) - 1:], params)  # (γ + 1, V): after the context, after each draft
    return accept_walk(p, q, drafts, generator)
    ### END SOLUTION


# %%
exercises.check("04b.2", toy_round)

# %% [markdown]
# **Exercise 04b.3 (code).** Write the loop, `toy_generate`: rounds until `n` tokens are
# out, each continuing from the prompt and everything emitted so far; return exactly
# the first `n` (the last round may overshoot). The check compares your loop at
# temperature 0 with `speculative_generate`, and tests 800 three-token sequences
# against the target's exact law, `target.sequence_law`, with a chi-square test on raw
# counts (`specbook.stats`, the primer's tool).

# %% tags=["solution"]
def toy_generate(target, draft_model, prompt: list[int], n: int, gamma: int, params, generator) -> list[int]:
    """``n`` new tokens after ``prompt`` by speculative decoding (no cache)."""
    ### BEGIN SOLUTION
    out = []
    while len(out) < n:
        out += toy_round(target, draft_model, prompt + out, gamma, params, generator)
    return out[:n]
    ### END SOLUTION


# %%
exercises.check("04b.3", toy_generate)

# %% [markdown]
# ## 2. A batch: rows that keep different numbers of drafts
#
# A server verifies many rows in one pass. Their texts have different lengths, so the
# batch is **padded** to one width: each row is followed by filler tokens up to the
# longest row. Causal attention means a row's real positions never see its padding,
# so the filler's value does not matter. What matters is where each row's γ + 1 laws
# sit: after *its own* last context token. After verification every row has
# emitted its own number of tokens, so the rows drift further apart in length with
# every round.
#
# **Exercise 04b.4 (code).** Write `toy_batch_round`: draft for every row, build one
# right-padded (B, width) tensor, make **one** target pass (`target.reset(B)` first),
# and walk each row's drafts against its own rows of the pass with your `accept_walk`.
# Return one list of tokens per row.

# %% tags=["solution"]
def toy_batch_round(target, draft_model, contexts: list[list[int]], gamma: int, params, generator) -> list[list[int]]:
    """One round for a batch of rows of any lengths, with one target pass."""
    ### BEGIN SOLUTION
    drafted = [draft_tokens(draft_model, c, gamma, params, generator) for c in contexts]
    texts = [c + d for c, (d, _) in zip(contexts, drafted)]
    width = max(len(t) for t in texts)
    padded = torch.tensor([t + [0] * (width - len(t)) for t in texts])  # (B, width), filler after each row
    target.reset(len(texts))
    logits = target.forward(padded)  # (B, width, V): one pass for the batch
    out = []
    for b, (c, (d, q)) in enumerate(zip(contexts, drafted)):
        p = logits_to_probs(logits[b, len(c) - 1: len(c) + gamma], params)  # (γ + 1, V) row b's own positions
        out.append(accept_walk(p, q, d, generator))
    return out
    ### END SOLUTION


# %%
exercises.check("04b.4", toy_batch_round)

# %% [markdown]
# The library does the same with a cache (next section): one length per row. Below,
# `speculative_steps` (the loop, one pass per `next`) runs three rows of 1, 3 and 2
# prompt tokens; after every pass we read the target's per-row cache lengths. Each
# holds the row's prompt and everything it emitted, **but the last token**: that one
# is the *pending* token, fed first in the next pass. (The toy's "cache" is its token
# history; a transformer's is the next section's keys and values.)

# %%
batch_prompts = [[0], [1, 2, 3], [4, 5]]
emitted = [[] for _ in batch_prompts]
lines, invariant_held, counts_seen = [], True, set()
for step in speculative_steps(target, DraftModelDrafter(draft_model), batch_prompts, 10, params=params, gamma=GAMMA,
                              generator=torch.Generator().manual_seed(SEED)):
    lengths = target.cache_lengths.tolist()  # one per live row
    cells = []
    for slot, row in enumerate(step.rows):
        n, kept = int(step.num_emitted[slot]), int(step.kept[slot])
        emitted[row] += step.tokens[slot, :kept].tolist()
        counts_seen.add(n)
        if kept == n:  # a row cut at its budget keeps fewer than the pass emitted
            invariant_held &= lengths[slot] == len(batch_prompts[row]) + len(emitted[row]) - 1
        cells.append(f"row {row}: +{n} → cache {lengths[slot]}")
    lines.append(f"pass {len(lines) + 1}:  " + ";  ".join(cells))
print("\n".join(lines))
print(f"tokens emitted per row and pass: {sorted(counts_seen)}; "
      f"cache = prompt + emitted - 1 after every pass: {invariant_held}")

# %% [markdown]
# ## 3. A real model and its KV cache
#
# Re-reading the whole text every round, as the toy loop did, costs a transformer a
# pass over T + γ tokens. Instead it keeps, for every layer, the **keys and values**
# of every token it has read: a token's keys and values depend only on the tokens
# before it, so they never change. A pass then feeds only the new tokens (the pending
# token and the drafts), writes their keys and values after the cached ones, and
# lets them attend to everything cached.
#
# We load SmolLM2-135M from the local cache (`python -m specbook fetch-model` once
# while online), in float32 so that greedy comparisons are token for token.

# %%
from specbook.models.smollm2 import is_fetched, load_smollm2

HAVE_SMOL = is_fetched()
if HAVE_SMOL:
    model, tokenizer = load_smollm2(dtype="float32")
    model_name = "SmolLM2-135M-Instruct"
    from specbook.models.chat import chat_ids

    prompt_ids = chat_ids(tokenizer, "Rewrite this paragraph in the past tense and change nothing else: The old "
                                     "keeper climbs the stairs every evening. He lights the lamp, cleans the glass "
                                     "and writes the weather in his book. Ships pass far out at sea, and their crews "
                                     "see the light and know where the rocks are.")
else:
    print("SmolLM2-135M is not on this machine (run `python -m specbook fetch-model` once while online). The cache "
          "mechanics below run on a small random Llama instead; the comparisons on SmolLM2 are skipped.")
    config = LlamaConfig(vocab_size=512, dim=128, n_layers=4, n_heads=4, n_kv_heads=2, intermediate_size=256,
                         max_position_embeddings=512)
    model = LlamaModel(config).init_weights(std=0.3, generator=torch.Generator().manual_seed(SEED)).eval()
    model_name, tokenizer = "a small random Llama", None
    prompt_ids = torch.randint(512, (40,), generator=torch.Generator().manual_seed(SEED)).tolist()


def name(token: int) -> str:
    """A short printable label for a token."""
    if tokenizer is None:
        return str(token)
    return tokenizer.decode([token]).replace(" ", "␣").replace("\n", "⏎")[:7] or "∅"


smol = LlamaTarget(model, max_length=len(prompt_ids) + SMOL_NEW + 2 * GAMMA + 8)
t0 = time.perf_counter()
truth = generate(smol, torch.tensor(prompt_ids), SMOL_NEW, params=GREEDY, progress=not FAST).new_tokens[0].tolist()
print(f"{model_name}: prompt of {len(prompt_ids)} tokens; plain greedy decoding of {SMOL_NEW} tokens took "
      f"{time.perf_counter() - t0:.1f} s")
print("reply:", repr(tokenizer.decode(truth)) if tokenizer else truth)

# %% [markdown]
# The cache is one preallocated buffer per layer for keys and one for values, and a
# **length per row**: how many of its slots are valid. A pass writes each new token
# at slot `length + i` and raises the length; attention reads only slots below the
# length. Before the first round the loop *prefills* the cache with the prompt
# **except its last token**, which becomes the first pending token.

# %%
smol.reset(1)
smol.forward(torch.tensor([prompt_ids[:-1]]))  # prefill: the prompt but its last token
cache = smol.cache
print(f"keys: {tuple(cache.k.shape)} = (layers, rows, key-value heads, max length, head width); "
      f"values: the same")
print(f"row length after the prefill: {smol.cache_lengths.tolist()} (the prompt has {len(prompt_ids)} tokens)")

# %% [markdown]
# ### One round, watched from the cache
#
# We pick a round in which prompt lookup (lesson 4's n-gram drafter) proposes
# drafts and the target keeps some but not all of them, and run it on the cache by
# hand. At temperature 0 the rule is "keep a draft while it equals the target's
# argmax" (`verify_greedy`). Watch the row's length.

# %%
def demo_round():
    """(position in the reply, drafts) of the first round whose drafts are partly accepted."""
    text = prompt_ids + truth
    for t in range(len(truth) - 1):
        context = prompt_ids + truth[:t]
        drafts = NGramDrafter().lookup(context, GAMMA)
        kept = next((i for i, (d, x) in enumerate(zip(drafts, text[len(context):])) if d != x), len(drafts))
        if len(drafts) >= 2 and 0 < kept < len(drafts):
            return t, drafts
    t = 1  # no such round in this reply: draft the true text with an error at the third token
    drafts = truth[t:t + GAMMA]
    drafts[2] = (drafts[2] + 1) % model.config.vocab_size
    return t, drafts


at, drafts = demo_round()
context = prompt_ids + truth[:at]
smol.reset(1)
smol.forward(torch.tensor([context[:-1]]))
start = int(smol.cache_lengths[0])
fed = [context[-1]] + drafts  # the pending token, then the drafts
logits = smol.forward(torch.tensor([fed]))  # (1, K + 1, V): one pass
after_forward = int(smol.cache_lengths[0])
after_forward_cache = smol.cache.clone()  # kept for the experiment below
tokens, num_emitted = verify_greedy(logits, torch.tensor([drafts]))
n = int(num_emitted[0])  # accepted drafts + 1
new_token = int(tokens[0, n - 1])  # the corrected token (or the bonus)
smol.rollback(torch.tensor([start + n]))  # keep the pending token and the accepted drafts
after_rollback = int(smol.cache_lengths[0])
print(f"pending {name(fed[0])!r}, drafts {[name(d) for d in drafts]}")
print(f"accepted {n - 1} of {len(drafts)}; the target's own token after them: {name(new_token)!r}")
print(f"cache length: {start} before the pass, {after_forward} after the forward (+{len(fed)}), "
      f"{after_rollback} after the rollback")

# %% [markdown]
# The forward wrote keys and values for all K + 1 fed tokens, including the
# rejected draft and the drafts after it: the pass could not know in advance which
# would survive. Those entries were computed from a text that is now wrong, so the
# rollback **lowers the row's length** to `start + accepted + 1`, the pending token
# and the accepted drafts. Nothing is erased: the stale keys stay in the buffer
# above the length, are never read, and the next pass overwrites them.
# (transformers' `DynamicCache` does the same with `crop`; specbook's `HFTarget.rollback`
# calls it.)
#
# The corrected token itself is **not** in the cache: it was never fed. It is the
# new pending token, the first token of the next pass. So after every round:
#
# > the cache holds the prompt and every emitted token **but the last**.

# %%
stale = smol.cache.k[:, 0, :, after_rollback:after_forward]  # keys of the discarded drafts, above the length
slots = (f"slot {after_rollback} still holds" if after_forward - after_rollback == 1
         else f"slots {after_rollback}..{after_forward - 1} still hold")
print(f"above the length, {slots} keys "
      f"(largest |k| = {stale.abs().max():.2f}): stale, never read")
stale_survived = bool(stale.abs().max() > 0)
smol.forward(torch.tensor([[new_token]]))  # the next pass starts with the pending token ...
overwritten = not torch.equal(smol.cache.k[:, 0, :, after_rollback], after_forward_cache.k[:, 0, :, after_rollback])
print(f"the next pass wrote the pending token into slot {after_rollback}: the stale key there was overwritten "
      f"({overwritten})")


# %%
def plot_cache_round(start, fed, accepted, new_token, show=5):
    """One row's cache around one pass: above, right after the forward; below, after the rollback."""
    colours = {"cached": "#d5d8dc", "kept": "#58d68d", "discarded": "#f1948a", "new": "#85c1e9"}
    fig = plots.new_figure(9.5, 3.2)
    ax = fig.add_subplot()

    def box(x, y, text, colour, hatch=None, dashed=False, alpha=1.0):
        ax.add_patch(Rectangle((x, y), 0.94, 0.8, facecolor=colour, edgecolor="#333", hatch=hatch, alpha=alpha,
                               linestyle="--" if dashed else "-", lw=0.8))
        ax.text(x + 0.47, y + 0.4, text, ha="center", va="center", fontsize=8)

    first = start - show
    for y, after in ((1.4, False), (0.0, True)):
        for slot in range(first, start):
            box(slot, y, name(context[slot]), colours["cached"])
        for j, token in enumerate(fed):
            slot = start + j
            if j <= accepted:
                box(slot, y, name(token), colours["kept"])
            elif not after:
                box(slot, y, name(token), colours["discarded"], hatch="//")
            else:
                box(slot, y, name(token), "white", hatch="//", alpha=0.35)
        length = start + (accepted + 1 if after else len(fed))
        ax.plot([length - 0.03] * 2, [y - 0.1, y + 0.9], color="black", lw=2)
        ax.text(length - 0.12, y - 0.22, f"length {length}", fontsize=7, ha="right", va="center")
    for slot in range(first, start + len(fed)):  # slot numbers above the top row
        ax.text(slot + 0.47, 2.35, str(slot), fontsize=7, ha="center", color="#555")
    # the corrected (or bonus) token: not in the cache; the next pass writes it at the new length
    box(start + accepted + 1, -1.3, name(new_token), colours["new"], dashed=True)
    ax.annotate("", xy=(start + accepted + 1.47, -0.05), xytext=(start + accepted + 1.47, -0.5),
                arrowprops=dict(arrowstyle="->", color="#555"))
    ax.set_xlim(first - 0.2, start + len(fed) + 0.5)
    ax.set_ylim(-1.5, 2.6)
    ax.set_yticks([-0.9, 0.4, 1.8], ["next pass\nfeeds first", "after the\nrollback", "after the\nforward"])
    ax.set_xticks([])
    ax.legend(handles=[Patch(facecolor=colours["cached"], label="cached before this pass"),
                       Patch(facecolor=colours["kept"], label="written and kept (pending + accepted)"),
                       Patch(facecolor=colours["discarded"], hatch="//", label="written, then discarded"),
                       Patch(facecolor=colours["new"], label=f"{'bonus' if accepted == len(fed) - 1 else 'corrected'}"
                                                              " token: not in the cache")],
              loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=2, fontsize=7, frameon=False)
    ax.set_title(f"{model_name}: one row's KV cache around one pass (γ = {len(fed) - 1}, {accepted} accepted)",
                 fontsize=9)
    return fig


plot_cache_round(start, fed, n - 1, new_token)

# %% [markdown]
# ### What goes wrong without the rollback
#
# Suppose the loop skipped the rollback. The next pass would feed the pending token
# after the *rejected* drafts: it would attend to their keys and values, and sit at
# a position K − accepted slots too far, so its rotary position would be wrong too.
# Nothing raises an error. We compare the logits of that next pass, with and without
# the rollback, against a fresh run over the correct text.

# %%
right_text = context + drafts[: n - 1] + [new_token]
smol.reset(1)
reference = smol.forward(torch.tensor([right_text]))[0, -1]  # (V,) from scratch: the truth
smol.cache.copy_from(after_forward_cache)  # the cache right after the forward, not rolled back
no_rollback = smol.forward(torch.tensor([[new_token]]))[0, -1]  # (V,)
smol.cache.copy_from(after_forward_cache)
smol.rollback(torch.tensor([start + n]))
with_rollback = smol.forward(torch.tensor([[new_token]]))[0, -1]  # (V,)
error_with = float((with_rollback - reference).abs().max())
error_without = float((no_rollback - reference).abs().max())
print(f"largest logit error of the next pass: with the rollback {error_with:.1e}, without it {error_without:.2f}")
print(f"its argmax: from scratch {name(int(reference.argmax()))!r}, with the rollback "
      f"{name(int(with_rollback.argmax()))!r}, without it {name(int(no_rollback.argmax()))!r}")

# %% [markdown]
# **Exercise 04b.5 (code).** Write `cached_round`, one greedy round on a cache: the
# cache holds the text but its last token `pending`; feed `[pending] + drafts` in one
# forward, keep drafts while they equal the target's argmax, roll the cache back to
# what was kept (`target.rollback(torch.tensor([length]))`, with the length from
# `target.cache_lengths`), and return the accepted drafts followed by the target's own
# token. Write the comparison yourself (the library's `verify_greedy` is the
# reference the check holds you to).
#
# The check runs your round on a tiny random Llama through a target that records
# which tokens its cache holds, with drafts that go wrong at every position in turn.

# %% tags=["solution"]
def cached_round(target, pending: int, drafts: list[int]) -> list[int]:
    """One greedy round on the target's cache; afterwards the cache holds pending + the accepted drafts."""
    ### BEGIN SOLUTION
    before = int(target.cache_lengths[0])
    best = target.forward(torch.tensor([[pending] + drafts]))[0].argmax(-1).tolist()  # (K + 1,) the target's choices
    accepted = 0
    while accepted < len(drafts) and drafts[accepted] == best[accepted]:
        accepted += 1
    target.rollback(torch.tensor([before + accepted + 1]))  # pending + accepted drafts; drop the rest
    return drafts[:accepted] + [best[accepted]]
    ### END SOLUTION


# %%
exercises.check("04b.5", cached_round)

# %% [markdown]
# **Exercise 04b.6 (code).** Write the whole greedy loop on the cache, `cached_decode`:
# reset the target for one row, prefill the prompt but its last token, then rounds
# until `max_new_tokens` are out. Each round asks the drafter for
# `drafter.propose([torch.tensor(text)], k, GREEDY).tokens[0]` (it may return fewer
# than k), with k = min(γ, tokens still to emit − 1): a draft past the budget could
# never be emitted, and its entry would stay in the cache. Then one `cached_round`
# with the last token of the text as the pending token.
#
# The check: the same tokens as plain decoding, a clean cache at the start of every
# pass, and, on return, a cache holding the prompt and every returned token but the last.

# %% tags=["solution"]
def cached_decode(target, drafter, prompt: list[int], max_new_tokens: int, gamma: int) -> list[int]:
    """Greedy speculative decoding of one row on the target's KV cache."""
    ### BEGIN SOLUTION
    target.reset(1)
    if len(prompt) > 1:
        target.forward(torch.tensor([prompt[:-1]]))  # prefill: the last prompt token is the first pending token
    out = []
    while len(out) < max_new_tokens:
        text = prompt + out
        k = min(gamma, max_new_tokens - len(out) - 1)  # never draft past the budget
        drafts = drafter.propose([torch.tensor(text)], k, GREEDY).tokens[0].tolist() if k else []
        out += cached_round(target, text[-1], drafts)
    return out
    ### END SOLUTION


# %%
exercises.check("04b.6", cached_decode)

# %% [markdown]
# ### Your loop on SmolLM2
#
# Once 04b.6 is right, the next cell runs your `cached_decode` with prompt lookup on
# SmolLM2 and compares it with plain greedy decoding (`generate`, computed above), and
# runs the library's loop, `speculative_generate`, the same way.

# %%
class Counting:
    """A drafter wrapper that advances a progress bar to the text's length (full mode)."""

    def __init__(self, drafter, bar, prompt_length):
        self.drafter, self.bar, self.prompt_length = drafter, bar, prompt_length

    def propose(self, contexts, gamma, params, generator=None):
        self.bar.update(len(contexts[0]) - self.prompt_length - self.bar.n)
        return self.drafter.propose(contexts, gamma, params, generator)


library = speculative_generate(smol, NGramDrafter(), torch.tensor(prompt_ids), SMOL_NEW, params=GREEDY, gamma=GAMMA,
                               progress=not FAST)
library_equal = library.new_tokens[0].tolist() == truth
print(f"library loop: equal to plain decoding: {library_equal}; {library.stats.target_passes} target passes for "
      f"{SMOL_NEW} tokens (plain decoding: {SMOL_NEW})")
mine_equal = None
if not HAVE_SMOL:
    print("SmolLM2 is not on this machine: your loop is not run on it (the check above ran it on a tiny Llama).")
elif not passed("04b.6"):
    print("04b.6 is not answered or not right yet: your loop is not run on SmolLM2.")
else:
    with tqdm(total=SMOL_NEW, desc="your loop", disable=FAST) as bar:
        mine = cached_decode(smol, Counting(NGramDrafter(), bar, len(prompt_ids)), list(prompt_ids), SMOL_NEW, GAMMA)
    mine_equal = mine == truth
    print(f"your loop: equal to plain decoding: {mine_equal}; cache length at the end "
          f"{int(smol.cache_lengths[0])} = prompt {len(prompt_ids)} + {SMOL_NEW} - 1")

# %% [markdown]
# ### Rows at different lengths in one cache
#
# In a batch every row rolls back to its own length, so after a round the rows are
# out of step. The next pass writes each row's new token at *that row's* length, and
# each row's attention mask covers only its own valid slots
# (`specbook.models.cache.KVCache.plan`). Below, two rows run the same pass; row 0
# keeps one draft and row 1 keeps all of them. Each row's next logits must equal a
# one-row run over its own text.

# %%
pair = torch.tensor([context[-6:], context[-6:]])  # two rows, the same 6 tokens
smol.reset(2)
smol.forward(pair[:, :-1])
base = int(smol.cache_lengths[0])
smol.forward(torch.cat([pair[:, -1:], torch.tensor([drafts, drafts])], dim=1))
keep = [1, len(drafts)]  # drafts kept by row 0 and by row 1
smol.rollback(torch.tensor([base + 1 + k for k in keep]))
print(f"row lengths after the rollback: {smol.cache_lengths.tolist()}")
nxt = torch.tensor([[truth[0]], [truth[1]]])  # any next pending tokens
batched = smol.forward(nxt)[:, -1]  # (2, V)
row_errors = []
for b, k in enumerate(keep):
    smol.reset(1)
    alone = smol.forward(torch.tensor([pair[b].tolist() + drafts[:k] + [int(nxt[b])]]))[0, -1]  # (V,)
    row_errors.append(float((batched[b] - alone).abs().max()))
print(f"largest logit difference, batched against alone: {', '.join(f'{e:.1e}' for e in row_errors)}")

# %% [markdown]
# ## 4. Trees: keeping a path
#
# Lesson 5 verifies a **tree** of drafts in one pass: several candidates per position,
# each node attending to the cached text and to its own ancestors only. Siblings
# share a position, so the pass writes each node's keys and values in its own slot,
# in the order the nodes were listed, at the rotary position of its depth. After
# verification the accepted path's entries are scattered among those slots.
# `target.keep(path)` packs them into place, right after the cached text, and drops
# the rest: the result is exactly the cache a chain pass over the path would have
# written. (The library's loop calls it with `specbook.verify_tree.keep_indices`.)

# %%
parents = torch.tensor([-1, -1, 0, 0, 1, 2])  # six nodes: two roots' children, then two levels below
nodes = [truth[0], (truth[0] + 7) % model.config.vocab_size, truth[1], 5, 6, truth[2]]  # path 0 → 2 → 5: the text
fed_parents = torch.cat([torch.tensor([-1]), torch.where(parents < 0, 0, parents + 1)])  # the pending token is the root
path = [0, 1, 3, 6]  # fed indices: the root, node 0, node 2, node 5
smol.reset(1)
smol.forward(torch.tensor([prompt_ids[:-1]]))
tree_start = int(smol.cache_lengths[0])
smol.forward(torch.tensor([[prompt_ids[-1]] + nodes]), parents=fed_parents)
print(f"after the tree pass: length {int(smol.cache_lengths[0])} (root + {len(nodes)} nodes)")
smol.keep([path])
tree_keys = smol.cache.k[:, 0, :, tree_start:tree_start + len(path)].clone()
print(f"after keep({path}): length {int(smol.cache_lengths[0])}; slots "
      + ", ".join(f"{tree_start + i}→{tree_start + m}" for m, i in enumerate(path) if i != m) + " moved")
smol.reset(1)
smol.forward(torch.tensor([prompt_ids[:-1]]))
smol.forward(torch.tensor([[prompt_ids[-1]] + [nodes[i - 1] for i in path[1:]]]))  # the path as a chain
chain_keys = smol.cache.k[:, 0, :, tree_start:tree_start + len(path)]
tree_error = float((tree_keys - chain_keys).abs().max())
print(f"kept keys against a chain pass over the path: largest difference {tree_error:.1e}")

# %% [markdown]
# ## Concept check
#
# Answer in the cell below, then run the check.
#
# * **c1.** A row's cache holds 40 tokens before a pass with γ = 4 drafts. The first two
#   drafts are accepted, the third is rejected. How many entries does the row hold right
#   after the forward, and after the rollback? (two numbers)
# * **c2.** After a round, whose keys and values are *not* in the cache?
#   (a) the pending token the pass started with; (b) the last accepted draft;
#   (c) the corrected or bonus token; (d) none: every emitted token is cached.
# * **c3.** A loop forgets the rollback and decodes at temperature 0. What happens?
#   (a) the same text, only slower; (b) the next pass attends to rejected drafts and
#   sits at shifted positions, so the text can change; (c) the next forward raises an error.
# * **c4.** Two rows hold 30 and 25 tokens before a pass with γ = 4. Row 0 accepts one
#   draft, row 1 accepts three. Their lengths after the rollback? (two numbers)
# * **c5.** A row holds 30 tokens; a tree pass feeds the pending token and 6 nodes; the
#   accepted path has 2 nodes. After `keep`, how long is the row, and how many of the
#   entries the pass wrote were dropped? (two numbers)
#
# Give two numbers as a pair, `(45, 43)`, and a choice as its letter in quotes, `"b"`.
#
# <details><summary>Answers</summary>
#
# c1. (45, 43): the forward writes the pending token and the 4 drafts; the rollback keeps
# the pending token and the 2 accepted drafts. c2. (c): the corrected or bonus token comes
# out of the pass's logits and is fed only in the next pass. c3. (b): nothing raises; the
# cache just holds more than the text. c4. (32, 29): each row keeps its pending token and
# its own accepted drafts. c5. (33, 4): the root and the 2 path nodes are packed after the
# 30 cached tokens; of the 7 entries written, the 4 nodes off the path are dropped.
#
# </details>

# %% tags=["solution"]
### BEGIN SOLUTION
c1 = (40 + 4 + 1, 40 + 2 + 1)
c2 = "c"
c3 = "b"
c4 = (30 + 1 + 1, 25 + 3 + 1)
c5 = (30 + 1 + 2, 6 - 2)
### END SOLUTION

# %%
for key, answer in (("04b.c1", c1), ("04b.c2", c2), ("04b.c3", c3), ("04b.c4", c4), ("04b.c5", c5)):
    exercises.check(key, answer)

# %% [markdown]
# ## Checks
#
# What the lesson claimed about the library and the cache, asserted, so that a wrong
# library would stop this notebook; then your own answers.

# %%
# 1. The library's loop keeps one length per row, and the rows accept different numbers of drafts.
assert invariant_held and len(counts_seen) > 1, (invariant_held, counts_seen)
# 2. The verify pass writes every fed token; the rollback only lowers the length; the stale entries
#    survive above it until the next pass overwrites them.
assert after_forward == start + len(fed) and after_rollback == start + n and 1 < n <= len(drafts)
assert stale_survived and overwritten
# 3. Without the rollback the next pass is wrong; with it, it equals a fresh run.
assert error_with < 1e-3 < error_without, (error_with, error_without)
# 4. Rows out of step in one cache give each row its own result.
assert max(row_errors) < 1e-3, row_errors
# 5. keep() after a tree pass leaves exactly what a chain pass over the path writes.
assert tree_error < 1e-4, tree_error
# 6. Greedy speculative decoding with the library's loop equals plain decoding.
assert library_equal
# 7. Your exercises and concept check, as graded above.
graded = exercises.results("04b")
print(f"exercises and concept check: {sum(r.passed for r in graded)} of {len(graded)} right")
### BEGIN SOLUTION
assert len(graded) == 11 and all(r.passed for r in graded), [str(r) for r in graded]
assert mine_equal is not False, "your cached_decode differs from plain decoding on SmolLM2"
### END SOLUTION
print(f"all lesson-4b checks passed in {time.perf_counter() - _started:.1f} s (fast mode: {FAST})")
