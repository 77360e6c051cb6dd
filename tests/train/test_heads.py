"""Medusa heads and EAGLE: drafting from the target's own features, in chains and trees.

Without a download (tiny random Llamas, seconds):
* the features a drafter mirrors through ``observe`` equal the target's hidden states of
  the emitted sequence, after chains and after tree compaction;
* EAGLE's incremental drafting (its own cache, re-synchronised every step) equals the
  training-time unroll, and every node of an EAGLE-2 dynamic tree has as children the top-k
  of a from-scratch recomputation along its path;
* greedy speculative decoding with Medusa and EAGLE (chains, choice trees, dynamic trees;
  batch 1 and 2) equals greedy autoregressive decoding token for token;
* the law of the first two sampled tokens equals the target's exact law (chi-square on raw
  counts), and a broken twin that reports a distribution other than the one it sampled
  from is caught;
* both trainers lower their loss, are deterministic, and round-trip through safetensors;
  the choice-tree builder is exact on hand-made ranks; training prompts are disjoint from
  the benchmark prompts and the held-out split is stable.

``@pytest.mark.model`` on SmolLM2-135M-Instruct with the shipped heads: greedy tree decoding
with Medusa and with EAGLE equals greedy autoregressive decoding.  Near ties: verification
scores several positions in one forward, plain decoding one, so logits differ by float32
rounding (about 1e-5).  The prompts were chosen with a top-2 logit margin of at least
MIN_MARGIN at every generated position (asserted), so any divergence is a bug, and the
failure message then reports the margin at the first differing token.
"""
from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
import torch

from specbook.decode import generate, speculative_generate
from specbook.drafters.eagle import DynamicTree, EagleConfig, EagleDrafter, EagleHead, load_eagle, save_eagle
from specbook.drafters.medusa import (WEIGHTS_DIR, MedusaConfig, MedusaDrafter, MedusaHeads, load_medusa,
                                      save_medusa)
from specbook.models import LlamaConfig, LlamaModel, LlamaTarget
from specbook.sampling import GREEDY, SamplingParams
from specbook.train.eagle import chain_acceptance, train_eagle, unroll
from specbook.train.features import features_from_ids, validation_indices
from specbook.train.heads_data import all_prompts, overlaps, training_mix
from specbook.train.prompts import Prompt, is_heldout
from specbook.train.medusa import best_choices, head_ranks, tokens_per_pass, train_medusa
from support import check_fit, check_rejects, exact_two_token_law, sample_two_tokens

MIN_MARGIN = 1e-3
REPO = Path(__file__).resolve().parents[2]
V_TINY, VD_TINY = 12, 9


def tiny_model(seed: int = 0, vocab: int = V_TINY, std: float = 0.35) -> LlamaModel:
    cfg = LlamaConfig(vocab_size=vocab, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, intermediate_size=64,
                      max_position_embeddings=256, rope_theta=500.0)
    return LlamaModel(cfg).init_weights(std=std, generator=torch.Generator().manual_seed(seed)).requires_grad_(False)


def tiny_vocab(model, size: int = VD_TINY, seed: int = 1) -> torch.Tensor:
    return torch.randperm(model.config.vocab_size, generator=torch.Generator().manual_seed(seed))[:size]


def tiny_medusa(model, num_heads: int = 3, seed: int = 2) -> MedusaHeads:
    heads = MedusaHeads(MedusaConfig(model.config.dim, num_heads, VD_TINY, model.config.vocab_size), tiny_vocab(model))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return heads.eval()


def tiny_eagle(model, seed: int = 3) -> EagleHead:
    torch.manual_seed(seed)  # nn.Linear's default initialisation
    return EagleHead(EagleConfig.for_target(model.config, VD_TINY), tiny_vocab(model)).eval()


