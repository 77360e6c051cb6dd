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
# # Lesson 6 — Batching versus speculation: one pool of spare arithmetic
#
# Speculative decoding is free only because decoding leaves the arithmetic units idle: at
# batch 1 a step reads every weight from memory to do one multiply-add with it, and the
# γ + 1 positions of a verify pass share that one read. **Batching spends the same idle
# arithmetic**: B rows share the read too. The two techniques draw on one pool, and once
# B (γ + 1) positions cross the hardware's *ridge* the extra positions cost time in
# proportion to their number, and every rejected draft takes arithmetic that another
# row's real token needed. This is the practical caveat most often missed.
#
# Crossing the ridge is where speculation stops being free, not where it starts to
# lose. It loses only once a round costs more target steps than the tokens it yields,
# and by the roofline's own arithmetic a wide band of batch sizes lies between the two.
# Real servers can lose earlier than that band suggests, for reasons the plain roofline
# leaves out; this lesson adds them one at a time.
#
# In this lesson:
#
# 1. the roofline of one decode step: the picture, and one step's time worked out by hand;
# 2. the verify cost v_B and the speedup against batch size: the ridge batch and the
#    crossover batch, two different points;
# 3. what the plain roofline leaves out, each term added to the model and shown moving the
#    crossover: the KV cache, the draft's own step, rows that accept different numbers of
#    drafts, kernel efficiency;
# 4. your machine: its ridge, measured; throughput against batch size, plain against
#    speculative; the predicted crossover against the measured one, and why they differ;
# 5. the latency-throughput frontier and how a latency target (an SLO) picks a point; the
#    wasted-work tax; adapting γ to the load; reasoning traces;
# 6. exercises and a concept check, graded.

# %% tags=["parameters"]
import os

FAST = os.environ.get("SPECBOOK_FAST", "0") == "1"  # the test suite sets SPECBOOK_FAST=1
BATCHES = [1, 2, 4] if FAST else [1, 2, 4, 8, 16]  # batch sizes measured on this machine
NEW_TOKENS = 10 if FAST else 32  # new tokens per row
GAMMA = 4
PARAMS_7B = 7e9  # the course's example model for the GPU presets
CONTEXT = 512  # cached tokens per row in the GPU examples with a KV cache
STATIC_TOKENS = 256  # new tokens per row of a static batch (the uneven-acceptance example)

# %%
import math
import time

import torch
from IPython.display import HTML, Markdown, display
from tqdm.auto import tqdm

from specbook import roofline, theory
from specbook.decode import generate, speculative_generate
from specbook.drafters import NGramDrafter
from specbook.models import LlamaModel, LlamaTarget
from specbook.models.config import LlamaConfig
from specbook.sampling import GREEDY
from specbook.teach import exercises
from specbook.teach.batching import BatchingExplorer
from specbook.teach.batching_plots import (plot_classic_roofline, plot_frontier, plot_ridge_and_crossover,
                                           plot_speedup_curves, plot_throughput_curves)

_started = time.perf_counter()


def table(head, rows):
    """A small HTML table: head is a list of column titles, rows a list of lists of cells."""
    h = "".join(f"<th>{c}</th>" for c in head)
    b = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return HTML(f"<table><tr>{h}</tr>{b}</table>")


def batch_text(b):
    """A crossover for a table: the batch, or 'none' when speculation never loses among the sizes searched."""
    return "none ≤ 4096" if b is None else str(b)


# %% [markdown]
# ## The roofline of one decode step
#
# One decode step multiplies every weight by every position it processes: 2 FLOPs per
# parameter per position. It reads every weight once, whatever the number of positions.
# The roofline model (Williams, Waterman & Patterson 2009) says a step takes the longer of
# its two demands:
#
# $$t = \max\left(\frac{\text{FLOPs}}{\text{peak FLOP/s}},\ \frac{\text{bytes}}{\text{bandwidth}}\right).$$
#
# Their ratio, FLOPs per byte, is the step's *arithmetic intensity*. A step whose intensity
# is below the hardware's **ridge**, peak FLOP/s over bandwidth, waits for memory: it runs on
# the sloped part of the picture below, and more positions per byte would cost nothing. Above
# the ridge it waits for arithmetic: it runs under the flat roof, and every extra position
# costs time. With B rows of γ + 1 positions each and weights of `dtype_bytes` bytes:
#
# $$\text{intensity} = \frac{2\,\text{params}\,B(\gamma+1)}{\text{params}\cdot\text{dtype bytes}}
#   = \frac{2B(\gamma+1)}{\text{dtype bytes}}\quad(= B(\gamma+1)\text{ in bfloat16}).$$
#
# The model size cancels. One step worked out with numbers: an H100 SXM in bfloat16
# (989.4 TFLOP/s dense, 3.35 TB/s), a 7B model (14 GB of weights), batch 64.
#
# * The plain step, 64 positions: 2 × 7e9 × 64 = 8.96e11 FLOPs take 0.91 ms at the peak;
#   1.4e10 bytes take 4.18 ms at the bandwidth. The step takes max(0.91, 4.18) = **4.18 ms**:
#   memory-bound, the arithmetic units idle four fifths of the time.
# * The verify step with γ = 4, 320 positions: 4.48e12 FLOPs take **4.53 ms**, the same
#   bytes 4.18 ms. Compute-bound: the step costs 4.53 / 4.18 = 1.08 plain steps.
#
# The cell computes the same numbers, checks them against `roofline.step_time`, and draws
# both steps on the H100's roofline.

# %%
H100 = "H100 SXM"
h100 = roofline.PRESETS[H100]
B_WORKED = 64
worked = {}
for label, positions in (("plain step", 1), (f"verify step, γ = {GAMMA}", GAMMA + 1)):
    flops = 2 * PARAMS_7B * B_WORKED * positions
    nbytes = PARAMS_7B * roofline.DTYPE_BYTES["bfloat16"]
    compute_s, memory_s = flops / h100.peak("bfloat16"), nbytes / h100.bandwidth
    worked[label] = dict(flops=flops, bytes=nbytes, compute_s=compute_s, memory_s=memory_s,
                         step_s=max(compute_s, memory_s),
                         library_s=roofline.step_time(H100, "bfloat16", B_WORKED, positions, PARAMS_7B, 2))
display(table(["B = 64, 7B, H100 bfloat16", "FLOPs", "bytes", "FLOPs / peak (ms)", "bytes / bandwidth (ms)",
               "step time (ms)", "bound by"],
              [[k, f"{v['flops']:.3g}", f"{v['bytes']:.3g}", f"{1e3 * v['compute_s']:.2f}", f"{1e3 * v['memory_s']:.2f}",
                f"<b>{1e3 * v['step_s']:.2f}</b>", "arithmetic" if v["compute_s"] > v["memory_s"] else "memory"]
               for k, v in worked.items()]))
worked_v = worked[f"verify step, γ = {GAMMA}"]["step_s"] / worked["plain step"]["step_s"]
print(f"verify cost at batch 64: {worked_v:.3f} plain steps")
plot_classic_roofline(h100, "bfloat16", {f"{k}, B = {B_WORKED}": (v["flops"], v["bytes"]) for k, v in worked.items()},
                      title="H100 SXM, bfloat16: a 7B model at batch 64")

# %% [markdown]
# Here is the course's table, computed: the intensity of four steps against the H100's
# ridge (KV-cache reads are left out here; they come back below).

# %%
course = []
for batch, gamma in [(1, 0), (1, 4), (64, 0), (64, 4)]:
    intensity = roofline.step_intensity(batch, gamma, PARAMS_7B, 2)
    share = roofline.ridge_fraction(H100, "bfloat16", batch, gamma, PARAMS_7B, 2)
    text = "OVER the ridge" if share >= 1 else (f"{share:.1%}" if share < 0.1 else f"{share:.0%}")
    course.append((batch, gamma, intensity, text))
display(table(["batch", "γ", "intensity (FLOP/byte)", f"share of the ridge ({roofline.ridge(H100, 'bfloat16'):.0f})"],
              course))

# %% [markdown]
# The ridge differs from machine to machine. The presets hold vendor datasheet figures:
# peak dense FLOP/s (tensor cores, no 2:4 sparsity; plain float32, no TF32) and memory
# bandwidth, with the datasheet each comes from (`docs/batching.md` lists them). A GPU with
# a *low* ridge is crossed by a smaller batch; a GPU with slow memory, such as the L4's
# GDDR6, has a high one.

