# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
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
# and by the roofline's own arithmetic a wide band of batch sizes lies between the two:
# telling them apart is the first thing this lesson does.
#
# In this lesson:
#
# 1. the roofline of one decode step, as code (`specbook.roofline`), with hardware presets,
#    the ridge batch against the crossover batch, and an explorer;
# 2. the throughput-versus-batch curves of *your* machine, plain against speculative;
# 3. the latency-throughput frontier, and how a latency target (an SLO) picks a point;
# 4. the wasted-work tax, measured;
# 5. adapting γ to the load, and why reasoning traces shift the balance back;
# 6. exercises: predict, then run.

# %% tags=["parameters"]
import os

FAST = os.environ.get("SPECBOOK_FAST", "0") == "1"  # the test suite sets SPECBOOK_FAST=1
BATCHES = [1, 2, 4] if FAST else [1, 2, 4, 8, 16]  # batch sizes measured on this machine
NEW_TOKENS = 10 if FAST else 32  # new tokens per row
GAMMA = 4
PARAMS_7B = 7e9  # the course's example model for the GPU presets

# %%
import math
import time

import torch
from IPython.display import HTML, display
from tqdm.auto import tqdm

from specbook import roofline, theory
from specbook.decode import generate, speculative_generate
from specbook.drafters import NGramDrafter
from specbook.models import LlamaModel, LlamaTarget
from specbook.models.config import LlamaConfig
from specbook.sampling import GREEDY
from specbook.teach.batching import BatchingExplorer, plot_frontier, plot_throughput_curves

_started = time.perf_counter()


def table(head, rows):
    """A small HTML table: head is a list of column titles, rows a list of lists of cells."""
    h = "".join(f"<th>{c}</th>" for c in head)
    b = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return HTML(f"<table><tr>{h}</tr>{b}</table>")


def solution(summary, body_html):
    """A worked solution, folded until the reader clicks it open."""
    display(HTML(f"<details><summary><b>{summary}</b> (click to reveal)</summary>{body_html}</details>"))


# %% [markdown]
# ## The roofline of one decode step
#
# One decode step multiplies every weight by every position it processes: 2 FLOPs per
# parameter per position. It reads every weight once, whatever the number of positions.
# With B rows of γ + 1 positions each and weights of `dtype_bytes` bytes:
#
# $$\text{intensity} = \frac{2\,\text{params}\,B(\gamma+1)}{\text{params}\cdot\text{dtype bytes}}
#   = \frac{2B(\gamma+1)}{\text{dtype bytes}}\quad(= B(\gamma+1)\text{ in bfloat16}).$$
#
# The model size cancels (KV-cache reads, which grow with context, are left out here;
# `roofline.step_intensity(..., kv_bytes_per_row=...)` adds them). The *ridge* is peak
# FLOP/s over memory bandwidth: below it a step waits for memory, above it for arithmetic.
# Here is the course's table, computed:

# %%
H100 = "H100 SXM"
course = []
for batch, gamma in [(1, 0), (1, 4), (64, 0), (64, 4)]:
    intensity = roofline.step_intensity(batch, gamma, PARAMS_7B, 2)
    share = roofline.ridge_fraction(H100, "bfloat16", batch, gamma, PARAMS_7B, 2)
    text = "OVER the ridge" if share >= 1 else (f"{share:.1%}" if share < 0.1 else f"{share:.0%}")
    course.append((batch, gamma, intensity, text))
display(table(["batch", "γ", "intensity (FLOP/byte)", f"share of the ridge ({roofline.ridge(H100, 'bfloat16'):.0f})"],
              course))

# %% [markdown]
# The ridge differs from machine to machine. The presets hold vendor datasheet peaks
# (dense, no sparsity) and memory bandwidth (sources in `docs/batching.md`). A GPU
# with a *low* ridge is crossed by a smaller batch.

# %%
display(table(["hardware", "bf16 peak (TFLOP/s)", "fp32 peak (TFLOP/s)", "bandwidth (GB/s)", "ridge bf16",
               "ridge fp32", "source"],
              [[hw.name, f"{hw.flops['bfloat16'] / 1e12:.0f}", f"{hw.flops['float32'] / 1e12:.1f}",
                f"{hw.bandwidth / 1e9:.0f}", f"{roofline.ridge(hw, 'bfloat16'):.0f}",
                f"{roofline.ridge(hw, 'float32'):.0f}", hw.source] for hw in roofline.PRESETS.values()]))

