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
# # Lesson 1 — The loop: draft a few, verify once, keep what survives
#
# A large language model writes one token per forward pass, and each pass has
# to stream *every* weight from memory into the chip. For a single sequence the
# arithmetic units spend most of that time waiting for bytes. Speculative
# decoding puts the wasted arithmetic to work:
#
# 1. **Draft.** A cheap model guesses the next γ tokens, one after another,
#    remembering the distribution q it drew each guess from.
# 2. **Verify.** The big (target) model reads the context *plus all γ guesses*
#    in a single forward pass. Attention is causal, so that one pass yields the
#    target's distribution p at every guessed position, and one position beyond.
# 3. **Accept.** Walk the guesses left to right and keep or discard each with a
#    rule (lesson 2 proves it is the right one). Stop at the first discard.
# 4. **Finish.** After a discard, draw one *corrected* token from a residual
#    distribution. If nothing was discarded, draw one *bonus* token from p at the
#    last position, which the verify pass already computed.
#
# Every round therefore emits between 1 and γ + 1 tokens for one target pass.
# In this lesson you run that loop by hand on two tiny models whose
# probabilities we know exactly, watch a whole generation coloured by what
# happened to each guess, and count passes. At the end we check with the
# roofline model why the verify pass costs about the same as an ordinary one.

# %% tags=["parameters"]
import os

FAST = os.environ.get("SPECBOOK_FAST", "0") == "1"  # the test suite sets SPECBOOK_FAST=1
GAMMA = 4
LONG_RUN = 60 if FAST else 300  # tokens in the traced generation
N_SEQUENCES = 3000 if FAST else 30000  # rows in the distribution check
SEED = 0
ROUND_SEED = 10  # the by-hand round below: two guesses kept, the third rejected

# %%
import math
import time

import torch
from IPython.display import HTML, display
from matplotlib.patches import Rectangle

import specbook as sb
from specbook import roofline, stats
from specbook.decode import generate, speculative_generate
from specbook.drafters import DraftModelDrafter
from specbook.sampling import SamplingParams, logits_to_probs
from specbook.teach import exercises, plots
from specbook.teach.html import trace_html
from specbook.teach.trace import trace_speculative
from specbook.toy import make_toy_pair
from specbook.verify import verify_chain

_started = time.perf_counter()
torch.set_num_threads(1)  # the toy models are tiny: one thread avoids threading overhead on small tensors
WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "."]

# %% [markdown]
# ## The two models
#
# `make_toy_pair` builds two first-order Markov chains over an 8-word
# vocabulary: the next word depends only on the current one, through a fixed
# table. The **target** plays the big model whose output we want. The
# **draft** is a blend: 70% the target's table, 30% an unrelated one, so it
# guesses well but not perfectly. Both tables contain exact zeros, so the draft
# sometimes proposes a word the target would never say. Toy models are not a
# shortcut here: they let us compute every probability exactly and check the
# library against the truth.

# %%
target, draft_model = make_toy_pair(vocab_size=8, order=1, match=0.7, seed=SEED)
params = SamplingParams(temperature=1.0)
context = [0, 1]  # "the cat"
p_next = target.next_probs(context, params)
q_next = draft_model.next_probs(context, params)
rows = "".join(f"<tr><td>{w}</td><td>{p:.3f}</td><td>{q:.3f}</td></tr>" for w, p, q in zip(WORDS, p_next, q_next))
display(HTML(f"<p>Next word after <i>the cat</i>:</p><table><tr><th>word</th><th>target p</th><th>draft q</th></tr>{rows}</table>"))

# %% [markdown]
# ## One round, step by step
#
# **Draft.** The drafter wraps the draft model and runs it γ times. It returns
# the guessed tokens and, for each one, the distribution it was sampled from.

# %%
g = torch.Generator().manual_seed(ROUND_SEED)
drafter = DraftModelDrafter(draft_model)
proposal = drafter.propose([torch.tensor(context)], GAMMA, params, g)
guesses = proposal.tokens[0].tolist()
print("drafted:", " ".join(WORDS[t] for t in guesses))
print("draft model passes so far:", drafter.passes)

