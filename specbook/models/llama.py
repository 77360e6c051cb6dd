"""A readable Llama-family transformer in plain PyTorch.

Shape legend: B batch, N new tokens in one forward, S keys attended to (cache + new),
T sequence, V vocab, D model width, H query heads, Hkv key/value heads, G = H // Hkv,
Dh head width, I MLP width, L layers.

The architecture is Llama (Touvron et al., 2023, "LLaMA: Open and Efficient Foundation
Language Models", arXiv:2302.13971): pre-norm residual blocks with RMSNorm (Zhang &
Sennrich, 2019), rotary position embeddings (Su et al., 2021, "RoFormer", arXiv:2104.09864,
eq. 34), grouped-query attention (Ainslie et al., 2023, arXiv:2305.13245) and a SwiGLU MLP
(Shazeer, 2020, arXiv:2002.05202, eq. 6).  The numerics follow Hugging Face's
``LlamaForCausalLM`` (RMSNorm in float32, rotate-half RoPE), so logits match it on the same
weights; see ``tests/models/test_models.py`` for the measured tolerance.

Three small departures from the textbook layout, all for speed on a CPU:

* the query/key/value projections are one matrix ``wqkv`` and the gate/up projections
  one matrix ``w_gate_up`` (one matrix product instead of three or two);
* grouped-query attention folds the G query heads that share a key/value head into the
  query-length axis, so keys and values are never copied G times;
* every projection is a :class:`~specbook.models.linear.Linear`, which on the CPU multiplies
  by a copy of its weight prepacked once for oneDNN: one row then streams the weight at
  about the memory bus's speed, and a verify pass over a few rows costs little more than
  one; see ``models/linear.py`` for the measurement.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .cache import KVCache
from .config import LlamaConfig, rope_inverse_frequencies
from .linear import Linear


TOP_IN_FLOAT32 = 32  # logits per position recomputed in float32 when the weights are in half precision


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * w, computed in float32 (Zhang & Sennrich 2019, eq. 4)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:  # x * rsqrt(mean(x^2) + eps) * w as one fused kernel
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        # Lower precision: normalise in float32, round, then scale, as Hugging Face's LlamaRMSNorm
        # does (three kernels per norm instead of six: 61 norms per decode step).
        normed = F.rms_norm(x.float(), self.weight.shape, None, self.eps)
        return self.weight * normed.to(x.dtype)


def fold_query_groups_mask(mask: torch.Tensor | None, is_causal: bool, groups: int, n: int):
    """The attention mask for G query heads per key/value head stacked on the query axis.

    mask (B|1, 1, N, S) bool or None -> (B|1, 1, G*N, S): row g*N + i is query i of head g.
    Returns (mask, is_causal) for ``scaled_dot_product_attention``.
    """
    if groups == 1:
        return mask, is_causal
    if is_causal:
        mask = torch.ones(n, n, dtype=torch.bool).tril()[None, None]
    if mask is None:
        return None, False
    folded = mask.unsqueeze(2).expand(mask.shape[0], 1, groups, n, mask.shape[-1])
    return folded.reshape(mask.shape[0], 1, groups * n, mask.shape[-1]), False


def matmul_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                     is_causal: bool) -> torch.Tensor:
    """softmax(q k^T / sqrt(Dh)) v as two matrix products in the inputs' dtype, the softmax in
    float32 (the form of Hugging Face's "eager" attention).  q (B, Hkv, M, Dh), k and v
    (B, Hkv, S, Dh), mask (B|1, 1, M, S) bool or None -> (B, Hkv, M, Dh).

    ``F.scaled_dot_product_attention``'s CPU kernel is faster, but a query's result there
    depends on how many other queries share the call and on how many keys the call holds:
    in bfloat16 a query of a 5-token verify pass and the same query decoded alone came out
    different in 149 of 1,800 (layer, position) pairs measured on SmolLM2 (docs/bench.md,
    "Bit for bit in bfloat16").  Here each query's scores and its weighted sum of values
    come out the same whatever else is in the pass (0 of the same 1,800), at about three
    times the attention's time.  Trees are not covered: there a node's masked siblings sit
    between its ancestors, and the measured replies still part at near ties (most likely the
    vectorised sums then add the same terms in another order)."""
    scores = torch.matmul(q, k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)  # (B, Hkv, M, S)
    if is_causal:
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril(k.shape[-2] - q.shape[-2])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(scores.softmax(-1, dtype=torch.float32).to(q.dtype), v)


@dataclass
class Step:
    """What every layer of one forward shares: rotary tables, the cache plan, the mask."""

    cos: torch.Tensor  # (B, N, 1, Dh)
    sin: torch.Tensor  # (B, N, 1, Dh)
    plan: object  # AttentionPlan, or _NoCachePlan without a cache
    mask: torch.Tensor | None  # (B|1, 1, G*N, S) bool, for the folded query layout
    is_causal: bool


class Attention(nn.Module):
    matmul_form = False  # per layer: matmul_attention instead of F.scaled_dot_product_attention

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = config.n_heads, config.n_kv_heads, config.head_dim
        q_size, kv_size = config.n_heads * config.head_dim, config.n_kv_heads * config.head_dim
        self.wqkv = Linear(config.dim, q_size + 2 * kv_size, bias=config.attention_bias)
        self.wo = Linear(q_size, config.dim, bias=config.attention_bias)

    def forward(self, x: torch.Tensor, layer: int, cache: KVCache | None, step: Step) -> torch.Tensor:
        B, N, _ = x.shape
        H, Hkv, Dh = self.n_heads, self.n_kv_heads, self.head_dim
        qkv = self.wqkv(x)  # (B, N, (H + 2 Hkv) Dh)
        # Rotate queries and keys together: they sit side by side in qkv.
        qk = qkv[..., :(H + Hkv) * Dh].view(B, N, H + Hkv, Dh)
        qk = qk * step.cos + rotate_half(qk) * step.sin  # RoFormer eq. 34, rotate-half layout
        q = qk[:, :, :H].transpose(1, 2)  # (B, H, N, Dh)
        k = qk[:, :, H:].transpose(1, 2)  # (B, Hkv, N, Dh)
        v = qkv[..., (H + Hkv) * Dh:].view(B, N, Hkv, Dh).transpose(1, 2)  # (B, Hkv, N, Dh)
        if cache is not None:
            k, v = cache.update(layer, k, v, step.plan)  # (B, Hkv, S, Dh)
        # The G = H / Hkv query heads sharing a key/value head are stacked along the query
        # axis, so keys and values are read in place instead of being repeated G times.
        q = q.reshape(B, Hkv, (H // Hkv) * N, Dh)  # (B, Hkv, G*N, Dh)
        if self.matmul_form:
            y = matmul_attention(q, k, v, step.mask, step.is_causal)  # (B, Hkv, G*N, Dh)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=step.mask, is_causal=step.is_causal)
        y = y.reshape(B, H, N, Dh).transpose(1, 2).reshape(B, N, H * Dh)
        return self.wo(y)


class MLP(nn.Module):
    """SwiGLU: W_down (silu(W_gate x) * W_up x)  (Shazeer 2020, eq. 6)."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.w_gate_up = Linear(config.dim, 2 * config.intermediate_size, bias=config.mlp_bias)
        self.w_down = Linear(config.intermediate_size, config.dim, bias=config.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w_gate_up(x).chunk(2, dim=-1)  # (B, N, I) each
        return self.w_down(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.attn_norm = RMSNorm(config.dim, config.rms_norm_eps)
        self.attn = Attention(config)
        self.mlp_norm = RMSNorm(config.dim, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, layer: int, cache: KVCache | None, step: Step) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), layer, cache, step)
        return x + self.mlp(self.mlp_norm(x))


@dataclass
class _NoCachePlan:
    """Attention among the new tokens only (no cache): causal unless a mask is given."""

    mask: torch.Tensor | None = None
    is_causal: bool = True


class LlamaModel(nn.Module):
    """Decoder-only Llama.  ``forward`` returns logits and, on request, residual-stream states."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.dim)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.dim, config.rms_norm_eps)
        self.lm_head = Linear(config.dim, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.embed.weight
        # Rotary tables cos/sin (P, Dh) per (device, dtype), computed in float32 and kept outside
        # the module's buffers so that .to(bfloat16) cannot round the frequencies; a decode
        # step then only gathers its rows instead of recomputing cos and sin.
        self._rope: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def _rope_tables(self, length: int, device: torch.device, dtype: torch.dtype):
        """(cos, sin), each (P, Dh) in ``dtype`` for positions 0..P-1, P >= ``length`` (grown by doubling)."""
        key = (device, dtype)
        if key not in self._rope or self._rope[key][0].shape[0] < length:
            size = min(max(length, 2 * self._rope[key][0].shape[0] if key in self._rope else 256),
                       self.config.max_position_embeddings)
            positions = torch.arange(size, device=device, dtype=torch.float32)
            freqs = positions[:, None] * rope_inverse_frequencies(self.config).to(device)  # (P, Dh/2)
            emb = torch.cat((freqs, freqs), dim=-1)  # (P, Dh), the same float32 arithmetic as HF
            self._rope[key] = (emb.cos().to(dtype), emb.sin().to(dtype))
        return self._rope[key]

    @torch.no_grad()
    def init_weights(self, std: float = 0.02, generator: torch.Generator | None = None) -> "LlamaModel":
        """Random weights N(0, std^2), norms at 1, biases at 0 (for tests and toy models)."""
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float32).mul_(std))
        return self

    def batch_invariant(self, enabled: bool = True) -> "LlamaModel":
        """Make every token's logits independent of what else shares its forward pass (bfloat16).

        Greedy speculative decoding emits exactly plain decoding's tokens only if the verify
        pass scores each drafted token with the very bits a one-token step would.  In float32
        the differing kernels disagree by about 1e-7 and no greedy token changed in the
        benchmark's runs; in bfloat16 they disagree by one rounding step often enough that about
        3 in 10 of the benchmark's speculative replies part from plain decoding at a near tie.
        Two kernels depend on the pass's shape: oneDNN's one-row product (fixed by
        ``Linear.one_row_as_two``) and torch's CPU attention (replaced by
        :func:`matmul_attention`).  Measured on a 2-core AMD EPYC, bfloat16: chains
        (prompt lookup) then emit plain decoding's tokens on every prompt; trees (EAGLE)
        still part at near ties; a decode step costs more (docs/bench.md, "Bit for bit in
        bfloat16").  Off by default: the speed figures are measured without it."""
        for module in self.modules():
            if isinstance(module, Attention):
                module.matmul_form = enabled
            elif isinstance(module, Linear):
                module.one_row_as_two = enabled
        return self

    def make_cache(self, batch_size: int, max_length: int) -> KVCache:
        """An empty preallocated cache on this model's device and dtype."""
        if max_length > self.config.max_position_embeddings:
            raise ValueError(f"max_length ({max_length}) exceeds the model's context "
                             f"({self.config.max_position_embeddings} positions)")
        c, w = self.config, self.embed.weight
        return KVCache(c.n_layers, batch_size, c.n_kv_heads, c.head_dim, max_length, dtype=w.dtype, device=w.device)

    def forward(
        self,
        tokens: torch.Tensor,
        cache: KVCache | None = None,
        position_ids: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        return_hidden: bool | list[int] = False,
        logits_to_keep: int | None = None,
        exit_layer: int | None = None,
    ):
        """Run ``tokens`` (B, N) through the model, appending them to ``cache`` if given.

        position_ids: (B, N) long; default = each row's cache length + 0..N-1.
        attn_mask:    (B, N, N) or (N, N) bool, which new tokens each new token may see
                      (True = attend); every token always sees all of its row's cached ones.
                      Default: causal.  A token must be allowed to see itself.
        return_hidden: False -> logits only.  True -> (logits, h) with h (B, N, D) the last
                      block's output before the final norm.  list of ints -> (logits, [h_i])
                      where h_i is the residual stream after i blocks (0 = embeddings,
                      n_layers = last block output, never normalised).
        logits_to_keep: compute logits only for the last this-many positions (0: none, for a
                      prefill whose logits are not needed; the lm head is a large share of
                      the work when V is large).
        exit_layer:   run only the first ``exit_layer`` blocks, then norm + head (early exit).
        Returns logits (B, N or logits_to_keep, V): float32 when the weights are in half precision
        (the top candidates recomputed in float32, :meth:`_top_in_float32`), else the weights' dtype.
        """
        n_run = self._check_inputs(tokens, attn_mask, logits_to_keep, exit_layer)
        wanted = [] if return_hidden is False else [n_run] if return_hidden is True else list(return_hidden)
        for i in wanted:
            if not 0 <= i <= n_run:
                raise ValueError(f"return_hidden layer index {i} not in [0, {n_run}]")
        x = self.embed(tokens)  # (B, N, D)
        step = self._step(tokens, cache, position_ids, attn_mask, x)
        x, hidden = self._blocks(x, cache, step, n_run, wanted)
        N = tokens.shape[1]
        last = x if logits_to_keep is None else x[:, N - logits_to_keep:]
        normed = self.norm(last)  # (B, N, D)
        logits = self.lm_head(normed)  # (B, N, V) in the weights' dtype
        if logits.dtype in (torch.bfloat16, torch.float16) and isinstance(self.lm_head, nn.Linear):
            logits = self._top_in_float32(normed, logits)  # (B, N, V) float32; a draft's reduced head is left as is
        if return_hidden is False:
            return logits
        if return_hidden is True:
            return logits, hidden[n_run]
        return logits, [hidden[i] for i in wanted]

    def _top_in_float32(self, normed: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """float32 logits whose largest ``TOP_IN_FLOAT32`` per position are recomputed in float32.

        A bfloat16 product accumulates in float32 but rounds its output to 8 bits of mantissa, so
        two tokens often tie exactly at the top (logits near 20 are 1/16 apart), and a pass over 5
        positions can break a tie differently from a pass over 1: greedy speculative output then
        differs from plain decoding for no reason but rounding.  Recomputing the top candidates
        from the same rounded inputs and weights in float32 costs a gather of a few rows of the
        head; the other logits keep their rounding (they decide no argmax).  llama.cpp also
        returns float32 logits.
        """
        top = logits.topk(TOP_IN_FLOAT32, dim=-1).indices  # (B, N, k)
        rows = self.lm_head.weight[top].float()  # (B, N, k, D)
        exact = torch.einsum("bnd,bnkd->bnk", normed.float(), rows)  # (B, N, k)
        return logits.float().scatter(-1, top, exact)  # (B, N, V)

    def _check_inputs(self, tokens, attn_mask, logits_to_keep, exit_layer) -> int:
        """Validate one forward's arguments; returns how many blocks it runs."""
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be (B, N), got shape {tuple(tokens.shape)}")
        N = tokens.shape[1]
        if N == 0:
            raise ValueError("tokens must hold at least one new token per row, got N=0")
        n_run = self.config.n_layers if exit_layer is None else exit_layer
        if not 0 <= n_run <= self.config.n_layers:
            raise ValueError(f"exit_layer must be in [0, {self.config.n_layers}], got {exit_layer}")
        if tokens.device.type == "cpu":  # elsewhere this check would stall the device
            lo, hi = int(tokens.min()), int(tokens.max())
            if lo < 0 or hi >= self.config.vocab_size:
                raise ValueError(f"token ids must be in [0, {self.config.vocab_size}), got range [{lo}, {hi}]")
        if logits_to_keep is not None and not 0 <= logits_to_keep <= N:
            raise ValueError(f"logits_to_keep must be in [0, {N}], got {logits_to_keep}")
        if attn_mask is not None and attn_mask.dtype != torch.bool:
            raise ValueError(f"attn_mask must be bool, got {attn_mask.dtype}")
        return n_run

    def _step(self, tokens, cache, position_ids, attn_mask, x) -> Step:
        """Positions, rotary tables, the cache plan and the folded mask, shared by every block."""
        B, N = tokens.shape
        # The largest position is known without reading the device when positions are the
        # default ones; explicit positions are checked on the CPU only (elsewhere the check
        # would stall the accelerator; LlamaTarget checks its own).
        explicit = position_ids is not None
        if cache is None:
            plan = _NoCachePlan(mask=None if attn_mask is None else attn_mask.view(-1, 1, N, N),
                                is_causal=attn_mask is None)
            if not explicit:
                position_ids = torch.arange(N, device=tokens.device).expand(B, N)
            max_pos = N - 1
        else:
            plan = cache.plan(N, attn_mask)
            if not explicit:
                position_ids = plan.positions  # (B, N)
            max_pos = plan.kv_len - 1
        if explicit:
            max_pos = int(position_ids.max()) if position_ids.device.type == "cpu" else -1
        if max_pos >= self.config.max_position_embeddings:
            raise ValueError(f"position {max_pos} is beyond the model's context of "
                             f"{self.config.max_position_embeddings} positions (prompt too long?)")
        if max_pos < 0:  # explicit positions on an accelerator: bounded by the context, unread
            max_pos = self.config.max_position_embeddings - 1
        cos, sin = self._rope_tables(max_pos + 1, x.device, x.dtype)  # (P, Dh) each
        mask, is_causal = fold_query_groups_mask(plan.mask, plan.is_causal,
                                                 self.config.n_heads // self.config.n_kv_heads, N)
        # (B, N, 1, Dh): the rows of each position, broadcast over heads
        return Step(cos[position_ids][:, :, None], sin[position_ids][:, :, None], plan,
                    None if mask is None else mask.to(x.device), is_causal)

    def _blocks(self, x, cache, step: Step, n_run: int, wanted: list[int]):
        """The first ``n_run`` blocks; returns the last state and {i: state after i blocks} for i in wanted."""
        hidden = {0: x} if 0 in wanted else {}
        for i, block in enumerate(self.layers[:n_run]):
            x = block(x, i, cache, step)  # (B, N, D)
            if i + 1 in wanted:
                hidden[i + 1] = x
        if cache is not None:
            cache.advance(step.plan)
        return x, hidden