# %%
display(table(["hardware", "memory", "bf16 peak (TFLOP/s)", "fp32 peak (TFLOP/s)", "bandwidth (GB/s)", "ridge bf16",
               "ridge fp32", "source"],
              [[hw.name, hw.memory, f"{hw.flops['bfloat16'] / 1e12:g}", f"{hw.flops['float32'] / 1e12:g}",
                f"{hw.bandwidth / 1e9:g}", f"{roofline.ridge(hw, 'bfloat16'):.0f}",
                f"{roofline.ridge(hw, 'float32'):.1f}", hw.source] for hw in roofline.PRESETS.values()]))

# %% [markdown]
# ## The ridge is not the crossover
#
# Take the course's example: an H100 in bfloat16 (ridge 295), a 7B model, γ = 4. The
# verify step has intensity 5B, so it crosses the ridge at B = 60: the **ridge batch**. Does
# speculation lose there? A round yields E(α, γ) tokens per row and costs γc plain steps of
# drafting plus one verify step, v_B(γ + 1) plain steps, where
#
# $$v_B(\gamma+1) = \frac{t(B, \gamma+1)}{t(B, 1)}$$
#
# is the verify cost at batch B relative to one plain step at the same batch. So speculation
# is faster exactly while
#
# $$E(\alpha, \gamma) > \gamma c + v_B(\gamma + 1).$$
#
# Below the ridge v_B(γ + 1) = 1. Above it (while the plain step is still memory-bound)
# the verify step's time grows with its positions, v_B(γ + 1) = B(γ + 1) / 295 in
# bfloat16, and the inequality fails only at B > (E − γc) · 295 / (γ + 1): the
# **crossover**. The cell computes both batches with `specbook.roofline` and
# `specbook.theory`, and draws v_B and the speedup against the batch with both marked.

# %%
h100_ridge_batch = roofline.ridge_batch(H100, "bfloat16", GAMMA, 2)
ridge_vs_cross = {}
for a in (0.6, 0.8):
    e_a = float(theory.expected_tokens(a, GAMMA))
    ridge_vs_cross[a] = dict(
        ridge_batch=h100_ridge_batch,
        crossover=roofline.predicted_crossover(H100, "bfloat16", PARAMS_7B, 2, a, GAMMA, 0.05, range(1, 4097)),
        by_hand=(e_a - GAMMA * 0.05) * roofline.ridge(H100, "bfloat16") / (GAMMA + 1),
        at_ridge=roofline.predict(H100, "bfloat16", h100_ridge_batch, GAMMA, a, 0.05, PARAMS_7B, 2).speedup,
        at_64=roofline.predict(H100, "bfloat16", 64, GAMMA, a, 0.05, PARAMS_7B, 2))
display(table(["α", "verify step reaches the ridge at batch", "speedup there", "speedup at batch 64 (v_B(5))",
               "speculation loses from batch (crossover)", "(E − γc) · ridge / (γ + 1)"],
              [[a, r["ridge_batch"], f"{r['at_ridge']:.2f}×", f"{r['at_64'].speedup:.2f}× ({r['at_64'].verify_cost:.3f})",
                r["crossover"], f"{r['by_hand']:.1f}"] for a, r in ridge_vs_cross.items()]))
DENSE = sorted({round(2 ** (k / 8)) for k in range(8 * 10 + 1)})  # batch sizes 1..1024, eight per doubling
curve = [roofline.predict(H100, "bfloat16", b, GAMMA, 0.8, 0.05, PARAMS_7B, 2) for b in DENSE]
threshold = float(theory.expected_tokens(0.8, GAMMA)) - GAMMA * 0.05
plot_ridge_and_crossover(DENSE, [p.verify_cost for p in curve], [p.speedup for p in curve],
                         ridge_batch=h100_ridge_batch, crossover=ridge_vs_cross[0.8]["crossover"], threshold=threshold,
                         title="H100 SXM, bfloat16, 7B, γ = 4, α = 0.8, c = 0.05: the plain roofline")

# %% [markdown]
# At batch 64 the verify step is past the ridge and costs 1.08 plain steps instead of
# one, yet speculation with α = 0.8 and c = 0.05 still runs 2.62× faster than plain
# decoding. By this model it loses only from batch 187 (α = 0.8) or 125 (α = 0.6), two
# to three times the ridge batch. On the left, v_B leaves 1 at the ridge batch and must
# climb to E − γc = 3.16 before speculation loses; on the right, the speedup starts to
# fall at the ridge batch and reaches 1 at the crossover.
#
# ## What the plain roofline leaves out
#
# Real servers can lose much earlier than batch 187. The vLLM team measured speculative
# decoding in their server (blog post, October 2024): at low load it sped decoding up 1.5×
# with a draft model and 2.8× with n-gram lookup, and at high load it slowed it down 1.4× and
# 1.8×.
# The plain roofline prices a step by its weights alone and the draft at a fixed share c of
# a plain step. Four things it leaves out, each added below as one term of
# `roofline.serving_predict`, with every other term held at the plain roofline's value:
#
# 1. **The KV cache.** Every step also reads each row's cached keys and values: bytes that
#    grow with batch × context, and that no other row shares.
# 2. **The draft's own step.** A draft model is a decoder too: its step reads its own
#    weights and its own KV cache, so its cost relative to the target, c_B, changes with
#    the batch and the context.
# 3. **Rows that accept different numbers of drafts.** A batch of rows that must all finish
#    (a static batch) runs until its slowest row is done, and pays for every row's γ + 1
#    positions in every pass meanwhile.
# 4. **Kernel efficiency.** The datasheet's peaks are ceilings; the matrix products of a
#    decode step, a few hundred rows tall, reach a fraction of them.
#
# With the KV cache a step is two kernels, one after the other, each on its own roofline:
# the weight products and attention. Attention cannot hide its reads behind the products'
# arithmetic, so the two times add:
#
# $$t(B, n) = \max\left(\frac{2PBn}{\eta_c F}, \frac{P\,b}{\eta_m W}\right)
#   + \max\left(\frac{A\,B\,n}{\eta_c F}, \frac{B\,K\,r}{\eta_m W}\right)$$
#
# with P parameters of b bytes, peak F and bandwidth W reached to fractions η_c and η_m,
# K the KV bytes of one row, A attention's FLOPs per position (4 × layers × heads ×
# head dim × context), and r = 1 if a verify pass reads each row's cache once for all its
# n positions (a multi-query attention kernel) or r = n if it reads it once per position
# (the pass run as n one-query rows). Attention's intensity is a few FLOP per byte, far
# below any GPU's ridge, so its time is its reads. The model needs the attention geometry:
# the 7B below has Mistral 7B's (32 layers, 8 KV heads of 128 dims).

# %%
SEVEN_B, DRAFT = roofline.MODELS["7B"], roofline.MODELS["draft 0.35B"]
SEARCH = range(1, 4097)  # batch sizes searched for a crossover
ALPHA, C = 0.8, 0.05


def crossover(**terms):
    """The H100 crossover of the 7B example (α 0.8, γ 4) with the given terms of the extended model."""
    return roofline.serving_crossover(H100, "bfloat16", GAMMA, ALPHA, SEVEN_B, SEARCH, **terms)


def speedups(batches, **terms):
    return [roofline.serving_predict(H100, "bfloat16", b, GAMMA, ALPHA, SEVEN_B, **terms).speedup for b in batches]


kv_row = SEVEN_B.kv_bytes_per_row(CONTEXT, 2)
print(f"{SEVEN_B.name}: {SEVEN_B.kv_bytes_per_token(2) / 2**10:.0f} KiB per cached token in bfloat16; at {CONTEXT} "
      f"tokens {kv_row / 2**20:.0f} MiB per row, {64 * kv_row / 1e9:.1f} GB for 64 rows against "
      f"{PARAMS_7B * 2 / 1e9:.0f} GB of weights")
plain_cross = crossover(draft=C)
kv_table = {L: {reads: crossover(draft=C, context=L, kv_reads=reads) for reads in roofline.KV_READS}
            for L in (0, 128, 512, 2048, 8192)}
display(table(["context (tokens per row)", "KV bytes per row", "crossover, cache read once per row",
               "crossover, cache read once per position"],
              [[L, f"{SEVEN_B.kv_bytes_per_row(L, 2) / 2**20:.0f} MiB", batch_text(x["once"]),
                batch_text(x["per_position"])] for L, x in kv_table.items()]))
plot_speedup_curves(DENSE, {"weights only": speedups(DENSE, draft=C),
                            f"+ KV of {CONTEXT} tokens, read once": speedups(DENSE, draft=C, context=CONTEXT),
                            f"+ KV of {CONTEXT} tokens, read per position":
                                speedups(DENSE, draft=C, context=CONTEXT, kv_reads="per_position")},
                    {"weights only": plain_cross,
                     f"+ KV of {CONTEXT} tokens, read once": kv_table[CONTEXT]["once"],
                     f"+ KV of {CONTEXT} tokens, read per position": kv_table[CONTEXT]["per_position"]},
                    title="H100, 7B, γ = 4, α = 0.8, c = 0.05: the KV cache")