def prompts(n: int, seed: int = 4, vocab: int = V_TINY) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (int(torch.randint(2, 9, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]


def drafters(model):
    medusa, eagle = tiny_medusa(model), tiny_eagle(model)
    return {
        "medusa-chain": MedusaDrafter(medusa, model),
        "medusa-tree": MedusaDrafter(medusa, model, tree=[[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]]),
        "eagle-chain": EagleDrafter(eagle, model),
        "eagle-tree": EagleDrafter(eagle, model, tree=DynamicTree(depth=4, top_k=3, num_nodes=10)),
    }


# ------------------------------------------------------------------------- the observe hook

@pytest.mark.parametrize("kind", ["medusa-tree", "eagle-chain", "eagle-tree"])
def test_observed_features_are_the_targets_hidden_states_of_the_emitted_sequence(kind):
    model = tiny_model()
    target, drafter = LlamaTarget(model, max_length=128), drafters(model)[kind]
    for p in prompts(3):
        out = speculative_generate(target, drafter, torch.tensor(p), 25, params=GREEDY, gamma=3)
        seq = out.tokens[0]
        assert out.stats.target_passes < 25  # it did speculate
        # the cache holds every emitted token but the pending one
        with torch.no_grad():
            _, hidden = model(seq[None, :-1], return_hidden=True)
        mirrored = drafter.features.features(0)
        assert mirrored.shape == (len(seq) - 1, model.config.dim)
        torch.testing.assert_close(mirrored, model.norm(hidden[0]), atol=1e-4, rtol=1e-4)


def test_propose_without_observe_is_refused():
    model = tiny_model()
    for kind, d in drafters(model).items():
        with pytest.raises(ValueError, match="observe"):
            d.propose([torch.tensor([1, 2, 3])], 3, GREEDY)


# ------------------------------------------------------------------ EAGLE drafting == training

def _observe_context(drafter, target, context: list[int]) -> None:
    target.reset(1)
    target.forward(torch.tensor([context[:-1]]))
    drafter.observe(target, [list(range(len(context) - 1))])


def test_eagle_incremental_chain_equals_the_training_unroll():
    model = tiny_model()
    head = tiny_eagle(model)
    drafter, target = EagleDrafter(head, model), LlamaTarget(model, max_length=64)
    seq = prompts(1, seed=9)[0] + prompts(1, seed=10)[0] * 3  # 6..24 tokens
    gamma = 4
    with torch.no_grad():
        _, hidden = model(torch.tensor([seq]), return_hidden=True)
        z = model.norm(hidden)  # (1, T, D)
        L = len(seq) - 1 - gamma
        zhats = unroll(head, model.embed, z[:, :L], torch.tensor([seq[1:]]), gamma)
    lm = model.lm_head.weight[head.vocab]
    for t in range(L):
        # context x_0..x_{t+1}: the last pair fed is (z_t, x_{t+1}); drafts guess x_{t+2}, ...
        _observe_context(drafter, target, seq[: t + 2])
        draft = drafter.propose([torch.tensor(seq[: t + 2])], gamma, GREEDY)
        # the unroll feeds the true tokens; the drafter its own guesses: compare while they agree
        for j in range(gamma):
            expected = int(head.vocab[(zhats[j][0, t] @ lm.T).argmax()])
            assert int(draft.tokens[0, j]) == expected, (t, j)
            if j + 2 + t >= len(seq) or expected != seq[t + j + 2]:
                break


def test_eagle_dynamic_tree_children_are_the_top_k_of_each_path():
    model = tiny_model()
    head = tiny_eagle(model)
    shape = DynamicTree(depth=3, top_k=3, num_nodes=3 + 3 * 3 * 2)  # keep every node created
    drafter, target = EagleDrafter(head, model, tree=shape), LlamaTarget(model, max_length=64)
    context = prompts(1, seed=11)[0] + [5, 6, 7]
    _observe_context(drafter, target, context)
    draft = drafter.propose([torch.tensor(context)], 0, GREEDY)
    tokens, parents = draft.tokens[0].tolist(), draft.parents.tolist()
    assert len(tokens) == shape.num_nodes and parents[:3] == [-1, -1, -1]
    assert all(p < i for i, p in enumerate(parents))
    lm = model.lm_head.weight[head.vocab]
    with torch.no_grad():
        _, hidden = model(torch.tensor([context[:-1]]), return_hidden=True)
        z = model.norm(hidden)
    for node in [-1] + list(range(len(tokens))):
        kids = [tokens[i] for i in range(len(tokens)) if parents[i] == node]
        if not kids:
            continue
        path = []
        a = node
        while a >= 0:
            path.insert(0, tokens[a])
            a = parents[a]
        # from scratch, no cache: true pairs of the context, then (zhat, token) along the path
        feats, toks = z[0], context[1:]
        with torch.no_grad():
            out = head(feats[None], model.embed(torch.tensor([toks])), torch.arange(len(toks))[None])
            zhat = out[:, -1:]
            for d, tok in enumerate(path):
                feats = torch.cat([feats, zhat[0]])
                toks = toks + [tok]
                out = head(feats[None], model.embed(torch.tensor([toks])), torch.arange(len(toks))[None])
                zhat = out[:, -1:]
        top = (zhat[0, 0] @ lm.T).topk(shape.top_k).indices
        assert sorted(kids) == sorted(int(head.vocab[i]) for i in top), node


def test_eagle_dynamic_tree_keeps_the_best_nodes_and_needs_batch_one():
    model = tiny_model()
    drafter, target = EagleDrafter(tiny_eagle(model), model, tree=DynamicTree(4, 3, 7)), LlamaTarget(model, 64)
    context = prompts(1, seed=12)[0] + [1, 2]
    _observe_context(drafter, target, context)
    draft = drafter.propose([torch.tensor(context)], 4, GREEDY)
    assert draft.tokens.shape == (1, 7) and draft.probs is None
    target.reset(2)
    target.forward(torch.tensor([context[:-1]] * 2))
    drafter.observe(target, [list(range(len(context) - 1))] * 2)
    with pytest.raises(ValueError, match="batch size 1"):
        drafter.propose([torch.tensor(context)] * 2, 4, GREEDY)


def test_eagle_trees_of_one_and_two_nodes_are_the_heads_greedy_chain():
    """The benchmark's EAGLE budgets 1 and 2 (specbook.bench.registry.EAGLE_TREES): the head's first guess,
    then the guess after it, as a chain (each node the child of the one before), the chain drafter's drafts."""
    from specbook.bench.registry import EAGLE_TREES

    model = tiny_model()
    eagle, target = tiny_eagle(model), LlamaTarget(model, 64)
    for seed in (12, 13):
        context = prompts(1, seed=seed)[0] + [1, 2]
        chain = EagleDrafter(eagle, model)
        _observe_context(chain, target, context)
        guesses = chain.propose([torch.tensor(context)], 2, GREEDY).tokens[0].tolist()
        for budget in (1, 2):
            tree = EagleDrafter(eagle, model, tree=EAGLE_TREES[budget])
            _observe_context(tree, target, context)
            draft = tree.propose([torch.tensor(context)], 16, GREEDY)
            assert draft.tokens[0].tolist() == guesses[:budget]
            assert draft.parents.tolist() == list(range(-1, budget - 1))


# ------------------------------------------------------------------------- greedy equality

@pytest.mark.parametrize("kind", ["medusa-chain", "medusa-tree", "eagle-chain", "eagle-tree"])
def test_greedy_speculative_equals_greedy_autoregressive_tiny(kind):
    model = tiny_model()
    target, drafter = LlamaTarget(model, max_length=128), drafters(model)[kind]
    batch = [p[:2] for p in prompts(2, seed=5)]
    runs = [torch.tensor(p) for p in prompts(3)]
    if kind != "eagle-tree":  # Draft.parents is shared by the batch; dynamic trees are per row
        runs.append(torch.tensor(batch))
    for prompt in runs:
        ref = generate(target, prompt, 30, params=GREEDY).new_tokens
        out = speculative_generate(target, drafter, prompt, 30, params=GREEDY, gamma=3)
        assert torch.equal(out.new_tokens, ref), kind


# ------------------------------------------------------------------ the law of sampled tokens

class WrongQ(EagleDrafter):
    """Broken twin: samples from q but reports a flattened q (sqrt, renormalised) to the verifier,
    the 'q taken from a different distribution than the draft was sampled from' pitfall."""

    def propose(self, contexts, gamma, params, generator=None):
        draft = super().propose(contexts, gamma, params, generator)
        if draft.probs is not None:
            draft.probs = draft.probs.sqrt() / draft.probs.sqrt().sum(-1, keepdim=True)
        return draft


@pytest.mark.parametrize("kind", ["medusa-chain", "eagle-chain", "eagle-tree"])
def test_first_two_sampled_tokens_follow_the_targets_exact_law(kind):
    model = tiny_model(std=0.5)
    params = SamplingParams(temperature=0.8)
    prompt = [3, 1, 4]
    law = exact_two_token_law(model, prompt, params)
    drafter = drafters(model)[kind]
    if kind == "eagle-tree":  # batch 1 only: fewer, single-row samples
        target, g, observed = LlamaTarget(model, 32), torch.Generator().manual_seed(21), []
        for _ in range(600):
            res = speculative_generate(target, drafter, torch.tensor(prompt), 2, params=params, generator=g)
            observed.append(tuple(res.new_tokens[0].tolist()))
    else:
        observed = sample_two_tokens(model, drafter, prompt, params, 2000, seed=20)
    check_fit(f"heads {kind} two-token law", law, observed)


def test_broken_twin_reporting_another_q_is_caught():
    model = tiny_model(std=0.5)
    params = SamplingParams(temperature=0.8)
    prompt = [3, 1, 4]
    twin = WrongQ(tiny_eagle(model), model)
    observed = sample_two_tokens(model, twin, prompt, params, 2000, seed=22)
    check_rejects("eagle chain reporting sqrt(q)", exact_two_token_law(model, prompt, params), observed)


# ------------------------------------------------------------------------------- training

def tiny_data(model, n: int = 12, new: int = 24):
    return features_from_ids(model, prompts(n, seed=30), max_new_tokens=new, eos_id=0, batch_size=6)


def test_medusa_training_lowers_the_loss_is_deterministic_and_round_trips(tmp_path):
    model = tiny_model(std=0.5)
    fs = tiny_data(model)
    fit, val = validation_indices(fs, every=4)
    vocab = tiny_vocab(model)
    runs = [train_medusa(fs, model, fit, num_heads=2, vocab=vocab, epochs=20, batch_size=32, lr=3e-2,
                         progress=False) for _ in range(2)]
    (heads, log), (heads2, _) = runs
    assert log["loss"][-1][1] < 0.7 * log["loss"][0][1]
    for a, b in zip(heads.parameters(), heads2.parameters()):
        assert torch.equal(a, b)
    save_medusa(heads, tmp_path / "m", {"trees": {"4": [[0], [1], [0, 0], [0, 1]]}})
    loaded, meta = load_medusa(tmp_path / "m")
    z = torch.randn(5, model.config.dim)
    lm = model.lm_head.weight[vocab]
    torch.testing.assert_close(loaded(z, lm), heads(z, lm), atol=2e-2, rtol=2e-2)  # float16 on disk
    assert torch.equal(loaded.vocab, heads.vocab) and meta["trees"]["4"][2] == [0, 0]
    untrained = MedusaHeads(MedusaConfig(model.config.dim, 2, len(vocab), model.config.vocab_size), vocab)
    before, after = (head_ranks(h, model, fs, fit, top_s=4) for h in (untrained, heads))
    assert after.shape[1] == 2
    for k in range(2):  # each head guesses its token (k+2 ahead) far more often than at the start
        assert (after[:, k] == 0).float().mean() > (before[:, k] == 0).float().mean() + 0.2


def test_eagle_training_lowers_the_loss_is_deterministic_and_round_trips(tmp_path):
    model = tiny_model(std=0.5)
    fs = tiny_data(model)
    fit, _ = validation_indices(fs, every=4)
    vocab = tiny_vocab(model)
    runs = [train_eagle(fs, model, fit, vocab=vocab, epochs=8, batch_sequences=3, lr=3e-3, unroll_steps=2,
                        w_cls=1.0, progress=False) for _ in range(2)]
    (head, log), (head2, _) = runs
    assert log["loss"][-1][1] < 0.7 * log["loss"][0][1]
    for a, b in zip(head.parameters(), head2.parameters()):
        assert torch.equal(a, b)
    survival = chain_acceptance(head, model, fs, fit, gamma=3)
    assert survival[0] == 1 and (survival[1:] <= survival[:-1]).all() and survival[1] > 0.2
    save_eagle(head, tmp_path / "e", {"note": "tiny"})
    loaded, meta = load_eagle(tmp_path / "e")
    z = torch.randn(1, 4, model.config.dim)
    e = model.embed(torch.tensor([[1, 2, 3, 4]]))
    pos = torch.arange(4)[None]
    torch.testing.assert_close(loaded(z, e, pos), head(z, e, pos), atol=3e-2, rtol=3e-2)
    assert meta["note"] == "tiny"


def test_every_unroll_step_weighs_in_the_eagle_loss():
    """Step j of the unroll is weighted 0.5 ** j by default, however many steps there are; a list of
    weights that does not cover every step is refused (a zip over three default weights used to
    drop the fourth step and later ones from the loss without a word)."""
    model = tiny_model(std=0.5)
    fs = tiny_data(model)
    fit, _ = validation_indices(fs, every=4)
    vocab = tiny_vocab(model)

    def first_loss(**kw):
        _, log = train_eagle(fs, model, fit, vocab=vocab, epochs=1, batch_sequences=3, max_steps=1, progress=False,
                             **kw)
        return log["loss"][0][1]

    four = first_loss(unroll_steps=4)
    assert four == first_loss(unroll_steps=4, step_weights=(1.0, 0.5, 0.25, 0.125))
    dropped = first_loss(unroll_steps=4, step_weights=(1.0, 0.5, 0.25, 0.0))  # the old behaviour: a twin
    assert four > dropped + 1e-3
    assert first_loss(unroll_steps=2) == first_loss(unroll_steps=2, step_weights=(1.0, 0.5))  # shipped recipe
    for bad in ((1.0, 0.5), (1.0, 0.5, -1.0), (1.0, float("nan"), 0.5)):
        with pytest.raises(ValueError, match="step_weights"):
            first_loss(unroll_steps=3, step_weights=bad)


def test_warmup_cosine_is_each_trainers_former_schedule():
    """One schedule module; both joins reproduce the formulas the shipped weights were trained with."""
    from specbook.train.schedule import warmup_cosine, warmup_cosine_factor

    steps, warm = 37, 5
    for i in range(steps + 3):  # Medusa and EAGLE: a warm-up ramp times a cosine over all steps
        old = min(1.0, (i + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(i, steps) / steps))
        assert warmup_cosine_factor(i, steps, warm) == old
    for s in range(steps):  # the distilled draft: the cosine starts where the warm-up ends
        old = (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, steps - warm)))
        assert warmup_cosine_factor(s, steps, warm, cosine_after_warmup=True) == old
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = warmup_cosine(opt, steps, warm)
    assert opt.param_groups[0]["lr"] == warmup_cosine_factor(0, steps, warm)
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == warmup_cosine_factor(1, steps, warm)
    with pytest.raises(ValueError, match="warmup"):
        warmup_cosine(opt, steps, 0)


