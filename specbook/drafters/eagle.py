"""EAGLE: a one-layer autoregressive head over the target's features (Li et al., 2024).

Shape legend: B batch, T context length, N nodes fed in one head pass, D width, Vd draft
vocabulary, V target vocabulary, k top-k per expansion.

Li, Wei, Zhang & Zhang, "EAGLE: Speculative Sampling Requires Rethinking Feature
Uncertainty" (ICML 2024, arXiv:2401.15077), sec. 3: drafting is autoregressive at the
*feature* level.  With z_t the target's feature at position t (its last hidden state after
the final norm, what its LM head reads) and e(x) the target's frozen token embedding,

    zhat_{t+1} = Block( W_fc [z_t ; e(x_{t+1})] ),    draft logits = W_lm zhat_{t+1}

The token x_{t+1} ("one step shifted") removes the uncertainty of which token was actually
sampled after z_t.  Drafting continues by feeding (zhat, drafted token) pairs.  Block is
one Llama decoder layer (pre-norm attention with rotary positions, then a SwiGLU MLP, as in
:mod:`specbook.models.llama`): the target's own ``Block`` class, run with an explicit
attention mask so that tree nodes fed at different steps see exactly their ancestors, and a
one-row cache that grows as nodes are fed and is cut back to the committed pairs after each
step.  W_lm and e are the
target's own, frozen, restricted to a draft vocabulary (``vocab``, draft id -> target id).

Trees, EAGLE-2 (Li et al., "EAGLE-2: Faster Inference of Language Models with Dynamic
Draft Trees", EMNLP 2024, arXiv:2406.16858, sec. 4): the value of a node is the product of
draft probabilities along its path (an estimate of its acceptance probability).  Expand:
at each depth feed the k best new nodes and give each its k likeliest children.  Rerank:
keep the N best nodes overall (a child never beats its parent, so they form a tree).
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..models.config import LlamaConfig, rope_inverse_frequencies
from ..models.linear import Linear
from ..models.llama import Block, Step, fold_query_groups_mask
from ..protocols import Draft
from ..sampling import SamplingParams, logits_to_probs, sample
from .medusa import WEIGHTS_DIR, check_vocab, draft_lm_head, load_head, save_head
from .target_features import TargetFeatures


@dataclass(frozen=True)
class EagleConfig:
    dim: int
    n_heads: int
    n_kv_heads: int
    intermediate_size: int
    draft_vocab_size: int
    target_vocab_size: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 100000.0
    feature_layers: tuple[int, ...] = ()  # earlier layers the head also reads (EAGLE-3); () = EAGLE's last only

    def __post_init__(self):
        object.__setattr__(self, "feature_layers", tuple(int(i) for i in self.feature_layers))  # JSON gives a list

    def layer_config(self) -> LlamaConfig:
        return LlamaConfig(vocab_size=self.target_vocab_size, dim=self.dim, n_layers=1, n_heads=self.n_heads,
                           n_kv_heads=self.n_kv_heads, intermediate_size=self.intermediate_size,
                           rms_norm_eps=self.rms_norm_eps, rope_theta=self.rope_theta)

    @classmethod
    def for_target(cls, target_config: LlamaConfig, draft_vocab_size: int, intermediate_size: int | None = None,
                   feature_layers: tuple[int, ...] = ()):
        c = target_config
        for i in feature_layers:
            if not 1 <= i < c.n_layers:
                raise ValueError(f"feature_layers must be in [1, {c.n_layers - 1}] (blocks run), got {i}")
        return cls(dim=c.dim, n_heads=c.n_heads, n_kv_heads=c.n_kv_heads,
                   intermediate_size=intermediate_size or c.intermediate_size, draft_vocab_size=draft_vocab_size,
                   target_vocab_size=c.vocab_size, rms_norm_eps=c.rms_norm_eps, rope_theta=c.rope_theta,
                   feature_layers=tuple(feature_layers))


class HeadCache:
    """Keys/values of the head's one layer: committed pairs, then draft nodes (or, in training, unroll steps).

    Unlike the target's preallocated :class:`~specbook.models.cache.KVCache` (one length per
    row of a batch), the head drafts for one row at a time and its cache grows by
    concatenation; setting ``length`` back drops the draft nodes.  ``update`` has the target
    cache's signature, so the model's own :class:`~specbook.models.llama.Attention` writes into it.
    """

    def __init__(self):
        self.k = self.v = None
        self.length = 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor, plan=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Append (B, Hkv, N, Dh) keys/values after the first ``length``; return all (B, Hkv, S, Dh)."""
        if self.length == 0:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k[:, :, : self.length], k], dim=2)
            self.v = torch.cat([self.v[:, :, : self.length], v], dim=2)
        self.length += k.shape[2]
        return self.k, self.v


