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
# # Lesson 2 — The acceptance rule, its proof, and the rules that look right but are not
#
# Lesson 1 used a rule to decide which guesses survive. This lesson asks why
# *that* rule. The goal is strict: whatever the draft model does, every emitted
# token must follow the target's distribution p **exactly**. Not roughly, not
# "the text reads fine": exactly. Then a bad draft can only cost speed, never
# quality.
#
# The plan:
#
# 1. Look at some tempting rules and compute, exactly, what they emit. Each
#    one tilts the output.
# 2. Build the modified rejection sampler (you write it in Assignment 1) and
#    check the library's version against the rule.
# 3. Walk through the proof one identity at a time, with the library checking
#    each identity in exact rational arithmetic, first on a worked example,
#    then on hundreds of random ones.
# 4. See that the verifier just proved is not the best lossless one for a block
#    of drafts: block verification keeps more, and is still exact.
# 5. Confirm by sampling: chi-square tests of the real sampler (passes) and of
#    each tempting rule (fails). The tests, Holm's correction and power are built
#    from scratch in the statistics primer (`02b_statistics_primer`): read it
#    before this lesson or alongside it.
# 6. The practical trap: sampling parameters applied to one side only.
#
# We use p for the target's distribution and q for the draft's, at one
# position, with the guess x drawn from q. (The library spells them
# `target_probs` and `draft_probs`.)

# %% tags=["parameters"]
import os

FAST = os.environ.get("SPECBOOK_FAST", "0") == "1"  # the test suite sets SPECBOOK_FAST=1
N_DRAWS = 4000 if FAST else 50000  # samples per rule in the chi-square tests
N_SEQUENCES = 3000 if FAST else 30000  # rows in the sequence-level check
N_HYPOTHESIS = 150 if FAST else 1000  # random (p, q) pairs for the proof checks
LEVEL = 0.01  # family-wise false-alarm rate of the chi-square tests
SEED = 0

# %%
import time
from fractions import Fraction as F

import numpy as np
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from IPython.display import HTML, display
from tqdm.auto import tqdm

import specbook as sb
from specbook import laws, stats
from specbook.decode import speculative_generate
from specbook.drafters import DraftModelDrafter
from specbook.naive import NAIVE_RULES
from specbook.sampling import SamplingParams
from specbook.teach import buggy, exercises, plots, rules
from specbook.teach.widgets import ProofExplorer
from specbook.toy import make_toy_pair
from specbook.verify import residual, verify_token

_started = time.perf_counter()
torch.set_num_threads(1)  # the toy models are tiny: one thread avoids threading overhead on small tensors
WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "."]

# %% [markdown]
# ## One position of a toy pair
#
# `sb.teach.rules.position_setup` picks one context of a toy target/draft pair and
# returns p and q there. The draft here is poor on purpose (only 30% of it
# imitates the target) so that mistakes in a rule are large enough to see.

# %%
setup = rules.position_setup(match=0.3, temperature=1.0, seed=2)
p, q = setup.target_probs, setup.draft_probs
display(HTML("<table><tr><th>token</th>" + "".join(f"<th>{w}</th>" for w in WORDS) + "</tr>"
             + "<tr><td>p</td>" + "".join(f"<td>{v:.3f}</td>" for v in p) + "</tr>"
             + "<tr><td>q</td>" + "".join(f"<td>{v:.3f}</td>" for v in q) + "</tr></table>"))

# %% [markdown]
# ## Three tempting rules
#
# Each of these was written, at some point, by someone who thought it was fine.
# `sb.naive.NAIVE_RULES` keeps them with their exact emitted law.
#
# * **"Keep the guess if the target agrees, with a fresh redraw."** Keep x with
#   probability p(x), as if the target had been asked and picked x too; otherwise
#   draw a *fresh*, independent token from p. The fresh draw can land on x again,
#   so x gets two chances and the draft's favourites are over-represented: the
#   draft has a vote on what is even considered. This is the biased rule.
#   Its natural reading, "accept if the target agrees, else take the target's
#   token", is *not* biased: draw y from p, emit x if y = x, else emit y. The
#   output is y, a draw from p, whatever x was. It is exact but wasteful: the
#   guess survives only Σ p(x)q(x) of the time, less than the Σ min(p, q) we are
#   about to reach (the proof below computes both).
# * **"Right test, wrong refill."** Keep x with probability min(1, p(x)/q(x))
#   (correct) but after a rejection draw from p. The probability that p and q
#   agree on has already been handed out by the acceptances; drawing from all
#   of p hands it out a second time.
# * **"Keep it when the target likes it at least as much."** Keep x exactly
#   when p(x) ≥ q(x), no randomness; after a rejection, draw from the residual
#   max(0, p − q), renormalised, as the correct rule does (the library's
#   `accept_if_target_prefers` refills that way). Tokens the draft over-proposes
#   (q > p) are then never emitted at all: never kept as guesses, and the
#   residual has no mass on them.
#
# Below, black is p and each colour is a rule's exact law. The lower panel shows
# law minus p; a correct rule would have no bars at all.

# %%
naive_laws = {r.name: r.law(p, q) for r in NAIVE_RULES}
plots.plot_laws(p, naive_laws, token_names=WORDS, title="What each tempting rule emits, against the target p")

# %%
plots.plot_bias(p, naive_laws, token_names=WORDS, title="Bias: emitted law minus p")