# %% [markdown]
# **The KV cache moves the crossover either way, and the kernel decides which.** Read once
# per row, the cache adds the same bytes to the plain step and to the verify step: the
# verify step's extra positions now hide behind more memory time, v_B(γ + 1) moves towards
# 1, and the crossover moves *out*, at long contexts beyond any batch (Chen et al. 2024,
# "MagicDec", arXiv:2408.11049, make this argument and measure it). Read once per position,
# the verify step reads the cache γ + 1 times where the plain step reads it once, and the
# crossover moves *in*, fast. vLLM's first implementation scored the drafts that way, each row
# expanded into γ + 1 one-query rows ("batch expansion", vllm-project/vllm pull request 3103);
# it moved to a multi-query kernel in late 2024 (pull requests 8839 and 9298).
#
# **The draft's own step.** The course's c = 0.05 is the weights ratio of a 0.35B draft to
# the 7B. Priced as a decoder of its own, the draft reads its own KV cache every step, a
# quarter of the target's per token with the geometry below, so c_B climbs with the batch and
# the context:

# %%
draft_rows = []
for b in (1, 16, 64, 256, 1024):
    fixed = roofline.serving_predict(H100, "bfloat16", b, GAMMA, ALPHA, SEVEN_B, draft=C, context=CONTEXT)
    model = roofline.serving_predict(H100, "bfloat16", b, GAMMA, ALPHA, SEVEN_B, draft=DRAFT, context=CONTEXT)
    draft_rows.append([b, f"{model.draft_cost:.3f}", f"{fixed.speedup:.2f}×", f"{model.speedup:.2f}×"])
draft_cross = {reads: (crossover(draft=C, context=CONTEXT, kv_reads=reads),
                       crossover(draft=DRAFT, context=CONTEXT, kv_reads=reads)) for reads in roofline.KV_READS}
print(f"{DRAFT.name}: {DRAFT.source}")
display(table(["batch", f"c_B of the draft model ({CONTEXT} cached tokens)", "speedup, c = 0.05 fixed",
               "speedup, the draft model priced"], draft_rows))
print("crossover, c fixed -> the draft model priced: "
      + "; ".join(f"cache read {r.replace('_', ' ')}: {batch_text(f)} -> {batch_text(m)}"
                  for r, (f, m) in draft_cross.items()))

# %% [markdown]
# The priced draft costs more than its weights say as soon as its KV reads count, and it
# takes back part of the speedup at every batch; with the cache read per position it also
# pulls the crossover in. A drafter that runs on the host (prompt lookup) has a cost of
# another kind that also grows with the batch: its work is per row, in Python.
#
# **Rows that accept different numbers of drafts.** A round gives each row its own number
# of tokens, 1 to γ + 1. With continuous batching a finished row is replaced at once and
# the mean E(α, γ) is the right yield. A *static* batch, whose rows must all finish (an
# offline job, or a server that admits new requests only between batches), runs until its
# slowest row is done, and pays for every live row's γ + 1 positions in each of those
# passes. If R_i is the number of rounds row i needs for N tokens, the batch runs
# E[max_i R_i] rounds, so its yield per row per round is N / E[max_i R_i], which falls as
# the batch grows (`roofline.slowest_row_yield`; the distribution of R_i is exact, built
# round by round from the law of one round's tokens). The table shows it for N = 256, for
# identical rows and for a batch where one row in eight accepts far less (α = 0.3, a prompt
# the draft does not suit):

# %%
def static_yield(b, slow_share=0):
    """Tokens per row per round of a static batch of b rows: every `slow_share`-th row at α = 0.3."""
    rows = [0.3 if slow_share and i % slow_share == slow_share - 1 else ALPHA for i in range(b)]
    return roofline.slowest_row_yield(rows, GAMMA, STATIC_TOKENS)


def static_cross(slow_share=0):
    """The crossover of a static batch, priced by the plain roofline's step times."""
    for b in SEARCH:
        p = roofline.serving_predict(H100, "bfloat16", b, GAMMA, ALPHA, SEVEN_B, draft=C)
        if static_yield(b, slow_share) * p.plain_step_s / (GAMMA * C * p.plain_step_s + p.verify_step_s) < 1:
            return b
    return None


uneven = {b: (static_yield(b), static_yield(b, 8)) for b in (1, 8, 64, 256)}
uneven_cross = {"continuous batching, E(α, γ)": plain_cross, "static, identical rows": crossover(
    draft=C, new_tokens=STATIC_TOKENS), "static, one row in 8 at α = 0.3": static_cross(8)}
display(table(["batch", "E(α, γ), continuous", "N / E[max R], identical rows", "N / E[max R], one row in 8 at 0.3"],
              [[b, f"{float(theory.expected_tokens(ALPHA, GAMMA)):.3f}", f"{u:.3f}", f"{m:.3f}"]
               for b, (u, m) in uneven.items()]))
print("crossover: " + "; ".join(f"{k}: {batch_text(v)}" for k, v in uneven_cross.items()))

# %% [markdown]
# Even identical rows lose: the more rows, the likelier one of them has a bad run, and the
# batch waits for it. One poorly suited row in eight costs far more than chance does. The
# n-gram drafter on a real workload is the extreme case: a row whose context has nothing
# to copy accepts nothing, needs N rounds, and the whole batch waits for it.
#
# **Kernel efficiency.** The datasheet peaks are ceilings. If the weight products reach a
# share η_c of the peak FLOP/s and the memory system a share η_m of the bandwidth, the
# attained ridge is η_c F / (η_m W). When the products of a few hundred rows reach a
# smaller share of their peak than the reads reach of theirs, the attained ridge is lower,
# and it is crossed by a smaller batch. The shares below are illustrative; the section on
# your machine measures the share its decode-shaped product reaches.

# %%
efficiency_rows = []
for eta_c, eta_m in ((1.0, 1.0), (0.8, 0.9), (0.6, 0.9), (0.4, 0.8)):
    eff = dict(compute_efficiency=eta_c, bandwidth_efficiency=eta_m)
    efficiency_rows.append([eta_c, eta_m, f"{roofline.ridge(H100, 'bfloat16') * eta_c / eta_m:.0f}",
                            roofline.ridge_batch(H100, "bfloat16", GAMMA, 2, **eff), batch_text(crossover(draft=C, **eff))])
display(table(["η_c (share of peak FLOP/s)", "η_m (share of bandwidth)", "attained ridge", "ridge batch", "crossover"],
              efficiency_rows))

# %% [markdown]
# **All together.** The terms add up. Here they are one after another, on the 7B example at
# 512 cached tokens per row, for both attention kernels: the static batch of 256 new tokens
# per row with identical rows, the kernels at 60% of peak FLOP/s and 90% of bandwidth.

# %%
LADDER = [("weights only (the plain roofline)", dict(draft=C)),
          (f"+ KV cache, {CONTEXT} tokens per row", dict(draft=C, context=CONTEXT)),
          ("+ the draft's own step", dict(draft=DRAFT, context=CONTEXT)),
          (f"+ a static batch of {STATIC_TOKENS} tokens per row", dict(draft=DRAFT, context=CONTEXT,
                                                                       new_tokens=STATIC_TOKENS)),
          ("+ kernels at 60% / 90% of the peaks", dict(draft=DRAFT, context=CONTEXT, new_tokens=STATIC_TOKENS,
                                                      compute_efficiency=0.6, bandwidth_efficiency=0.9))]
ladder = {reads: [crossover(**terms, kv_reads=reads) for _, terms in LADDER] for reads in roofline.KV_READS}
display(table(["model", "crossover, cache read once per row", "crossover, cache read once per position"],
              [[name, batch_text(ladder["once"][i]), batch_text(ladder["per_position"][i])]
               for i, (name, _) in enumerate(LADDER)]))
plot_speedup_curves(DENSE, {name: speedups(DENSE, **terms, kv_reads="per_position") for name, terms in LADDER},
                    {name: ladder["per_position"][i] for i, (name, _) in enumerate(LADDER)},
                    title=f"H100, 7B, γ = 4, α = 0.8: the terms one after another (cache read per position)")

# %% [markdown]
# Read the table down each column. With the cache read per position every term pulls the
# crossover in, from 187 to 69; with the cache read once the KV term pushes it out beyond
# any batch, and the static batch and the kernels pull it back to 211 and then 129. Which
# column describes a server depends on its attention kernel, its contexts, its draft and its
# scheduler: the model says which terms matter, not what one server does. Measure the
# server you run. The next sections do exactly that on your machine.

