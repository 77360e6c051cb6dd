"""Chain drafters: prompt lookup, layer skipping, the distilled draft model, HF drafts, adaptive gamma.

Three kinds of tests:
* no model (about a second each): the incremental n-gram index against a naive rescan and
  against transformers' prompt-lookup candidates, adaptive-gamma bookkeeping, the reduced
  vocabulary head, layer skipping and distillation on tiny random Llamas, and exact-law
  chi-square tests on toy Markov models (each with a broken twin that must be caught);
* ``@pytest.mark.model`` on SmolLM2-135M-Instruct (float32): every drafter's greedy output
  equals greedy autoregressive decoding token for token, prompt lookup equals transformers'
  ``generate(prompt_lookup_num_tokens=...)``, and the law of the first two sampled tokens
  equals the target's exact law with each drafter (chi-square, plus a broken twin).

Greedy equality and near ties: verification scores K+1 positions in one forward while plain
decoding scores one, so logits differ by float32 rounding (about 1e-5, see test_models.py).
Where the target's top two logits are closer than that, the two runs may legitimately pick
different tokens.  The prompts below were chosen with a top-2 margin of at least
MIN_MARGIN at every generated position (asserted), so any divergence is a bug; if one ever
happens, the failure message reports the margin at the first differing token.
"""
from __future__ import annotations

import random

import pytest
import torch

from specbook.decode import generate, speculative_generate
from specbook.drafters import (AdaptiveGamma, DraftModelDrafter, GammaPolicy, LayerSkipDrafter, NGramDrafter,
                               ReducedHead)
from specbook.drafters.adaptive import accepted_count
from specbook.drafters.layer_skip import EarlyExitModel, exit_layer_agreement
from specbook.drafters.ngram import NGramIndex
from specbook.drafters.small_model import DraftConfig, build_draft_model, load_draft, save_draft
from specbook.models import LlamaConfig, LlamaModel, LlamaTarget
from specbook.sampling import GREEDY, SamplingParams, logits_to_probs
from specbook.toy import make_toy_pair
from specbook.train.data import teacher_replies
from specbook.train.distill import DistillConfig, evaluate, train_draft
from support import check_fit, check_rejects
from support import WrappedTarget

MIN_MARGIN = 1e-3  # smallest top-2 logit gap allowed along the greedy reference trajectories


def naive_lookup(ctx, gamma, max_n, min_n):
    """The definition, written the slow way: latest earlier occurrence of the longest suffix."""
    T = len(ctx)
    for n in range(min(max_n, T - 1), min_n - 1, -1):
        for s in range(T - n - 1, -1, -1):
            if ctx[s:s + n] == ctx[T - n:]:
                return ctx[s + n:s + n + gamma]
    return []


# ------------------------------------------------------------------------------ n-gram index

def test_ngram_index_equals_naive_rescan_and_is_incremental():
    rng = random.Random(0)
    for _ in range(400):
        V, T = rng.choice([2, 3, 5, 30]), rng.randint(1, 50)
        ctx = [rng.randrange(V) for _ in range(T)]
        max_n = rng.randint(1, 4)
        min_n, gamma = rng.randint(1, max_n), rng.randint(1, 6)
        expected = naive_lookup(ctx, gamma, max_n, min_n)
        assert NGramDrafter(max_n, min_n, overlap=False).lookup(ctx, gamma) == expected
        cuts = sorted(rng.randint(0, T) for _ in range(3))
        index = NGramIndex(max_n, min_n)
        for a, b in zip([0, *cuts], [*cuts, T]):  # the history arrives in pieces, as in decoding
            index.extend(ctx[a:b])
        assert index.lookup(gamma, overlap=False) == expected


def test_ngram_earliest_equals_transformers_prompt_lookup_candidates():
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    rng = random.Random(1)
    for _ in range(300):
        ctx = [rng.randrange(rng.choice([2, 4, 20])) for _ in range(rng.randint(2, 60))]
        max_n, gamma = rng.randint(1, 4), rng.randint(1, 8)
        reference = PromptLookupCandidateGenerator(num_output_tokens=gamma, max_matching_ngram_size=max_n,
                                                   max_length=10**6)
        candidates, _ = reference.get_candidates(torch.tensor([ctx]))
        ours = NGramDrafter(max_n, 1, prefer="earliest", overlap=False).lookup(ctx, gamma)
        assert ours == candidates[0, len(ctx):].tolist(), (ctx, max_n, gamma)