# %%
for name, law in naive_laws.items():
    tv = 0.5 * float((law - p).abs().sum())
    print(f"{name:35s} total variation from p: {tv:.3f}")

# %% [markdown]
# ## The modified rejection sampler
#
# The rule that works (Leviathan et al. 2023; Chen et al. 2023):
#
# 1. keep x with probability **min(1, p(x)/q(x))**;
# 2. after a rejection, draw from the **residual**
#    p′(z) = max(0, p(z) − q(z)) / Σ_w max(0, p(w) − q(w)).
#
# The intuition. If the target likes x at least as much as the draft
# (p(x) ≥ q(x)), keep it, no questions asked. If it likes x less, keep it in
# proportion, p/q. And after a rejection, do not refill from all of p: the
# part of p that q already covered was handed out by the acceptances. What is
# left to hand out is exactly where p exceeds q, the mass the draft
# under-supplied. That is the residual.
#
# Writing this sampler yourself is **Assignment 1**
# (`assignments/source/01_acceptance_rule`), so the lesson uses the library's
# `sb.verify.verify_token` and checks its two visible rules. It draws one
# uniform u and keeps x when u · q(x) < p(x), the same test as
# u < p(x)/q(x) without a division by zero; on rejection it draws one token from
# the residual. With the generator in the same state, the uniform alone must
# decide whether the guess comes back, on 300 guesses; and the residual is the
# formula above.

# %%
guesses = torch.multinomial(q, 300, replacement=True, generator=torch.Generator().manual_seed(SEED)).tolist()
for s, x in enumerate(guesses):
    u = torch.rand((), generator=torch.Generator().manual_seed(s), dtype=p.dtype)
    kept_guess = verify_token(p, q, x, torch.Generator().manual_seed(s)) == x
    assert kept_guess == bool(u * q[x] < p[x]), (s, x)  # a rejected guess never comes back from the residual
torch.testing.assert_close(torch.clamp(p - q, min=0) / torch.clamp(p - q, min=0).sum(), residual(p, q))
print("sb.verify.verify_token on 300 guesses: kept exactly when u·q(x) < p(x); sb.verify.residual == max(0, p − q) / mass")

# %% [markdown]
# ## The proof, one identity at a time
#
# We want P(emit z) for every token z. Work with a small example in exact
# fractions, chosen to contain every case: a token the target prefers, one the
# draft prefers, one they agree on, one the draft never proposes, and one the
# target forbids.

# %%
p_ex = [F(3, 8), F(1, 8), F(1, 4), F(1, 4), F(0)]
q_ex = [F(1, 8), F(3, 8), F(1, 4), F(0), F(1, 4)]
assert sum(p_ex) == 1 and sum(q_ex) == 1


def fmt(x):
    return str(x) if isinstance(x, (F, int, str)) else f"{x:.4f}"


def show(rows, head):
    display(HTML("<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"
                 + "".join("<tr>" + "".join(f"<td>{fmt(c)}</td>" for c in r) + "</tr>" for r in rows) + "</table>"))


# %% [markdown]
# **Step 1. Emitting z as an accepted guess.** The draft must propose z
# (probability q(z)) and the test must keep it (probability min(1, p(z)/q(z))):
#
# P(guess z and keep it) = q(z) · min(1, p(z)/q(z)) = **min(p(z), q(z))**.
#
# The library's `sb.laws.accept_prob` is the acceptance probability; the
# product equals min(p, q) for every token, in exact arithmetic.

# %%
step1 = [q_ex[z] * laws.accept_prob(p_ex[z], q_ex[z]) for z in range(5)]
assert step1 == [min(a, b) for a, b in zip(p_ex, q_ex)]
show([[z, p_ex[z], q_ex[z], laws.accept_prob(p_ex[z], q_ex[z]), step1[z]] for z in range(5)],
     ["z", "p(z)", "q(z)", "min(1, p/q)", "q · min(1, p/q)"])

# %% [markdown]
# **Step 2. The chance of a rejection.** Whatever is not an acceptance is a
# rejection: P(reject) = 1 − Σ_w min(p(w), q(w)).
#
# And a neat fact, because p sums to one: since p(w) = min(p(w), q(w)) +
# max(0, p(w) − q(w)) for every w,
#
# Σ_w max(0, p(w) − q(w)) = Σ_w p(w) − Σ_w min(p(w), q(w)) = 1 − Σ_w min(p(w), q(w)) = **P(reject)**.
#
# The normaliser of the residual *is* the rejection probability.

# %%
p_reject = 1 - sum(step1)
residual_mass = sum(max(F(0), a - b) for a, b in zip(p_ex, q_ex))
assert p_reject == residual_mass == 1 - sum(min(a, b) for a, b in zip(p_ex, q_ex))
print("P(reject) =", p_reject, "= sum of max(0, p - q) =", residual_mass)

# %% [markdown]
# **Step 3. Adding the two ways to emit z.**
#
# P(emit z) = min(p(z), q(z)) + P(reject) · max(0, p(z) − q(z)) / P(reject)
#           = min(p(z), q(z)) + max(0, p(z) − q(z)).
#
# If p(z) ≤ q(z) this is p(z) + 0. If p(z) > q(z) it is q(z) + p(z) − q(z).
# Either way it is **p(z)**, however good or bad q is. ∎
#
# `sb.laws.emission_law` computes P(emit z) by enumerating every guess and both
# outcomes of the test; on fractions the answer is p to the last digit.