# %% [markdown]
# ## Your machine's roofline, measured
#
# Two stopwatches (`specbook.bench.batch_costs.measure_roofline`, the ones the
# `python -m specbook batch` command uses): a matrix product of the shape a decode step
# multiplies, 64 rows through one of SmolLM2's projections (576 → 1536; its FLOP/s is the
# arithmetic ceiling a step near the crossover can reach), and a sum over a tensor much
# larger than the caches (its bytes/s is the memory ceiling). A large square product runs
# faster on most CPUs, and is printed beside it, but no decode step multiplies one. The
# result becomes one more `Hardware`, next to the presets.

# %%
from specbook.bench.batch_costs import measure_roofline

measure = dict(size=768, read_mb=64, reps=3) if FAST else dict(reps=7)
measured_roof = {name: measure_roofline(dtype, **measure)
                 for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16))}
peak = {name: r["matmul_flop_per_s"] for name, r in measured_roof.items()}
bandwidth = measured_roof["float32"]["memory_bytes_per_s"]  # the same float32 sum in both
this_machine = roofline.Hardware.measured(peak, bandwidth, name="this machine, measured")
ridge_here = {name: roofline.ridge(this_machine, name) for name in peak}
cpu_ridge_batch = {name: roofline.ridge_batch(this_machine, name, GAMMA, roofline.DTYPE_BYTES[name]) for name in peak}
square_share = {name: r["matmul_flop_per_s"] / r["square_matmul_flop_per_s"] for name, r in measured_roof.items()}
print(f"decode-shaped matmul: {peak['float32'] / 1e9:.0f} GFLOP/s float32, {peak['bfloat16'] / 1e9:.0f} GFLOP/s "
      f"bfloat16 (a square product: {measured_roof['float32']['square_matmul_flop_per_s'] / 1e9:.0f} and "
      f"{measured_roof['bfloat16']['square_matmul_flop_per_s'] / 1e9:.0f}); memory read {bandwidth / 1e9:.1f} GB/s; "
      f"{torch.get_num_threads()} threads")
display(Markdown(
    f"**The ridge of this machine, measured just now: {ridge_here['float32']:.2f} FLOP per byte in float32 and "
    f"{ridge_here['bfloat16']:.2f} in bfloat16** (the H100's datasheet gives "
    f"{roofline.ridge(H100, 'bfloat16'):.0f} in bfloat16). A γ = {GAMMA} verify step reaches it at batch "
    f"{cpu_ridge_batch['float32']} in float32 and {cpu_ridge_batch['bfloat16']} in bfloat16. The decode-shaped "
    f"product reached {square_share['float32']:.0%} (float32) and {square_share['bfloat16']:.0%} (bfloat16) of the "
    f"square product's rate: a kernel efficiency, measured."))

# %% [markdown]
# Compare your ridge with the GPUs' hundreds: a float32 step has intensity B (γ + 1) / 2,
# so on a CPU a verify step crosses the ridge within a few rows, and the crossover follows
# a few rows later. That makes a CPU the better classroom for this lesson: the whole story
# fits into batch sizes from 1 to 16.
#
# ## The explorer
#
# Move the sliders: batch size B, draft length γ, acceptance α, the draft's cost c (one
# draft step over one target step), the hardware and the dtype. The table shows the verify
# step's intensity and share of the ridge, the predicted throughput (tokens/s over all
# rows) and latency (ms between one row's tokens) with and without speculation, the batch
# at which the verify step reaches the ridge and the batch from which speculation loses.
# A round is γ draft steps at c target steps each plus one verify step over γ + 1
# positions per row, and it yields E(α, γ) = (1 − α^(γ+1)) / (1 − α) tokens per row
# (lesson 3); the verify step's time comes from the plain roofline at that batch. The
# explorer refuses values outside its ranges instead of quietly clamping them.

# %%
explorer = BatchingExplorer(batch=1, gamma=GAMMA, alpha=0.8, c=0.05, hardware=H100, params=PARAMS_7B,
                            extra_hardware=[this_machine])
explorer

# %%
try:
    explorer.batch.value = 10_000
    refused = None
except ValueError as err:
    refused = str(err)
print("explorer.batch.value = 10_000 ->", refused)
worked_explorer = explorer.compute(64, GAMMA, 0.8, 0.05, roofline.PRESETS[H100], "bfloat16", PARAMS_7B)
print(f"H100, 7B, B=64, γ=4, α=0.8, c=0.05: verify cost v = {worked_explorer['verify_cost']:.3f}, "
      f"speedup {worked_explorer['speedup']:.2f}, ridge batch {worked_explorer['ridge_batch']}, "
      f"predicted crossover at batch {worked_explorer['crossover']}")

# %% [markdown]
# ## Measured on your machine: throughput against batch size
#
# Now the real loop. Each batch size runs the same prompts twice, greedily: plain
# decoding (`generate`) and speculative decoding with prompt lookup
# (`speculative_generate` with an `NGramDrafter`, γ = 4). Both take the batch as a list of
# prompts of different lengths, and a row leaves the batch when it finishes. Greedy
# speculation must give every row exactly the tokens plain decoding gives it; we check that
# at every batch size. Three stopwatches split each run's time: the target's forward passes
# (a `LlamaTarget` that adds up the seconds of its `forward`, prefills apart), the drafter's
# lookups (an `NGramDrafter` that times its `propose`), and the rest, the loop's own work
# (verification, bookkeeping, cache rollback). The loop's hook counts, per row, the passes it
# took part in and the drafts it accepted and verified.
#
# The model: in the full run, SmolLM2-135M if it is on disk (`python -m specbook
# fetch-model`), else a randomly initialised model of the same shape; in fast mode, a
# small random Llama (timing depends on the shapes, not on what the weights know). With
# random weights the prompts are random token ids of different lengths, and greedy text
# soon falls into loops, so prompt lookup finds something to propose: read the acceptance
# column before you read the speedups.
#
# The full run is slow: two decodes per batch size, the largest verifying 16 × 5 positions
# per pass through a 135M-parameter model. On the course's 2-core development machine,
# shared with other jobs (load average 3 to 5), the sweep took six minutes and the whole
# lesson seven; the bar counts batch sizes, shows its own estimate of the time left, and the
# cell prints how long the sweep took.