def test_best_choices_is_exact_on_hand_made_ranks():
    # 10 positions; ranks of the right token under heads 0 and 1 (3 = not in the top 3)
    ranks = torch.tensor([[0, 0]] * 4 + [[0, 1]] * 2 + [[1, 0]] * 2 + [[2, 3]] + [[3, 0]])
    assert best_choices(ranks, 1, top_s=3) == [[0]]
    # shares: (0,) 6, (0, 0) 4, then a tie at 2 between (0, 1) and (1,): the smaller path first
    assert best_choices(ranks, 3, top_s=3) == [[0], [0, 0], [0, 1]]
    tree = best_choices(ranks, 5, top_s=3)
    assert tree == [[0], [0, 0], [0, 1], [1], [1, 0]]
    # two drafts accepted at the 8 positions whose ranks are a path of the tree, none at the other 2
    assert tokens_per_pass(ranks, tree) == pytest.approx(1 + (4 * 2 + 2 * 2 + 2 * 2) / 10)
    assert tokens_per_pass(ranks, None, chain=2) == pytest.approx(1 + (4 * 2 + 2 * 1) / 10)
    with pytest.raises(ValueError):
        best_choices(torch.tensor([1, 2]), 3)


def test_training_prompts_are_disjoint_from_the_benchmark_and_the_split_is_stable():
    from specbook.bench.workloads import load_prompts

    bench = [p.prompt for p in load_prompts()]
    assert overlaps(bench) == []
    long_prompt = next(p.text for p in all_prompts() if len(p.text) > 200)
    assert overlaps(["Please: " + long_prompt[50:130] + " thanks"]) != []  # the check can fail
    assert overlaps(["Tell me: " + all_prompts()[0].text]) != []  # short prompts must not hide inside
    train, held = training_mix(60), training_mix(12, heldout=True)
    assert not any(is_heldout(p.id) for p in train) and all(is_heldout(p.id) for p in held)
    assert training_mix(30) == train[:30]  # growing the set keeps every earlier prompt