# %%
emit = laws.emission_law(p_ex, q_ex)
assert emit == p_ex
show([[z, step1[z], max(F(0), p_ex[z] - q_ex[z]), emit[z], p_ex[z]] for z in range(5)],
     ["z", "min(p, q)", "max(0, p − q)", "P(emit z)", "p(z)"])
for r in NAIVE_RULES:
    print(f"{r.name:35s} emits {[str(v) for v in r.law(p_ex, q_ex)]}  (p = {[str(v) for v in p_ex]})")
# "Accept if the target's own draw y ~ p agrees, else emit y": enumerate the guess x ~ q and y ~ p.
agree_law = [sum(q_ex[x] * p_ex[y] for x in range(5) for y in range(5) if (x if y == x else y) == z) for z in range(5)]
agree_keeps = sum(a * b for a, b in zip(p_ex, q_ex))
print(f"{'accept if y ~ p agrees, else emit y':35s} emits {[str(v) for v in agree_law]}: exact, but keeps the guess "
      f"{agree_keeps} of the time, against Σ min(p, q) = {sum(step1)}")
assert agree_law == p_ex and agree_keeps < sum(step1)

# %% [markdown]
# **The proof in one picture.** Draw p and q on one plot. Under both curves lies
# min(p, q) (green): that much of each token is emitted by accepted guesses
# (step 1). Where p rises above q, the gap max(0, p − q) (orange) is what the
# residual refills after a rejection (step 3). Where q rises above p, the gap
# max(0, q − p) (hatched) is the mass of guesses that get rejected; its total
# equals the orange total (step 2), so the rejections pay for the refill exactly.
# Green plus orange is p, token by token.

# %%
def plot_proof(p, q, token_names, ax=None):
    """p and q as outlines; min(p, q), max(0, p - q) and max(0, q - p) as shaded areas."""
    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    fig = plots.new_figure(6.8, 3.4) if ax is None else ax.figure
    ax = ax or fig.add_subplot()
    x = np.arange(len(p))
    both, refill, rejected = np.minimum(p, q), np.clip(p - q, 0, None), np.clip(q - p, 0, None)
    ax.bar(x, both, 0.8, color="#7dcea0", label="min(p, q): accepted guesses")
    ax.bar(x, refill, 0.8, bottom=both, color="#f5b041", label="max(0, p − q): refilled by the residual")
    ax.bar(x, rejected, 0.8, bottom=both, color="none", edgecolor="#888", hatch="//",
           label="max(0, q − p): rejected guesses")
    ax.step(np.r_[x - 0.4, x[-1] + 0.4], np.r_[p, p[-1]], where="post", color="black", lw=1.5, label="p (target)")
    ax.step(np.r_[x - 0.4, x[-1] + 0.4], np.r_[q, q[-1]], where="post", color="#2e86c1", lw=1.2, ls="--",
            label="q (draft)")
    ax.set_xticks(x, token_names, fontsize=8)
    ax.set_ylabel("probability")
    ax.set_title(f"accept {both.sum():.3f}, reject {rejected.sum():.3f} = residual mass {refill.sum():.3f}")
    ax.legend(fontsize=7, loc="upper right")
    return fig, (both, refill, rejected)


proof_fig, (area_min, area_refill, area_rejected) = plot_proof(p, q, WORDS)
proof_fig

# %% [markdown]
# One example proves nothing. Hypothesis generates random pairs (p, q) of
# rational distributions, sizes 2 to 7, with plenty of zeros, and we check all
# three identities exactly on each. The `@example`s pin the edge cases: p = q
# (nothing is ever rejected, the residual is empty), disjoint supports (every
# guess is rejected), and a one-hot draft (a deterministic guess, as from
# n-gram lookup).

# %%
def rational_dist(size):
    weights = st.lists(st.integers(0, 5), min_size=size, max_size=size).filter(lambda w: sum(w) > 0)
    return weights.map(lambda w: [F(x, sum(w)) for x in w])


pairs = st.integers(2, 7).flatmap(lambda n: st.tuples(rational_dist(n), rational_dist(n)))
checked = []


@settings(max_examples=N_HYPOTHESIS, derandomize=True, database=None, deadline=None)
@given(pairs)
@example(([F(1, 2), F(1, 2)], [F(1, 2), F(1, 2)]))
@example(([F(1), F(0), F(0)], [F(0), F(1, 2), F(1, 2)]))
@example(([F(1, 3), F(1, 3), F(1, 3)], [F(0), F(1), F(0)]))
def proof_holds(pq):
    p_, q_ = pq
    keep = [qz * laws.accept_prob(pz, qz) for pz, qz in zip(p_, q_)]
    assert keep == [min(a, b) for a, b in zip(p_, q_)]  # step 1
    assert 1 - sum(keep) == sum(max(F(0), a - b) for a, b in zip(p_, q_))  # step 2
    assert laws.emission_law(p_, q_) == p_  # step 3
    checked.append(len(p_))


proof_holds()
print(f"all three identities hold exactly on {len(checked)} random and edge-case pairs")

