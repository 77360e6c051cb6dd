"""EAGLE heads that also read earlier layers of the target (EAGLE-3's fused features).

Without a download (a tiny random Llama of three blocks, seconds):
* the recomputed layer features are the model's own residual stream at every position of every
  sequence (padding in a batch never leaks into a shorter sequence), and come back from the cache;
* the drafter's incremental chain with a fused head equals the training-time unroll given the
  same earlier-layer states; a broken twin that drops those states at drafting time is caught;
* greedy tree decoding with a fused head equals plain decoding; the decoding loop asks the target
  to keep the layers (``attach``), and a loop that never does, or a compiled target without them,
  is refused by name;
* training with fused features lowers the loss and round-trips through safetensors.
"""
from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from specbook.decode import generate, speculative_generate
from specbook.drafters.eagle import DynamicTree, EagleConfig, EagleDrafter, EagleHead, load_eagle, save_eagle
from specbook.models import LlamaConfig, LlamaModel, LlamaTarget
from specbook.sampling import GREEDY
from specbook.train.eagle import chain_acceptance, train_eagle, unroll
from specbook.train.features import features_from_ids, validation_indices
from specbook.train.layer_features import layer_features

V, VD, LAYERS = 12, 9, (1, 2)


def tiny_model(seed: int = 0) -> LlamaModel:
    cfg = LlamaConfig(vocab_size=V, dim=32, n_layers=3, n_heads=4, n_kv_heads=2, intermediate_size=64,
                      max_position_embeddings=256, rope_theta=500.0)
    return LlamaModel(cfg).init_weights(std=0.5, generator=torch.Generator().manual_seed(seed)).requires_grad_(False)


def fused_head(model, seed: int = 3) -> EagleHead:
    torch.manual_seed(seed)
    vocab = torch.randperm(V, generator=torch.Generator().manual_seed(1))[:VD]
    head = EagleHead(EagleConfig.for_target(model.config, VD, feature_layers=LAYERS), vocab)
    with torch.no_grad():  # W_fuse starts at zero; make the earlier layers matter
        head.fuse.weight.copy_(torch.randn(head.fuse.weight.shape, generator=torch.Generator().manual_seed(seed)))
    return head.eval()