# %%
class TimedTarget(LlamaTarget):
    """A LlamaTarget that adds up the seconds of its forward passes, prefills apart."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seconds = {"prefill": 0.0, "passes": 0.0}

    def forward(self, tokens, parents=None, **kwargs):
        t0 = time.perf_counter()
        logits = super().forward(tokens, parents, **kwargs)
        kind = "prefill" if kwargs.get("logits_to_keep") == 0 or tokens.shape[1] > GAMMA + 1 else "passes"
        self.seconds[kind] += time.perf_counter() - t0
        return logits

    __call__ = forward


class TimedLookup(NGramDrafter):
    """Prompt lookup that adds up the seconds of its proposals."""

    def __init__(self):
        super().__init__()
        self.seconds = 0.0

    def propose(self, contexts, gamma, params, generator=None):
        t0 = time.perf_counter()
        draft = super().propose(contexts, gamma, params, generator)
        self.seconds += time.perf_counter() - t0
        return draft


def load_model():
    """(model, name, tokenizer or None)."""
    if not FAST:
        from specbook.models.smollm2 import is_fetched, load_smollm2

        if is_fetched():
            # float32: the sweep checks every row token for token against plain decoding, and
            # in bfloat16 a multi-position pass may flip a near tie (lesson 4).
            smollm2, tok = load_smollm2(dtype="float32")
            return smollm2, "SmolLM2-135M-Instruct", tok
        return LlamaModel(LlamaConfig()).init_weights(generator=torch.Generator().manual_seed(0)), \
            "random Llama of SmolLM2's shape", None
    cfg = LlamaConfig(vocab_size=4096, dim=256, n_layers=4, n_heads=4, n_kv_heads=2, intermediate_size=768,
                      tie_embeddings=False)
    return LlamaModel(cfg).init_weights(generator=torch.Generator().manual_seed(0)), "small random Llama", None


def make_prompts(tokenizer, count):
    """Prompts of different lengths: real ones that copy from their context if there is a tokenizer."""
    if tokenizer is not None:
        from specbook.bench.workloads import load_prompts, select
        from specbook.models.chat import chat_ids

        texts = select(load_prompts(), ["code_edit", "summarize_quote", "rag_qa"])
        return [chat_ids(tokenizer, texts[i % len(texts)].prompt) for i in range(count)]
    gen = torch.Generator().manual_seed(0)
    return [torch.randint(0, model.config.vocab_size, (24 + 5 * i,), generator=gen).tolist() for i in range(count)]


model, model_name, tokenizer = load_model()
model.eval()
n_params = sum(p.numel() for p in model.parameters())
prompts = make_prompts(tokenizer, max(BATCHES))
target = TimedTarget(model, max_length=max(map(len, prompts)) + NEW_TOKENS + GAMMA + 2)
print(f"{model_name}: {n_params / 1e6:.1f} M parameters, float32")


def run(batch, speculate):
    """One timed greedy run over the first ``batch`` prompts; per-row passes and acceptance counted on the hook."""
    rows = prompts[:batch]
    counts = {"computed": 0, "useful": 0, "passes": 0}
    rounds, accepted, verified = [0] * batch, [0] * batch, [0] * batch

    def on_step(step):
        k = step.draft.num_tokens
        counts["passes"] += 1
        counts["computed"] += len(step.rows) * (k + 1)  # positions the target processed
        counts["useful"] += int(step.num_emitted.sum())  # accepted drafts + corrected/bonus token
        for slot, row in enumerate(step.rows):
            kept = int(step.num_emitted[slot]) - 1  # drafts this row accepted
            rounds[row] += 1
            accepted[row] += kept
            verified[row] += min(kept + 1, k)  # the drafts tested: up to the first rejection

    target.seconds = {"prefill": 0.0, "passes": 0.0}
    drafter = TimedLookup() if speculate else None
    t0 = time.perf_counter()
    if speculate:
        out = speculative_generate(target, drafter, rows, NEW_TOKENS, params=GREEDY, gamma=GAMMA, on_step=on_step)
    else:
        out = generate(target, rows, NEW_TOKENS, params=GREEDY, on_step=on_step)
    seconds = time.perf_counter() - t0
    new = int(out.lengths.sum())  # new tokens over all rows
    per_row = new / batch
    decoding = seconds - target.seconds["prefill"]  # the prefill is the same work with or without a drafter
    drafting = drafter.seconds if speculate else 0.0
    return dict(seconds=seconds, decoding=decoding, forwards=target.seconds["passes"], drafting=drafting,
                loop=decoding - target.seconds["passes"] - drafting, new=new, tokens_per_s=new / seconds,
                ms_per_token=1e3 * seconds / per_row, sequences=out.sequences(), computed=counts["computed"],
                useful=counts["useful"], passes=counts["passes"], rounds=rounds,
                row_alpha=[a / v if v else 0.0 for a, v in zip(accepted, verified)],
                wasted_fraction=(counts["computed"] - counts["useful"]) / counts["computed"] if speculate else 0.0,
                acceptance=out.stats.acceptance_rate if speculate else float("nan"),
                tau=out.stats.tau if speculate else 1.0)


run(1, False), run(1, True)  # warm-up: the first calls allocate and pick kernels
measured = {}
t_sweep = time.perf_counter()
for batch in tqdm(BATCHES, desc="batch sizes", disable=FAST):
    measured[batch] = {"plain": run(batch, False), "spec": run(batch, True)}
print(f"measured {len(BATCHES)} batch sizes x 2 in {time.perf_counter() - t_sweep:.1f} s "
      f"({'fast mode' if FAST else 'full run'})")

# %%
identical = {b: m["plain"]["sequences"] == m["spec"]["sequences"] for b, m in measured.items()}
measured_cross = next((b for b in BATCHES if measured[b]["spec"]["tokens_per_s"] < measured[b]["plain"]["tokens_per_s"]),
                      None)
display(table(["batch", "plain tok/s", "n-gram tok/s", "speedup", "plain ms/token", "n-gram ms/token", "acceptance",
               "τ", "wasted share", "same tokens"],
              [[b, f"{m['plain']['tokens_per_s']:.1f}", f"{m['spec']['tokens_per_s']:.1f}",
                f"{m['spec']['tokens_per_s'] / m['plain']['tokens_per_s']:.2f}×",
                f"{m['plain']['ms_per_token']:.1f}", f"{m['spec']['ms_per_token']:.1f}",
                f"{m['spec']['acceptance']:.2f}", f"{m['spec']['tau']:.2f}", f"{m['spec']['wasted_fraction']:.0%}",
                identical[b]] for b, m in measured.items()]))
print(f"measured crossover: {measured_cross if measured_cross else 'none among the batch sizes measured'}; "
      f"a γ = {GAMMA} verify step reaches this machine's float32 ridge at batch {cpu_ridge_batch['float32']}")
plot_throughput_curves(BATCHES, {"plain": [measured[b]["plain"]["tokens_per_s"] for b in BATCHES],
                                 f"n-gram, γ={GAMMA}": [measured[b]["spec"]["tokens_per_s"] for b in BATCHES]},
                       marks={"measured crossover": measured_cross}, title=f"{model_name} on this machine")

# %% [markdown]
# Read the speedup column from top to bottom. At batch 1 the verify pass rides on idle
# arithmetic, so tokens per pass (τ) turn into speed. As the batch grows, the B (γ + 1)
# positions of a verify pass cross the ridge of this machine (the batch printed above):
# from there every extra position costs time and speculation's margin shrinks, until it
# turns into a loss, the crossover. Your numbers are your machine's; on a busy machine run
# the cell again.
#
# ## Predicted against measured, and why they differ
#
# The extended model, term by term, against the measurement. Each column predicts the
# speedup at each batch size; its last row is the batch from which that column says
# speculation loses.
#
# 1. **roofline**: the plain roofline on this machine's measured peaks, weights only, c = 0
#    for a lookup, at the measured τ (tokens per pass per row, which also counts the passes
#    where a row's lookup found nothing to propose);
# 2. **+ KV cache**: the model's own attention geometry at the run's mean context, read
#    once per row (the attention of `specbook.models` reads each row's cache once per pass);
# 3. **+ slowest row**: the batch runs until its slowest row is done, so its yield is
#    N / E[max_i R_i], with each row's acceptance the one that gives its *measured* tokens
#    per pass (`roofline.alpha_for_yield`, then `roofline.slowest_row_yield`);
# 4. **forwards as measured**: the target's passes as the stopwatch saw them, the time a
#    loop that cost nothing else would take; this replaces the roofline's step times by the
#    real ones, and so adds kernel efficiency, and everything else a forward does;
# 5. **+ drafting**: the lookups' measured time added;
# 6. **measured**: the whole run, the loop's own work included.

# %%
# the weights a step streams: an untied embedding table is looked up, not read whole
streamed_params = sum(p.numel() for name, p in model.named_parameters()
                      if model.config.tie_embeddings or not name.startswith("embed."))
cfg = model.config
shape = roofline.ModelShape(model_name, streamed_params, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim,
                            "the model's own config")
mean_context = sum(map(len, prompts[:max(BATCHES)])) / max(BATCHES) + NEW_TOKENS / 2
print(f"{model_name}: {streamed_params / 1e6:.1f} M weights streamed per step, "
      f"{shape.kv_bytes_per_token(4) / 2**10:.0f} KiB of float32 KV cache per token, mean context {mean_context:.0f} "
      f"tokens: {shape.kv_bytes_per_row(mean_context, 4) / 2**20:.2f} MiB per row")


def roofline_speedup(b, tokens_per_round, context=0.0):
    """Predicted speedup at batch b for a given yield per pass: the roofline's step times, c = 0."""
    p = roofline.serving_predict(this_machine, "float32", b, GAMMA, 0.0, shape, context=context)
    return tokens_per_round * p.plain_step_s / p.verify_step_s, p


on_machine = {}
for b, m in measured.items():
    plain, spec = m["plain"], m["spec"]
    row_yield = [len(seq) / r for seq, r in zip(spec["sequences"], spec["rounds"])]  # tokens per pass, per row
    row_alpha = [roofline.alpha_for_yield(min(max(y, 1.0), GAMMA + 1.0), GAMMA) for y in row_yield]
    slowest_passes = roofline.expected_slowest_rounds(row_alpha, GAMMA, NEW_TOKENS)
    roof, _ = roofline_speedup(b, spec["tau"])
    kv, p_kv = roofline_speedup(b, spec["tau"], context=mean_context)
    slowest, _ = roofline_speedup(b, NEW_TOKENS / slowest_passes, context=mean_context)
    on_machine[b] = {
        "roofline": roof, "+ KV cache": kv, "+ slowest row": slowest,
        "forwards as measured": plain["forwards"] / spec["forwards"],
        "+ drafting": plain["forwards"] / (spec["forwards"] + spec["drafting"]),
        "measured": spec["tokens_per_s"] / plain["tokens_per_s"],
        "_passes": (NEW_TOKENS / spec["tau"], slowest_passes, spec["passes"]),
        "_step_ms": (1e3 * p_kv.plain_step_s, 1e3 * plain["forwards"] / plain["passes"]),
        "_shares": (spec["forwards"] / spec["decoding"], spec["drafting"] / spec["decoding"],
                    spec["loop"] / spec["decoding"]),
    }