# %% [markdown]
# ## The verifier you just proved is not the best one
#
# At one position nothing lossless keeps more: α = Σ min(p, q) is the most that any
# rule emitting exactly p can keep of a guess drawn from q. But a round verifies a
# *block* of γ guesses, and judging them one at a time, stopping at the first
# rejection, throws away something a joint judgement keeps. **Block verification**
# (Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami and Suresh, ICLR 2025,
# arXiv 2403.10444; `sb.verify_block`) carries a weight along the drafted prefix,
#
# w_0 = 1,  w_i = min(1, w_{i−1} · p_i(x_i) / q_i(x_i)),
#
# what is left of the target's claim on x_1 … x_i after the draft has paid for it.
# A guess the draft over-proposed (p < q) lowers w, and the token-wise rule would
# stop there; a later guess the target likes *more* than the draft did (p > q)
# raises it again, up to 1. The rule then tosses one coin per prefix length i, heads
# with a chance h_i computed from w_i and the mass of the block residual
# max(0, w_i p_i − q_i), keeps the *longest* prefix whose coin came up heads, and
# draws the next token from that block residual, renormalised (from p itself, the
# bonus, when it keeps all γ).
#
# The paper's example: two tokens a and b, p = (1/3, 2/3) and q = (2/3, 1/3) at every
# position (the draft over-proposes a), γ = 2. `sb.block_laws` enumerates both rules
# in exact fractions.

# %%
from specbook import block_laws

p_ab, q_ab = [F(1, 3), F(2, 3)], [F(2, 3), F(1, 3)]  # tokens a, b at every position
ab_target, ab_draft = block_laws.table([p_ab] * 3), block_laws.table([q_ab] * 2)  # (γ+1, V), (γ, V)
VERIFIERS = ("token", "block")
block_step = {rule: block_laws.step_law(ab_target, ab_draft, 2, rule) for rule in VERIFIERS}
kept_ab = {rule: block_laws.expected_kept(law) for rule, law in block_step.items()}
print(f"drafts kept per step: token-wise {kept_ab['token']}, block {kept_ab['block']}")

draft_pairs = [(0, 0), (0, 1), (1, 0), (1, 1)]  # the four outcomes of the two guesses


def kept_given(rule, x):
    """[P(keep 0), P(keep 1), P(keep 2)] given the guesses x, exactly."""
    law = (laws.block_law([p_ab] * 3, [q_ab] * 2, list(x)) if rule == "token"
           else block_laws.block_rule_law([p_ab] * 3, [q_ab] * 2, x))
    return [sum(pr for block, pr in law.items() if len(block) - 1 == m) for m in range(3)]


per_pair = {(rule, x): kept_given(rule, x) for rule in VERIFIERS for x in draft_pairs}
q_pair = {x: q_ab[x[0]] * q_ab[x[1]] for x in draft_pairs}
show([["ab"[x[0]] + " " + "ab"[x[1]], q_pair[x], block_laws.block_weights([p_ab] * 3, [q_ab] * 2, x)[2],
       *per_pair[("token", x)], *per_pair[("block", x)]] for x in draft_pairs],
     ["guesses", "q(guesses)", "w_2", "token: keep 0", "keep 1", "keep 2", "block: keep 0", "keep 1", "keep 2"])

# %%
def plot_block_vs_token(pairs, per_pair, q_pair):
    """Left: P(keep 0/1/2 | guesses) for each rule; right: q(guesses) · E[kept | guesses], which sums to E[kept]."""
    fig = plots.new_figure(9.6, 3.4)
    left, right = fig.subplots(1, 2)
    x = np.arange(len(pairs))
    labels = ["ab"[a] + " " + "ab"[b] for a, b in pairs]
    colours = ["#d5d8dc", "#f5b041", "#58d68d"]
    for k, (rule, hatch) in enumerate((("token", ""), ("block", "//"))):
        bottom = np.zeros(len(pairs))
        for m in range(3):
            height = np.array([float(per_pair[(rule, g)][m]) for g in pairs])
            left.bar(x + (k - 0.5) * 0.38, height, 0.36, bottom=bottom, color=colours[m], hatch=hatch,
                     edgecolor="#555", lw=0.4, label=f"keeps {m}" if k == 0 else None)
            bottom += height
        contribution = [float(q_pair[g] * sum(m * v for m, v in enumerate(per_pair[(rule, g)]))) for g in pairs]
        right.bar(x + (k - 0.5) * 0.38, contribution, 0.36, color="#5b8def" if rule == "token" else "#1e8449",
                  hatch=hatch, edgecolor="#555", lw=0.4,
                  label=f"{'token-wise' if rule == 'token' else 'block'}: total {sum(contribution):.3f}")
    left.set_xticks(x, labels)
    left.set_xlabel("the two guesses (left bar token-wise, hatched bar block)")
    left.set_ylabel("P(keeps m guesses | guesses)")
    left.legend(fontsize=7, loc="upper left")
    right.set_xticks(x, labels)
    right.set_xlabel("the two guesses")
    right.set_ylabel("q(guesses) · E[kept | guesses]")
    right.legend(fontsize=7)
    fig.suptitle("p = (1/3, 2/3), q = (2/3, 1/3), γ = 2: judging the pair jointly keeps more", fontsize=9)
    return fig


plot_block_vs_token(draft_pairs, per_pair, q_pair)

