# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lesson 5 — Trees, Medusa heads and EAGLE
#
# A chain of drafts dies at its first wrong guess. A **tree** of drafts gives
# every position several candidates, and one target pass still scores them
# all: each node attends only to the cached context and to its own ancestors.
# Self-speculation drafts those trees from the target's *own* hidden states:
#
# * **Medusa** (Cai et al., 2024): K small heads on the last hidden state z_t
#   of the last token the target read, x_t. The target's own LM head predicts
#   x_{t+1}; head k (k = 1..K) predicts x_{t+k+1}, the token **k positions
#   after the target's own next token** (this is what "head k predicts k
#   positions ahead" counts from, and what specbook's trainer uses as labels).
#   The heads cannot see each other's guesses, so Medusa spreads its bets over
#   a tree of their top candidates.
# * **EAGLE** (Li et al., 2024): one small transformer layer that runs
#   autoregressively on the target's *features*: its input at position t is the
#   second-to-top feature, the state the target's LM head reads (in specbook
#   z_t = norm(f_t): the last block's output f_t after the final norm, as for
#   Medusa), together with the token sequence shifted by one step, x_{t+1}; it
#   predicts z_{t+1}. EAGLE-2 grows the tree dynamically where the draft is
#   confident; EAGLE-3 fuses low, middle and high layers' features.
#
# The models: sections 1 to 4 and 6 use a tiny random Llama, on which every claim can
# be checked in seconds, and train their heads on it live. SmolLM2-135M appears in
# section 3b (the measured cost of a tree pass) and, in the full run, in section 5
# with the heads that ship with specbook; in fast mode section 5 runs on the tiny model.
#
# In this lesson we build a tree and its mask, verify it in one pass and check
# that this equals verifying each path on its own, measure what "one pass"
# costs for 64 nodes, train tiny Medusa and EAGLE heads live and check exactly
# what each reads and predicts, compare acceptance (chain vs tree, Medusa vs
# EAGLE, temperature 0 vs 1), and finally show by chi-square that the lossless
# tree rule keeps the target's law while Medusa's *typical acceptance* does not.

# %% tags=["parameters"]
import os

FAST = os.environ.get("SPECBOOK_FAST", "0") == "1"  # the test suite sets SPECBOOK_FAST=1
USE_SMOLLM2 = not FAST  # full mode: the shipped heads on the real model (needs the weights)
N_DRAWS = 4000 if FAST else 40000  # samples per rule in the chi-square demonstration
NEW_TOKENS = 24 if FAST else 64
TREE_SIZES = [1, 16, 64] if FAST else [1, 2, 4, 8, 16, 32, 64]  # nodes per verify pass in the cost curve
TREE_REPS = 1 if FAST else 5
LEVEL = 0.01
SEED = 0

# %%
import copy
import json
import time
from pathlib import Path

import torch
from IPython.display import display
from tqdm.auto import tqdm

import specbook as sb
from specbook.decode import generate, speculative_generate
from specbook.drafters.eagle import DynamicTree, EagleDrafter
from specbook.drafters.medusa import MedusaDrafter
from specbook.models import LlamaConfig, LlamaModel, LlamaTarget
from specbook.sampling import GREEDY, SamplingParams
from specbook.bench.timing import verify_cost_curve
from specbook.teach import diagrams, exercises, plots
from specbook.teach.plots import draw_tree
from specbook.tree_attention import tree_mask
from specbook.tree_paths import from_paths, leaf_paths
from specbook.verify import verify_greedy
from specbook.typical import typical_acceptance
from specbook.verify_tree import verify_tree, verify_tree_greedy

torch.set_num_threads(1)
_started = time.perf_counter()

# %% [markdown]
# ## 1. A tree and its attention mask
#
# A Medusa-style *choice list* names each node by the ranks taken at each
# depth: `[0, 1]` is "the best candidate at depth 0, then the second best
# below it". Parents come first, so the tree is just a `parents` vector.

# %%
choices = [[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]]
tree = from_paths(choices)
print("parents:", tree.parents.tolist())
print("depth:  ", tree.depth.tolist())
mask = tree_mask(tree.parents)
print(mask.int())
draw_tree(tree.parents, context_length=3)
# every node sees itself and its ancestors, nothing else
for i, par in enumerate(tree.parents.tolist()):
    assert mask[i, i] and (par < 0 or mask[i, par])
    assert mask[i].sum() == tree.depth[i] + 1

# %% [markdown]
# ## 2. One pass scores every branch
#
# A tiny random Llama stands in for the target. We feed `[pending] + nodes`
# with the tree mask in one forward, then feed each root-to-leaf path as an
# ordinary chain in a fresh cache: the logits of every node must agree.

# %%
cfg = LlamaConfig(vocab_size=64, dim=48, n_layers=2, n_heads=4, n_kv_heads=2, intermediate_size=96,
                  max_position_embeddings=512, rope_theta=500.0)
tiny = LlamaModel(cfg).init_weights(std=0.5, generator=torch.Generator().manual_seed(SEED)).requires_grad_(False)
target = LlamaTarget(tiny, max_length=256)
context = torch.tensor([[5, 9, 2, 7]])
nodes = torch.tensor([[11, 12, 13, 14, 15, 16]])  # one token per node of the tree above