# %% [markdown]
# **Verify.** The target keeps a cache of the tokens it has already read. We
# feed it the last context word plus the γ guesses, all at once: γ + 1 new
# positions, one forward pass. Out come γ + 1 next-token distributions: p
# after "cat", p after "cat + guess 1", ... and p after all γ guesses (the
# bonus position).

# %%
target.reset(1)
target.forward(torch.tensor([context[:-1]]))  # the cache holds the context except its last token
calls_before = target.forward_calls
logits = target.forward(torch.cat([torch.tensor([[context[-1]]]), proposal.tokens], dim=1))  # (1, γ+1, V)
target_probs = logits_to_probs(logits, params)  # (1, γ+1, V)
print("shape of the verify output:", tuple(target_probs.shape), "from", target.forward_calls - calls_before, "target pass")

# %% [markdown]
# **Accept.** For each guess x the rule keeps it with probability
# min(1, p(x) / q(x)): always if the target likes x at least as much as the
# draft did, otherwise in proportion. The table shows the odds each guess
# faces *if it is reached*; a guess after a rejection is never examined.

# %%
q_probs = proposal.probs
cells = []
for i, x in enumerate(guesses):
    px, qx = float(target_probs[0, i, x]), float(q_probs[0, i, x])
    cells.append(f"<tr><td>{i + 1}</td><td>{WORDS[x]}</td><td>{px:.3f}</td><td>{qx:.3f}</td><td>{min(1.0, px / qx):.3f}</td></tr>")
display(HTML("<table><tr><th>position</th><th>guess x</th><th>p(x)</th><th>q(x)</th><th>keep with prob.</th></tr>"
             + "".join(cells) + "</table>"))

# %% [markdown]
# The library's `verify_chain` does this walk for a whole batch. It draws one
# uniform u per position *first*, keeps guess i when u_i · q_i(x_i) < p_i(x_i)
# (the division-free form of "with probability min(1, p/q)"), stops at the first
# rejection, and then draws one token: from the residual max(0, p − q),
# renormalised, after a rejection, or from p at the bonus position. Writing the
# walk yourself is **Assignment 2** (`assignments/source/02_chain_verifier`), so
# the lesson only checks its two visible rules on 200 seeds: with the generator
# in the same state, the uniforms decide how many guesses survive, and a
# corrected token is never the guess that was just rejected (the residual has no
# mass where q exceeds p, the only place a rejection can happen).

# %%
rejections = 0
for s in range(200):
    u = torch.rand(1, GAMMA, generator=torch.Generator().manual_seed(s), dtype=target_probs.dtype)  # (1, γ)
    p_x = target_probs[0, :GAMMA].gather(-1, proposal.tokens[0].unsqueeze(-1)).squeeze(-1)  # (γ,)
    q_x = q_probs[0].to(target_probs.dtype).gather(-1, proposal.tokens[0].unsqueeze(-1)).squeeze(-1)  # (γ,)
    survive = (u[0] * q_x < p_x).long().cumprod(0).sum().item()  # guesses before the first failed test
    tokens, n = verify_chain(target_probs, q_probs, proposal.tokens, torch.Generator().manual_seed(s))
    assert n[0].item() == survive + 1, (s, n, survive)
    if survive < GAMMA:
        rejections += 1
        assert tokens[0, survive].item() != guesses[survive], (s, tokens)  # never the rejected guess
print(f"sb.verify.verify_chain on 200 seeds: the uniforms decide the survivors; "
      f"{rejections} rejections, none refilled with the rejected guess")

g_step = torch.Generator().manual_seed(ROUND_SEED)
tokens, n = verify_chain(target_probs, q_probs, proposal.tokens, g_step)
emitted = tokens[0, : n[0]].tolist()
print("this round emits:", " ".join(WORDS[t] for t in emitted), f"({len(emitted)} tokens for one target pass)")

# %% [markdown]
# ## A whole generation, coloured
#
# `sb.teach.trace.trace_speculative` runs `sb.decode.speculative_generate`
# itself, listening on its `on_step` hook (so: same calls, same order, same
# random draws), and writes down the verdict on every guess. Green guesses were accepted, red
# was the first rejection, grey ones came after it and were never checked,
# orange is the corrected token drawn from the residual, blue is the bonus
# token. Hover over a guess for its p(x), q(x) and acceptance probability.

