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
# # Lesson 4 — A real model: measured α, τ, verify cost and speedup
#
# Lessons 1 to 3 used toy models whose probabilities we knew exactly. Now the
# target is a real pretrained language model, **SmolLM2-135M-Instruct**
# (30 layers, 135 million parameters), running on your own machine. The
# drafter is the cheapest one in the family: **prompt lookup** (n-gram
# drafting). It has no model at all: it finds the last few tokens earlier in
# the context and proposes whatever followed them there.
#
# Lesson 3 said that a speedup needs three numbers, and that each of them must
# be *measured*:
#
# * **α**, how often a guess survives, which depends on the workload;
# * **c**, what one draft step costs relative to one target pass;
# * **v**, what the verify pass over γ + 1 positions costs relative to an
#   ordinary pass over one position. The paper assumes v = 1 ("the extra
#   positions are free"); on a CPU that is a question for the stopwatch.
#
# We measure all three, predict the speedup from them with the formula of
# lesson 3, and hold the prediction against the speedup we actually get.
# Every number below comes from your machine, so yours will differ from a
# classmate's; the *shape* of the results is the lesson.

# %% tags=["parameters"]
import os

FAST = os.environ.get("SPECBOOK_FAST", "0") == "1"  # the test suite sets SPECBOOK_FAST=1
PER_CATEGORY = 1 if FAST else 3  # prompts per workload category
MAX_NEW = 16 if FAST else 64  # tokens generated per prompt
GAMMA = 4  # draft tokens per verification
CURVE_REPS = 3 if FAST else 7  # repetitions per point of the verify-cost curve

# %%
import statistics
import time

import numpy as np
import torch
from IPython.display import HTML, display

import specbook as sb
from specbook import theory
from specbook.bench.engines import SpecbookEngine
from specbook.bench.registry import get_drafter
from specbook.bench.timing import verify_cost_curve
from specbook.bench.workloads import load_prompts, select
from specbook.models.chat import chat_ids
from specbook.models.smollm2 import load_smollm2
from specbook.sampling import GREEDY
from specbook.teach import plots

_started = time.perf_counter()

# %% [markdown]
# ## The model
#
# `load_smollm2` reads the weights from the local cache (run
# `python -m specbook fetch-model` once while online) into specbook's readable
# Llama, `specbook/models/llama.py`, a file short enough to read in one sitting.
# Its logits equal those of transformers' own implementation to about 1e-5.

# %%
model, tokenizer = load_smollm2()
n_params = sum(p.numel() for p in model.parameters())
print(f"SmolLM2-135M-Instruct: {n_params / 1e6:.0f} M parameters, {model.config.n_layers} layers, "
      f"vocabulary {model.config.vocab_size}; torch threads: {torch.get_num_threads()}")

# %% [markdown]
# ## The workloads
#
# Prompt lookup can only propose text that is already in the context, so its
# acceptance depends on how much of the answer copies the prompt. The built-in
# benchmark prompts (`specbook/data/bench_prompts.jsonl`) come in six
# categories, from "copies a lot" to "copies nothing":

# %%
prompts = select(load_prompts(), None, PER_CATEGORY)
rows = "".join(f"<tr><td>{p.category}</td><td><code>{p.prompt[:110].replace(chr(10), ' ')}…</code></td></tr>"
               for p in prompts[::PER_CATEGORY])
display(HTML(f"<table><tr><th>category</th><th>prompt (start)</th></tr>{rows}</table>"))

# %% [markdown]
# ## Plain decoding against prompt lookup, prompt by prompt
#
# For every prompt we decode greedily twice, back to back: once plainly (one
# target pass per token) and once with the n-gram drafter (γ = 4). Doing the two
# side by side means that whatever else your machine is busy with slows both
# alike; the realized speedup of a prompt is the ratio of its two times. Greedy
# speculative decoding must return *exactly* the plain output: we check that on
# every prompt.

# %%
ids = [chat_ids(tokenizer, p.prompt) for p in prompts]
engine = SpecbookEngine(model, max_length=max(map(len, ids)) + MAX_NEW + GAMMA + 2)
ngram = get_drafter("ngram").make(model, tokenizer, gamma=GAMMA, device="cpu", dtype=torch.float32)
engine.run(ids[0][:32], None, GREEDY, 4, GAMMA)  # warm-up: first calls allocate and pick kernels
engine.run(ids[0][:32], ngram, GREEDY, 4, GAMMA)