target.reset(1)
target.forward(context[:, :-1])
fed_parents = torch.cat([torch.tensor([-1]), torch.where(tree.parents < 0, 0, tree.parents + 1)])
one_pass = target.forward(torch.cat([context[:, -1:], nodes], 1), parents=fed_parents)  # (1, N+1, V)

for path in leaf_paths(tree.parents):
    target.reset(1)
    chain = target.forward(torch.cat([context, nodes[:, path]], 1))[:, context.shape[1] - 1:]  # (1, len+1, V)
    torch.testing.assert_close(one_pass[:, [0] + [i + 1 for i in path]], chain, atol=1e-4, rtol=1e-4)
print("one tree pass == one chain pass per path, for all", len(leaf_paths(tree.parents)), "paths")

# %% [markdown]
# ## 3. Verifying the tree in one pass equals verifying each path
#
# Greedy verification walks down the tree, following the child equal to the
# target's argmax. Verifying each path as a chain and keeping the longest
# accepted prefix must give the same tokens. We make the tree agree with the
# target somewhere so there is something to accept.

# %%
best = one_pass.argmax(-1)[0]  # the target's choice at the root and after each node
agreeing = nodes.clone()
agreeing[0, 0] = best[0]  # node 0 follows the root's argmax
agreeing[0, 2] = 99 % cfg.vocab_size  # node 2 (child of node 0) wrong, its sibling node 3 right:
target.reset(1)
target.forward(context[:, :-1])
logits = target.forward(torch.cat([context[:, -1:], agreeing], 1), parents=fed_parents)
agreeing[0, 3] = logits.argmax(-1)[0, 1]
target.reset(1)
target.forward(context[:, :-1])
logits = target.forward(torch.cat([context[:, -1:], agreeing], 1), parents=fed_parents)
tokens, n_emitted, path = verify_tree_greedy(logits, agreeing, tree.parents)
print("tree verification emits", tokens[0, : n_emitted[0]].tolist(), "via nodes", path[0].tolist())

best_chain = []
for leaf_path in leaf_paths(tree.parents):
    target.reset(1)
    chain_logits = target.forward(torch.cat([context, agreeing[:, leaf_path]], 1))[:, context.shape[1] - 1:]
    t, n = verify_greedy(chain_logits, agreeing[:, leaf_path])
    if n[0] > len(best_chain):
        best_chain = t[0, : n[0]].tolist()
assert tokens[0, : n_emitted[0]].tolist() == best_chain
print("== the longest result of verifying each path separately:", best_chain)

# %% [markdown]
# ## 3b. Is 64 nodes really "one pass"?
#
# The course text says verifying 64 tree nodes costs one forward pass. That is
# true only while the processor has idle arithmetic. A pass over n nodes pushes
# n rows through every weight matrix: each weight fetched from memory is used
# for n multiply-adds, so the pass does about 2n flops per weight, or
# **I(n) = 2n / b flop per byte** with b bytes per weight (4 in float32, 2 in
# bfloat16). While I(n) is below the machine's *ridge point* (peak flop/s over
# memory bandwidth) the pass waits for memory and extra nodes are nearly free;
# above it the pass waits for arithmetic and its time grows with n. A GPU's
# ridge is in the hundreds of flop/byte; a CPU's is far lower and differs from
# machine to machine, so we measure this one's with the stopwatches lesson 6 and
# `python -m specbook batch` use: 64 rows through one of SmolLM2's projections (the
# shape of a 64-node pass) against a sum over a buffer larger than the caches. Then we
# time one tree-masked verify pass of SmolLM2 over n nodes in both number types.

# %%
from specbook.bench.batch_costs import measure_roofline

t0 = time.perf_counter()
measure = dict(size=768, read_mb=64, reps=3) if FAST else dict(reps=5)
ridge_here = {name: measure_roofline(dtype, **measure)["ridge_flop_per_byte"]
              for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16))}
print(f"this machine's ridge, measured: {ridge_here['float32']:.1f} flop/byte in float32, "
      f"{ridge_here['bfloat16']:.1f} in bfloat16 (an H100's in bfloat16: "
      f"{sb.roofline.ridge('H100 SXM', 'bfloat16'):.0f})")
smol, tokenizer = sb.models.load_smollm2(dtype="float32")  # and a bfloat16 copy beside it
smol_bf16 = copy.deepcopy(smol).to(torch.bfloat16)
context_ids = list(range(1000, 1064))  # any 64 cached tokens: the cost depends on lengths, not on words
tree_curves = {name: verify_cost_curve(LlamaTarget(m, max_length=160), context_ids, sizes=TREE_SIZES,
                                       reps=TREE_REPS, tree=True)
               for name, m in (("float32", smol), ("bfloat16", smol_bf16))}
for name, cv in tree_curves.items():
    print(f"{name:8s}: t(1) = {1000 * cv['seconds'][0]:.0f} ms, t(64) = {1000 * cv['seconds'][-1]:.0f} ms, "
          f"v(64) = {cv['v'][-1]:.2f}")
intensity = {name: 2 * 64 / b for name, b in (("float32", 4), ("bfloat16", 2))}  # flop per weight byte at n = 64
print(f"arithmetic intensity at 64 nodes: {intensity} flop/byte, "
      + ", ".join(f"{'above' if intensity[k] > ridge_here[k] else 'below'} this machine's {k} ridge "
                  f"({ridge_here[k]:.1f})" for k in intensity)
      + f"; measured in {time.perf_counter() - t0:.0f} s")