# %%
trace = trace_speculative(target, DraftModelDrafter(draft_model), [0], LONG_RUN, params, gamma=GAMMA,
                          generator=torch.Generator().manual_seed(SEED), token_names=WORDS)
display(HTML(trace_html(trace, max_steps=10)))

# %%
reference = speculative_generate(target, DraftModelDrafter(draft_model), torch.tensor([0]), LONG_RUN, params=params,
                                 gamma=GAMMA, generator=torch.Generator().manual_seed(SEED))
assert trace.tokens == reference.new_tokens[0].tolist()
assert trace.accepted_per_step == reference.stats.accepted_per_step
print("the traced loop reproduces speculative_generate token for token")
plots.plot_trace(trace, max_steps=12)

# %% [markdown]
# ## Counting passes
#
# Plain decoding needs one target pass per token. Speculation needs one per
# *round*. `stats.tau` is the mean number of tokens per round; with a bonus
# token possible it can reach γ + 1. The price is γ passes of the draft model
# per round, cheap but not free (lesson 3 puts a number on it).
#
# Two ratios describe the guesses, and only one of them is α (docs/glossary.md):
#
# * the **acceptance rate** α, `stats.acceptance_rate` = accepted / *verified*
#   guesses: the chance that a guess survives when it is checked. This is the α
#   of lesson 3's formulas.
# * the **draft efficiency**, `stats.draft_efficiency` = accepted / *proposed*
#   guesses, including the grey ones nobody looked at: the share of the drafting
#   work that survived. It is smaller, and it is not α.

# %%
plain = generate(target, torch.tensor([0]), LONG_RUN, params=params, generator=torch.Generator().manual_seed(SEED))
spec = reference.stats
print(f"plain decoding:       {plain.stats.target_passes} target passes for {LONG_RUN} tokens")
print(f"speculative (γ={GAMMA}):    {spec.target_passes} target passes for {LONG_RUN} tokens "
      f"(+ {spec.draft_passes} cheap draft passes)")
print(f"tokens per target pass τ = {spec.tau:.2f}; acceptance rate α = {spec.acceptance_rate:.2f}; "
      f"draft efficiency = {spec.draft_efficiency:.2f}")
print("kinds of tokens:", {k: trace.count(k) for k in ("accepted", "rejected", "unverified", "corrected", "bonus")})

# %% [markdown]
# ## The time line of a generation
#
# Counting passes hides *when* things happen. Below, the same traced run is laid
# out in time, in units of one target pass. The top line is speculation: per
# round, γ short draft passes (orange, each costing c of a target pass; here we
# take c = 0.1, a draft a tenth the cost of the target) and then one verify pass
# (blue) that emits the number of tokens written on it. The bottom line is plain
# decoding of the same tokens: one target pass each. The picture is built from
# the trace, that is, from the loop's own `on_step` hook: the number of drafts
# per round is what the loop asked for.

# %%
C_TOY = 0.1  # assumed cost of one draft pass, in target passes (a toy has no meaningful wall time)


def plot_timeline(trace, c, verify_cost=1.0, max_steps=8):
    """Draft and verify passes of the first rounds of ``trace`` on a time axis, above plain decoding.

    Returns the figure and (speculative time, plain time) for those rounds, in target passes.
    """
    steps = trace.steps[:max_steps]
    emitted = sum(len(s.emitted) for s in steps)
    fig = plots.new_figure(7.5, 2.2)
    ax = fig.add_subplot()
    t = 0.0
    for s in steps:
        for _ in s.draft_tokens:  # one draft pass per guess
            ax.add_patch(Rectangle((t, 1.15), c, 0.7, facecolor="#f5b041", edgecolor="#555", lw=0.4))
            t += c
        ax.add_patch(Rectangle((t, 1.15), verify_cost, 0.7, facecolor="#5b8def", edgecolor="#555", lw=0.4))
        ax.text(t + verify_cost / 2, 1.5, f"+{len(s.emitted)}", ha="center", va="center", fontsize=8, color="white")
        t += verify_cost
    for i in range(emitted):  # plain decoding: one target pass per token
        ax.add_patch(Rectangle((i, 0.15), 1.0, 0.7, facecolor="#5b8def", edgecolor="#555", lw=0.4))
        ax.text(i + 0.5, 0.5, "+1", ha="center", va="center", fontsize=7, color="white")
    ax.set_xlim(0, max(t, emitted) + 0.2)
    ax.set_ylim(0, 2)
    ax.set_yticks([0.5, 1.5], ["plain", f"speculative (γ={GAMMA})"])
    ax.set_xlabel("time, in target passes (orange: draft passes, blue: target passes)")
    ax.set_title(f"{emitted} tokens: {t:.1f} target-pass times with speculation, {emitted} without")
    return fig, (t, float(emitted))