# %% [markdown]
# Read the pair "a b". The draft over-proposed a (q = 2/3 against p = 1/3), so the
# token-wise rule keeps a half the time and otherwise stops. But b follows, which the
# target likes twice as much as the draft did: w_2 = 1/2 · 2 = 1, the debt is paid, and
# the block rule keeps *both* guesses every time. It pays for this on "a a", where the
# debt only grows (w_2 = 1/4): there it keeps both a quarter of the time and otherwise
# none, never a alone (after a alone the block residual max(0, w_1 p − q) is empty).
# Averaged over the guesses it keeps 11/9 per step where the token-wise rule keeps
# 10/9; the paper proves it never keeps fewer, for any p and q.
#
# Is it still lossless? The two rules emit blocks with different laws, so compare what
# matters: emit the block, then let the target write the rest. Lossless means the first
# γ + 1 tokens then follow the target's own law, exactly (`completed_law` against
# `target_law`). We check it on the paper's example and on the worked example above
# (p_ex, q_ex at every position), and then run the library's `verify_block` and
# `verify_chain` on the same sampled guesses.

# %%
lossless_block = {}
for name, (tgt, drf) in {"the paper's example": (ab_target, ab_draft),
                         "the worked example": (block_laws.table([p_ex] * 3), block_laws.table([q_ex] * 2))}.items():
    for rule in VERIFIERS:
        law = block_laws.step_law(tgt, drf, 2, rule)
        lossless_block[(name, rule)] = block_laws.completed_law(law, tgt, 2) == block_laws.target_law(tgt, 2)
    print(f"{name}: completed law == target law: token-wise {lossless_block[(name, 'token')]}, "
          f"block {lossless_block[(name, 'block')]}")

n_rows = N_DRAWS
ab_p = torch.tensor([[1 / 3, 2 / 3]], dtype=torch.float64).expand(n_rows, 3, 2)  # (B, γ+1, V)
ab_q = torch.tensor([[2 / 3, 1 / 3]], dtype=torch.float64).expand(n_rows, 2, 2)  # (B, γ, V)
ab_x = torch.multinomial(ab_q.reshape(-1, 2), 1, generator=torch.Generator().manual_seed(SEED + 40)).view(n_rows, 2)
kept_sampled = {}
for rule, verifier in (("token", sb.verify.verify_chain), ("block", sb.verify_block.verify_block)):
    _, n_emitted = verifier(ab_p, ab_q, ab_x, torch.Generator().manual_seed(SEED + 41))
    kept_sampled[rule] = (n_emitted - 1).double()  # (B,) guesses kept per row
    print(f"{verifier.__name__:13s} on {n_rows} rows: {kept_sampled[rule].mean():.3f} guesses kept per step "
          f"(exact {float(kept_ab[rule]):.3f})")

# %% [markdown]
# **A draft with one-hot guesses gains nothing.** Prompt lookup proposes tokens with
# certainty, q(x_i) = 1, so p/q ≤ 1 at every guess: the weight can only fall, w_i is
# p_1(x_1) ⋯ p_i(x_i), which is exactly the token-wise chance of keeping the prefix, and
# there is no over-supply for a later guess to pay back. Block verification pays off for
# drafters that sample their guesses from a spread-out q, such as a draft model at
# temperature 1.

# %%
one_hot_kept = {x: {rule: block_laws.expected_kept(block_laws.step_law(ab_target, None, 2, rule, drafts=x))
                    for rule in VERIFIERS} for x in draft_pairs}
print({"ab"[x[0]] + "ab"[x[1]]: f"{v['token']} vs {v['block']}" for x, v in one_hot_kept.items()})

# %% [markdown]
# ## Sampling confirms it
#
# Exact laws check the *mathematics*. Sampling checks the *code that runs*.
# For each rule we draw many guesses from q, run the rule, count how often
# each token comes out, and test the raw counts against p with a chi-square
# goodness-of-fit test (bins with small expected counts pooled). Four tests
# (the correct sampler and the three tempting rules) at once call for a correction: Holm's method keeps the chance of any false
# alarm in the family at 1%. The power column is the probability that the test
# catches a rule with that exact bias at this sample size, so a pass of a
# biased rule could not be blamed on a small sample. It is computed at 0.25%,
# the level of Holm's first and strictest step (1% / 4), so it holds whichever
# step a rule meets.
#
# In one line each (the primer, `02b_statistics_primer`, builds all three from
# scratch): chi-square adds up the squared gaps between observed and expected
# counts, each divided by the expected count; Holm sorts the four p-values and
# compares the smallest with 1%/4, the next with 1%/3, and so on, stopping at the
# first that is not small enough; power is the chance of catching a given bias.

# %%
results = {}
N_TESTS = sum(name != rules.TARGET_ONLY for name in rules.RULES)  # the family: the sampler and three naive rules
for i, (name, r) in enumerate(tqdm(rules.RULES.items(), desc="rules", disable=FAST)):
    if name == rules.TARGET_ONLY:
        continue  # at temperature 1 this bug is invisible; it gets its own section
    drawn = r.sample(setup, N_DRAWS, torch.Generator().manual_seed(SEED + i))
    counts = stats.counts_of(drawn, len(p))
    law = r.law(setup)
    results[name] = dict(counts=counts, law=law, gof=stats.chisquare_gof(counts, p.numpy()),
                         power=stats.chisquare_power(p.numpy(), law.numpy(), N_DRAWS, alpha=LEVEL / N_TESTS))
family = stats.run_family({k: v["gof"].pvalue for k, v in results.items()}, LEVEL)
print(family)
print()
for name, v in results.items():
    print(f"{name:35s} X² = {v['gof'].statistic:9.1f}  dof = {v['gof'].dof}  power = {v['power']:.3f}")