def test_ngram_overlapping_copy_continues_a_period():
    d = NGramDrafter(max_ngram=2)
    assert d.lookup([9, 1, 2, 1, 2], 5) == [1, 2, 1, 2, 1]  # copies past the end of the context
    assert NGramDrafter(max_ngram=2, overlap=False).lookup([9, 1, 2, 1, 2], 5) == [1, 2]
    assert d.lookup([1, 2, 3], 4) == []


def test_ngram_propose_indexes_each_token_once_and_rebuilds_on_a_new_history(monkeypatch):
    fed = []
    original = NGramIndex.extend
    monkeypatch.setattr(NGramIndex, "extend", lambda self, toks: (fed.append(len(toks)), original(self, toks))[1])
    d = NGramDrafter(overlap=False)
    ctx = torch.tensor([5, 6, 7, 5, 6])
    for step in range(30):  # a growing history, as the decode loop shows it
        draft = d.propose([ctx], 3, GREEDY)
        assert draft.tokens.tolist()[0] == naive_lookup(ctx.tolist(), 3, 3, 1) or draft.num_tokens == 0
        ctx = torch.cat([ctx, torch.tensor([5 + step % 3, 6])])
    assert sum(fed) == len(ctx) - 2  # every token indexed exactly once (the last two were never shown)
    other = torch.tensor([1, 2, 3, 1, 2])
    assert d.propose([other], 2, GREEDY).tokens.tolist() == [[3, 1]]  # a new prompt: rebuilt, no stale matches


def test_ngram_bad_arguments():
    with pytest.raises(ValueError, match="min_ngram"):
        NGramDrafter(max_ngram=1, min_ngram=2)
    with pytest.raises(ValueError, match="prefer"):
        NGramDrafter(prefer="first")


# ------------------------------------------------------------------------------ adaptive gamma

def test_accepted_count_reads_acceptance_off_the_histories():
    assert accepted_count([1, 2], [3, 4, 5], [1, 2, 3, 4, 9]) == 2
    assert accepted_count([1, 2], [3, 4, 5], [1, 2, 3, 4, 5, 6]) == 3  # all accepted + bonus
    assert accepted_count([1, 2], [3, 4, 5], [1, 2, 8]) == 0
    assert accepted_count([1, 2], [3], [7, 2, 3]) is None  # not a continuation


class ScriptedDrafter:
    """Proposes ``gamma`` copies of token 0: the toy target below accepts them at a set rate."""

    passes = 0

    def propose(self, contexts, gamma, params, generator=None):
        from specbook.protocols import Draft

        return Draft(torch.zeros(len(contexts), gamma, dtype=torch.long), None)


def test_heuristic_policy_grows_after_full_acceptance_and_shrinks_after_a_rejection():
    a = AdaptiveGamma(ScriptedDrafter(), GammaPolicy(kind="heuristic", start_gamma=2))
    ctx = [1]
    for accepted_all in (True, True, False, False, True):
        g = a.propose([torch.tensor(ctx)], 8, GREEDY).num_tokens
        ctx = ctx + ([0] * g + [5] if accepted_all else [5])
    assert a.history == [2, 4, 6, 5, 4]


def test_model_policy_follows_the_acceptance_estimate():
    fast = GammaPolicy(c=0.05, verify_cost=(1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8))
    a = AdaptiveGamma(ScriptedDrafter(), fast)
    ctx = [1]
    for _ in range(6):  # everything accepted: alpha estimate rises, so does gamma
        g = a.propose([torch.tensor(ctx)], 8, GREEDY).num_tokens
        ctx = ctx + [0] * g + [5]
    assert a.alpha_estimate() > 0.9 and a.history[-1] == 8 and a.history[0] < 8
    for _ in range(20):  # nothing accepted: back to the minimum
        a.propose([torch.tensor(ctx)], 8, GREEDY)
        ctx = ctx + [5]
    assert a.alpha_estimate() < 0.3 and a.history[-1] == 1
    with pytest.raises(ValueError, match="kind"):
        GammaPolicy(kind="magic")