native = tree_curves["bfloat16"]["seconds"][-1] < tree_curves["float32"]["seconds"][-1]
print(f"torch CPU capability {torch.backends.cpu.get_cpu_capability()}, CUDA bfloat16 "
      f"{torch.cuda.is_available() and torch.cuda.is_bf16_supported()}: this machine has the "
      + ("bfloat16 curve (a 64-node pass is faster in bfloat16: native bfloat16 arithmetic)" if native
         else "float32 curve (bfloat16 is not faster here: no native bfloat16 arithmetic)"))

plots.plot_cost_curves(TREE_SIZES, tree_curves, "tree nodes n in one verify pass", what="one tree verify pass",
                       flat_label="one pass (v = 1)")

# %% [markdown]
# At 64 nodes float32 does 32 flop per weight byte. Compare it with this
# machine's float32 ridge, printed above. Where 32 lies above it, as on every CPU
# we have measured, the pass is compute-bound and costs several plain passes, so
# a 64-node tree only pays if it yields that many more tokens. That is the same
# pool of idle arithmetic that batching consumes: with many sequences in a
# batch, there is no idle compute left and a big tree becomes a tax. Size the
# tree by the measured curve, not by the slogan.

# %% [markdown]
# ## Medusa and EAGLE side by side
#
# Both read the frozen target's last feature. Medusa's heads all read z_t at
# once and guess blind of each other; EAGLE's single layer reads the pair
# (feature, next token) and feeds its own predicted feature back, so each guess
# is conditioned on the previous one.

# %%
diagrams.draw_medusa_eagle(num_heads=3)

# %% [markdown]
# ## 4. Train a tiny Medusa and a tiny EAGLE, live
#
# Both learn from the target's own replies (self-distillation) and its
# features; the target stays frozen. Medusa's loss is a cross-entropy per
# head; EAGLE's is a feature regression plus a token loss. Here the "target"
# is the tiny random model, so the heads learn its quirks in seconds.

# %%
from specbook.train.eagle import chain_acceptance, train_eagle
from specbook.train.features import draft_vocabulary, features_from_ids, validation_indices
from specbook.train.medusa import best_choices, head_ranks, tokens_per_pass, train_medusa

g = torch.Generator().manual_seed(SEED)
prompt_ids = [torch.randint(1, cfg.vocab_size, (6,), generator=g).tolist() for _ in range(16 if FAST else 48)]
data = features_from_ids(tiny, prompt_ids, max_new_tokens=32, eos_id=0)
fit, val = validation_indices(data, every=4)
vocab = draft_vocabulary(data.select(fit), 48, always=(0,))

t0 = time.perf_counter()
medusa_heads, mlog = train_medusa(data, tiny, fit, num_heads=3, vocab=vocab, epochs=20 if FAST else 40,
                                  batch_size=64, lr=3e-2, progress=False)
eagle_recipe = dict(vocab=vocab, epochs=40 if FAST else 80, batch_sequences=4, lr=5e-3, w_cls=1.0, progress=False)
eagle_head, elog = train_eagle(data, tiny, fit, unroll_steps=2, **eagle_recipe)
print(f"trained both in {time.perf_counter() - t0:.1f} s")
print(f"Medusa loss {mlog['loss'][0][1]:.2f} -> {mlog['loss'][-1][1]:.2f}; "
      f"EAGLE loss {elog['loss'][0][1]:.2f} -> {elog['loss'][-1][1]:.2f}")
assert mlog["loss"][-1][1] < mlog["loss"][0][1] and elog["loss"][-1][1] < elog["loss"][0][1]

ranks = head_ranks(medusa_heads, tiny, data, fit, top_s=4)
medusa_tree = best_choices(ranks, 8, top_s=4)
print("Medusa top-1 accuracy per head:", [round(float((ranks[:, k] == 0).float().mean()), 2) for k in range(3)])
print("best 8-node tree from the measured ranks:", medusa_tree)
print("predicted tokens/pass: chain of 3", round(tokens_per_pass(ranks, None, 3), 2),
      " tree", round(tokens_per_pass(ranks, medusa_tree), 2))
survival = chain_acceptance(eagle_head, tiny, data, fit, gamma=3)
print("EAGLE: share of positions whose chain survives 0..3 drafts:", [round(float(x), 2) for x in survival])

# %% [markdown]
# ### What each head reads and predicts, exactly
#
# **Medusa.** For every reply position t of a sequence x_1 … x_T, the target's
# feature f_t (its last block's output) through the final norm and the LM head
# gives x_{t+1}, the greedy reply itself; head k (k = 1..K) is trained on
# x_{t+k+1}. We check both on the training data.
#
# **What the heads read.** specbook stores f_t, the last block's output *before* the
# final norm (`features_from_ids`), but neither head reads it raw: both read
# z_t = norm(f_t), the final norm of f_t, exactly what the target's LM head reads. The
# trainers apply the target's frozen norm before a head sees a feature
# (`specbook.train.medusa.target_features`), and so do the drafters when they decode
# (their feature store transforms every observed hidden state with `model.norm`).
#
# **EAGLE.** Its input is the pair (z_t, x_{t+1}): that same post-norm feature,
# concatenated with the embedding of the token one step later (the token sequence
# shifted by one), through one linear map from 2D to D.
#
# **EAGLE-3** (Li et al., 2025) changes the training: no feature regression
# (only the token loss), a "training-time test" that feeds the head its own
# predictions (specbook's `unroll_steps`), a reduced draft vocabulary, and an
# input that fuses features from a low, a middle and a high layer (3D wide)
# instead of the top one. One target pass yields all three.