def test_eagle_training_under_bfloat16_autocast_runs_its_products_in_bfloat16_and_still_learns():
    """``autocast=torch.bfloat16`` (the trainer's --autocast): the loss starts where float32's does (to
    bfloat16's rounding), falls as far, and the head's weights and optimizer stay float32."""
    model = tiny_model(std=0.5)
    fs = tiny_data(model)
    fit, _ = validation_indices(fs, every=4)
    vocab = tiny_vocab(model)
    runs = {dtype: train_eagle(fs, model, fit, vocab=vocab, epochs=8, batch_sequences=3, lr=3e-3, unroll_steps=2,
                               w_cls=1.0, progress=False, autocast=dtype) for dtype in (None, torch.bfloat16)}
    (_, log32), (head16, log16) = runs[None], runs[torch.bfloat16]
    assert all(p.dtype == torch.float32 for p in head16.parameters())
    first32, first16 = log32["loss"][0][1], log16["loss"][0][1]
    assert first16 == pytest.approx(first32, rel=0.02) and first16 != first32  # the same loss, rounded otherwise
    assert log16["loss"][-1][1] < 0.7 * first16
    assert chain_acceptance(head16, model, fs, fit, gamma=3)[1] > 0.2
    with pytest.raises(ValueError, match="autocast"):
        train_eagle(fs, model, fit, vocab=vocab, epochs=1, progress=False, autocast=torch.float64)