@pytest.mark.parametrize("kind", ["model", "heuristic"])
def test_adaptive_greedy_equals_autoregressive_on_toys(kind):
    target, draft = make_toy_pair(6, 1, match=0.7, seed=11)
    prompts = torch.randint(6, (8, 4), generator=torch.Generator().manual_seed(3))
    plain = generate(target, prompts, 30, params=GREEDY)
    for inner in (DraftModelDrafter(draft), NGramDrafter()):
        adaptive = AdaptiveGamma(inner, GammaPolicy(kind=kind, c=0.1))
        spec = speculative_generate(target, adaptive, prompts, 30, params=GREEDY, gamma=6)
        assert torch.equal(spec.tokens, plain.tokens)
        if kind == "heuristic":
            assert len(set(adaptive.history)) > 1  # it really did vary gamma


def test_shadow_drafting_stops_on_failing_lookups_and_resumes_on_copies():
    """Prompt lookup costs nothing, so its full proposal is scored even when not verified (gamma 0)."""
    from specbook.bench.measure import simulate_greedy

    policy = GammaPolicy(min_gamma=0, verify_cost=(1.0, 1.1, 1.2, 1.8, 1.9))
    with pytest.raises(ValueError, match="shadow"):
        AdaptiveGamma(NGramDrafter(), policy)
    a = AdaptiveGamma(NGramDrafter(max_ngram=2, overlap=False), policy, shadow=True)
    rng = random.Random(0)
    prompt = rng.sample(range(1000), 60)  # distinct tokens
    fresh = [rng.choice(prompt) for _ in range(15)]  # known tokens in a new order: lookups match, drafts fail
    simulate_greedy(a, prompt, fresh + prompt[:40], 4, list(policy.verify_cost))
    assert a.history[:3] != [0, 0, 0] and 0 in a.history[3:12]  # stopped drafting in the fresh stretch
    assert max(a.history[-5:]) > 0  # and resumed on the copied stretch


def test_simulated_greedy_run_matches_the_real_loop():
    from specbook.bench.measure import simulate_greedy

    target, _ = make_toy_pair(6, 2, match=0.7, seed=4)
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    ref = generate(target, torch.tensor([prompt]), 48, params=GREEDY).new_tokens[0].tolist()
    for drafter in (NGramDrafter(), AdaptiveGamma(NGramDrafter(), GammaPolicy(min_gamma=0), shadow=True)):
        sim = simulate_greedy(drafter, prompt, ref, 4, verify_cost=[1.0, 1.0], max_new_tokens=40)
        if isinstance(drafter, AdaptiveGamma):
            drafter.reset()
        real = speculative_generate(target, drafter, torch.tensor([prompt]), 40, params=GREEDY, gamma=4).stats
        assert (sim["steps"], sim["accepted"]) == (real.target_passes, real.accepted)


def test_adaptive_gamma_sequence_law_equals_target():
    """gamma chosen from past acceptance is still lossless: chi-square on whole 3-token sequences."""
    target, draft = make_toy_pair(4, 1, match=0.5, seed=5)
    prompt = torch.tensor([1, 2, 1, 2, 3])
    params = SamplingParams(temperature=0.8)
    drafter = AdaptiveGamma(DraftModelDrafter(draft), GammaPolicy(c=0.1, prior=1.0))
    out = speculative_generate(target, drafter, prompt.expand(12_000, -1), 3, params=params, gamma=4,
                               generator=torch.Generator().manual_seed(7))
    check_fit("adaptive gamma, toy draft model", target.sequence_law(prompt.tolist(), 3, params),
              [tuple(r) for r in out.new_tokens.tolist()])


# ------------------------------------------------------------------------------ reduced vocabulary

class MaskedDraft(WrappedTarget):
    """A toy draft model whose vocabulary is cut to ``keep`` (logits -inf elsewhere), like ReducedHead.

    ``report_full=True`` is the broken twin: it samples from the cut distribution but reports
    the uncut one to the verifier."""

    def __init__(self, model, keep, report_full=False):
        super().__init__(model)
        self.model, self.keep_ids, self.report_full = model, torch.tensor(keep), report_full

    def forward(self, tokens, parents=None):
        logits = self.model.forward(tokens)
        out = torch.full_like(logits, float("-inf"))
        out[..., self.keep_ids] = logits[..., self.keep_ids]
        return out