timeline_fig, (spec_time, plain_time) = plot_timeline(trace, C_TOY)
print(f"first 8 rounds: speculation {spec_time:.1f}, plain decoding {plain_time:.0f} target-pass times")
timeline_fig

# %% [markdown]
# Fewer passes would be worthless if the text changed. It does not: the
# output of speculative decoding follows the target's distribution exactly
# (lesson 2 proves it). A first taste: generate the first three words after
# "the" in many independent rows with speculation, and compare the counts of
# every three-word continuation with the target's exact law, which the toy
# model can enumerate. A chi-square test on the raw counts should find nothing.
# As a control, the same counts tested against the *draft's* law must fail:
# the test is able to notice a wrong distribution.
#
# (Chi-square in one line: add up, over the outcomes, the squared gap between the
# observed and the expected count, each divided by the expected count; a sum much
# larger than chance alone makes is evidence against the law, and the p-value says how
# rare it would be if the law were right. The statistics primer, `02b_statistics_primer`,
# builds this test from scratch, along with the Holm correction and the power that
# lesson 2 uses: read it first, or alongside lessons 1 and 2.)

# %%
prompt = torch.zeros(N_SEQUENCES, 1, dtype=torch.long)  # every row starts with "the"
batch = speculative_generate(target, DraftModelDrafter(draft_model), prompt, 3, params=params, gamma=GAMMA,
                             generator=torch.Generator().manual_seed(SEED + 1))
target_law = target.sequence_law([0], 3, params)
draft_law = draft_model.sequence_law([0], 3, params)
outcomes = sorted(set(target_law) | set(draft_law))
index = {o: i for i, o in enumerate(outcomes)}
counts = [0] * len(outcomes)
for row in batch.new_tokens.tolist():
    counts[index[tuple(row)]] += 1
test_target = stats.chisquare_gof(counts, [target_law.get(o, 0.0) for o in outcomes])
test_draft = stats.chisquare_gof(counts, [draft_law.get(o, 0.0) for o in outcomes])
print(f"{N_SEQUENCES} rows; against the target's law: p = {test_target.pvalue:.3f}; "
      f"against the draft's law: p = {test_draft.pvalue:.2g}")

# %% [markdown]
# ## Why verifying γ + 1 positions costs about one pass
#
# The **roofline** model says a kernel runs at whichever is slower: moving its
# bytes or doing its arithmetic. In decoding, the bytes are the weights (2 per
# parameter in bf16), read once per pass no matter how many positions ride
# along. The arithmetic is about 2 FLOPs per parameter *per position*. So the
# arithmetic intensity of a pass, FLOPs per weight byte, is simply the number
# of positions processed: batch × (γ + 1).
#
# A chip stays memory-bound until the intensity reaches its **ridge point**,
# peak FLOP/s divided by bandwidth. For an H100 that is about 989 TFLOP/s ÷
# 3.35 TB/s ≈ 295. At batch 1 a plain decode step uses an intensity of 1, a
# third of a percent of what the chip could do while it waits for memory.
# Verifying γ = 4 guesses raises it to 5, still under 2%: the extra positions
# are paid for with arithmetic that was idle anyway.
#
# Concretely, take a model with 7.5 billion parameters: 15 GB of bf16 weights.
# Reading them at 3.35 TB/s takes about 4.5 ms. The arithmetic for five
# positions, 75 GFLOP, takes under a tenth of a millisecond at peak. Both
# passes, one position or five, are dominated by the same 4.5 ms of weight
# traffic.