# %% [markdown]
# ## The ridge is not the crossover
#
# Take the course's example: an H100 in bfloat16 (ridge 295), a 7B model, γ = 4. The
# verify step has intensity 5B, so it crosses the ridge at B = 60. Does speculation lose
# there? A round yields E(α, γ) tokens per row and costs γc plain steps of drafting plus
# one verify step, v_B(γ + 1) plain steps, so speculation is faster exactly while
#
# $$E(\alpha, \gamma) > \gamma c + v_B(\gamma + 1).$$
#
# Below the ridge v_B(γ + 1) = 1. Above it (while the plain step is still memory-bound)
# the verify step's time grows with its positions, v_B(γ + 1) = B(γ + 1) / 295 in
# bfloat16, and the inequality fails only at B > (E − γc) · 295 / (γ + 1). The cell
# computes both batches with `specbook.roofline` and `specbook.theory`:

# %%
def ridge_batch(hw, dtype, gamma, dtype_bytes):
    """The first batch whose step over gamma + 1 positions per row reaches the ridge."""
    return next(b for b in range(1, 100_000)
                if roofline.ridge_fraction(hw, dtype, b, gamma, PARAMS_7B, dtype_bytes) >= 1)


h100_ridge_batch = ridge_batch(H100, "bfloat16", GAMMA, 2)
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

# %% [markdown]
# At batch 64 the verify step is past the ridge and costs 1.08 plain steps instead of
# one, yet speculation with α = 0.8 and c = 0.05 still runs 2.62× faster than plain
# decoding. By this model it loses only from batch 187 (α = 0.8) or 125 (α = 0.6), two
# to three times the ridge batch. Past the ridge every extra position costs time, so the
# margin shrinks with every row; the **crossover** is where it reaches zero.
#
# Real servers lose much earlier than the plain roofline says, for reasons it leaves out:
# attention over the KV cache (its reads grow with the context and the batch, its
# arithmetic with every verified position too, and the weights-only intensity counts
# neither); the draft's
# own step, whose cost also grows with the batch (c is not a constant); rows that accept
# different numbers of drafts, so a batch advances at a ragged pace and pads; and kernels
# that reach a fraction of peak on the small, oddly shaped matrices of a verify step. The
# vLLM team measured speculative decoding in their server (blog post, October 2024): at
# low load it sped decoding up 1.5× with a draft model and 2.8× with n-gram lookup, and at
# high load it slowed it down 1.4× and 1.8×. Read the crossover below as an upper bound,
# and measure it on the server you run.
#
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
print(f"decode-shaped matmul: {peak['float32'] / 1e9:.0f} GFLOP/s float32, {peak['bfloat16'] / 1e9:.0f} GFLOP/s "
      f"bfloat16 (a square product: {measured_roof['float32']['square_matmul_flop_per_s'] / 1e9:.0f} and "
      f"{measured_roof['bfloat16']['square_matmul_flop_per_s'] / 1e9:.0f}); memory read {bandwidth / 1e9:.1f} GB/s; "
      f"{torch.get_num_threads()} threads")
print(f"ridge of this machine: {ridge_here['float32']:.1f} FLOP/byte in float32, {ridge_here['bfloat16']:.1f} "
      f"in bfloat16 (an H100: {roofline.ridge(H100, 'bfloat16'):.0f} in bfloat16)")
cpu_ridge_batch = {name: ridge_batch(this_machine, name, GAMMA, roofline.DTYPE_BYTES[name]) for name in peak}
print(f"a γ = {GAMMA} verify step reaches it at batch {cpu_ridge_batch['float32']} (float32), "
      f"{cpu_ridge_batch['bfloat16']} (bfloat16)")