# %%
from specbook.train.medusa import medusa_examples

seq = fit[0]
tok, hid, _, _ = data.sequence(seq)
P, K = int(data.prompt_lengths[seq]), 3
rows_, labels_ = medusa_examples(data, [seq], num_heads=K)  # rows into data.hidden, labels (n, K)
for i, t in enumerate(range(P - 1, len(tok) - 1)):  # t: 0-based index of the last token read
    for k in range(1, K + 1):
        want = int(tok[t + k + 1]) if t + k + 1 < len(tok) else -100
        assert int(labels_[i, k - 1]) == want  # head k: k positions after the target's own next token
print("Medusa labels at the first reply position:", labels_[0].tolist(), "= x_{t+2}, x_{t+3}, x_{t+4}")

check = LlamaTarget(tiny, max_length=256, hidden_layers=(0, 1, 2))  # embeddings, after block 1, after block 2
check.reset(1)
logits = check.forward(tok[None, :-1].long())  # (1, T-1, V)
torch.testing.assert_close(hid.float(), check.last_hidden[0], atol=2e-2, rtol=1e-2)  # stored in float16
own_next = tiny.lm_head(tiny.norm(check.last_hidden))  # the target's LM head on f_t
torch.testing.assert_close(own_next, logits)
assert own_next[0, P - 1:].argmax(-1).tolist() == tok[P:].tolist()  # f_t -> x_{t+1}: the greedy reply
assert tuple(eagle_head.fc.weight.shape) == (cfg.dim, 2 * cfg.dim)  # EAGLE: [z_t ; e(x_{t+1})] -> D
# Both heads read z_t = norm(f_t), what the LM head reads, in training and when drafting.
from specbook.train.medusa import target_features

torch.testing.assert_close(target_features(tiny, hid[:4]), tiny.norm(hid[:4].float()))
reads_post_norm = all(d.features.transform is tiny.norm
                      for d in (MedusaDrafter(medusa_heads, tiny), EagleDrafter(eagle_head, tiny)))
assert reads_post_norm
low, mid, high = check.last_hidden_layers  # EAGLE-3's three feature sources, from the same pass
assert torch.equal(high, check.last_hidden)
print(f"EAGLE input width {2 * cfg.dim} = [z_t ; e(x_t+1)]; EAGLE-3 fused input width "
      f"{torch.cat([low, mid, high], -1).shape[-1]} = 3 layers x {cfg.dim}; "
      f"draft vocabulary {eagle_head.vocab.numel()} of {cfg.vocab_size} tokens")

# %% [markdown]
# ## 5. Compare acceptance: chain vs tree, Medusa vs EAGLE, temperature 0 vs 1
#
# τ is the mean number of tokens per target pass. Full mode uses SmolLM2 with
# the shipped heads on held-out prompts; fast mode the tiny model above, on its
# own training prompts (so only the mechanics, not the numbers, carry over).

# %%
if USE_SMOLLM2:
    from specbook.models.chat import chat_ids
    from specbook.train.heads_data import training_mix

    real_target = LlamaTarget(smol, max_length=1024)
    configs = {
        "Medusa chain": MedusaDrafter.shipped(smol, tree=None),
        "Medusa tree": MedusaDrafter.shipped(smol),
        "EAGLE chain": EagleDrafter.shipped(smol, tree=None),
        "EAGLE dynamic tree": EagleDrafter.shipped(smol),
    }
    eval_prompts = [torch.tensor(chat_ids(tokenizer, p.text)) for p in training_mix(6, heldout=True)]
else:
    real_target = target
    configs = {
        "Medusa chain": MedusaDrafter(medusa_heads, tiny),
        "Medusa tree": MedusaDrafter(medusa_heads, tiny, tree=medusa_tree),
        "EAGLE chain": EagleDrafter(eagle_head, tiny),
        "EAGLE dynamic tree": EagleDrafter(eagle_head, tiny, tree=DynamicTree(depth=4, top_k=3, num_nodes=12)),
    }
    eval_prompts = [torch.tensor(prompt_ids[i]) for i in fit[:3]]  # prompts the heads were trained on

t0 = time.perf_counter()
results = {}
for temperature in (0.0, 1.0):
    params = SamplingParams(temperature=temperature)
    for name, drafter in tqdm(configs.items(), desc=f"temperature {temperature:g}", disable=FAST):
        gen = torch.Generator().manual_seed(SEED)
        emitted = passes = 0
        for prompt in eval_prompts:
            out = speculative_generate(real_target, drafter, prompt, NEW_TOKENS, params=params, gamma=3, generator=gen)
            emitted += out.stats.emitted
            passes += out.stats.target_passes
            if temperature == 0:
                ref = generate(real_target, prompt, NEW_TOKENS, params=GREEDY).new_tokens
                assert torch.equal(out.new_tokens, ref), name  # greedy speculation changes nothing
        results[(name, temperature)] = emitted / passes