runs = []
for p, prompt_ids in zip(prompts, ids):
    plain = engine.run(prompt_ids, None, GREEDY, MAX_NEW, GAMMA)
    spec = engine.run(prompt_ids, ngram, GREEDY, MAX_NEW, GAMMA)
    runs.append({"category": p.category, "plain": plain, "spec": spec})
print(f"{len(runs)} prompts, {MAX_NEW} new tokens each, decoded twice in {time.perf_counter() - _started:.0f} s so far")

# %%
categories = list(dict.fromkeys(r["category"] for r in runs))
per_cat = {}
for cat in categories:
    rs = [r for r in runs if r["category"] == cat]
    spec = [r["spec"] for r in rs]
    proposed, accepted = sum(s.proposed for s in spec), sum(s.accepted for s in spec)
    verified, passes = sum(s.verified for s in spec), sum(s.passes for s in spec)
    per_cat[cat] = {
        "alpha": accepted / proposed if proposed else 0.0,  # accepted / proposed
        "acceptance": accepted / verified if verified else 0.0,  # accepted / tested: the α of the formula
        "tau": sum(s.emitted for s in spec) / passes,  # tokens per target pass
        "mean_drafts": proposed / passes,  # drafts per pass: lookup often finds fewer than γ, or none
        "plain_tps": statistics.median(len(r["plain"].new_ids) / r["plain"].seconds for r in rs),
        "spec_tps": statistics.median(len(r["spec"].new_ids) / r["spec"].seconds for r in rs),
        "speedup": statistics.median(r["plain"].seconds / r["spec"].seconds for r in rs),
    }
head = "<tr><th>category</th><th>plain tok/s</th><th>n-gram tok/s</th><th>α = acc/proposed</th>" \
       "<th>acceptance = acc/tested</th><th>drafts per pass</th><th>τ</th><th>realized speedup</th></tr>"
body = "".join(f"<tr><td>{c}</td><td>{m['plain_tps']:.1f}</td><td>{m['spec_tps']:.1f}</td><td>{m['alpha']:.2f}</td>"
               f"<td>{m['acceptance']:.2f}</td><td>{m['mean_drafts']:.2f}</td><td>{m['tau']:.2f}</td>"
               f"<td>{m['speedup']:.2f}×</td></tr>" for c, m in per_cat.items())
display(HTML(f"<table>{head}{body}</table>"))

# %% [markdown]
# Read the τ column first. Where the answer copies the prompt (editing code,
# quoting a source, answering from a context, filling a fixed JSON schema) the
# lookup drafter's guesses survive and a target pass yields more than one
# token. In open chat and arithmetic there is little to copy: the drafter
# often finds no match at all (see "drafts per pass", well below γ), and those
# rounds are plain decoding steps.

# %%
fig = plots.new_figure(6.4, 3.4)
ax = fig.subplots()
ax.bar(categories, [per_cat[c]["tau"] for c in categories], color="C0")
ax.axhline(1.0, color="grey", lw=1, ls="--")
ax.set_ylabel("τ (tokens per target pass)")
ax.set_title("Prompt lookup on SmolLM2, by workload")
ax.tick_params(axis="x", labelrotation=20)
fig

# %% [markdown]
# ## v: the verify-cost curve of *your* machine
#
# The crux of lesson 1 was that one pass over γ + 1 positions costs "about the
# same" as a pass over one position. Here is the measurement: the time of one
# target forward over n = 1 … 17 new positions (after a cached context of a
# real prompt), divided by the time for n = 1. On a GPU the curve stays near 1
# for a long way. On a laptop CPU it rises sooner: a 135M-parameter model is
# small enough that its weights partly fit in cache, so the pass is less
# memory-bound than a large model on a GPU, and extra rows cost arithmetic.

# %%
curve = verify_cost_curve(engine.target, ids[0][:128], max_positions=17, reps=CURVE_REPS)
v = curve["v"]  # v[n - 1] = cost of n positions / cost of 1
print(f"t(1) = {1000 * curve['seconds'][0]:.1f} ms; v(2) = {v[1]:.2f}, v(5) = {v[4]:.2f}, "
      f"v(9) = {v[8]:.2f}, v(17) = {v[16]:.2f}")
plots.plot_curves(curve["n"], {"measured v(n)": v, "v = 1 (the paper's assumption)": [1.0] * len(v)},
                  "new positions n in one forward", "time / time of n = 1",
                  title="What verifying γ + 1 positions costs here")

# %% [markdown]
# ## c: what drafting costs
#
# The n-gram drafter is a dictionary lookup, so c is tiny, but not zero: we
# time its `propose` on contexts from the runs above and divide by the cost of
# one target pass per draft token.