# %%
H100 = "H100 SXM"
h100 = roofline.PRESETS[H100]
h100_ridge = roofline.ridge(H100, "bfloat16")
params_b = 7.5e9
weight_read_ms = 2 * params_b / h100.bandwidth * 1e3
flops_ms = {n: 2 * params_b * n / h100.peak("bfloat16") * 1e3 for n in (1, GAMMA + 1)}
print(f"H100 ridge point: {h100_ridge:.0f} FLOP/byte")
print(f"weight read per pass: {weight_read_ms:.2f} ms; arithmetic at peak: "
      f"{flops_ms[1]:.3f} ms (1 position), {flops_ms[GAMMA + 1]:.3f} ms ({GAMMA + 1} positions)")
roof = roofline.roofline_rows(batches=(1, 64), gammas=(0, GAMMA), hw=H100)
rows = "".join(f"<tr><td>{r['batch']}</td><td>{r['gamma']}</td><td>{r['intensity']:.0f}</td>"
               f"<td>{100 * r['fraction_of_ridge']:.1f}%</td><td>{'compute-bound' if r['compute_bound'] else 'memory-bound'}</td></tr>"
               for r in roof)
display(HTML("<table><tr><th>batch</th><th>γ</th><th>intensity</th><th>share of ridge</th><th>regime</th></tr>"
             + rows + "</table>"))
plots.plot_roofline(roof)

# %% [markdown]
# The last row is a warning for later lessons: at batch 64, verifying γ = 4
# guesses per row means 320 positions per pass, beyond the ridge. Then extra
# positions cost real time, and rejected guesses waste arithmetic another row
# needed. Batching and speculation draw on the same pool of idle compute.
# (Costing time is not yet losing: lesson 6 shows that by this model speculation
# still wins well past the ridge, and where it stops winning.)
#
# Two more honest remarks. Speculation *adds* FLOPs (rejected guesses are
# computed for nothing): it buys time, not work. And on a laptop CPU the
# "free extra positions" assumption is itself something to measure, not to
# assume; a later lesson does that.
#
# The roofline estimate of the verify cost ratio v (time of a pass over n
# positions divided by a one-position pass) makes the point in numbers:

# %%
for batch_size in (1, 64):
    ratios = [roofline.verify_time_ratio(n, batch=batch_size, hw=H100) for n in range(1, 9)]
    print(f"batch {batch_size:>2}: v for 1..8 positions =", " ".join(f"{r:.2f}" for r in ratios))

# %% [markdown]
# ## Exercises
#
# Each exercise has an answer cell and a check cell. Write your answer in place of the
# `...`, run the cell, then run the check below it: it says whether the answer is right
# and, if not, what to look at again. A "predict, then run" exercise asks for your
# prediction as numbers; the cell after the check runs the experiment.
#
# **Exercise 1 (predict, then run).** Suppose the draft model were a perfect
# copy of the target (q = p). Predict the acceptance rate α (`alpha_perfect`), the tokens per
# target pass τ (`tau_perfect`), and the number of target passes (`passes_perfect`) for
# LONG_RUN tokens at γ = 4. The cell after the check runs the loop with a copy of the
# target as the draft.
#
# <details><summary>Solution</summary>
#
# With q = p every keep-probability min(1, p(x)/q(x)) is 1, so α = 1 and every
# round emits all γ guesses plus the bonus token: γ + 1 = 5 tokens per pass. The
# loop never drafts past the budget, so the last round may emit fewer, and the
# number of target passes is ⌈LONG_RUN / (γ + 1)⌉ (τ is LONG_RUN divided by it, 5 here).
# The draft efficiency is 1 too: no guess is ever left unchecked.
#
# </details>

# %% tags=["solution"]
### BEGIN SOLUTION
alpha_perfect = 1.0
passes_perfect = math.ceil(LONG_RUN / (GAMMA + 1))
tau_perfect = LONG_RUN / passes_perfect
### END SOLUTION