# %% [markdown]
# Compare your ridge, printed above, with the GPUs' hundreds: a float32 step has intensity
# B (γ + 1) / 2, so on a CPU a verify step crosses the ridge within a few rows, and
# the crossover follows a few rows later. That makes a CPU the better classroom for this
# lesson: the whole story fits into batch sizes from 1 to 16.
#
# ## The explorer
#
# Move the sliders: batch size B, draft length γ, acceptance α, the draft's cost c (one
# draft step over one target step), the hardware and the dtype. The table shows the verify
# step's intensity and share of the ridge, and the predicted throughput (tokens/s over all
# rows) and latency (ms between one row's tokens) with and without speculation. A round is
# γ draft steps at c target steps each plus one verify step over γ + 1 positions per row,
# and it yields E(α, γ) = (1 − α^(γ+1)) / (1 − α) tokens per row (lesson 3); the verify
# step's time comes from the roofline at that batch. The explorer refuses values outside
# its ranges instead of quietly clamping them.

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
worked = explorer.compute(64, GAMMA, 0.8, 0.05, roofline.PRESETS[H100], "bfloat16", PARAMS_7B)
print(f"H100, 7B, B=64, γ=4, α=0.8, c=0.05: verify cost v = {worked['verify_cost']:.3f}, "
      f"speedup {worked['speedup']:.2f}, predicted crossover at batch {worked['crossover']}")

# %% [markdown]
# ## Measured on your machine: throughput against batch size
#
# Now the real loop. Each batch size runs the same prompts twice, greedily: plain
# decoding (`generate`) and speculative decoding with prompt lookup
# (`speculative_generate` with an `NGramDrafter`, γ = 4). Both take the batch as a list of
# prompts of different lengths, and a row leaves the batch when it finishes. Greedy speculation must give every
# row exactly the tokens plain decoding gives it; we check that at every batch size.
#
# The model: in the full run, SmolLM2-135M if it is on disk (`python -m specbook
# fetch-model`), else a randomly initialised model of the same shape; in fast mode, a
# small random Llama (timing depends on the shapes, not on what the weights know). The
# prompts are random token ids of different lengths. With random weights, greedy text
# soon falls into loops, so prompt lookup finds something to propose: read the acceptance
# column before you read the speedups.
#
# The full run is slow: two decodes per batch size, the largest verifying 16 x 5 positions
# per pass through a 135M-parameter model. Expect many minutes on a 2-core CPU (more on a
# busy one); the bar counts batch sizes, and the cell prints how long the sweep took.

# %%
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
target = LlamaTarget(model, max_length=max(map(len, prompts)) + NEW_TOKENS + GAMMA + 2)
print(f"{model_name}: {n_params / 1e6:.1f} M parameters, float32")