def test_bad_arguments():
    model = tiny_model()
    with pytest.raises(ValueError, match="draft_vocab_size"):
        MedusaConfig(32, 2, 20, 12)
    with pytest.raises(ValueError, match="distinct"):
        MedusaHeads(MedusaConfig(32, 2, 3, 12), torch.tensor([1, 1, 2]))
    with pytest.raises(ValueError, match="deep"):
        MedusaDrafter(tiny_medusa(model, num_heads=1), model, tree=[[0], [0, 0]])
    other = tiny_model(vocab=16)
    with pytest.raises(ValueError, match="width|vocab"):
        EagleDrafter(tiny_eagle(model), other)
    with pytest.raises(ValueError, match="num_nodes"):
        DynamicTree(3, 2, 0)
    with pytest.raises(FileNotFoundError, match="specbook.train.medusa"):
        load_medusa(WEIGHTS_DIR / "does-not-exist")


# ------------------------------------------------------------------ SmolLM2 with shipped heads

SMOL_PROMPTS = [  # held-out prompts of the heads' data (never trained on), chosen free of near ties
    "Explain how glaciers shape valleys.",
    "Write a Python function that returns the largest of three numbers.",
]


@pytest.fixture(scope="module")
def smollm2():
    from specbook.models.smollm2 import load_smollm2

    model, tokenizer = load_smollm2(dtype=torch.float32)  # float32: training and recorded figures
    return model, tokenizer