# %%
exercises.check("01.1", alpha_perfect, tau_perfect, passes_perfect, LONG_RUN, GAMMA)

# %%
perfect_copy = make_toy_pair(vocab_size=8, order=1, match=0.7, seed=SEED)[0]  # a second instance of the target
perfect = speculative_generate(target, DraftModelDrafter(perfect_copy), torch.tensor([0]), LONG_RUN, params=params,
                               gamma=GAMMA, generator=torch.Generator().manual_seed(SEED)).stats
print(f"q = p: α = {perfect.acceptance_rate}, τ = {perfect.tau:.3f}, {perfect.target_passes} target passes, "
      f"draft efficiency {perfect.draft_efficiency}")

# %% [markdown]
# **Exercise 2 (code).** Write `rates_from_steps(steps)`, which computes from a trace's
# steps alone (each step has `draft_tokens` and `num_accepted`) the acceptance rate α
# (accepted / verified) and the draft efficiency (accepted / proposed), and returns the
# pair. The check runs it on `trace.steps` and on a second trace, against the loop's own
# statistics. Which guesses count as verified?
#
# <details><summary>Solution</summary>
#
# A round verifies its guesses up to and including the first rejection: all of
# them if none was rejected (`num_accepted == len(draft_tokens)`), otherwise
# `num_accepted + 1`. The grey guesses after the rejection are proposed but not
# verified, which is why the draft efficiency is the smaller number.
#
# </details>

# %% tags=["solution"]
def rates_from_steps(steps):
    """(acceptance rate α, draft efficiency) of a traced generation, from its steps alone."""
    ### BEGIN SOLUTION
    accepted = sum(s.num_accepted for s in steps)
    verified = sum(min(s.num_accepted + 1, len(s.draft_tokens)) for s in steps)
    proposed = sum(len(s.draft_tokens) for s in steps)
    return accepted / verified, accepted / proposed
    ### END SOLUTION


# %%
exercises.check("01.2", rates_from_steps, trace)

# %% [markdown]
# **Exercise 3 (predict, then run).** At batch 1 on the H100, about how many
# positions can one pass verify before the extra positions start to cost time?
# Predict from the ridge point the first n whose verify-cost ratio is above 1
# (`first_costly_n`); the cell after the check finds it with
# `roofline.verify_time_ratio(n, batch=1, hw="H100 SXM")`.
#
# <details><summary>Solution</summary>
#
# A pass over n positions has intensity n FLOP per weight byte, so it stays
# memory-bound, and costs one pass of weight traffic, while n is below the ridge
# point, about 295. The first n whose ratio exceeds 1 is the first integer above
# the ridge: 296. No draft of a sane length comes near that at batch 1; at batch
# 64 the budget is 295 / 64, fewer than 5 positions per row.
#
# </details>

# %% tags=["solution"]
### BEGIN SOLUTION
first_costly_n = math.floor(h100_ridge) + 1
### END SOLUTION

# %%
exercises.check("01.3", first_costly_n)

# %%
first_costly = next(n for n in range(1, 1000) if roofline.verify_time_ratio(n, batch=1, hw=H100) > 1.0)
print(f"H100, batch 1: the first costly pass verifies {first_costly} positions (ridge {h100_ridge:.1f})")

# %% [markdown]
# ## Concept check
#
# Five short questions on the whole lesson. Give numbers as numbers and a choice as its
# letter in quotes (`"b"`), then run the check cell.
#
# 1. A round drafts γ = 4 guesses; the first two are kept and the third is rejected. How
#    many tokens does the round emit? (`c1`)
# 2. In that round, how many of the four guesses were *verified*? (`c2`)
# 3. Which ratio is the acceptance rate α of lesson 3's formulas? (`c3`)
#    (a) accepted / proposed guesses; (b) accepted / verified guesses; (c) tokens per target pass.
# 4. On the H100 in bfloat16, what is the arithmetic intensity (FLOP per weight byte) of a
#    verify pass at batch 64 with γ = 4? (`c4`)
# 5. Why does verifying γ + 1 positions at batch 1 cost about one ordinary pass? (`c5`)
#    (a) the target has cached the context, so it skips most of the work for the new positions;
#    (b) the pass is memory-bound: every weight is read once whatever the number of positions,
#    and the extra arithmetic uses compute that sat idle; (c) guessed tokens are cheaper for the
#    target to process than real ones.
#
# <details><summary>Answers</summary>
#
# 1. 3: two kept guesses and one corrected token from the residual. 2. 3: the walk ran the
# test on the first three and stopped; the fourth was never checked. 3. (b); (a) is the draft
# efficiency and (c) is τ. 4. 64 × (4 + 1) = 320, past the ridge of about 295. 5. (b).
#
# </details>