# %%
plots.plot_emission(p, results[rules.CORRECT]["counts"], results[rules.CORRECT]["law"], token_names=WORDS,
                    title=f"modified rejection sampling: p = {results[rules.CORRECT]['gof'].pvalue:.3f}")

# %%
worst = NAIVE_RULES[0].name
plots.plot_emission(p, results[worst]["counts"], results[worst]["law"], token_names=WORDS,
                    title=f"{worst}: p = {results[worst]['gof'].pvalue:.2g}")

# %% [markdown]
# ## The sampling-parameter trap
#
# The proof has one assumption that is easy to break in real code: **q must be
# the distribution the guess was actually drawn from**. Suppose the user asks
# for temperature 0.6. The draft model samples its guesses at temperature 0.6,
# as it should. But the verifier processes only the target's logits with the
# temperature and divides by the draft's *unprocessed* q. Nothing crashes; the
# words look like the model's words. The law is wrong.
#
# At temperature 1 the processed and unprocessed q coincide and the bug hides
# completely, which is how it survives testing with default settings.

# %%
T_BUG = 0.6
setup_hot = rules.position_setup(match=0.3, temperature=T_BUG, seed=2)
bug = rules.rule(rules.TARGET_ONLY)
bug_law = bug.law(setup_hot)
bug_tv = 0.5 * float((bug_law - setup_hot.target_probs).abs().sum())
bias_at_1 = float((bug.law(setup) - setup.target_probs).abs().max())
print(f"temperature {T_BUG}: total variation of the buggy law from p = {bug_tv:.3f}; at temperature 1: {bias_at_1:.1e}")
bug_counts = stats.counts_of(bug.sample(setup_hot, N_DRAWS, torch.Generator().manual_seed(SEED + 10)), len(p))
bug_gof = stats.chisquare_gof(bug_counts, setup_hot.target_probs.numpy())
plots.plot_emission(setup_hot.target_probs, bug_counts, bug_law, token_names=WORDS,
                    title=f"{rules.TARGET_ONLY} (T = {T_BUG}): p = {bug_gof.pvalue:.2g}")

# %% [markdown]
# The same bug in a whole decoding loop. `sb.teach.buggy.MismatchedDraftProbs` is a
# drafter that samples with the sampling parameters but reports the unprocessed
# q to the verifier. Generate two words after "the" in many rows, with it and
# with the correct `DraftModelDrafter`, and compare each against the target's
# exact law of two-word continuations at temperature 0.6. Read a few rows
# first: can you tell which is which?

# %%
target, draft_model = make_toy_pair(vocab_size=8, order=1, match=0.3, seed=2)
hot = SamplingParams(temperature=T_BUG)
seq_law = target.sequence_law([0], 2, hot)
outcomes = sorted(seq_law)
index = {o: i for i, o in enumerate(outcomes)}
seq_tests = {}
for name, drafter in [("correct", DraftModelDrafter(draft_model)), ("buggy", buggy.MismatchedDraftProbs(draft_model))]:
    out = speculative_generate(target, drafter, torch.zeros(N_SEQUENCES, 1, dtype=torch.long), 2, params=hot, gamma=4,
                               generator=torch.Generator().manual_seed(SEED + 20))
    counts = [0] * len(outcomes)
    for row in out.new_tokens.tolist():
        counts[index[tuple(row)]] += 1
    seq_tests[name] = stats.chisquare_gof(counts, [seq_law[o] for o in outcomes])
    print(f"{name:8s}", " | ".join("the " + " ".join(WORDS[t] for t in row) for row in out.new_tokens[:4].tolist()))
for name, res in seq_tests.items():
    print(f"{name:8s} chi-square against the target's two-word law: p = {res.pvalue:.3g}")

# %% [markdown]
# ## Your turn
#
# The explorer puts one position of a toy pair under your control: the draft's
# quality (1 = identical to the target), the temperature, and the number of
# samples. The histogram shows the chosen rule; the table tests every rule.
# Things to try:
#
# * Draft quality 1.0 (q = p). Which tempting rules become exact, and which
#   one still is not? (Work out its law on paper first.) The table may also
#   show the deterministic rule slightly off: here q equals p only up to
#   floating-point rounding, and a rule that jumps at p(x) = q(x) turns a
#   difference of 1e-17 into a visible bias. The min(1, p/q) rules do not care.
# * A good draft (0.9) and 500 samples: some biased rules now pass. Look at the
#   power column: the test is not broken, the sample is too small to see a
#   small bias. Raise the sample size.
# * Temperature 1.0 with the sampling-parameter bug selected.

# %%
explorer = ProofExplorer(sample_size=1000 if FAST else 5000)
explorer

# %% [markdown]
# The explorer's state can be set from code too, which is how the checks
# below drive it.

# %%
explorer.match.value = 1.0
explorer.temperature.value = 1.0
at_identity = explorer.values()
print({k: f"{v:.3g}" for k, v in at_identity["pvalues"].items()})
explorer.match.value = 0.3
explorer.temperature.value = T_BUG