# %%
contexts = [torch.tensor(i + r["spec"].new_ids[: MAX_NEW // 2]) for i, r in zip(ids, runs)]
reps = 20
t0 = time.perf_counter()
for _ in range(reps):
    for ctx in contexts:
        ngram.propose([ctx], GAMMA, GREEDY)
t_propose = (time.perf_counter() - t0) / (reps * len(contexts))
c = t_propose / (GAMMA * curve["seconds"][0])
print(f"one propose call: {1e6 * t_propose:.0f} µs; c = {c:.4f} of a target pass per draft token")

# %% [markdown]
# ## Theory against measurement
#
# Lesson 3's formula, with the verify cost measured instead of assumed:
#
# speedup = E[tokens] / (γ·c + v(γ + 1)),  E[tokens] = (1 − α^(γ+1)) / (1 − α)
#
# with α the measured acceptance of a tested draft. It assumes every round
# drafts γ tokens and accepts each with the same probability α. Prompt lookup
# breaks both assumptions, so we also make an "accounting" prediction that
# takes τ and the mean drafts per pass, K̄, straight from the runs:
#
# speedup ≈ τ / (K̄·c + v(K̄ + 1))
#
# The realized speedup also pays for the prompt's prefill (the same in both
# runs, so it pulls the ratio toward 1) and for the loop's bookkeeping.

# %%
def v_at(n: float) -> float:
    """Measured verify cost at n positions, linearly interpolated."""
    return float(np.interp(n, curve["n"], v))


prediction = {}
for cat, m in per_cat.items():
    formula = theory.speedup(m["acceptance"], GAMMA, c, verify_cost=lambda g: v_at(g + 1))
    accounting = m["tau"] / (m["mean_drafts"] * c + v_at(m["mean_drafts"] + 1))
    prediction[cat] = (formula, accounting)
rows = "".join(f"<tr><td>{cat}</td><td>{f:.2f}×</td><td>{a:.2f}×</td><td>{per_cat[cat]['speedup']:.2f}×</td></tr>"
               for cat, (f, a) in prediction.items())
display(HTML("<table><tr><th>category</th><th>formula (α, γ, c, v)</th><th>accounting (τ, K̄, c, v)</th>"
             f"<th>realized</th></tr>{rows}</table>"))

fig = plots.new_figure(5.2, 4.2)
ax = fig.subplots()
realized = [per_cat[c_]["speedup"] for c_ in categories]
ax.scatter(realized, [prediction[c_][0] for c_ in categories], label="formula (α, γ, c, v)", marker="o")
ax.scatter(realized, [prediction[c_][1] for c_ in categories], label="accounting (τ, K̄, c, v)", marker="s")
for c_, x in zip(categories, realized):
    ax.annotate(c_, (x, prediction[c_][1]), fontsize=7, xytext=(3, 3), textcoords="offset points")
lo = min(realized + [p for pair in prediction.values() for p in pair]) * 0.9
hi = max(realized + [p for pair in prediction.values() for p in pair]) * 1.1
ax.plot([lo, hi], [lo, hi], color="grey", lw=1, ls="--")
ax.set_xlabel("realized speedup")
ax.set_ylabel("predicted speedup")
ax.set_title("Prediction against measurement")
ax.legend(fontsize=8)
fig

# %% [markdown]
# ## Three drafters side by side
#
# Prompt lookup is one of three classic ways to get drafts. The other two use a
# model:
#
# * **layer skipping** (`layerskip`): the target's own first 28 of 30 blocks,
#   then its final norm and head. No extra weights, and it shares the target's
#   cache; but a draft step costs almost a whole target step (c close to 1), and
#   SmolLM2 was never trained to exit early.
# * **a distilled draft model** (`draft`): two Llama blocks and a head over the
#   8192 most frequent tokens, trained to imitate the target (`python -m
#   specbook.train.distill`; the weights ship with specbook). One step costs about
#   a tenth of a target step.
#
# `specbook.bench.measure` decodes each prompt plainly and then
# speculatively, timing every draft call and every target pass, and turns the
# logs into α (accepted / tested drafts), c (seconds per draft pass over seconds
# per plain step) and the speedup lesson 3 predicts from α, c and your v(n),
# next to the realized one.

# %%
from specbook.bench.measure import measure_prompt, predict

SIDE_BY_SIDE = ["ngram", "layerskip", "draft"]
side_drafters = {name: get_drafter(name).make(model, tokenizer, gamma=GAMMA, device="cpu", dtype=torch.float32,
                                              target=engine.target) for name in SIDE_BY_SIDE}
for d in side_drafters.values():  # warm-up
    measure_prompt(engine.target, d, ids[0][:32], 4, GAMMA)
records = {name: [] for name in SIDE_BY_SIDE}
for p, prompt_ids in zip(prompts, ids):
    for name, d in side_drafters.items():
        records[name].append({"category": p.category, **measure_prompt(engine.target, d, prompt_ids, MAX_NEW, GAMMA)})
side = {name: predict(recs, v) for name, recs in records.items()}
side_cat = {(name, cat): predict([r for r in records[name] if r["category"] == cat], v)
            for name in SIDE_BY_SIDE for cat in categories}
rows = "".join(f"<tr><td>{name}</td><td>{m['alpha']:.2f}</td><td>{m['c']:.3f}</td><td>{m['tau']:.2f}</td>"
               f"<td>{m['predicted']:.2f}×</td><td>{m['realized']:.2f}×</td></tr>" for name, m in side.items())
display(HTML("<table><tr><th>drafter</th><th>α (acc/tested)</th><th>c</th><th>τ</th><th>predicted</th>"
             f"<th>realized (median)</th></tr>{rows}</table>"))

# %%
fig = plots.new_figure(7.0, 3.4)
ax = fig.subplots()
width = 0.8 / len(SIDE_BY_SIDE)
for i, name in enumerate(SIDE_BY_SIDE):
    ax.bar(np.arange(len(categories)) + (i - 1) * width, [side_cat[(name, c_)]["realized"] for c_ in categories],
           width, label=name)
ax.axhline(1.0, color="grey", lw=1, ls="--")
ax.set_xticks(np.arange(len(categories)), categories, rotation=20)
ax.set_ylabel("realized speedup (×)")
ax.set_title("Three drafters on the same target, by workload")
ax.legend(fontsize=8)
fig

# %% [markdown]
# Each drafter wins somewhere else. Prompt lookup costs nothing and shines where
# the answer copies the prompt. The distilled draft guesses from what it learned,
# so it also helps where nothing can be copied, as long as its α stays well above
# its cost c. Layer skipping shows the other side of the formula: with c near 1,
# even a decent α cannot pay for γ draft steps, and it is slower than plain
# decoding on this model. (A model trained for early exit, as in LayerSkip,
# would change α, not c.)

# %% [markdown]
# What to take away:
#
# * **α is a property of the workload**, not of the drafter alone: the same
#   zero-cost drafter is worth a lot on copy-heavy work and little on chat.
# * **v is a property of the hardware.** Where v(γ + 1) is well above 1, a
#   round must yield more tokens just to break even, and a drafter that helps on
#   a GPU can lose on a laptop. Measure it before choosing γ.
# * **The paper's formula is a model.** With measured α, c and v it gets the
#   ordering of the categories right; where it misses, look at what it assumes
#   (fixed γ, independent acceptances) against what the drafter does.
#
# `python -m specbook bench` runs the same measurement over more prompts,
# side by side with transformers' own `generate`, and writes a JSON report.

# %% [markdown]
# ## Checks

# %%
# 1. Lossless on a real model: greedy speculative output == greedy plain output, every prompt.
for r in runs:
    assert r["spec"].new_ids == r["plain"].new_ids, r["category"]
    assert len(r["plain"].new_ids) == MAX_NEW
# 2. The bookkeeping: τ counts the bonus token, α cannot exceed the per-test acceptance.
for m in per_cat.values():
    assert m["tau"] >= 1.0 and 0.0 <= m["alpha"] <= m["acceptance"] <= 1.0 and 0 <= m["mean_drafts"] <= GAMMA
# 3. The verify-cost curve is relative to n = 1 and covers 1..17 positions.
assert curve["n"] == list(range(1, 18)) and v[0] == 1.0 and all(x > 0 for x in v)
# 4. Every drafter side by side is lossless too, and its measured c is a fraction of a target step or more.
for name, recs in records.items():
    assert all(r["same_as_plain"] for r in recs), name
    assert side[name]["c"] >= 0 and side[name]["tau"] >= 1.0, name
# 5. The prediction is lesson 3's formula, term by term.
m = per_cat[categories[0]]
by_hand = theory.expected_tokens(m["acceptance"], GAMMA) / (GAMMA * c + v_at(GAMMA + 1))
assert abs(prediction[categories[0]][0] - by_hand) < 1e-12
print(f"all lesson-4 checks passed in {time.perf_counter() - _started:.1f} s (fast mode: {FAST})")