# %% tags=["solution"]
### BEGIN SOLUTION
c1, c2, c3, c4, c5 = 3, 3, "b", 320, "b"
### END SOLUTION

# %%
for key, answer in {"01.c1": c1, "01.c2": c2, "01.c3": c3, "01.c4": c4, "01.c5": c5}.items():
    exercises.check(key, answer)

# %% [markdown]
# ## Checks
#
# The lesson claimed five things. Each is asserted below, so a wrong library
# would stop this notebook; then come the exercises' experiments and your own answers.

# %%
# 1. The traced loop is the library's loop, and each round emits its accepted guesses plus one token.
assert trace.tokens == reference.new_tokens[0].tolist()
assert all(len(s.emitted) == s.num_accepted + 1 for s in trace.steps)
assert sum(len(s.emitted) for s in trace.steps) >= LONG_RUN
assert trace.count("corrected") + trace.count("bonus") == trace.target_passes
assert all(st_.final_token != st_.draft_tokens[st_.num_accepted] for st_ in trace.steps if st_.final_kind == "corrected")
# 2. Speculation used fewer target passes than tokens; plain decoding used exactly one per token.
assert plain.stats.target_passes == LONG_RUN
assert spec.target_passes < LONG_RUN / 2, spec.target_passes
assert 1.0 < spec.tau <= GAMMA + 1
# 3. The output follows the target's law (and the test can tell a wrong law apart).
assert test_target.pvalue > 1e-3, test_target
assert test_draft.pvalue < 1e-6, test_draft
# 4. Roofline: at batch 1 verifying γ+1 positions stays memory-bound (costs one pass of weight traffic);
#    at batch 64 it crosses the ridge.
assert [r["intensity"] for r in roof] == [1, GAMMA + 1, 64, 64 * (GAMMA + 1)]
assert not roof[1]["compute_bound"] and roof[3]["compute_bound"]
assert roofline.verify_time_ratio(GAMMA + 1, batch=1, hw=H100) == 1.0
assert roofline.verify_time_ratio(GAMMA + 1, batch=64, hw=H100) > 1.0
# 5. The time line comes from the loop's hook: one draft pass per guess, one target pass per round.
assert sum(len(s.draft_tokens) for s in trace.steps) == spec.proposed == spec.draft_passes
assert plain_time == sum(len(s.emitted) for s in trace.steps[:8])
assert math.isclose(spec_time, sum(len(s.draft_tokens) * C_TOY + 1.0 for s in trace.steps[:8]))
assert spec_time < plain_time
# 6. The exercises' experiments: a perfect draft keeps everything and needs ⌈n / (γ + 1)⌉ passes; the first
#    costly verify width at batch 1 is the first integer past the ridge; α and the draft efficiency differ.
assert perfect.acceptance_rate == 1.0 and perfect.draft_efficiency == 1.0
assert perfect.target_passes == math.ceil(LONG_RUN / (GAMMA + 1))
assert first_costly == math.floor(h100_ridge) + 1
assert spec.draft_efficiency < spec.acceptance_rate
# 7. Your exercises and concept check, as graded above.
graded = exercises.results("01")
print(f"exercises and concept check: {sum(r.passed for r in graded)} of {len(graded)} right")
### BEGIN SOLUTION
assert len(graded) == 8 and all(r.passed for r in graded), [str(r) for r in graded]
### END SOLUTION
print(f"all lesson-1 checks passed in {time.perf_counter() - _started:.1f} s (fast mode: {FAST})")