class EagleHead(nn.Module):
    """fc over [feature ; next token's embedding], then one Llama block: predicts the next feature.

    With ``config.feature_layers`` (EAGLE-3's low and middle features, Li et al. 2025,
    arXiv:2503.01840), a true pair's feature is z_t + W_fuse [rms(h_t^(i)) ; ...], the target's
    residual stream after blocks i, each scaled to unit RMS; W_fuse starts at zero, so training
    starts from EAGLE's head.  Pairs fed with the head's own guesses have no such features.
    """

    def __init__(self, config: EagleConfig, vocab: torch.Tensor | None = None):
        super().__init__()
        self.config = config
        self.fc = Linear(2 * config.dim, config.dim)
        self.block = Block(config.layer_config())  # the target's own decoder layer
        if config.feature_layers:
            self.fuse = Linear(len(config.feature_layers) * config.dim, config.dim)
            nn.init.zeros_(self.fuse.weight)
        vocab = torch.arange(config.draft_vocab_size) if vocab is None else vocab.long()
        check_vocab(vocab, config.draft_vocab_size, config.target_vocab_size)
        self.register_buffer("vocab", vocab)  # (Vd,) draft id -> target id
        self._inv_freq = rope_inverse_frequencies(config.layer_config())

    def forward(self, z: torch.Tensor, next_embeds: torch.Tensor, positions: torch.Tensor,
                cache: HeadCache | None = None, mask: torch.Tensor | None = None,
                layers: torch.Tensor | None = None) -> torch.Tensor:
        """z, next_embeds (B, N, D); positions (B, N) long; mask (B|1, N, S) bool over the cached
        and new entries (True = attend), or None: causal among the new ones, no cache;
        layers (B, N, len(feature_layers) * D): the target's earlier hidden states at the same
        positions (only for true pairs, and only for a head with ``feature_layers``).

        Returns the predicted next features (B, N, D).
        """
        if layers is not None:
            fused = self.unit_rms(layers)  # raises for a head without feature_layers
            z = z + self.fuse(fused)
        x = self.fc(torch.cat([z, next_embeds], dim=-1))  # (B, N, D)
        N = x.shape[1]
        freqs = positions[..., None].float() * self._inv_freq.to(x.device)  # (B, N, Dh/2)
        emb = torch.cat((freqs, freqs), dim=-1)[:, :, None]  # (B, N, 1, Dh), broadcast over heads
        c = self.config
        folded, is_causal = fold_query_groups_mask(None if mask is None else mask[:, None], mask is None,
                                                   c.n_heads // c.n_kv_heads, N)  # (B|1, 1, G*N, S)
        step = Step(emb.cos().to(x.dtype), emb.sin().to(x.dtype), None,
                     None if folded is None else folded.to(x.device), is_causal)
        return self.block(x, 0, cache, step)

    def unit_rms(self, layers: torch.Tensor) -> torch.Tensor:
        """(..., n * D) -> each of the n hidden states scaled to unit RMS (their scales differ by layer)."""
        if not self.config.feature_layers:
            raise ValueError("this head reads the last feature only (config.feature_layers is empty): pass no layers")
        h = layers.unflatten(-1, (len(self.config.feature_layers), self.config.dim)).float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.config.rms_norm_eps)
        return h.flatten(-2).to(self.fuse.weight.dtype)