print(f"{len(configs)} drafters x {len(eval_prompts)} prompts x 2 temperatures in {time.perf_counter() - t0:.0f} s")
print(f"{'drafter':22s} {'tau at T=0':>11s} {'tau at T=1':>11s}")
for name in configs:
    print(f"{name:22s} {results[(name, 0.0)]:11.2f} {results[(name, 1.0)]:11.2f}")

# %% [markdown]
# Trees beat chains because a wrong top-1 guess no longer ends the step:
# the second or third candidate can still be accepted. On SmolLM2 (full mode;
# the benchmark figures are in `docs/heads.md`) EAGLE also beats Medusa, because
# each of its guesses is conditioned on the previous one, while Medusa's heads
# guess blind. (In fast mode both were trained and scored on the same few
# replies of a random tiny model, so both mostly memorise them.) Sampling at
# temperature 1 lowers everything: the target's choice is no longer its
# argmax, so even a perfect guesser of the argmax is accepted less often.

# %% [markdown]
# ## 5b. Training-time test: drafts that survive past the first
#
# At drafting time the EAGLE head feeds on its *own* predicted features: the
# second draft reads the head's guess of z, not the target's z. A head trained
# only on the target's true features (one unroll step, teacher forcing) has
# never seen its own errors, so its later drafts fall apart. Training-time test
# (EAGLE-3; HASS trains on the draft's rollouts in the same spirit) runs the
# head on its own outputs for U steps during training and adds each step's loss,
# weighted 0.5^j for step j (`train_eagle(..., unroll_steps=U)`). Below, the tiny
# head is retrained with U = 1 and U = 3 beside the U = 2 head of section 4, on
# the same replies and steps, and each is scored by the share of positions whose
# first d drafts are all right. These are the replies it trained on (a random tiny
# model has nothing to generalise), so the figure shows the mechanism, not a
# held-out gain: the first draft barely moves, the later ones do.

# %%
t0 = time.perf_counter()
depth_heads = {u: train_eagle(data, tiny, fit, unroll_steps=u, **eagle_recipe)[0] for u in (1, 3)}
depth_heads = {1: depth_heads[1], 2: eagle_head, 3: depth_heads[3]}  # section 4's head trained with 2
by_depth = {u: chain_acceptance(h, tiny, data, fit, gamma=4)[1:].tolist() for u, h in depth_heads.items()}
print(f"two more tiny heads trained and scored in {time.perf_counter() - t0:.1f} s")
for u, acc in by_depth.items():
    print(f"unroll {u}: first d drafts all right, d = 1..4:", [round(a, 2) for a in acc])
plots.plot_curves([1, 2, 3, 4], {f"trained with {u} unroll step{'s' * (u > 1)}": acc for u, acc in by_depth.items()},
                  "drafts d", "share of positions with d drafts right",
                  title="Tiny EAGLE head: acceptance by depth")

# %% [markdown]
# ## 5c. Features from earlier layers
#
# EAGLE-3's other change: the head also reads the target's residual stream
# after earlier blocks (a low and a middle one), not only the last feature.
# specbook's head built with `feature_layers` adds W_fuse [rms(h_low) ; rms(h_mid)]
# to z_t at the true pairs, each state scaled to unit RMS (their scales differ
# by layer); W_fuse starts at zero, so training starts from EAGLE's head. Since
# the head's first map is linear, that is a linear map of [z_t ; rms(h_low) ;
# rms(h_mid) ; e(x_t+1)]: EAGLE-3's wider input. Pairs the head feeds with its own guesses
# have no earlier layers (the target never ran on them) and read its guess alone.
# The training data need one more target pass over each reply
# (`specbook.train.layer_features`, cached on disk for a real model), and a
# target keeps those states when built with `hidden_layers`. The tiny target has
# two blocks, so its head reads the state after block 1; it trains with U = 2
# beside section 4's head, on the same replies and steps. A two-block random
# model leaves an earlier layer little to add: here the point is the mechanism
# and the lossless check; `docs/heads.md` measures what it buys on SmolLM2.

# %%
from specbook.train.layer_features import layer_features

t0 = time.perf_counter()
data.layers = layer_features(data, tiny, (1,), progress=False)  # after block 1, every position of every reply
fused_head = train_eagle(data, tiny, fit, unroll_steps=2, feature_layers=(1,), **eagle_recipe)[0]
fused_depth = chain_acceptance(fused_head, tiny, data, fit, gamma=4)[1:].tolist()
data.layers = None  # the other heads read the last feature only
print(f"fused-feature tiny head trained and scored in {time.perf_counter() - t0:.1f} s")
print("last feature only:      first d drafts all right, d = 1..4:", [round(a, 2) for a in by_depth[2]])
print("plus the block-1 state: first d drafts all right, d = 1..4:", [round(a, 2) for a in fused_depth])
fused_target = LlamaTarget(tiny, max_length=256, hidden_layers=(1,))  # keeps the state the head reads
fused_prompt = torch.tensor(prompt_ids[fit[0]])
fused_drafter = EagleDrafter(fused_head, tiny, tree=DynamicTree(depth=3, top_k=3, num_nodes=8))
fused_out = speculative_generate(fused_target, fused_drafter, fused_prompt, 24, params=GREEDY)
assert torch.equal(fused_out.new_tokens, generate(fused_target, fused_prompt, 24, params=GREEDY).new_tokens)  # lossless
print(f"greedy tree decoding with it equals plain decoding; tau {fused_out.stats.tau:.2f}")
plots.plot_curves([1, 2, 3, 4], {"last feature": by_depth[2], "last feature + block 1": fused_depth},
                  "drafts d", "share of positions with d drafts right",
                  title="Tiny EAGLE head (U = 2): what an earlier layer adds")