def _margins(model, seq: torch.Tensor, start: int) -> torch.Tensor:
    with torch.no_grad():
        logits = model(seq[None, :-1])[0, start - 1 :]  # predictions of the generated tokens
    top2 = logits.topk(2, dim=-1).values
    return top2[:, 0] - top2[:, 1]


def _check_equal(model, prompt, ref, out, label):
    if torch.equal(out, ref):
        return
    i = int((out != ref).nonzero()[0, 1])
    seq = torch.cat([prompt, ref[0]])
    margin = float(_margins(model, seq, len(prompt))[i])
    pytest.fail(f"{label}: greedy output differs from autoregressive at generated token {i} "
                f"(target's top-2 logit margin there: {margin:.2e}; a margin below ~1e-5 would be a float32 near tie)")


@pytest.mark.model
def test_smollm2_greedy_tree_decoding_with_medusa_and_eagle_equals_autoregressive(smollm2):
    from specbook.models.chat import chat_ids

    model, tokenizer = smollm2
    medusa, mmeta = load_medusa()
    eagle, emeta = load_eagle()
    kinds = {
        "medusa-tree": MedusaDrafter(medusa, model, tree=mmeta["trees"][mmeta["default_tree"]]),
        "eagle-tree": EagleDrafter(eagle, model, tree=DynamicTree(**emeta["default_tree"])),
        "eagle-chain": EagleDrafter(eagle, model),
        # the head and its LM head in bfloat16 under the float32 target (as the benchmark runs it where bfloat16
        # is native): the target's verification still decides every token
        "eagle-tree-bf16": EagleDrafter(eagle, model, tree=DynamicTree(**emeta["default_tree"]), dtype=torch.bfloat16),
    }
    assert eagle.fc.weight.dtype == torch.float32 and kinds["eagle-tree-bf16"].head.fc.weight.dtype == torch.bfloat16
    target = LlamaTarget(model, max_length=256)
    n_new = 40
    taus = {label: [] for label in kinds}
    for text in SMOL_PROMPTS:
        prompt = torch.tensor(chat_ids(tokenizer, text))
        ref = generate(target, prompt, n_new, params=GREEDY).new_tokens
        margins = _margins(model, torch.cat([prompt, ref[0]]), len(prompt))
        assert margins.min() >= MIN_MARGIN, f"prompt {text!r} has a near tie (margin {margins.min():.2e}); pick another"
        for label, drafter in kinds.items():
            out = speculative_generate(target, drafter, prompt, n_new, params=GREEDY, gamma=5)
            _check_equal(model, prompt, ref, out.new_tokens, label)
            taus[label].append(out.stats.tau)
    # The shipped heads really draft: an untrained head gives tau ~ 1.0 (the shipped ones give
    # 1.3 to 3 on these prompts, depending on head, tree and prompt).
    mean = {label: sum(t) / len(t) for label, t in taus.items()}
    assert all(t > 1.2 for ts in taus.values() for t in ts), taus
    assert mean["eagle-tree"] > mean["eagle-chain"] and mean["eagle-tree"] > mean["medusa-tree"], mean