def run(batch, speculate):
    """One timed greedy run over the first ``batch`` prompts; waste counted on the loop's hook."""
    rows = prompts[:batch]
    counts = {"computed": 0, "useful": 0}

    def on_step(step):
        computed = len(step.rows) * (step.draft.num_tokens + 1)  # positions the target processed
        counts["computed"] += computed
        counts["useful"] += int(step.num_emitted.sum())  # accepted drafts + corrected/bonus token

    t0 = time.perf_counter()
    if speculate:
        out = speculative_generate(target, NGramDrafter(), rows, NEW_TOKENS, params=GREEDY, gamma=GAMMA, on_step=on_step)
    else:
        out = generate(target, rows, NEW_TOKENS, params=GREEDY)
    seconds = time.perf_counter() - t0
    new = int(out.lengths.sum())  # new tokens over all rows
    per_row = new / batch
    return dict(seconds=seconds, new=new, tokens_per_s=new / seconds, ms_per_token=1e3 * seconds / per_row,
                sequences=out.sequences(), computed=counts["computed"], useful=counts["useful"],
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
alpha_here = measured[1]["spec"]["acceptance"]
predicted_cross = roofline.predicted_crossover(this_machine, "float32", n_params, 4, min(alpha_here, 1.0), GAMMA, 0.0,
                                               range(1, 1025))
display(table(["batch", "plain tok/s", "n-gram tok/s", "speedup", "plain ms/token", "n-gram ms/token", "acceptance",
               "τ", "wasted share", "same tokens"],
              [[b, f"{m['plain']['tokens_per_s']:.1f}", f"{m['spec']['tokens_per_s']:.1f}",
                f"{m['spec']['tokens_per_s'] / m['plain']['tokens_per_s']:.2f}×",
                f"{m['plain']['ms_per_token']:.1f}", f"{m['spec']['ms_per_token']:.1f}",
                f"{m['spec']['acceptance']:.2f}", f"{m['spec']['tau']:.2f}", f"{m['spec']['wasted_fraction']:.0%}",
                identical[b]] for b, m in measured.items()]))
print(f"measured crossover: {measured_cross}; roofline's prediction for this machine "
      f"(α = {alpha_here:.2f}, c ≈ 0 for a lookup): {predicted_cross}; the verify step reaches this machine's "
      f"float32 ridge at batch {cpu_ridge_batch['float32']}")
plot_throughput_curves(BATCHES, {"plain": [measured[b]["plain"]["tokens_per_s"] for b in BATCHES],
                                 f"n-gram, γ={GAMMA}": [measured[b]["spec"]["tokens_per_s"] for b in BATCHES]},
                       marks={"measured crossover": measured_cross}, title=f"{model_name} on this machine")

# %% [markdown]
# Read the speedup column from top to bottom. At batch 1 the verify pass rides on idle
# arithmetic, so tokens per pass (τ) turn into speed. As the batch grows, the B (γ + 1)
# positions of a verify pass cross the ridge of this machine (the batch printed above):
# from there every extra position costs time and speculation's margin shrinks, until it
# turns into a loss, the crossover. The roofline's prediction is a model (Python
# overhead, the loop's bookkeeping and ragged rows are not in it), so expect agreement
# in order of magnitude, not to the batch. Your numbers are your machine's; on a busy
# machine run the cell again.
#
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
# **1.** An L4 in bfloat16 serves a 7B model. At what batch does *plain* decoding cross
# the ridge? And with γ = 4? Write your two numbers down, then open the solution.

# %%
l4_plain = next(b for b in range(1, 2049) if roofline.ridge_fraction("L4", "bfloat16", b, 0, PARAMS_7B, 2) >= 1)
l4_spec = next(b for b in range(1, 2049) if roofline.ridge_fraction("L4", "bfloat16", b, GAMMA, PARAMS_7B, 2) >= 1)
solution("Exercise 1", f"<p>The ridge is 121 TFLOP/s / 300 GB/s = {roofline.ridge('L4', 'bfloat16'):.1f} FLOP/byte. "
         f"Plain bfloat16 intensity is B, so the first batch at or over it is <b>{l4_plain}</b>; with γ = 4 it is "
         f"5B, so <b>{l4_spec}</b> (5 × {l4_spec} = {5 * l4_spec}).</p>")

# %% [markdown]
# **2.** The same 7B model on an A100 SXM in bfloat16, α = 0.8, γ = 4, c = 0.05. Predict
# the batch at which the verify step reaches the ridge, and the batch at which
# speculation starts losing to plain decoding. (Hint: it loses when v_B(5) >
# E(0.8, 4) − 4c, and above the ridge v_B(5) = 5B / ridge while the plain step is still
# memory-bound.)

# %%
e = float(theory.expected_tokens(0.8, GAMMA))
a100_ridge = roofline.ridge("A100 SXM", "bfloat16")
a100_ridge_batch = ridge_batch("A100 SXM", "bfloat16", GAMMA, 2)
by_hand = next(b for b in range(1, 2049) if 5 * b / a100_ridge > e - GAMMA * 0.05)
a100_cross = roofline.predicted_crossover("A100 SXM", "bfloat16", PARAMS_7B, 2, 0.8, GAMMA, 0.05, range(1, 2049))
solution("Exercise 2", f"<p>The ridge is 312 / 2.039 = {a100_ridge:.1f} FLOP/byte, and the verify step's intensity "
         f"is 5B: it reaches the ridge at batch <b>{a100_ridge_batch}</b>. E(0.8, 4) = {e:.4f}; speculation loses "
         f"once 5B / {a100_ridge:.1f} > {e - 0.2:.4f}, that is B > {(e - 0.2) * a100_ridge / 5:.1f}: batch "
         f"<b>{by_hand}</b>, three times the ridge batch. The library says {a100_cross}.</p>")

# %% [markdown]
# **3.** With α = 0.6 and γ = 4, what share of the computed verify positions is thrown
# away, on average?

# %%
e6 = float(theory.expected_tokens(0.6, GAMMA))
waste6 = (GAMMA - (e6 - 1)) / (GAMMA + 1)
solution("Exercise 3", f"<p>E(0.6, 4) = {e6:.4f} tokens per row per pass, of which E − 1 = {e6 - 1:.4f} are "
         f"drafts; the other γ − (E − 1) = {GAMMA - e6 + 1:.4f} drafts are wasted, out of γ + 1 = 5 positions: "
         f"<b>{waste6:.1%}</b>.</p>")

# %% [markdown]
# ## Checks

# %%
# 1. The course's table, exactly, and the presets it needs.
assert [(b, g, i, t) for b, g, i, t in course] == [
    (1, 0, 1.0, "0.3%"), (1, 4, 5.0, "1.7%"), (64, 0, 64.0, "22%"), (64, 4, 320.0, "OVER the ridge")]
assert round(roofline.ridge(H100, "bfloat16")) == 295 and {"H100 SXM", "A100 SXM", "L4", "RTX 4090"} <= set(roofline.PRESETS)
# 1b. The ridge is not the crossover: on the course's H100 example the verify step reaches the ridge at batch 60,
#     speculation is still 2.62x faster at batch 64, and it loses only from batch 187 (α 0.8) or 125 (α 0.6).
assert all(r["ridge_batch"] != r["crossover"] for r in ridge_vs_cross.values())
assert h100_ridge_batch == 60 and all(r["at_ridge"] > 1 and r["at_64"].speedup > 1 for r in ridge_vs_cross.values())
assert (ridge_vs_cross[0.8]["crossover"], ridge_vs_cross[0.6]["crossover"]) == (187, 125)
assert round(ridge_vs_cross[0.8]["at_64"].speedup, 2) == 2.62 and ridge_vs_cross[0.8]["at_64"].verify_cost > 1
assert all(r["crossover"] == math.floor(r["by_hand"]) + 1 for r in ridge_vs_cross.values())
# 2. The explorer refuses instead of clamping, and shows the library's numbers.
assert refused is not None and "batch" in refused and explorer.batch.value == 1
p1 = roofline.predict(H100, "bfloat16", 1, GAMMA, 0.8, 0.05, PARAMS_7B, 2)
assert f'data-key="speedup">{p1.speedup:.3f}<' in explorer.table.value
assert worked["crossover"] == 187 and worked["verify_cost"] > 1
# 3. Measured: speculation is lossless row by row at every batch size; plain wastes nothing, speculation some.
assert all(identical.values()), identical
# the target computed every kept token, and kept no more than the verifier emitted
assert all(m["spec"]["new"] <= m["spec"]["useful"] <= m["spec"]["computed"] for m in measured.values())
assert all(0 <= m["spec"]["wasted_fraction"] < 1 and m["plain"]["wasted_fraction"] == 0 for m in measured.values())
assert any(m["spec"]["wasted_fraction"] > 0 for m in measured.values())
assert all(m["plain"]["tokens_per_s"] > 0 and m["spec"]["tokens_per_s"] > 0 for m in measured.values())
# 4. The SLO picks the best feasible point; a tight SLO wants speculation at small batch, a loose one a big batch.
assert choice is not None and all(tps <= choice[3] for _, (mss, tpss, _) in frontier.items()
                                  for ms, tps in zip(mss, tpss) if ms <= slo)
assert tight[0] == f"γ={GAMMA}" and tight[1] < loose[1]
# 5. The scheduler's γ falls with load and switches speculation off; better α keeps it on longer.
assert all(all(x >= y for x, y in zip(gs, gs[1:])) and gs[0] > 0 and gs[-1] == 0 for gs in sched.values())
assert all(cross_by_alpha[a] <= cross_by_alpha[b] for a, b in zip(alphas, alphas[1:]))
assert trace_s[0.95] < trace_s[0.6]
# 6. The exercises.
assert (l4_plain, l4_spec) == (404, 81) and round(waste6, 3) == 0.539 and model_waste[0.9] < model_waste[0.5]
assert (a100_ridge_batch, by_hand) == (31, 97) == (a100_ridge_batch, a100_cross)
print(f"all lesson-6 checks passed in {time.perf_counter() - _started:.1f} s (fast mode: {FAST})")