class ReportFullDrafter(DraftModelDrafter):
    """Broken on purpose: drafts from the reduced-vocabulary model but reports the full model's q."""

    def next_logits(self, feed, real=None):
        cut = super().next_logits(feed, real)
        inner = self.model.model
        full = inner.forward(feed)  # same history: the inner model advanced twice
        inner.rollback(inner.cache_lengths - feed.shape[1])
        self._full = full[:, -1] if real is None else full[torch.arange(len(real)), torch.tensor(real) - 1]
        return cut

    def draw(self, logits, params, generator):
        from specbook.sampling import sample

        return sample(logits_to_probs(logits, params), generator), logits_to_probs(self._full, params)


def test_reduced_vocabulary_draft_is_lossless_and_its_twin_is_caught():
    target, draft = make_toy_pair(5, 1, match=0.6, seed=2, zero_fraction=0.0)
    prompt = torch.tensor([1, 2, 3])
    params = SamplingParams()
    law = target.sequence_law(prompt.tolist(), 3, params)
    keep = [0, 2, 3]  # tokens 1 and 4 can never be drafted: q = 0 there, the residual supplies them
    g = torch.Generator().manual_seed(1)
    out = speculative_generate(target, DraftModelDrafter(MaskedDraft(draft, keep)), prompt.expand(12_000, -1), 3,
                               params=params, gamma=3, generator=g)
    check_fit("reduced-vocabulary toy draft", law, [tuple(r) for r in out.new_tokens.tolist()])
    twin = ReportFullDrafter(MaskedDraft(make_toy_pair(5, 1, match=0.6, seed=2, zero_fraction=0.0)[1], keep))
    bad = speculative_generate(target, twin, prompt.expand(12_000, -1), 3, params=params, gamma=3, generator=g)
    check_rejects("reduced vocabulary, uncut q reported", law, [tuple(r) for r in bad.new_tokens.tolist()])


def test_reduced_head_scatters_into_the_full_vocabulary():
    w = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    head = ReducedHead(w, torch.tensor([7, 2, 5]), 9)
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    full = head(x)  # (2, 9)
    assert torch.isinf(full[:, [0, 1, 3, 4, 6, 8]]).all()
    assert torch.allclose(full[:, [7, 2, 5]], x @ w.t())
    with pytest.raises(ValueError, match="distinct"):
        ReducedHead(w, torch.tensor([1, 1, 2]), 9)


# ------------------------------------------------------------------------------ tiny random Llamas

TINY = LlamaConfig(vocab_size=97, dim=64, n_layers=4, n_heads=4, n_kv_heads=2, intermediate_size=96,
                   max_position_embeddings=256, rope_theta=500.0, tie_embeddings=True)


def tiny_model(seed=0, std=0.3):
    return LlamaModel(TINY).init_weights(std=std, generator=torch.Generator().manual_seed(seed)).eval()


@pytest.mark.parametrize("share", [True, False])
def test_layer_skip_greedy_equals_autoregressive_and_restores_the_cache(share):
    model = tiny_model()
    target = LlamaTarget(model, max_length=96)
    prompts = torch.randint(97, (3, 6), generator=torch.Generator().manual_seed(4))
    plain = generate(target, prompts, 40, params=GREEDY)
    drafter = LayerSkipDrafter(target, exit_layer=2, share_cache=share)
    spec = speculative_generate(target, drafter, prompts, 40, params=GREEDY, gamma=3)
    assert torch.equal(spec.tokens, plain.tokens)
    assert drafter.passes == spec.stats.draft_passes > 0
    # propose() leaves the shared cache exactly as it found it: lengths, and every layer >= exit_layer
    target.reset(1)
    target.forward(prompts[:1, :-1])
    before = target.cache.k.clone()
    drafter.propose([prompts[0]], 4, GREEDY)
    assert target.cache_lengths.tolist() == [5] and torch.equal(target.cache.k[2:], before[2:])