# %% [markdown]
# ## Exercises
#
# Each exercise has an answer cell and a check cell. Write your answer in place of the
# `...`, run the cell, then run the check below it: it says whether the answer is right
# and, if not, what to look at again. A "predict, then run" exercise asks for your
# prediction as a value; the cell after the check runs the experiment.
#
# **Exercise 1 (predict, then run).** In the worked example, token 3 has
# q = 0 (the draft never proposes it) and p = 1/4. Can speculative decoding
# ever emit it? Give the probability that one round's first token is token 3
# (`p_emit_token3`, a number or a `Fraction`) and its route (`route_token3`, a letter):
# (a) only as an accepted guess; (b) only through the residual, after a rejection;
# (c) both ways; (d) it is never emitted.
#
# <details><summary>Solution</summary>
#
# Yes, with probability exactly 1/4, and only through the residual: it is never
# guessed, so min(p, q) = 0 there, while max(0, p − q) = 1/4. A rejection happens
# with probability P(reject) = Σ max(0, p − q), and the residual then picks
# token 3 with probability (1/4) / P(reject); the product is 1/4.
#
# </details>

# %% tags=["solution"]
### BEGIN SOLUTION
p_emit_token3 = F(1, 4)
route_token3 = "b"
### END SOLUTION

# %%
exercises.check("02.1", p_emit_token3, route_token3, p_ex, q_ex)

# %%
via_residual = p_reject * (max(F(0), p_ex[3] - q_ex[3]) / residual_mass)
print("P(emit token 3) =", laws.emission_law(p_ex, q_ex)[3], "; via the residual:", via_residual,
      "; as an accepted guess:", min(p_ex[3], q_ex[3]))

# %% [markdown]
# **Exercise 2 (code).** The rule "right test, wrong refill" keeps x with
# probability min(1, p(x)/q(x)) but refills from p. Derive its emitted law by
# following the proof's three steps and write it as `wrong_refill_law(p_, q_)`, a
# function of two lists of probabilities (fractions in, fractions out), without calling
# `specbook.naive`. The check compares it, exactly, with the library's law on the worked
# example and on other pairs. Which tokens of the worked example does it over-produce?
# (`over_produced`, a list of token indices)
#
# <details><summary>Solution</summary>
#
# Step 1 is unchanged: an accepted guess emits z with probability min(p(z), q(z)).
# Step 2 too: a rejection happens with probability P(reject) = 1 − Σ min(p, q).
# Only step 3 changes: the refill picks z with probability p(z), not the residual.
# So the law is min(p(z), q(z)) + P(reject) · p(z). Compared with p it adds
# P(reject) · p(z) − max(0, p(z) − q(z)): too much wherever q covers p
# (tokens 1 and 2 here), because that mass was already handed out by the
# acceptances.
#
# </details>

# %% tags=["solution"]
def wrong_refill_law(p_, q_):
    """The exact law of "keep with min(1, p/q), refill from p"."""
    ### BEGIN SOLUTION
    reject = 1 - sum(min(a, b) for a, b in zip(p_, q_))
    return [min(a, b) + reject * a for a, b in zip(p_, q_)]
    ### END SOLUTION


### BEGIN SOLUTION
over_produced = [z for z, (emitted_z, p_z) in enumerate(zip(wrong_refill_law(p_ex, q_ex), p_ex)) if emitted_z > p_z]
### END SOLUTION

# %%
exercises.check("02.2", wrong_refill_law, over_produced, p_ex, q_ex)

# %% [markdown]
# **Exercise 3 (predict, then run).** In the picture of the proof, the hatched
# area (rejected guesses) and the orange area (the residual's refill) always have
# the same total. Predict the acceptance rate α = Σ min(p, q) of the lesson's
# pair (the green area) from the title of the figure, to two decimals
# (`alpha_from_picture`). The cell after the check samples it: it draws guesses from q,
# runs the library's `verify_token`, and counts how often the emitted token is the
# guess itself.
#
# <details><summary>Solution</summary>
#
# The green total in the figure's title is α (about 0.60 here). Counting
# "emitted == guess" counts the acceptances exactly: a guess x can be rejected
# only when q(x) > p(x), and there the residual max(0, p − q) has no mass, so a
# rejected guess never comes back as the emitted token. The frequency must
# therefore match α within sampling error (a few standard errors of a binomial
# proportion).
#
# </details>

# %% tags=["solution"]
### BEGIN SOLUTION
alpha_from_picture = round(float(area_min.sum()), 2)
### END SOLUTION

# %%
exercises.check("02.3", alpha_from_picture, p, q)

# %%
alpha_pair = float(area_min.sum())
g_ex = torch.Generator().manual_seed(SEED + 30)
draws = torch.multinomial(q, N_DRAWS, replacement=True, generator=g_ex).tolist()
kept = sum(verify_token(p, q, x, g_ex) == x for x in draws)
se_kept = (alpha_pair * (1 - alpha_pair) / N_DRAWS) ** 0.5
print(f"α = Σ min(p, q) = {alpha_pair:.4f}; measured {kept / N_DRAWS:.4f} ± {se_kept:.4f}")