SHIPPED_HEADS = ("medusa_smollm2-135m", "eagle_smollm2-135m")


def _shipped_meta(name: str) -> dict:
    return json.loads((WEIGHTS_DIR / f"{name}.json").read_text())


def test_shipped_heads_record_their_exact_training_prompts():
    """Each shipped head names the prompt set it was trained on, and that file holds exactly the
    prompts its json lists (train, validation, held-out), each split as ``is_heldout`` says."""
    for name in SHIPPED_HEADS:
        training = _shipped_meta(name)["training"]
        path = training["prompt_set"]
        assert path.startswith("specbook/data/") and f"--prompt-set {path}" in training["command"], name
        rows = [json.loads(line) for line in (REPO / path).read_text().splitlines()]
        ids = {r["id"] for r in rows}
        assert len(ids) == len(rows) and all(r["prompt_token_ids"] for r in rows)
        assert ids == set(training["train_prompt_ids"]) | set(training["validation_prompt_ids"]) | set(
            training["heldout_prompt_ids"])
        assert {i for i in ids if is_heldout(i)} == set(training["heldout_prompt_ids"])


@pytest.mark.model
def test_shipped_prompt_sets_share_nothing_with_the_benchmark(smollm2):
    """The prompts the shipped heads were trained on (decoded from the prompt sets) share no
    60-character stretch with any benchmark prompt."""
    from specbook.bench.workloads import load_prompts

    _, tokenizer = smollm2
    bench = [p.prompt for p in load_prompts()]
    sets = {_shipped_meta(name)["training"]["prompt_set"] for name in SHIPPED_HEADS}
    for path in sorted(sets):
        rows = [json.loads(line) for line in (REPO / path).read_text().splitlines()]
        texts = [Prompt(r["id"], r["category"], tokenizer.decode(r["prompt_token_ids"])) for r in rows]
        assert overlaps(bench, prompts=texts) == [], path
        assert overlaps([texts[0].text[-200:]], prompts=texts) != []  # the check can fail


@pytest.mark.model
def test_shipped_heads_are_small_and_documented():
    for name in SHIPPED_HEADS:
        assert (WEIGHTS_DIR / f"{name}.safetensors").stat().st_size < 20e6, name  # no copy of the 49152 x 576 embedding / LM head
        meta = _shipped_meta(name)
        assert meta["training"]["command"].startswith("python -m specbook.train.")
        assert meta["heldout"], name