def test_layer_skip_shared_cache_checks_the_loop_invariant():
    target = LlamaTarget(tiny_model(), max_length=32)
    target.reset(1)
    target.forward(torch.tensor([[1, 2, 3]]))
    drafter = LayerSkipDrafter(target, exit_layer=1)
    with pytest.raises(ValueError, match="minus its last token"):
        drafter.propose([torch.tensor([1, 2])], 2, GREEDY)
    with pytest.raises(ValueError, match="exit_layer"):
        LayerSkipDrafter(target, exit_layer=4)
    with pytest.raises(ValueError, match="bare LlamaModel"):
        LayerSkipDrafter(target.model, exit_layer=1, share_cache=True)


def test_exit_layer_agreement_matches_direct_early_exit():
    model = tiny_model(1)
    seqs = [torch.randint(97, (20,), generator=torch.Generator().manual_seed(s)) for s in range(3)]
    got = exit_layer_agreement(model, seqs, start=5)
    with torch.no_grad():
        for L in (1, 3):
            hits = sum(int((model(s[None], exit_layer=L)[0, 5:].argmax(-1) == model(s[None])[0, 5:].argmax(-1)).sum())
                       for s in seqs)
            assert got[L] == hits / 45
        exit_model = EarlyExitModel(model, 2, max_length=32)
        exit_model.reset(1)
        assert torch.allclose(exit_model.forward(seqs[0][None]), model(seqs[0][None], exit_layer=2), atol=1e-5)


def tiny_distillation(seed=0):
    teacher = tiny_model(seed, std=0.5)
    gen = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(96, (int(n),), generator=gen).tolist() for n in torch.randint(3, 12, (24,), generator=gen)]
    data = teacher_replies(teacher, prompts, max_new_tokens=10, eos_id=96, top_k=8, batch_size=8, progress=False)
    return teacher, data


def test_teacher_replies_are_the_teachers_greedy_replies_with_its_probabilities():
    teacher, data = tiny_distillation()
    target = LlamaTarget(teacher, max_length=64)
    for ex in data[:4]:
        P = ex["prompt_length"]
        plain = generate(target, ex["tokens"][:P].long(), len(ex["tokens"]) - P, params=GREEDY)
        assert plain.tokens[0].tolist() == ex["tokens"].tolist()
        with torch.no_grad():
            probs = teacher(ex["tokens"][None].long())[0, :-1].softmax(-1)  # (T-1, V)
        assert torch.allclose(probs.gather(-1, ex["topk_ids"].long()), ex["topk_probs"].float(), atol=2e-3)


def test_distillation_lowers_the_loss_is_deterministic_and_round_trips(tmp_path):
    teacher, data = tiny_distillation()
    cfg, dcfg = DraftConfig(n_layers=1, init_layers=(0,), draft_vocab=64), DistillConfig(epochs=8, lr=3e-3, batch_tokens=128)
    draft, losses = train_draft(teacher, data, cfg, dcfg, special_tokens=[96], pad=96, progress=False)
    again, losses2 = train_draft(teacher, data, cfg, dcfg, special_tokens=[96], pad=96, progress=False)
    assert losses == losses2 and all(torch.equal(a, b) for a, b in zip(draft.parameters(), again.parameters()))
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5
    untrained = build_draft_model(teacher, cfg, draft.lm_head.vocab_ids)
    assert evaluate(draft, data)["all"]["greedy_acceptance"] > evaluate(untrained, data)["all"]["greedy_acceptance"]
    assert teacher.embed.weight.requires_grad and not any(p.requires_grad for n, p in draft.named_parameters()
                                                          if not n.startswith("embed."))
    save_draft(draft, cfg, {"note": "test"}, tmp_path, "tiny", dtype=torch.float32)
    loaded = load_draft(teacher, tmp_path, "tiny")
    x = data[0]["tokens"][None].long()
    with torch.no_grad():
        assert torch.equal(loaded(x), draft(x))
    assert torch.isinf(loaded(x)).any()  # the reduced head: -inf outside the draft vocabulary
    with pytest.raises(ValueError, match="distilled from"):
        load_draft(tiny_model(7), tmp_path, "tiny")