# %% [markdown]
# On SmolLM2 the shipped head (trained with U = 2) records its held-out
# acceptance by depth in its metadata; `docs/heads.md` compares heads trained
# with U = 1 to 4 on the same replies, with the τ of 16- and 64-node trees.
# What each extra node costs is a property of this machine: from the tree curve
# of section 3b, a verify pass over n nodes costs v(n) plain passes, so the
# nodes beyond the first cost (v(n) - 1) / (n - 1) of a pass each, and a
# dynamic tree of depth d adds d head steps on top.

# %%
if USE_SMOLLM2:
    from specbook.drafters.eagle import load_eagle

    shipped_meta = load_eagle()[1]
    print("shipped SmolLM2 EAGLE head (unroll", shipped_meta["training"]["unroll"], "), held-out, first d drafts "
          "all right, d = 1..6:", shipped_meta["heldout"]["chain_survival_heldout"][1:])
for name, cv in tree_curves.items():
    per_node = [(v - 1) / (n - 1) for n, v in zip(cv["n"], cv["v"]) if n > 1]
    print(f"{name:8s}: each node beyond the first costs " + ", ".join(
        f"{c:.3f}" for c in per_node) + f" of a pass at n = {[n for n in cv['n'] if n > 1]}")

# %% [markdown]
# **Before and after new training data.** The shipped head was retrained twice
# more: first on replies that quote their prompts (invented notices to summarise,
# query or turn into JSON), then on those plus everyday prompts (advice questions,
# word problems, reports with a quote; `docs/heads.md`, "Notices" and "Everyday
# prompts"). The reports score each head beside the one shipped before it on the
# benchmark's held-out prompts, which none of them trained on: τ of a 64-node
# dynamic tree, per kind of prompt. The kinds the new data resembles gain most:
# a drafter learns the replies it was shown.

# %%
data_dir = Path(sb.__file__).resolve().parents[1] / "docs" / "data"
if (data_dir / "heads_everyday.json").exists():  # a clone of the repository (an installed package has no docs/)
    taus_by_head = {}
    for name in ("heads_notices.json", "heads_everyday.json"):  # e16 -> notices, notices -> everyday
        for h in json.loads((data_dir / name).read_text())["heads"]:
            taus_by_head.setdefault(h["head"].split(" ")[0], h["tau_tree_by_category"]["64"])
    kinds = list(next(iter(taus_by_head.values())))
    order = ["eagle_e16", "eagle_notices", "eagle_everyday"]
    fig, ax = plots.lesson_axes(None, width=7.5, height=3.4)
    for i, name in enumerate(order):
        ax.bar([k + (i - 1) * 0.27 for k in range(len(kinds))], [taus_by_head[name][c] for c in kinds], 0.25,
               label=name)
    ax.set_xticks(range(len(kinds)), kinds, fontsize=8)
    ax.set_ylabel("τ, 64-node tree")
    ax.set_title("Three shipped EAGLE heads, oldest first (the last is shipped now)")
    ax.legend(fontsize=8)
    display(fig)

# %% [markdown]
# ## 6. Lossless tree verification vs typical acceptance
#
# Medusa also proposed *typical acceptance*: accept a candidate if the target
# gives it enough probability, no rejection sampling. It is fast and sounds
# reasonable, but it is not lossless. One position, three deterministic
# candidates under the root; we sample the first emitted token many times with
# each rule and test the counts against the target's law p with a chi-square
# test on raw counts.

# %%
p_target = torch.tensor([0.05, 0.30, 0.25, 0.20, 0.12, 0.08], dtype=torch.float64)
star = from_paths([[0], [1], [2]])  # three children of the root
candidates = torch.tensor([[0, 4, 5]])  # the heads happened to like three unlikely tokens
probs = p_target.expand(N_DRAWS, 4, 6).clone()  # the same target row at every tree position
gen = torch.Generator().manual_seed(SEED)
lossless, _, _ = verify_tree(probs, None, candidates.expand(N_DRAWS, 3), star.parents, gen)
typical, _, _ = typical_acceptance(probs, candidates.expand(N_DRAWS, 3), star.parents, generator=gen)
pvalues = {}
for name, first in (("lossless tree rule", lossless[:, 0]), ("typical acceptance", typical[:, 0])):
    counts = torch.bincount(first, minlength=6).numpy()
    res = sb.stats.chisquare_gof(counts, p_target.numpy())
    pvalues[name] = res.pvalue
    print(f"{name:20s} counts {counts.tolist()}  chi-square p = {res.pvalue:.3g}")
    if name.startswith("lossless"):
        assert res.pvalue > LEVEL, "the lossless rule must follow p"
    else:
        assert res.pvalue < LEVEL, "typical acceptance is biased towards the candidates"