COLUMNS = ["roofline", "+ KV cache", "+ slowest row", "forwards as measured", "+ drafting", "measured"]
column_cross = {c: next((b for b in BATCHES if on_machine[b][c] < 1), None) for c in COLUMNS}
display(table(["batch", *COLUMNS], [[b, *(f"{on_machine[b][c]:.2f}×" for c in COLUMNS)] for b in BATCHES]
              + [["<b>crossover</b>", *(f"<b>{column_cross[c] or 'none'}</b>" for c in COLUMNS)]]))
display(table(["batch", "passes at τ per pass, N / τ", "E[max R] from each row's yield", "passes run",
               "plain step: roofline ms", "plain step: measured ms", "kernel efficiency (roofline / measured)",
               "forwards / drafting / loop (share of the speculative run)"],
              [[b, f"{x['_passes'][0]:.1f}", f"{x['_passes'][1]:.1f}", x["_passes"][2], f"{x['_step_ms'][0]:.2f}",
                f"{x['_step_ms'][1]:.2f}", f"{x['_step_ms'][0] / x['_step_ms'][1]:.0%}",
                " / ".join(f"{s:.0%}" for s in x["_shares"])] for b, x in on_machine.items()]))
display(plot_speedup_curves(BATCHES, {c: [on_machine[b][c] for b in BATCHES] for c in COLUMNS}, column_cross,
                            title=f"{model_name} on this machine: predicted and measured speedup"))
biggest = max(range(1, len(COLUMNS)), key=lambda i: abs(math.log(on_machine[BATCHES[-1]][COLUMNS[i]]
                                                                 / on_machine[BATCHES[-1]][COLUMNS[i - 1]])))
print(f"On this machine the plain roofline puts the crossover at {column_cross['roofline'] or 'none measured'}, the "
      f"measurement at {column_cross['measured'] or 'none measured'} (batch sizes {BATCHES}). At batch "
      f"{BATCHES[-1]} the largest single change between neighbouring columns is '{COLUMNS[biggest]}': "
      f"{on_machine[BATCHES[-1]][COLUMNS[biggest - 1]]:.2f}× -> {on_machine[BATCHES[-1]][COLUMNS[biggest]]:.2f}×.")

# %% [markdown]
# Why the columns differ (the printed sentence names the largest step on your machine):
#
# * **Kernel efficiency decides most of it on a CPU.** The roofline prices a step at the
#   measured peaks. A real forward also runs layer norms, attention, softmax and the
#   framework's per-call work, and its products are smaller than the 64-row product the
#   peak was measured on: the "plain step" columns put the roofline's milliseconds beside the
#   measured ones. Where a forward is mostly fixed per-call work, which grows little with the
#   positions, extra positions are cheaper than the roofline says and its crossover comes
#   too early; where the products run below the measured peak, it comes too late.
# * **The KV cache** matters little here: a small model caches few bytes per token (printed
#   above) and these contexts are short. On the GPU example it was the largest term.
# * **The slowest row** costs passes: compare N / τ, the passes the batch would run if it
#   could stop at its average row, with E[max R] from the rows' own yields and with the
#   passes the loop ran. With prompt lookup some rows find nothing to copy for a while, and
#   the batch waits for them.
# * **Drafting and the loop** are host work per row (lookups, verification, bookkeeping in
#   Python) that the GPU model prices at nothing; the shares say how much of the speculative
#   run's time they took. This is the draft's own cost growing with the batch, in its CPU
#   form.
#
# The remaining gap between the last two model columns and the measurement is what no
# column models, timer noise on a shared machine among it: run the sweep again and compare.

# %% [markdown]
# ## The latency-throughput frontier, and how an SLO picks a point
#
# Each batch size is one point: latency (ms between a row's tokens) against throughput
# (tokens/s over all rows). Bigger batches buy throughput with latency; speculation buys
# latency, and at small batch some throughput too. A service states a latency target,
# its SLO, and then wants the most throughput that meets it: the highest point left of
# the SLO line.

# %%
def pick(points, slo_ms):
    """(label, batch, ms, tok/s) of the highest throughput among points with latency <= slo_ms."""
    feasible = [(label, b, ms, tps) for label, (mss, tpss, bs) in points.items()
                for ms, tps, b in zip(mss, tpss, bs) if ms <= slo_ms]
    return max(feasible, key=lambda p: p[3]) if feasible else None


frontier = {label: ([measured[b][key]["ms_per_token"] for b in BATCHES],
                    [measured[b][key]["tokens_per_s"] for b in BATCHES], BATCHES)
            for label, key in (("plain", "plain"), (f"n-gram γ={GAMMA}", "spec"))}
slo = 1.5 * measured[1]["plain"]["ms_per_token"]  # "at most 1.5x the latency of plain batch-1 decoding"
choice = pick(frontier, slo)
print(f"SLO {slo:.1f} ms/token -> {choice[0]} at batch {choice[1]}: {choice[3]:.1f} tok/s, {choice[2]:.1f} ms/token")
plot_frontier(frontier, slo_ms=slo)

# %% [markdown]
# The same choice on an H100 serving a 7B model, from the roofline (α = 0.8, c = 0.05):
# with a tight SLO the answer is speculation at a small batch; with a loose one it is a
# big batch, with speculation off or short.

# %%
gpu_batches = [1, 4, 16, 64, 128, 256]
gpu = {b: roofline.predict(H100, "bfloat16", b, GAMMA, 0.8, 0.05, PARAMS_7B, 2) for b in gpu_batches}
gpu_frontier = {"plain": ([gpu[b].plain_ms_per_token for b in gpu_batches],
                          [gpu[b].plain_tokens_per_s for b in gpu_batches], gpu_batches),
                f"γ={GAMMA}": ([gpu[b].spec_ms_per_token for b in gpu_batches],
                               [gpu[b].spec_tokens_per_s for b in gpu_batches], gpu_batches)}
tight, loose = pick(gpu_frontier, 2.0), pick(gpu_frontier, 6.0)
print(f"SLO 2 ms/token: {tight[0]} at batch {tight[1]}; SLO 6 ms/token: {loose[0]} at batch {loose[1]}")
plot_frontier(gpu_frontier, slo_ms=2.0)

# %% [markdown]
# ## The wasted-work tax, measured
#
# A verify pass computes γ + 1 positions per row. Only the accepted drafts and the one
# corrected or bonus token are kept; the drafts after the first rejection, and the
# positions of a row whose lookup found nothing to propose, are computed and thrown away.
# The loop's `on_step` hook counted both above. Under the ridge that waste is free. Over
# it, the waste share is a share of the step's *time*: arithmetic another row needed.
# Under the i.i.d. model of lesson 3 the expected share is (γ − (E − 1)) / (γ + 1).

# %%
display(table(["batch", "computed positions", "kept tokens", "wasted share (measured)"],
              [[b, m["spec"]["computed"], m["spec"]["useful"], f"{m['spec']['wasted_fraction']:.1%}"]
               for b, m in measured.items()]))
model_waste = {a: roofline.predict(H100, "bfloat16", 1, GAMMA, a, 0.05, PARAMS_7B, 2).wasted_fraction
               for a in (0.5, 0.7, 0.8, 0.9)}
print("expected wasted share at γ=4 by α:", {a: f"{w:.0%}" for a, w in model_waste.items()})

# %% [markdown]
# ## Adapting γ to the load
#
# A scheduler that knows the number of live rows B and the recent acceptance α can pick
# the draft length each step that maximises tokens per unit time,
# E(α, γ) / (γ c + v_B(γ + 1)), with γ = 0 meaning "speculation off". The roofline gives
# v_B; a real scheduler measures it on its machine. On an H100 with a 7B model:

# %%
def best_gamma(hw, dtype, batch, alpha, c, params, dtype_bytes, max_gamma=8):
    rates = {g: roofline.predict(hw, dtype, batch, g, alpha, c, params, dtype_bytes).spec_tokens_per_s
             for g in range(max_gamma + 1)}
    return max(rates, key=lambda g: (rates[g], -g))  # ties go to the shorter draft


sched_batches = [1, 16, 64, 128, 256, 512, 1024]
sched = {a: [best_gamma(H100, "bfloat16", b, a, 0.05, PARAMS_7B, 2) for b in sched_batches] for a in (0.6, 0.8, 0.9)}
display(table(["α \\ batch", *sched_batches], [[a, *gs] for a, gs in sched.items()]))