# %% [markdown]
# ## Concept check
#
# Five short questions on the whole lesson. Give numbers as numbers (or fractions) and a
# choice as its letter in quotes (`"b"`), then run the check cell.
#
# 1. After a rejection, why does the sampler draw from max(0, p − q), renormalised, and
#    not from p? (`c1`) (a) the residual is cheaper to sample than p; (b) the accepted
#    guesses have already emitted min(p, q) of every token, so drawing from all of p would
#    hand that part out a second time; (c) so that the guess just rejected cannot come back.
# 2. p = (0.2, 0.5, 0.3) and q = (0.5, 0.25, 0.25). What is the chance that a guess drawn
#    from q is kept? (`c2`)
# 3. For the same pair, what is the chance that the token with p = 0.5 is the one
#    emitted? (`c3`)
# 4. Block verification (`verify_block`) against the token-wise rule: (`c4`)
#    (a) it keeps more guesses on average, at the price of a small bias; (b) it never keeps
#    fewer on average, and the output still follows the target's law exactly; (c) it gains
#    the most for one-hot drafts such as prompt lookup.
# 5. A verifier applies the temperature to the target's logits but divides by the draft's
#    unprocessed q, while the draft samples at the temperature. At which temperature does
#    this bug leave the output law unchanged? (`c5`) (a) 0.6; (b) 1.0; (c) 1.5; (d) at none.
#
# <details><summary>Answers</summary>
#
# 1. (b); (c) is true of the residual, but it is a consequence, not the reason. 2. Σ min(p, q)
# = 0.2 + 0.25 + 0.25 = 0.7. 3. 0.5: the sampler is lossless, whatever q is. 4. (b); one-hot
# drafts gain nothing. 5. (b): at temperature 1 the processed and unprocessed q coincide.
#
# </details>

# %% tags=["solution"]
### BEGIN SOLUTION
c1, c2, c3, c4, c5 = "b", 0.7, 0.5, "b", "b"
### END SOLUTION

# %%
for key, answer in {"02.c1": c1, "02.c2": c2, "02.c3": c3, "02.c4": c4, "02.c5": c5}.items():
    exercises.check(key, answer)

# %% [markdown]
# ## Checks

# %%
# 1. The library's rule keeps a guess exactly when u·q(x) < p(x) (checked above on 300 guesses), and the
#    proof's identities are exact:
assert emit == p_ex and len(checked) >= N_HYPOTHESIS
# 2. Each tempting rule's exact law differs from p; the modified sampler's equals it.
assert all(0.5 * float((law - p).abs().sum()) > 0.01 for law in naive_laws.values())
assert all(r.law(p_ex, q_ex) != p_ex for r in NAIVE_RULES)
assert torch.allclose(laws.emission_law(p, q), p.double(), atol=1e-12)
# 3. Sampling: the real sampler is not rejected, every tempting rule is, and the test had the power to do so.
assert len(results) == N_TESTS == 4 and family.rejected == tuple(r.name for r in NAIVE_RULES), family
assert all(results[r.name]["power"] > 0.99 for r in NAIVE_RULES)  # at Holm's strictest level, LEVEL / 4
# 4. The sampling-parameter bug: invisible at temperature 1, biased and caught at 0.6, in one position and in a loop.
assert bias_at_1 < 1e-12 and bug_tv > 0.05
assert bug_gof.pvalue < 1e-6
assert seq_tests["correct"].pvalue > LEVEL and seq_tests["buggy"].pvalue < 1e-6
# 5. The explorer: with q = p the two rules built on min(1, p/q) are exact; "accept w.p. p(x)" is still biased.
assert at_identity["tv"][rules.CORRECT] == 0 and at_identity["tv"]["min(1,p/q), resample from p"] < 1e-12
assert at_identity["tv"]["accept w.p. p(x), else sample p"] > 0.01
assert not explorer.values()["rejected"][rules.CORRECT]
# 6. The picture of the proof: green + orange is p, and the rejected mass equals the residual's mass.
assert np.allclose(area_min + area_refill, p.numpy(), atol=1e-12)
assert abs(area_rejected.sum() - (1 - area_min.sum())) < 1e-9
# 7. Block verification: on the paper's example it keeps 11/9 guesses per step where the token-wise rule keeps
#    10/9; both are lossless (the completed law is the target's) though their block laws differ; the library's
#    verify_block and verify_chain agree with the exact figures; one-hot guesses gain nothing.
assert kept_ab == {"token": F(10, 9), "block": F(11, 9)} and block_step["token"] != block_step["block"]
assert all(lossless_block.values()) and len(lossless_block) == 4
assert per_pair[("block", (0, 1))] == [0, 0, 1] and per_pair[("token", (0, 1))] == [F(1, 2), 0, F(1, 2)]
for rule in VERIFIERS:
    se = float(kept_sampled[rule].std()) / n_rows ** 0.5
    assert abs(float(kept_sampled[rule].mean()) - float(kept_ab[rule])) < 4 * se, (rule, kept_sampled[rule].mean())
assert all(v["token"] == v["block"] for v in one_hot_kept.values())
# 8. The exercises' experiments: a token the draft never proposes comes out with probability p, all of it through
#    the residual; counting "emitted == guess" measures α (a rejected guess never comes back).
assert min(p_ex[3], q_ex[3]) == 0 and via_residual == laws.emission_law(p_ex, q_ex)[3] == p_ex[3]
assert abs(kept / N_DRAWS - alpha_pair) < 4 * se_kept
# 9. Your exercises and concept check, as graded above.
graded = exercises.results("02")
print(f"exercises and concept check: {sum(r.passed for r in graded)} of {len(graded)} right")
### BEGIN SOLUTION
assert len(graded) == 8 and all(r.passed for r in graded), [str(r) for r in graded]
### END SOLUTION
print(f"all lesson-2 checks passed in {time.perf_counter() - _started:.1f} s (fast mode: {FAST})")