# %% [markdown]
# Typical acceptance emits candidate tokens far more often than p says: the
# heads' preferences leak into the output. The lossless rule tries the
# candidates in turn, accepting each with probability p(x) and removing it from
# p when rejected (sampling without replacement), and ends exactly on p.
#
# **What "lossless" assumes about the siblings.** The tree rule's proof applies the
# one-position identity of lesson 2 once per sibling, to the current residual and that
# sibling's q. That holds when each sibling is *an independent draw* from the q reported
# for it, or when the candidates are fixed in advance and verified as one-hot
# (q(x) = 1: the case above). Medusa's and EAGLE's trees are neither: they take their
# heads' top-k, distinct tokens chosen without replacement. specbook's Medusa and EAGLE
# drafters therefore hand their tree candidates to the verifier as fixed
# (`draft_probs=None`), which is lossless; reporting the heads' q beside a top-k list
# breaks the proof. Exactly, with `specbook.tree_laws` on a root with two children:

# %%
from fractions import Fraction

from specbook.tree_laws import tree_block_law

p_root = [Fraction(1, 10), Fraction(3, 10), Fraction(6, 10)]  # the target at the root
q_head = [Fraction(1, 2), Fraction(3, 10), Fraction(1, 5)]  # the head's law, the same for both children
two_children = from_paths([[0], [1]]).parents


def first_token_law(block_law):
    """The law of the first emitted token, from the law of whole blocks."""
    out = [Fraction(0)] * len(p_root)
    for block, pr in block_law.items():
        out[block[0]] += pr
    return out


sibling_laws = {
    "two independent draws from q, q reported": tree_block_law([p_root] * 3, [q_head] * 2, two_children),
    "top-2 of q (tokens 0 and 1), verified as fixed": tree_block_law([p_root] * 3, None, two_children, [0, 1]),
    "top-2 of q, q reported": tree_block_law([p_root] * 3, [q_head] * 2, two_children, [0, 1]),
}
sibling_laws = {name: first_token_law(law) for name, law in sibling_laws.items()}
for name, law in sibling_laws.items():
    print(f"{name:48s} first token {[str(v) for v in law]}  (p = {[str(v) for v in p_root]})")

# %% [markdown]
# ## Exercises
#
# Each exercise has an answer cell and a check cell. Write your answer in place of the
# `...`, run the cell, then run the check below it: it says whether the answer is right
# and, if not, what to look at again.
#
# **1. Predict, then run.** For the choice list
# `[[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]]`: how many nodes does
# the tree have (`n_nodes`), how many root-to-leaf paths (`n_paths`), and how many entries
# of the attention-mask row of node `[0, 0, 0]` are True (`mask_row_true`)? The cell after
# the check builds the tree.
#
# <details><summary>Solution</summary>
#
# Seven nodes, one per choice. The leaves are `[2]`, `[0, 1]`, `[1, 0]` and
# `[0, 0, 0]`: four paths. Node `[0, 0, 0]` sees itself and its two ancestors
# `[0]` and `[0, 0]`: three True entries (the cached context is not part of
# this node-by-node mask).
# </details>

# %% tags=["solution"]
### BEGIN SOLUTION
n_nodes = 7
n_paths = 4
mask_row_true = 3
### END SOLUTION

# %%
exercises.check("05.1", n_nodes, n_paths, mask_row_true)

# %%
ex_tree = from_paths([[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]])
ex_mask = tree_mask(ex_tree.parents)
print(len(ex_tree.parents), "nodes,", len(leaf_paths(ex_tree.parents)), "paths, mask row of [0, 0, 0]:",
      ex_mask[-1].int().tolist())
draw_tree(ex_tree.parents, context_length=2)

# %% [markdown]
# **2. Medusa's labels.** Write `medusa_labels(tokens, t, K)`: the K tokens the
# heads should predict when the target has read `tokens[: t + 1]` (0-based t),
# with -100 past the end. The check compares it with the trainer's labels (`labels_`) on the
# sequence of section 4, at every reply position.
#
# <details><summary>Solution</summary>
#
# The target's own head predicts `tokens[t + 1]`; head k predicts the token k
# positions after it, `tokens[t + k + 1]`:
#
# ```python
# def medusa_labels(tokens, t, K):
#     return [int(tokens[t + k + 1]) if t + k + 1 < len(tokens) else -100 for k in range(1, K + 1)]
# ```
# </details>

# %% tags=["solution"]
def medusa_labels(tokens, t: int, K: int) -> list[int]:
    """Head k's label (k = 1..K) after the target read tokens[: t + 1], -100 past the end."""
    ### BEGIN SOLUTION
    return [int(tokens[t + k + 1]) if t + k + 1 < len(tokens) else -100 for k in range(1, K + 1)]
    ### END SOLUTION


# %%
exercises.check("05.2", medusa_labels, tok, P, labels_)

# %% [markdown]
# **3. A tree budget from the stopwatch.** Using the measured tree verify-cost
# curves of section 3b (`tree_curves`), what is the largest timed node count whose pass costs
# at most 1.5 plain passes, in float32 and in bfloat16? Give a dict, `tree_budget =
# {"float32": ..., "bfloat16": ...}`. Before computing it, predict which dtype allows the
# bigger tree on your machine (`bigger_tree`): (a) float32; (b) bfloat16; (c) the same.
#
# <details><summary>Solution</summary>
#
# Keep the sizes n with v(n) ≤ 1.5 and take the largest (n = 1 always
# qualifies). The flatter curve, bfloat16 where it is native, allows the bigger
# tree; a big tree there costs little more than a chain. Where the timed sizes are
# few (fast mode) both budgets can be the same.
# </details>

