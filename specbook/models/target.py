"""Real models as speculative-decoding targets (the ``Target`` protocol of ``protocols.py``).

Shape legend: B batch, N new tokens (chain or tree nodes), M kept nodes, V vocab, D width.

A forward appends N tokens to every row and returns next-token logits at each.  With
``parents`` the N tokens form a tree (SpecInfer, Miao et al., 2023, arXiv:2305.09781,
"tree attention"; Medusa, Cai et al., 2024, arXiv:2401.10774, sec. 2.1.2): node i sits at
position ``cache_length + depth(i)`` and attends to the cached context and to its own
ancestors only, so one forward scores every branch.  After verification ``keep`` packs
the accepted root-to-leaf path into place; ``rollback`` shortens a plain chain.

``LlamaTarget`` drives the readable ``LlamaModel`` with its per-row cache (any batch
size, rows out of step).  ``HFTarget`` adapts any transformers causal LM (batch 1).
"""
from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch

from .llama import LlamaModel


def tree_structure(parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Ancestor mask and depths of a tree given by parent links.

    parents: (N,) long, parents[i] in [-1, i) (-1 = child of the cached context), so
             nodes are listed parents-first.
    Returns (ancestors (N, N) bool, True where column j is i or an ancestor of i;
             depth (N,) long, 0 for children of the context).  Both on parents' device.
    """
    if parents.dim() != 1 or parents.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"parents must be a 1-D integer tensor, got shape {tuple(parents.shape)} {parents.dtype}")
    plist = parents.tolist()
    n = len(plist)
    anc = torch.eye(n, dtype=torch.bool)
    depth = [0] * n
    for i, p in enumerate(plist):
        if not -1 <= p < i:
            raise ValueError(f"parents[{i}]={p}: a parent must be -1 or an earlier node (< {i})")
        if p >= 0:
            anc[i] |= anc[p]
            depth[i] = depth[p] + 1
    return anc.to(parents.device), torch.tensor(depth, dtype=torch.long, device=parents.device)


def _as_index_rows(indices, batch_size: int) -> list[list[int]]:
    """(B, M) tensor, or a list of B 1-D tensors / lists -> list of B python lists."""
    if torch.is_tensor(indices):
        if indices.dim() != 2 or indices.shape[0] != batch_size:
            raise ValueError(f"indices must be ({batch_size}, M), got shape {tuple(indices.shape)}")
        return indices.tolist()
    rows = [r.tolist() if torch.is_tensor(r) else list(r) for r in indices]
    if len(rows) != batch_size:
        raise ValueError(f"indices must hold {batch_size} rows, got {len(rows)}")
    return rows


def _check_path(rows: list[list[int]], parents: list[int]) -> None:
    for b, row in enumerate(rows):
        prev = -1
        for m, node in enumerate(row):
            if not 0 <= node < len(parents) or parents[node] != prev:
                raise ValueError(f"indices[{b}]={row} is not a root-to-node path of the last tree "
                                 f"(parents={parents}); node {node} at step {m}")
            prev = node


class LlamaTarget:
    """``LlamaModel`` + a preallocated per-row ``KVCache`` behind the Target protocol.

    After every ``forward``, ``last_hidden`` (B, N, D) holds the last block's output before
    the final norm (the features Medusa and EAGLE heads read) and, if ``hidden_layers`` was
    given, ``last_hidden_layers`` the residual stream after each listed number of blocks.
    """

    def __init__(self, model: LlamaModel, max_length: int = 2048, hidden_layers: Sequence[int] | None = None):
        if not 0 < max_length <= model.config.max_position_embeddings:
            raise ValueError(f"max_length must be in [1, {model.config.max_position_embeddings}], got {max_length}")
        self.model = model.eval()
        self.config = model.config
        self.vocab_size = model.config.vocab_size
        self.max_length = max_length
        self.hidden_layers = None if hidden_layers is None else self._checked_layers(hidden_layers)
        self.cache = None
        self.last_hidden: torch.Tensor | None = None
        self.last_hidden_layers: tuple[torch.Tensor, ...] | None = None
        self._last_tree = None  # (starts, parents list, lengths after) of the last forward
        self._tree_memo = (None, None)

    @property
    def device(self) -> torch.device:
        return self.model.embed.weight.device

    def _checked_layers(self, layers: Sequence[int]) -> tuple[int, ...]:
        out = tuple(int(i) for i in layers)
        for i in out:
            if not 0 <= i <= self.config.n_layers:
                raise ValueError(f"hidden_layers entry {i} not in [0, {self.config.n_layers}]")
        return out

    def keep_layers(self, layers: Sequence[int]) -> None:
        """From the next forward on, also keep the residual stream after each of ``layers`` blocks."""
        have = self.hidden_layers or ()
        self.hidden_layers = have + tuple(i for i in self._checked_layers(layers) if i not in have)

    @property
    def dtype(self) -> torch.dtype:
        return self.model.embed.weight.dtype

    def reset(self, batch_size: int) -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        c = self.cache
        if c is None or c.batch_size != batch_size or c.device != self.device or c.k.dtype != self.dtype:
            self.cache = self._new_cache(batch_size)
        else:
            self.cache.reset()
        self.last_hidden = self.last_hidden_layers = self._last_tree = None

    def _new_cache(self, batch_size: int):
        return self.model.make_cache(batch_size, self.max_length)

    def _require_cache(self):
        if self.cache is None:
            raise ValueError("call reset(batch_size) before using the target")
        return self.cache

    @property
    def cache_lengths(self) -> torch.Tensor:
        """(B,) long; empty before the first ``reset``."""
        if self.cache is None:
            return torch.zeros(0, dtype=torch.long, device=self.device)
        return self.cache.lengths

    def _tree(self, parents: torch.Tensor):
        key = tuple(parents.tolist())
        if self._tree_memo[0] != key:
            anc, depth = tree_structure(parents.cpu())
            self._tree_memo = (key, (anc.to(self.device), depth.to(self.device)))
        return self._tree_memo[1]

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, parents: torch.Tensor | None = None, *,
                logits_to_keep: int | None = None) -> torch.Tensor:
        """Append ``tokens`` (B, N); return float32 logits (B, N, V).

        ``logits_to_keep=k`` (not part of the protocol) returns only the last k positions'
        logits, (B, k, V); k=0 skips the lm head entirely, e.g. for a prompt prefill.
        """
        cache = self._require_cache()
        if tokens.dim() != 2 or tokens.shape[0] != cache.batch_size:
            raise ValueError(f"tokens must be ({cache.batch_size}, N), got shape {tuple(tokens.shape)}")
        tokens = tokens.to(self.device)
        n = tokens.shape[1]
        starts = cache.length_list()
        if max(starts) + n > self.max_length:
            raise ValueError(f"a row would hold {max(starts) + n} tokens, more than max_length={self.max_length} "
                             "(prompt plus generation longer than the context)")
        if parents is None:
            mask = position_ids = None
            plist = list(range(-1, n - 1))
        else:
            if parents.shape != (n,):
                raise ValueError(f"parents must have shape ({n},) for {n} tokens, got {tuple(parents.shape)}")
            mask, depth = self._tree(parents)
            position_ids = cache.lengths[:, None] + depth  # (B, N)
            plist = parents.tolist()
        wanted = [*(self.hidden_layers or ()), self.config.n_layers]
        logits, hidden = self.model(tokens, cache, position_ids=position_ids, attn_mask=mask,
                                    return_hidden=wanted, logits_to_keep=logits_to_keep)
        self.last_hidden = hidden[-1]  # (B, N, D)
        self.last_hidden_layers = tuple(hidden[:-1]) if self.hidden_layers is not None else None
        self._last_tree = (starts, plist, cache.length_list())
        return logits.float()  # (B, N, V)

    __call__ = forward

    def prefill(self, tokens: torch.Tensor) -> None:
        """Append ``tokens`` (B, N) to the cache without computing logits (hidden states are kept)."""
        self.forward(tokens, logits_to_keep=0)

    def rollback(self, lengths: torch.Tensor) -> None:
        self._require_cache().rollback(lengths)
        self._last_tree = None

    def select_rows(self, rows: list[int]) -> None:
        """Keep only batch rows ``rows`` (the decode loop drops rows that have ended)."""
        self._require_cache().select_rows(rows)
        if self.last_hidden is not None:
            index = torch.tensor(rows, dtype=torch.long, device=self.last_hidden.device)
            self.last_hidden = self.last_hidden.index_select(0, index)
            if self.last_hidden_layers is not None:
                self.last_hidden_layers = tuple(h.index_select(0, index) for h in self.last_hidden_layers)
        self._last_tree = None

    def keep(self, indices) -> None:
        """Keep only the accepted path of the last tree forward, packed into place.

        indices: (B, M) long, or a list of B 1-D index sequences (rows may keep different
        counts): the new-token indices of a root-to-node path, in order.  Row b ends with
        length ``start_b + len(indices[b])``.  Must directly follow ``forward``.
        """
        cache = self._require_cache()
        if self._last_tree is None or cache.length_list() != self._last_tree[2]:
            raise ValueError("keep() must directly follow forward(): the cache changed since")
        starts, plist, _ = self._last_tree
        rows = _as_index_rows(indices, cache.batch_size)
        _check_path(rows, plist)
        cache.compact(starts, rows)
        self._last_tree = None


class HFTarget:
    """Any transformers causal LM (``AutoModelForCausalLM``) as a Target, batch size 1.

    Uses the model's own ``DynamicCache``: ``rollback`` crops it, ``keep`` gathers the
    accepted path's entries.  Trees go in as a 4-D additive attention mask.
    ``last_hidden`` is the last decoder layer's output (before the final norm) when the
    model exposes ``get_decoder().layers``, else None.
    """

    def __init__(self, hf_model, max_length: int | None = None):
        self.model = hf_model.eval()
        self.vocab_size = int(hf_model.get_output_embeddings().weight.shape[0])
        self.max_length = max_length or getattr(hf_model.config, "max_position_embeddings", None)
        self.cache = None
        self._length = 0
        self._last_tree = None
        self._tree_memo = (None, None)
        self.last_hidden: torch.Tensor | None = None
        # transformers renamed `past_key_values` to `cache` in 5.x
        params = inspect.signature(hf_model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        layers = getattr(hf_model.get_decoder(), "layers", None)
        if layers is not None:
            layers[-1].register_forward_hook(self._grab_hidden)

    def _grab_hidden(self, module, args, output):
        self.last_hidden = output[0] if isinstance(output, tuple) else output

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def reset(self, batch_size: int) -> None:
        if batch_size != 1:
            raise ValueError(f"HFTarget supports batch_size=1 only (its cache cannot roll rows back "
                             f"separately), got {batch_size}; use LlamaTarget for batches")
        from transformers import DynamicCache

        self.cache = DynamicCache()
        self._length = 0
        self._last_tree = None
        self.last_hidden = None

    @property
    def cache_lengths(self) -> torch.Tensor:
        """(1,) long; empty before the first ``reset``."""
        if self.cache is None:
            return torch.zeros(0, dtype=torch.long, device=self.device)
        return torch.tensor([self._length], dtype=torch.long, device=self.device)

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, parents: torch.Tensor | None = None) -> torch.Tensor:
        if self.cache is None:
            raise ValueError("call reset(1) before using the target")
        if tokens.dim() != 2 or tokens.shape[0] != 1:
            raise ValueError(f"tokens must be (1, N), got shape {tuple(tokens.shape)}")
        tokens = tokens.to(self.device)
        n, start = tokens.shape[1], self._length
        if self.max_length is not None and start + n > self.max_length:
            raise ValueError(f"the row would hold {start + n} tokens, more than max_length={self.max_length}")
        offsets = torch.arange(n, device=self.device)
        if parents is None:
            position_ids = start + offsets[None]
            mask = torch.ones(1, start + n, dtype=torch.long, device=self.device)
            plist = list(range(-1, n - 1))
        else:
            if parents.shape != (n,):
                raise ValueError(f"parents must have shape ({n},) for {n} tokens, got {tuple(parents.shape)}")
            key = tuple(parents.tolist())
            if self._tree_memo[0] != key:
                self._tree_memo = (key, tree_structure(parents.cpu()))
            anc, depth = self._tree_memo[1]
            position_ids = (start + depth[None]).to(self.device)
            allowed = torch.cat([torch.ones(n, start, dtype=torch.bool), anc], dim=1).to(self.device)
            dtype = self.model.get_output_embeddings().weight.dtype
            mask = torch.zeros(1, 1, n, start + n, dtype=dtype, device=self.device)
            mask.masked_fill_(~allowed, torch.finfo(dtype).min)
            plist = list(key)
        out = self.model(input_ids=tokens, position_ids=position_ids, attention_mask=mask, use_cache=True,
                         **{self._cache_kwarg: self.cache})  # the DynamicCache grows in place
        self._length = start + n
        self._last_tree = (start, plist, self._length)
        return out.logits.float()  # (1, N, V)

    __call__ = forward

    def _select(self, positions: torch.Tensor) -> None:
        if hasattr(self.cache, "layers"):
            for layer in self.cache.layers:
                layer.keys = layer.keys[..., positions, :]
                layer.values = layer.values[..., positions, :]
        else:  # older transformers
            for i in range(len(self.cache.key_cache)):
                self.cache.key_cache[i] = self.cache.key_cache[i][..., positions, :]
                self.cache.value_cache[i] = self.cache.value_cache[i][..., positions, :]

    def rollback(self, lengths: torch.Tensor) -> None:
        if self.cache is None:
            raise ValueError("call reset(1) before using the target")
        new = [int(x) for x in (lengths.tolist() if torch.is_tensor(lengths) else lengths)]
        if len(new) != 1 or not 0 <= new[0] <= self._length:
            raise ValueError(f"lengths must be one entry in [0, {self._length}], got {new}")
        if new[0] < self._length:
            self.cache.crop(new[0] - self._length)  # negative = tokens to drop (v4 and v5)
        self._length = new[0]
        self._last_tree = None

    def keep(self, indices) -> None:
        """As ``LlamaTarget.keep``: keep the accepted root-to-node path of the last tree."""
        if self._last_tree is None or self._last_tree[2] != self._length:
            raise ValueError("keep() must directly follow forward(): the cache changed since")
        start, plist, _ = self._last_tree
        rows = _as_index_rows(indices, 1)
        _check_path(rows, plist)
        positions = torch.tensor(list(range(start)) + [start + i for i in rows[0]], device=self.device)
        self._select(positions)
        self._length = start + len(rows[0])
        self._last_tree = None