save_eagle = save_head

# Files written before the head reused the model's Block name its attention weights without "attn.".
_RENAMED = {"block.wqkv.weight": "block.attn.wqkv.weight", "block.wo.weight": "block.attn.wo.weight"}


def shipped_feature_layers(path: str | Path = WEIGHTS_DIR / "eagle_smollm2-135m") -> tuple[int, ...]:
    """The earlier target blocks the shipped head reads (its config's ``feature_layers``; () if none or no file):
    a target compiled for it must keep them (``CompiledTarget(..., hidden_layers=)``)."""
    path = Path(path).with_suffix(".json")
    return tuple(json.loads(path.read_text())["config"].get("feature_layers", ())) if path.is_file() else ()


def load_eagle(path: str | Path = WEIGHTS_DIR / "eagle_smollm2-135m") -> tuple[EagleHead, dict]:
    """(head in float32, meta dict) from ``path``.safetensors + ``path``.json."""
    return load_head(path, lambda config, vocab: EagleHead(EagleConfig(**config), vocab),
                     "EAGLE", "specbook.train.eagle", _RENAMED)


@dataclass(frozen=True)
class DynamicTree:
    """EAGLE-2 tree shape: ``depth`` expansion levels, ``top_k`` children per expanded node,
    ``num_nodes`` kept after reranking (batch 1: the shape depends on the row)."""

    depth: int = 6
    top_k: int = 4
    num_nodes: int = 24

    def __post_init__(self):
        for name in ("depth", "top_k", "num_nodes"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be an int >= 1, got {getattr(self, name)!r}")


class EagleDrafter:
    """Drafts with an EAGLE head: a chain (``tree=None``, ``gamma`` drafts) or an EAGLE-2 dynamic tree.

    model: the target's ``LlamaModel`` (embedding, final norm and LM head reused, frozen).
    Chains at temperature 0 take the head's argmax; at temperature > 0 they sample from the
    head's distribution after the same SamplingParams and return it.  Trees are top-k
    candidates (deterministic), verified by the lossless tree rule at any temperature.
    Needs the loop's ``observe`` hook (:mod:`specbook.decode`).  ``dtype``: the head's and its LM
    head's (None: the target's); a drafter may run in a dtype the machine multiplies faster than the
    target's (bfloat16 under a float32 target on a CPU with AMX), since only the target's own
    verification decides what is emitted.
    """

    def __init__(self, head: EagleHead, model, tree: DynamicTree | None = None, dtype: torch.dtype | None = None):
        dtype = dtype or model.embed.weight.dtype
        if head.fc.weight.dtype != dtype:
            head = copy.deepcopy(head).to(dtype)  # a copy: Module.to casts in place, and the caller may share ``head``
        self._lm = draft_lm_head(model, head.config, head.vocab, "head was").to(dtype)
        self.head, self.model, self.tree = head.eval(), model, tree
        self.features = TargetFeatures(transform=model.norm, layers=head.config.feature_layers)
        self._rows: list[dict] = []  # per row: the head's cache and the tokens its committed pairs used
        self.passes = 0

    @classmethod
    def shipped(cls, model, tree: DynamicTree | str | None = "default",
                dtype: torch.dtype | None = None) -> "EagleDrafter":
        """The head shipped for SmolLM2-135M: ``tree="default"`` (the dynamic tree recorded with the
        weights), a :class:`DynamicTree`, or None for a chain; ``dtype`` as for the constructor."""
        head, meta = load_eagle()
        head = head.to(model.embed.weight.device, dtype or model.embed.weight.dtype)
        if tree == "default":
            tree = DynamicTree(**meta["default_tree"])
        elif tree is not None and not isinstance(tree, DynamicTree):
            raise ValueError(f"tree must be 'default', None or a DynamicTree, got {tree!r}")
        return cls(head, model, tree=tree, dtype=dtype)

    def attach(self, target) -> None:
        """A head with ``feature_layers`` asks the target to keep those blocks' states (before the prefill)."""
        if self.head.config.feature_layers and hasattr(target, "keep_layers"):
            target.keep_layers(self.head.config.feature_layers)

    def observe(self, target, kept: list[list[int]]) -> None:
        self.features.observe(target, kept)

    def select_rows(self, rows: list[int]) -> None:
        """Keep only batch rows ``rows``: their target features and head caches stay."""
        self.features.select_rows(rows)
        self._rows = [self._rows[r] for r in rows if r < len(self._rows)]

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model.embed(tokens.to(self.model.embed.weight.device)).to(self._lm.weight.dtype)

    def _sync(self, b: int, context: list[int], stable: int) -> torch.Tensor:
        """Feed row b's new (feature, next token) pairs; return zhat at the last cached position (1, 1, D)."""
        if len(self._rows) <= b:
            self._rows.append({"cache": HeadCache(), "tokens": []})
        row = self._rows[b]
        T = len(context)
        agree = 0
        for x, y in zip(row["tokens"], context):
            if x != y:
                break
            agree += 1
        # pair t = (z_t, x_{t+1}) is still valid if z_t and x_{t+1} are unchanged; always refeed the last one
        n = max(0, min(row["cache"].length, stable, agree - 1, T - 2))
        row["cache"].length = n
        feats = self.features.features(b)[n : T - 1][None].to(self._lm.weight.dtype)  # (1, m, D [+ n D])
        D = self.head.config.dim
        dev = self._lm.weight.device
        nxt = torch.tensor(context[n + 1 : T], dtype=torch.long, device=dev)[None]  # (1, m)
        positions = torch.arange(n, T - 1, device=dev)[None]
        layers = feats[..., D:] if self.head.config.feature_layers else None  # (1, m, n D): earlier blocks' states
        zhat = self.head(feats[..., :D], self._embed(nxt), positions, row["cache"],
                         self._prefix_mask(n, T - 1 - n, dev), layers)
        self.passes += 1
        row["tokens"] = list(context)
        row["committed"] = T - 1
        return zhat[:, -1:]

    @staticmethod
    def _prefix_mask(cached: int, n: int, device) -> torch.Tensor:
        """(1, n, cached + n): all cached entries plus causal among the new ones."""
        return torch.ones(n, cached + n, dtype=torch.bool, device=device).tril(diagonal=cached)[None]

    def _logits(self, zhat: torch.Tensor) -> torch.Tensor:
        return self._lm(zhat).float()  # (..., Vd), float32 whatever the head's dtype

    @torch.no_grad()
    def propose(self, contexts: list[torch.Tensor], gamma: int, params: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        self.features.check_contexts(contexts)
        stable = self.features.take_stable()
        B, V = len(contexts), self.head.config.target_vocab_size
        device = contexts[0].device
        if self.tree is not None and B != 1:
            raise ValueError(f"a dynamic tree's shape depends on the row, and Draft.parents is shared by the batch: "
                             f"use batch size 1 or a chain (tree=None), got batch size {B}")
        if any(len(c) < 2 for c in contexts) or (self.tree is None and gamma == 0):
            return Draft(torch.zeros(B, 0, dtype=torch.long, device=device), None if params.greedy else torch.zeros(B, 0, V))
        if self.tree is not None:
            zhat = self._sync(0, contexts[0].tolist(), stable[0])
            tokens, parents = self._dynamic_tree(0, zhat, len(contexts[0]))
            self._rows[0]["cache"].length = self._rows[0]["committed"]
            return Draft(tokens[None].to(device), None, parents.to(device))
        toks, probs = [], []
        for b in range(B):
            t, q = self._chain(b, contexts[b].tolist(), stable[b], gamma, params, generator)
            self._rows[b]["cache"].length = self._rows[b]["committed"]
            toks.append(t)
            probs.append(q)
        tokens = torch.stack(toks).to(device)  # (B, gamma)
        return Draft(tokens, None if params.greedy else torch.stack(probs).to(device))

    def _chain(self, b, context, stable, gamma, params, generator):
        zhat = self._sync(b, context, stable)  # (1, 1, D)
        vocab = self.head.vocab
        pos = len(context) - 1
        tokens, probs = [], []
        for i in range(gamma):
            logits = self._logits(zhat[0, 0])  # (Vd,)
            if params.greedy:
                d = int(logits.argmax())
            else:
                q = logits_to_probs(logits, params)  # (Vd,) the distribution the draft is sampled from
                d = int(sample(q, generator))
                probs.append(q.new_zeros(self.head.config.target_vocab_size).index_copy_(0, vocab, q))
            tokens.append(int(vocab[d]))
            if i + 1 < gamma:
                cache = self._rows[b]["cache"]  # the new pair sees every cached pair and itself
                dev = self._lm.weight.device
                zhat = self.head(zhat, self._embed(vocab[d].view(1, 1)), torch.tensor([[pos]], device=dev), cache,
                                 torch.ones(1, 1, cache.length + 1, dtype=torch.bool, device=dev))
                self.passes += 1
                pos += 1
        return torch.tensor(tokens), (torch.stack(probs) if probs else None)

    def _dynamic_tree(self, b: int, zhat: torch.Tensor, T: int) -> tuple[torch.Tensor, torch.Tensor]:
        """EAGLE-2 expand + rerank for row b.  Returns (tokens (N,), parents (N,))."""
        cfg, vocab, cache = self.tree, self.head.vocab, self._rows[b]["cache"]
        committed = cache.length
        logp = self._logits(zhat[0, 0]).log_softmax(-1)  # (Vd,)
        top = logp.topk(cfg.top_k)
        tok = [int(vocab[i]) for i in top.indices]
        score = top.values.tolist()
        par = [-1] * cfg.top_k
        slot: dict[int, int] = {}  # node -> index of its pair in the head cache (once fed)
        fed_z: dict[int, torch.Tensor] = {}  # node -> zhat after feeding it (1, 1, D)
        newest = list(range(cfg.top_k))  # the nodes of the deepest level so far
        for level in range(cfg.depth - 1):  # feed nodes of depth `level`, create depth `level + 1`
            feed = sorted(newest, key=lambda i: (-score[i], i))[: cfg.top_k]
            # each fed node attends to the committed pairs, its fed ancestors and itself
            S = cache.length + len(feed)
            mask = torch.zeros(1, len(feed), S, dtype=torch.bool)  # built on the CPU, moved once
            mask[0, :, :committed] = True
            for j, node in enumerate(feed):
                a = par[node]
                while a >= 0:
                    mask[0, j, slot[a]] = True
                    a = par[a]
                mask[0, j, cache.length + j] = True
            parent_z = torch.cat([zhat if par[n] < 0 else fed_z[par[n]] for n in feed], dim=1)  # (1, n, D)
            # a depth-d node's token sits at position T + d; its pair (parent zhat, token) one earlier
            dev = self._lm.weight.device
            positions = torch.tensor([[T - 1 + level] * len(feed)], device=dev)
            base = cache.length
            out = self.head(parent_z, self._embed(torch.tensor([[tok[n] for n in feed]], device=dev)), positions,
                            cache, mask.to(dev))
            self.passes += 1
            for j, node in enumerate(feed):
                slot[node] = base + j
                fed_z[node] = out[:, j : j + 1]
            child_logp = self._logits(out[0]).log_softmax(-1)  # (n, Vd)
            top = child_logp.topk(cfg.top_k, dim=-1)
            newest = []
            for j, node in enumerate(feed):
                for v, i in zip(top.values[j].tolist(), top.indices[j].tolist()):
                    newest.append(len(tok))
                    tok.append(int(vocab[i]))
                    score.append(score[node] + v)
                    par.append(node)
        keep = sorted(sorted(range(len(tok)), key=lambda i: (-score[i], i))[: cfg.num_nodes])
        index = {old: new for new, old in enumerate(keep)}
        parents = [-1 if par[i] < 0 else index[par[i]] for i in keep]
        return torch.tensor([tok[i] for i in keep]), torch.tensor(parents)