# ------------------------------------------------------------------------------ SmolLM2-135M-Instruct

GREEDY_PROMPTS = [
    "Change the name of the function below from calc to compute_total and return the whole code.\n\n"
    "```python\ndef calc(prices, tax):\n    total = sum(prices)\n    return total * (1 + tax)\n```",
    "Give two reasons why people keep a diary.",
]
N_NEW = 24
EXIT_LAYER = 24  # any L is lossless; at 24 a third of the drafts are accepted, so both paths are exercised
SAMPLING = SamplingParams(temperature=1.0, top_k=3)
N_SAMPLES = 200


@pytest.fixture(scope="module")
def real():
    from specbook.models.smollm2 import load_smollm2
    from specbook.models.chat import chat_ids

    model, tokenizer = load_smollm2(dtype=torch.float32)  # float32: training and recorded figures
    target = LlamaTarget(model, max_length=160)
    prompts = [chat_ids(tokenizer, text) for text in GREEDY_PROMPTS]
    plain = [generate(target, torch.tensor([p]), N_NEW, params=GREEDY).new_tokens[0].tolist() for p in prompts]
    return model, tokenizer, target, prompts, plain


def top2_margins(model, prompt: list[int], new: list[int]) -> torch.Tensor:
    """Gap between the target's two best logits at each generated position (one teacher-forced pass)."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + new]))[0, len(prompt) - 1:-1]  # (N_NEW, V)
    top = logits.topk(2, dim=-1).values
    return top[:, 0] - top[:, 1]


def real_drafter(name, model, tokenizer, target):
    from specbook.drafters.hf_draft import hf_drafter
    from specbook.drafters.small_model import distilled_drafter

    if name == "ngram":
        return NGramDrafter()
    if name == "ngram-earliest":
        return NGramDrafter(prefer="earliest", overlap=False)
    if name == "layerskip-shared":
        return LayerSkipDrafter(target, EXIT_LAYER)
    if name == "layerskip-own-cache":
        return LayerSkipDrafter(target, EXIT_LAYER, share_cache=False)
    if name == "distilled":
        return distilled_drafter(target)
    if name == "adaptive-distilled":
        return AdaptiveGamma(distilled_drafter(target), GammaPolicy(c=0.15))
    if name == "hf-draft":  # a real transformers model: SmolLM2 cut to its first 6 blocks
        from transformers import LlamaForCausalLM
        from transformers.utils import logging

        from specbook.models.smollm2 import model_dir

        level = logging.get_verbosity()
        logging.set_verbosity_error()  # the unused blocks' weights are reported, expectedly
        try:
            hf = LlamaForCausalLM.from_pretrained(str(model_dir()), num_hidden_layers=6, local_files_only=True)
        finally:
            logging.set_verbosity(level)
        return hf_drafter(hf.eval(), tokenizer)
    raise KeyError(name)


@pytest.mark.model
def test_reference_trajectories_have_no_near_ties(real):
    model, _, _, prompts, plain = real
    for p, new in zip(prompts, plain):
        assert top2_margins(model, p, new).min().item() >= MIN_MARGIN


@pytest.mark.model
@pytest.mark.parametrize("name", ["ngram", "ngram-earliest", "layerskip-shared", "layerskip-own-cache", "distilled",
                                  "adaptive-distilled", "hf-draft"])
def test_greedy_speculative_equals_greedy_autoregressive_on_smollm2(real, name):
    model, tokenizer, target, prompts, plain = real
    drafter = real_drafter(name, model, tokenizer, target)
    accepted = 0
    for p, ref in zip(prompts, plain):
        gamma = 2 if name.startswith(("layerskip", "hf")) else 4  # costly drafters: shorter drafts, faster test
        out = speculative_generate(target, drafter, torch.tensor([p]), N_NEW, params=GREEDY, gamma=gamma)
        got = out.new_tokens[0].tolist()
        accepted += out.stats.accepted
        if got != ref:
            i = next(j for j, (a, b) in enumerate(zip(got, ref)) if a != b)
            margin = top2_margins(model, p, ref)[i].item()
            kind = ("a float32 near tie (batched vs one-token numerics)" if margin < MIN_MARGIN
                    else "NOT a near tie: a real bug")
            pytest.fail(f"{name}: token {i} differs ({got[i]} vs greedy {ref[i]}); the target's top-2 logit "
                        f"margin there is {margin:.2e}: {kind}")
    assert accepted > 0  # the drafts were really exercised


@pytest.mark.model
def test_prompt_lookup_equals_transformers_prompt_lookup(real):
    from transformers import LlamaForCausalLM

    from specbook.models.smollm2 import model_dir

    model, tokenizer, target, prompts, plain = real
    hf = LlamaForCausalLM.from_pretrained(str(model_dir()), local_files_only=True).float().eval()
    for p, ref in zip(prompts, plain):
        with torch.no_grad():
            theirs = hf.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                 do_sample=False, max_new_tokens=N_NEW, prompt_lookup_num_tokens=4,
                                 max_matching_ngram_size=3, pad_token_id=tokenizer.eos_token_id)[0, len(p):].tolist()
        for drafter in (NGramDrafter(max_ngram=3), NGramDrafter(max_ngram=3, prefer="earliest", overlap=False)):
            ours = speculative_generate(target, drafter, torch.tensor([p]), N_NEW, params=GREEDY, gamma=4).new_tokens[0].tolist()
            assert ours[:len(theirs)] == theirs  # transformers stops at the end token, we do not
            assert ours == ref


@pytest.mark.model
@pytest.mark.parametrize("name", ["ngram", "layerskip-shared", "distilled", "twin: greedy draft, softmax q reported"])
def test_sampled_law_equals_target_on_smollm2(real, name):
    """The real-model law check of ``specbook.crosscheck`` (exact joint law of the first two tokens)
    with each drafter of this file; top-k 3 keeps the support at 9 pairs, so 200 rows suffice."""
    from specbook.bench.crosscheck import GreedyDraftSoftmaxReported, SharedPrefixTarget, joint_law
    from specbook.drafters.small_model import load_draft

    model, tokenizer, _, _, _ = real
    prompt = tokenizer.encode("go go go go")  # repetitive, so prompt lookup drafts too
    target = SharedPrefixTarget(model, 16)  # the identical prompts are prefilled once
    if name == "ngram":
        drafter = NGramDrafter()
    elif name == "layerskip-shared":
        drafter = LayerSkipDrafter(target.inner, EXIT_LAYER)
    elif name == "distilled":
        drafter = DraftModelDrafter(LlamaTarget(load_draft(model), max_length=16))
    else:
        # The twin's bias grows as the draft's confidence falls (it accepts its argmax with
        # min(1, p/q) for a q below 1).  A draft built from target blocks 0-1 but not trained
        # keeps that bias large whatever the quality of the shipped draft.
        trained = load_draft(model)
        vocab = trained.lm_head.vocab_ids
        untrained = build_draft_model(model, DraftConfig(n_layers=2, init_layers=(0, 1), draft_vocab=vocab.numel()),
                                      vocab)
        drafter = GreedyDraftSoftmaxReported(LlamaTarget(untrained, max_length=16))
    out = speculative_generate(target, drafter, torch.tensor([prompt]).expand(N_SAMPLES, -1), 2, params=SAMPLING, gamma=2,
                               generator=torch.Generator().manual_seed(11))
    assert out.stats.proposed > 0
    law, outcome = joint_law(model, prompt, SAMPLING)
    observed = [outcome(a, b) for a, b in out.new_tokens.tolist()]
    if name.startswith("twin"):
        check_rejects(f"SmolLM2, {name}", law, observed)
    else:
        check_fit(f"SmolLM2 two-token law, {name} drafter", law, observed)


def test_drafters_import_neither_the_benchmark_nor_training():
    """The layer rule for drafters/: imports inside functions count too."""
    import ast
    import pathlib

    import specbook.drafters

    bad = []
    for path in sorted(pathlib.Path(specbook.drafters.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                name = "." * node.level + (node.module or "")
            elif isinstance(node, ast.Import):
                name = ",".join(a.name for a in node.names)
            else:
                continue
            if any(part in name for part in ("..bench", "..train", "specbook.bench", "specbook.train")):
                bad.append(f"{path.name}: {name}")
    assert not bad, bad
