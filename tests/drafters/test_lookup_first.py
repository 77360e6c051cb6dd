"""LookupFirst: prompt lookup where the context repeats, a model drafter elsewhere.

On tiny random Llamas (about a second each): greedy output equals plain decoding with an EAGLE tree
and an EAGLE chain behind the lookup, both drafters having spoken; the first two sampled tokens
follow the target's exact law (chi-square) and a broken twin that hands the verifier the model's q
for the lookup's tokens is caught; a lookup draft is as wide as the fallback's widest draft.
"""
from __future__ import annotations

import pytest
import torch

from specbook.decode import generate, speculative_generate
from specbook.drafters.eagle import DynamicTree, EagleConfig, EagleDrafter, EagleHead
from specbook.drafters.lookup_first import LookupFirst
from specbook.models import LlamaConfig, LlamaModel, LlamaTarget
from specbook.protocols import Draft
from specbook.sampling import GREEDY, SamplingParams
from support import check_fit, check_rejects, exact_two_token_law, refuses, sample_two_tokens


def tiny_model(std: float = 0.35) -> LlamaModel:
    cfg = LlamaConfig(vocab_size=12, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, intermediate_size=64,
                      max_position_embeddings=256, rope_theta=500.0)
    return LlamaModel(cfg).init_weights(std=std, generator=torch.Generator().manual_seed(0)).requires_grad_(False)


def tiny_eagle(model) -> EagleHead:
    torch.manual_seed(3)  # nn.Linear's default initialisation
    vocab = torch.randperm(12, generator=torch.Generator().manual_seed(1))[:9]  # a 9-token draft vocabulary
    return EagleHead(EagleConfig.for_target(model.config, 9), vocab).eval()


REPEATING = [[3, 1, 4, 1, 5, 3, 1, 4, 1], [2, 7, 2, 7, 2, 7, 9], [5, 6, 8, 10, 11, 5, 6]]


@pytest.mark.parametrize("tree", [None, DynamicTree(depth=3, top_k=2, num_nodes=5)])
def test_greedy_output_equals_plain_decoding_and_both_drafters_speak(tree):
    model = tiny_model()
    target = LlamaTarget(model, max_length=128)
    drafter = LookupFirst(EagleDrafter(tiny_eagle(model), model, tree=tree))
    for prompt in REPEATING:
        ref = generate(target, torch.tensor(prompt), 40, params=GREEDY).new_tokens
        out = speculative_generate(target, drafter, torch.tensor(prompt), 40, params=GREEDY, gamma=4)
        assert torch.equal(out.new_tokens, ref), (prompt, tree)
    assert drafter.lookups > 0 and drafter.fallbacks > 0, (drafter.lookups, drafter.fallbacks)


def test_a_lookup_draft_is_as_wide_as_the_fallbacks_widest():
    model = tiny_model()
    context = [torch.tensor([1, 2, 3, 4, 5, 6, 1, 2])]  # "1 2" occurred before: the lookup drafts "3 4 5 ..."
    tree = LookupFirst(EagleDrafter(tiny_eagle(model), model, tree=DynamicTree(depth=2, top_k=2, num_nodes=3)))
    for gamma in (1, 16):  # behind a tree: the tree's node budget, whatever gamma
        assert tree.propose(context, gamma, GREEDY).tokens.tolist() == [[3, 4, 5]]
    chain = LookupFirst(EagleDrafter(tiny_eagle(model), model))
    assert chain.propose(context, 2, GREEDY).tokens.tolist() == [[3, 4]]  # behind a chain: gamma
    assert tree.lookups == 2 and chain.lookups == 1 and tree.fallbacks == chain.fallbacks == 0


class MixedUp(LookupFirst):
    """Broken twin: runs both drafters and hands the verifier the lookup's tokens with the model's q,
    the "q of another draft" pitfall of a drafter that combines two."""

    def propose(self, contexts, gamma, params, generator=None):
        model_draft = self.fallback.propose(contexts, gamma, params, generator)
        looked = self.lookup.propose(contexts, gamma, params, generator)
        if min(self.lookup.match_lengths) < self.min_match or model_draft.probs is None:
            return model_draft
        k = min(looked.num_tokens, model_draft.num_tokens)
        return Draft(looked.tokens[:, :k], model_draft.probs[:, :k])


PROMPT = [3, 1, 4, 3, 1]  # "3 1" occurs earlier: the first draft is the lookup's "4 3 1"


def test_first_two_sampled_tokens_follow_the_targets_exact_law():
    model, params = tiny_model(std=0.5), SamplingParams(temperature=0.8)
    drafter = LookupFirst(EagleDrafter(tiny_eagle(model), model))
    observed = sample_two_tokens(model, drafter, PROMPT, params, 2000, seed=40)
    assert drafter.lookups > 0 and drafter.fallbacks > 0
    check_fit("lookup-first two-token law", exact_two_token_law(model, PROMPT, params), observed)


def test_broken_twin_with_the_models_q_on_the_lookups_tokens_is_caught():
    model, params = tiny_model(std=0.5), SamplingParams(temperature=0.8)
    twin = MixedUp(EagleDrafter(tiny_eagle(model), model))
    observed = sample_two_tokens(model, twin, PROMPT, params, 2000, seed=41)
    check_rejects("lookup tokens verified with the model's q", exact_two_token_law(model, PROMPT, params), observed)


def test_bad_arguments():
    model = tiny_model()
    refuses(lambda: LookupFirst(EagleDrafter(tiny_eagle(model), model), min_match=0), "min_match", "0")
    refuses(lambda: LookupFirst(object()), "fallback", "object")