# %% [markdown]
# The best γ falls as the batch fills, and reaches 0 (speculation off) by the time the
# batch alone is over the ridge (B ≥ 296 for plain bfloat16 steps on the H100). Doing this well in a real server is an open problem: α drifts
# per request, v_B must be measured, and rows join and leave every step.
# (`python -m specbook batch --policy adaptive` runs such a scheduler on this machine;
# see docs/batching.md.)
#
# ## Reasoning traces shift the balance back
#
# A reasoning model writes thousands of chain-of-thought tokens that nobody reads as they
# appear: what matters is the *total* time of the trace, and such text is often
# predictable (α high). Higher α moves the crossover to a larger batch:

# %%
alphas = [0.6, 0.7, 0.8, 0.9, 0.95]
cross_by_alpha = {a: roofline.predicted_crossover(H100, "bfloat16", PARAMS_7B, 2, a, GAMMA, 0.05, range(1, 2049))
                  for a in alphas}
trace_tokens = 2000
trace_s = {a: trace_tokens * roofline.predict(H100, "bfloat16", 32, GAMMA, a, 0.05, PARAMS_7B, 2).spec_ms_per_token / 1e3
           for a in alphas}
plain_trace_s = trace_tokens * roofline.predict(H100, "bfloat16", 32, GAMMA, 0.8, 0.05, PARAMS_7B,
                                                 2).plain_ms_per_token / 1e3
display(table(["α", "predicted crossover batch", f"{trace_tokens}-token trace at batch 32 (s)"],
              [[a, cross_by_alpha[a], f"{trace_s[a]:.1f}"] for a in alphas]))
print(f"plain decoding at batch 32: {plain_trace_s:.1f} s for the same trace")


# %% [markdown]
# ## Exercises: predict, then run
#
# Each exercise has an answer cell and a check cell: write your answer where the cell says,
# then run both. The check grades it against `specbook.roofline` and says what is wrong,
# without giving the answer away.
#
# **Exercise 1 (06.1).** An L4 in bfloat16 serves a 7B model. At what batch does a *plain*
# step reach the ridge? And a verify step with γ = 4? Set `l4_plain` and `l4_spec`.
#
# <details><summary>Solution</summary>
#
# The ridge is 121 TFLOP/s / 300 GB/s = 403.3 FLOP per byte. A plain bfloat16 step has
# intensity B, so the first batch at or over the ridge is 404; a verify step with γ = 4 has
# intensity 5B, so it is the first B with 5B ≥ 403.3: 81 (5 × 81 = 405).
#
# </details>

# %% tags=["solution"]
l4 = roofline.PRESETS["L4"]
### BEGIN SOLUTION
l4_ridge = l4.peak("bfloat16") / l4.bandwidth
l4_plain = math.ceil(l4_ridge)  # a plain bfloat16 step's intensity is B
l4_spec = math.ceil(l4_ridge / (GAMMA + 1))  # a verify step's is B (γ + 1)
### END SOLUTION

# %%
exercises.check("06.1", l4_plain, l4_spec)

# %% [markdown]
# **Exercise 2 (06.2).** The same 7B model on an A100 SXM in bfloat16, α = 0.8, γ = 4,
# c = 0.05, the plain roofline. Predict the batch at which the verify step reaches the ridge
# (`a100_ridge_batch`) and the batch from which speculation loses to plain decoding
# (`a100_cross`). Hint: it loses when v_B(5) > E(0.8, 4) − 4c, and above the ridge
# v_B(5) = 5B / ridge while the plain step is still memory-bound.
#
# <details><summary>Solution</summary>
#
# The ridge is 312 / 2.039 = 153.0 FLOP per byte and the verify step's intensity is 5B: it
# reaches the ridge at batch 31. E(0.8, 4) = 3.3616, so speculation loses once
# 5B / 153.0 > 3.3616 − 0.2, that is B > 96.8: batch 97, three times the ridge batch.
#
# </details>

# %% tags=["solution"]
### BEGIN SOLUTION
a100_ridge = 312e12 / 2.039e12
a100_ridge_batch = math.ceil(a100_ridge / (GAMMA + 1))
e_08 = sum(0.8 ** k for k in range(GAMMA + 1))
a100_cross = math.floor((e_08 - GAMMA * 0.05) * a100_ridge / (GAMMA + 1)) + 1
### END SOLUTION

# %%
exercises.check("06.2", a100_ridge_batch, a100_cross)

# %% [markdown]
# **Exercise 3 (06.3).** With α = 0.6 and γ = 4, what share of the computed verify
# positions is thrown away, on average? Set `waste6`.
#
# <details><summary>Solution</summary>
#
# E(0.6, 4) = 2.3056 tokens per row per pass are kept: E − 1 = 1.3056 accepted drafts and
# one corrected or bonus token. The other 5 − 2.3056 = 2.6944 of the γ + 1 = 5 positions are
# thrown away: 53.9%.
#
# </details>

# %% tags=["solution"]
### BEGIN SOLUTION
e_06 = sum(0.6 ** k for k in range(GAMMA + 1))
waste6 = (GAMMA + 1 - e_06) / (GAMMA + 1)
### END SOLUTION

# %%
exercises.check("06.3", waste6)

# %% [markdown]
# **Exercise 4 (06.4): predict the crossover on A100, L4 and H200 with KV bytes.** The 7B
# model with Mistral 7B's attention (32 layers, 8 KV heads of 128 dims, bfloat16) serves rows
# with 512 cached tokens each; α = 0.8, γ = 4, a draft at the fixed cost c = 0.05. The GPUs,
# from NVIDIA's datasheets (dense bfloat16 tensor-core peaks, without 2:4 sparsity):
#
# | GPU | peak bf16 dense (TFLOP/s) | memory | bandwidth (GB/s) | source |
# |---|---:|---|---:|---|
# | A100 SXM 80GB | 312 | HBM2e | 2,039 | NVIDIA A100 Tensor Core GPU datasheet |
# | L4 | 121 | GDDR6 | 300 | NVIDIA L4 Tensor Core GPU datasheet |
# | H200 SXM | 989.4 | HBM3e | 4,800 | NVIDIA H200 Tensor Core GPU datasheet |
#
# Write `step_time_kv(hw, batch, positions, kv_reads)` yourself: the two kernels of the
# section above with η_c = η_m = 1, attention priced by its reads alone (its arithmetic is
# far below every ridge). Then find, for each GPU, the first batch in 1..4096 at which
# speculation is slower than plain decoding (`None` if there is none), once for a kernel
# that reads each row's cache once per verify pass and once for a kernel that reads it once
# per position. Before you run it: on which GPU do you expect speculation to last longest?
# Set `crossover_once` and `crossover_per_position`, dicts keyed by "A100 SXM", "L4" and
# "H200 SXM".
#
# <details><summary>Solution</summary>
#
# One row's cache holds 2 × 32 × 8 × 128 × 2 bytes = 128 KiB per token, 64 MiB at 512
# tokens. Read once, it adds B × 64 MiB / bandwidth to both steps. On the L4 and the H200
# that keeps the verify step's cost under E − γc = 3.16 plain steps at every batch: as B
# grows both steps become compute-bound in the weights, the KV term grows in proportion,
# and v_B tends to (5 × 2P / F + K / W) / (2P / F + K / W), 2.36 on the L4 and 3.01 on the
# H200; the A100's limit, 3.31, is above 3.16, and it loses from batch 142. Read once per
# position, the verify step reads 5 × 64 MiB per row: the crossovers fall to 77 (A100),
# 150 (L4) and 96 (H200). The slow L4 keeps speculation longest: its ridge is the highest.
#
# </details>

# %% tags=["solution"]
gpus = {name: roofline.PRESETS[name] for name in ("A100 SXM", "L4", "H200 SXM")}
kv_per_row = 2 * 32 * 8 * 128 * 2 * CONTEXT  # keys and values: 32 layers, 8 KV heads of 128 dims, bfloat16
### BEGIN SOLUTION


def step_time_kv(hw, batch, positions, kv_reads):
    weights = max(2 * PARAMS_7B * batch * positions / hw.peak("bfloat16"), 2 * PARAMS_7B / hw.bandwidth)
    reads = positions if kv_reads == "per_position" else 1
    return weights + batch * kv_per_row * reads / hw.bandwidth


def kv_crossover(hw, kv_reads):
    e = sum(0.8 ** k for k in range(GAMMA + 1))
    for b in range(1, 4097):
        plain = step_time_kv(hw, b, 1, "once")
        if e * plain < GAMMA * 0.05 * plain + step_time_kv(hw, b, GAMMA + 1, kv_reads):
            return b
    return None


crossover_once = {name: kv_crossover(hw, "once") for name, hw in gpus.items()}
crossover_per_position = {name: kv_crossover(hw, "per_position") for name, hw in gpus.items()}
### END SOLUTION

# %%
exercises.check("06.4", crossover_once, crossover_per_position)