def prompts(n: int, seed: int = 4) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, V, (int(torch.randint(2, 9, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]


def test_layer_features_are_the_models_residual_stream_per_sequence_and_cached(tmp_path):
    model = tiny_model()
    fs = features_from_ids(model, prompts(7, seed=30), max_new_tokens=12, eos_id=0, batch_size=4)
    got = layer_features(fs, model, LAYERS, batch_tokens=40, cache_dir=tmp_path, progress=False)
    for s in range(fs.num_sequences):
        tok = fs.sequence(s)[0]
        _, hidden = model(tok[None], return_hidden=list(LAYERS))  # one sequence alone, no padding
        want = torch.cat(hidden, -1)[0, :-1]
        fs.layers = got
        torch.testing.assert_close(fs.sequence_layers(s).float(), want, atol=2e-2, rtol=1e-2)  # float16 storage
    last = layer_features(fs, model, (3,), progress=False)  # after every block: the cached last hidden state
    torch.testing.assert_close(last.float(), fs.hidden.float(), atol=2e-2, rtol=1e-2)
    assert len(list(tmp_path.iterdir())) == 1
    model.layers = None  # the second call reads the file and never runs the model
    assert torch.equal(layer_features(fs, model, LAYERS, cache_dir=tmp_path, progress=False), got)
    with pytest.raises(ValueError, match="layers"):
        layer_features(fs, tiny_model(), (0,), progress=False)


def _drafts_and_unroll(drafter_layers: bool) -> tuple[list, list]:
    """(drafter's greedy chains, the unroll's) for every prefix of one sequence."""
    model = tiny_model()
    head = fused_head(model)
    drafter, target = EagleDrafter(head, model), LlamaTarget(model, max_length=64, hidden_layers=LAYERS)
    if not drafter_layers:  # broken twin: the drafter forgets the earlier layers
        drafter.features.layers = ()
        drafter.head = copy.deepcopy(head)
        drafter.head.config = dataclasses.replace(head.config, feature_layers=())
    seq = prompts(1, seed=9)[0] + prompts(1, seed=10)[0] * 3
    gamma = 3
    with torch.no_grad():
        _, hidden = model(torch.tensor([seq]), return_hidden=[*LAYERS, 3])
        z = model.norm(hidden[-1])
        L = len(seq) - 1 - gamma
        zhats = unroll(head, model.embed, z[:, :L], torch.tensor([seq[1:]]), gamma, torch.cat(hidden[:-1], -1)[:, :L])
    lm = model.lm_head.weight[head.vocab]
    got, want = [], []
    for t in range(L):
        target.reset(1)
        target.forward(torch.tensor([seq[: t + 1]]))
        drafter.observe(target, [list(range(t + 1))])
        got.append(drafter.propose([torch.tensor(seq[: t + 2])], 1, GREEDY).tokens[0].tolist())
        want.append([int(head.vocab[(zhats[0][0, t] @ lm.T).argmax()])])
    return got, want


def test_fused_head_drafts_equal_the_training_unroll_and_a_twin_without_layers_is_caught():
    got, want = _drafts_and_unroll(True)
    assert got == want
    broken, want = _drafts_and_unroll(False)
    assert broken != want


def test_fused_head_tree_decoding_equals_plain_and_the_target_is_asked_for_the_layers():
    model = tiny_model()
    drafter = EagleDrafter(fused_head(model), model, tree=DynamicTree(depth=3, top_k=2, num_nodes=6))
    target = LlamaTarget(model, max_length=96, hidden_layers=(3,))
    for p in prompts(4, seed=12):
        prompt = torch.tensor(p)
        out = speculative_generate(target, drafter, prompt, 24, params=GREEDY)  # the loop attaches the drafter
        assert torch.equal(out.new_tokens, generate(target, prompt, 24, params=GREEDY).new_tokens)
    assert target.hidden_layers == (3, *LAYERS)  # what it kept before, and what the head reads
    with pytest.raises(ValueError, match="hidden_layers entry 4"):
        target.keep_layers((1, 4))
    assert target.hidden_layers == (3, *LAYERS)  # a refused request changes nothing
    bare = LlamaTarget(model, max_length=96)
    bare.reset(1)
    bare.forward(torch.tensor([[1, 2, 3]]))  # a loop of one's own that never attaches the drafter
    with pytest.raises(ValueError, match=r"drafter.attach\(target\).*hidden_layers=\(1, 2\)"):
        drafter.observe(bare, [[0, 1, 2]])
    from specbook.models.compiled import CompiledTarget

    with pytest.raises(ValueError, match="CompiledTarget"):  # its passes keep what they were compiled with
        drafter.attach(CompiledTarget(model, max_length=96, autotune=False))


def test_fused_training_lowers_the_loss_and_round_trips(tmp_path):
    model = tiny_model()
    fs = features_from_ids(model, prompts(12, seed=30), max_new_tokens=24, eos_id=0, batch_size=6)
    fit, _ = validation_indices(fs, every=4)
    vocab = fused_head(model).vocab
    with pytest.raises(ValueError, match="feature_layers"):
        train_eagle(fs, model, fit, vocab=vocab, epochs=1, feature_layers=LAYERS, progress=False)
    fs.layers = layer_features(fs, model, LAYERS, progress=False)
    head, log = train_eagle(fs, model, fit, vocab=vocab, epochs=8, batch_sequences=3, lr=3e-3, unroll_steps=2,
                            w_cls=1.0, progress=False, feature_layers=LAYERS)
    assert log["loss"][-1][1] < 0.7 * log["loss"][0][1]
    assert head.fuse.weight.abs().sum() > 0  # the earlier layers were used
    assert chain_acceptance(head, model, fs, fit, gamma=3)[1] > 0.2
    save_eagle(head, tmp_path / "f")
    loaded, _ = load_eagle(tmp_path / "f")
    assert loaded.config.feature_layers == LAYERS
    z, e, h = torch.randn(1, 4, 32), model.embed(torch.tensor([[1, 2, 3, 4]])), torch.randn(1, 4, 64)
    pos = torch.arange(4)[None]
    torch.testing.assert_close(loaded(z, e, pos, layers=h), head(z, e, pos, layers=h), atol=3e-2, rtol=3e-2)
    with pytest.raises(ValueError, match="feature_layers"):
        EagleHead(EagleConfig.for_target(model.config, VD), vocab)(z, e, pos, layers=h)
    with pytest.raises(ValueError, match="feature_layers"):
        EagleConfig.for_target(model.config, VD, feature_layers=(3,))


def test_the_bench_engine_runs_a_fused_head_losslessly():
    from specbook.bench.engines import SpecbookEngine

    model = tiny_model()
    engine = SpecbookEngine(model, 96)
    drafter = EagleDrafter(fused_head(model), model, tree=DynamicTree(depth=3, top_k=2, num_nodes=6))
    prompt = prompts(1, seed=13)[0]
    plain = engine.run(prompt, None, GREEDY, 16, 0)
    assert engine.target.hidden_layers is None
    spec = engine.run(prompt, drafter, GREEDY, 16, 3)
    assert engine.target.hidden_layers == LAYERS and spec.new_ids == plain.new_ids and spec.accepted > 0


def test_token_loss_alone_trains_and_both_weights_zero_is_refused():
    """``w_reg=0``: EAGLE-3's loss, no feature regression; the head still learns to draft."""
    model = tiny_model()
    fs = features_from_ids(model, prompts(12, seed=30), max_new_tokens=24, eos_id=0, batch_size=6)
    fit, _ = validation_indices(fs, every=4)
    vocab = fused_head(model).vocab
    head, log = train_eagle(fs, model, fit, vocab=vocab, epochs=8, batch_sequences=3, lr=3e-3, unroll_steps=2,
                            w_cls=1.0, w_reg=0.0, progress=False)
    assert log["loss"][-1][1] < 0.7 * log["loss"][0][1]
    assert chain_acceptance(head, model, fs, fit, gamma=3)[1] > 0.2
    _, with_reg = train_eagle(fs, model, fit, vocab=vocab, epochs=8, batch_sequences=3, lr=3e-3, unroll_steps=2,
                              w_cls=1.0, w_reg=1.0, max_steps=1, progress=False)
    assert with_reg["loss"][0][1] > log["loss"][0][1]  # same seed, same first batch: the regression term is gone
    with pytest.raises(ValueError, match="w_reg and w_cls"):
        train_eagle(fs, model, fit, vocab=vocab, epochs=1, w_cls=0.0, w_reg=0.0, progress=False)