# %% tags=["solution"]
### BEGIN SOLUTION
tree_budget = {name: max(n for n, x in zip(cv["n"], cv["v"]) if x <= 1.5) for name, cv in tree_curves.items()}
bigger_tree = ("b" if tree_budget["bfloat16"] > tree_budget["float32"]
               else "a" if tree_budget["float32"] > tree_budget["bfloat16"] else "c")
### END SOLUTION

# %%
exercises.check("05.3", tree_budget, bigger_tree, tree_curves)

# %% [markdown]
# ## Concept check
#
# Five short questions on the whole lesson. Give numbers as numbers and a choice as its
# letter in quotes (`"b"`), then run the check cell.
#
# 1. Number the depths from 0 (the root's children). How many True entries has the
#    attention-mask row of a node at depth 2? (`c1`)
# 2. The target has read x_1 … x_t and its own LM head predicts x_{t+1}. Medusa head k
#    (k = 1..K) is trained to predict (`c2`) (a) x_{t+k}; (b) x_{t+k+1}; (c) x_{t+k+2}.
# 3. Medusa's typical acceptance (`c3`) (a) is lossless, and faster than rejection
#    sampling; (b) is biased towards the candidates: the heads' preferences leak into the
#    output; (c) is lossless at temperature 1 only.
# 4. A head proposes its top-2 tokens (distinct, chosen without replacement) as two
#    siblings, and the verifier is given the head's q for both. (`c4`) (a) the output still
#    follows the target's law; (b) it does not: the candidates must be handed over as fixed
#    (one-hot) for the tree rule to be exact.
# 5. How many flop per weight byte does a 64-node verify pass do in bfloat16? (`c5`)
#
# <details><summary>Answers</summary>
#
# 1. 3: itself and its two ancestors. 2. (b). 3. (b). 4. (b): the proof needs independent
# draws from the reported q, or fixed candidates. 5. 2 · 64 / 2 = 64.
#
# </details>

# %% tags=["solution"]
### BEGIN SOLUTION
c1, c2, c3, c4, c5 = 3, "b", "b", "b", 64
### END SOLUTION

# %%
for key, answer in {"05.c1": c1, "05.c2": c2, "05.c3": c3, "05.c4": c4, "05.c5": c5}.items():
    exercises.check(key, answer)

# %% [markdown]
# ## Checks: what this lesson taught

# %%
# 1. A tree's mask lets each node see itself and its ancestors only (section 1), and one masked pass
#    scored every branch as a separate chain would (section 2, asserted there path by path).
assert all(int(mask[i].sum()) == int(tree.depth[i]) + 1 for i in range(len(tree.parents)))
# 2. Greedy tree verification kept the longest path a chain-by-chain verification would keep.
assert tokens[0, : n_emitted[0]].tolist() == best_chain
# 3. "One pass" over 64 nodes: the curves are relative to one node, and 64 float32 nodes do 32 flop/byte.
for cv in tree_curves.values():
    assert cv["n"] == TREE_SIZES and cv["v"][0] == 1.0 and all(x > 0 for x in cv["v"])
assert intensity == {"float32": 32.0, "bfloat16": 64.0}
# 4. Medusa head k is trained on x_{t+k+1}; EAGLE reads [z_t ; e(x_{t+1})]; z_t = norm(f_t) -> LM head = x_{t+1},
#    and both drafters read that post-norm z_t.
assert labels_.shape[1] == K and tuple(eagle_head.fc.weight.shape) == (cfg.dim, 2 * cfg.dim) and reads_post_norm
# 5. Speculation emitted at least one token per target pass and at most a full path plus the bonus token;
#    at temperature 0 every configuration reproduced plain greedy decoding (asserted in section 5).
assert all(1.0 <= tau <= 1 + 12 for tau in results.values())
# 6. The lossless tree rule follows p; typical acceptance does not.
assert pvalues["lossless tree rule"] > LEVEL and pvalues["typical acceptance"] < LEVEL
# 7. Tree verification is exact for independently drawn siblings and for fixed (one-hot) candidates; a top-k list
#    verified with the heads' q is not, which is why the drafters hand their trees over as fixed.
laws_found = list(sibling_laws.values())
assert laws_found[0] == laws_found[1] == p_root and laws_found[2] != p_root
# 7b. Training on its own outputs (section 5b): the head trained with 3 unroll steps keeps its second and third
#     drafts right far more often than the teacher-forced one, on the replies both trained on.
assert by_depth[3][1] > by_depth[1][1] + 0.2 and by_depth[3][2] > by_depth[1][2] + 0.2
# 8. Exercise 1's tree: seven nodes, four leaves, and the deepest node's mask row holds it and its two ancestors.
assert len(ex_tree.parents) == 7 and len(leaf_paths(ex_tree.parents)) == 4 and int(ex_mask[-1].sum()) == 3
# 9. Your exercises and concept check, as graded above.
graded = exercises.results("05")
print(f"exercises and concept check: {sum(r.passed for r in graded)} of {len(graded)} right")
### BEGIN SOLUTION
assert len(graded) == 8 and all(r.passed for r in graded), [str(r) for r in graded]
### END SOLUTION
print(f"all lesson-5 checks passed in {time.perf_counter() - _started:.1f} s (fast mode: {FAST})")