# %% [markdown]
# ## Concept check
#
# Five short questions; set `c1` ... `c5` in the cell below, then run the check cell.
#
# **c1.** On the H100 example (7B, γ = 4, α = 0.8, c = 0.05) the verify step reaches the
# ridge at batch 60. At that batch speculation is (a) already slower than plain decoding;
# (b) exactly as fast as plain decoding; (c) still faster, and from here every extra row
# takes some of its margin. Set `c1` to "a", "b" or "c".
#
# **c2.** On the same example, the rows' context grows from 128 to 256 cached tokens. Where
# does the crossover go, with a kernel that reads each row's cache once per verify pass
# (`c2_once`), and with one that reads it once per position (`c2_per_position`)? Each is one
# of "smaller batch", "larger batch", "unchanged".
#
# **c3.** Some implementations keep a batch's rows in step: every row advances by the
# smallest number of tokens any row got this round, so that the cache stays rectangular.
# With 8 rows, α = 0.8 and γ = 4, how many tokens per row does a round yield on average
# (one row alone gets E = 3.36)? Set `c3` to the number.
#
# **c4.** From this machine's measured float32 ridge (printed above), the first batch at
# which a γ = 4 float32 verify step reaches it. Set `c4`.
#
# **c5.** The kernels reach 60% of the peak FLOP/s and 90% of the bandwidth. (a) The ridge
# is lower, and the crossover moves to a larger batch; (b) the ridge is lower, and the
# crossover moves to a smaller batch; (c) the ridge is higher, and the crossover moves to a
# larger batch; (d) the ridge is higher, and the crossover moves to a smaller batch. Set
# `c5`.
#
# <details><summary>Solution</summary>
#
# c1: (c), 2.80× (the verify step costs exactly one plain step at batch 60). c2: read once,
# a larger batch (the same KV bytes in both steps pull v_B towards 1); read per position, a
# smaller one. c3: the minimum of 8 rows is at least k when all 8 rows' first k − 1 drafts
# are accepted, probability 0.8^(8(k − 1)); summed over k = 1..5, 1.20 tokens. c4: the
# smallest B with 2B × 5 / 4 ≥ the ridge. c5: (b), the attained ridge is 0.6 / 0.9 of the
# datasheet's, and a lower ridge is reached by fewer rows.
#
# </details>

# %% tags=["solution"]
### BEGIN SOLUTION
c1 = "c"
c2_once, c2_per_position = "larger batch", "smaller batch"
c3 = sum(0.8 ** ((k - 1) * 8) for k in range(1, GAMMA + 2))
c4 = math.ceil(ridge_here["float32"] * 4 / (2 * (GAMMA + 1)))
c5 = "b"
### END SOLUTION

# %%
for key, answers in (("06.c1", (c1,)), ("06.c2", (c2_once, c2_per_position)), ("06.c3", (c3,)),
                     ("06.c4", (c4, this_machine)), ("06.c5", (c5,))):
    exercises.check(key, *answers)

# %% [markdown]
# ## Checks

# %%
# 1. The worked step and the course's table, exactly, and the presets they need.
assert [round(1e3 * v["step_s"], 2) for v in worked.values()] == [4.18, 4.53] and round(worked_v, 2) == 1.08
assert all(v["step_s"] == v["library_s"] for v in worked.values())
assert [(b, g, i, t) for b, g, i, t in course] == [
    (1, 0, 1.0, "0.3%"), (1, 4, 5.0, "1.7%"), (64, 0, 64.0, "22%"), (64, 4, 320.0, "OVER the ridge")]
assert round(roofline.ridge(H100, "bfloat16")) == 295 and {"H100 SXM", "A100 SXM", "L4", "RTX 4090"} <= set(roofline.PRESETS)
# 1b. The ridge is not the crossover: on the course's H100 example the verify step reaches the ridge at batch 60,
#     speculation is still 2.62x faster at batch 64, and it loses only from batch 187 (α 0.8) or 125 (α 0.6).
assert h100_ridge_batch == 60 == next(b for b in range(1, 1000)
                                      if roofline.ridge_fraction(H100, "bfloat16", b, GAMMA, PARAMS_7B, 2) >= 1)
assert all(r["ridge_batch"] != r["crossover"] for r in ridge_vs_cross.values())
assert all(r["at_ridge"] > 1 and r["at_64"].speedup > 1 for r in ridge_vs_cross.values())
assert (ridge_vs_cross[0.8]["crossover"], ridge_vs_cross[0.6]["crossover"]) == (187, 125)
assert round(ridge_vs_cross[0.8]["at_64"].speedup, 2) == 2.62 and ridge_vs_cross[0.8]["at_64"].verify_cost > 1
assert all(r["crossover"] == math.floor(r["by_hand"]) + 1 for r in ridge_vs_cross.values())
# 2. The terms the plain roofline leaves out, each moving the crossover (7B, H100, α 0.8, γ 4, 512 cached tokens).
assert plain_cross == 187 and kv_table[0] == {"once": 187, "per_position": 187}
assert kv_table[CONTEXT]["once"] is None and kv_table[CONTEXT]["per_position"] == 123  # read once: out; per position: in
per_position = [x["per_position"] for x in kv_table.values()]
assert all(a > b for a, b in zip(per_position, per_position[1:]))
assert draft_cross == {"once": (None, None), "per_position": (123, 107)}
assert list(uneven_cross.values()) == [187, 159, uneven_cross["static, one row in 8 at α = 0.3"]]
assert uneven_cross["static, one row in 8 at α = 0.3"] < 159
assert [row[-1] for row in efficiency_rows] == ["187", "167", "125", "94"]
assert ladder == {"once": [187, None, None, 211, 129], "per_position": [187, 123, 107, 87, 69]}
# 3. The explorer refuses instead of clamping, and shows the library's numbers.
assert refused is not None and "batch" in refused and explorer.batch.value == 1
p1 = roofline.predict(H100, "bfloat16", 1, GAMMA, 0.8, 0.05, PARAMS_7B, 2)
assert f'data-key="speedup">{p1.speedup:.3f}<' in explorer.table.value
assert worked_explorer["crossover"] == 187 and worked_explorer["ridge_batch"] == 60 and worked_explorer["verify_cost"] > 1
# 4. Measured: speculation is lossless row by row at every batch size; plain wastes nothing, speculation some; the
#    timers add up; a static batch runs as many passes as its slowest row took part in.
assert all(identical.values()), identical
# the target computed every kept token, and kept no more than the verifier emitted
assert all(m["spec"]["new"] <= m["spec"]["useful"] <= m["spec"]["computed"] for m in measured.values())
assert all(0 <= m["spec"]["wasted_fraction"] < 1 and m["plain"]["wasted_fraction"] == 0 for m in measured.values())
assert any(m["spec"]["wasted_fraction"] > 0 for m in measured.values())
assert all(m["plain"]["tokens_per_s"] > 0 and m["spec"]["tokens_per_s"] > 0 for m in measured.values())
assert all(r["passes"] == max(r["rounds"]) and 0 < r["forwards"] < r["decoding"] and r["loop"] > 0
           for m in measured.values() for r in m.values())
assert all(m["plain"]["passes"] == NEW_TOKENS and m["spec"]["drafting"] > 0 for m in measured.values())
assert all(0 <= a <= 1 for m in measured.values() for a in m["spec"]["row_alpha"])
# 5. The SLO picks the best feasible point; a tight SLO wants speculation at small batch, a loose one a big batch.
assert choice is not None and all(tps <= choice[3] for _, (mss, tpss, _) in frontier.items()
                                  for ms, tps in zip(mss, tpss) if ms <= slo)
assert tight[0] == f"γ={GAMMA}" and tight[1] < loose[1]
# 6. The scheduler's γ falls with load and switches speculation off; better α keeps it on longer.
assert all(all(x >= y for x, y in zip(gs, gs[1:])) and gs[0] > 0 and gs[-1] == 0 for gs in sched.values())
assert all(cross_by_alpha[a] <= cross_by_alpha[b] for a, b in zip(alphas, alphas[1:]))
assert trace_s[0.95] < trace_s[0.6] and model_waste[0.9] < model_waste[0.5]
# 7. Your exercises and concept check, as graded above (the instructor's edition asserts every one is right).
graded = exercises.results("06")
print(f"exercises and concept check: {sum(r.passed for r in graded)} of {len(graded)} right")
### BEGIN SOLUTION
assert [r.key for r in graded] == ["06.1", "06.2", "06.3", "06.4", "06.c1", "06.c2", "06.c3", "06.c4", "06.c5"], \
    [r.key for r in graded]
assert all(r.passed for r in graded), [str(r) for r in graded]
### END SOLUTION
print(f"all lesson-6 checks passed in {time.perf_counter() - _started:.1f} s (fast mode: {FAST})")
