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
weights; see ``tests/test_models.py`` for the measured tolerance.

Three small departures from the textbook layout, all for speed on a CPU:

* the query/key/value projections are one matrix ``wqkv`` and the gate/up projections
  one matrix ``w_gate_up`` (one matrix product instead of three or two);
* grouped-query attention folds the G query heads that share a key/value head into the
  query-length axis, so keys and values are never copied G times;
* every projection is a :class:`Linear` that multiplies a few rows (4 to 64: a verify
  pass over drafts) by a transposed copy of its weight, which the CPU's BLAS does much
  faster than the usual layout; see its docstring for the measurement.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .cache import KVCache


@dataclass(frozen=True)
class RopeScaling:
    """Context-extension rescaling of the rotary frequencies.

    kind="linear": every inverse frequency divided by ``factor`` (position interpolation,
    Chen et al., 2023, arXiv:2306.15595).  kind="llama3": low frequencies divided by
    ``factor``, high ones kept, a smooth blend in between (Llama 3.1 report, 2024).
    """

    kind: str
    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def __post_init__(self):
        if self.kind not in ("linear", "llama3"):
            raise ValueError(f"kind must be 'linear' or 'llama3', got {self.kind!r}")
        if not self.factor > 0:
            raise ValueError(f"factor must be > 0, got {self.factor}")


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int = 49152
    dim: int = 576
    n_layers: int = 30
    n_heads: int = 9
    n_kv_heads: int = 3
    intermediate_size: int = 1536
    head_dim: int = 0  # 0 means dim // n_heads
    rms_norm_eps: float = 1e-5
    rope_theta: float = 100000.0
    rope_scaling: RopeScaling | None = None
    max_position_embeddings: int = 8192
    tie_embeddings: bool = True
    attention_bias: bool = False
    mlp_bias: bool = False

    def __post_init__(self):
        for name in ("vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "intermediate_size",
                     "max_position_embeddings"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.head_dim == 0:
            if self.dim % self.n_heads:
                raise ValueError(f"dim ({self.dim}) is not divisible by n_heads ({self.n_heads}); give head_dim")
            object.__setattr__(self, "head_dim", self.dim // self.n_heads)
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")

    @classmethod
    def smollm2_135m(cls) -> "LlamaConfig":
        """SmolLM2-135M(-Instruct): 30 layers, width 576, 9 query / 3 key-value heads."""
        return cls()

    @classmethod
    def from_hf(cls, hf: dict) -> "LlamaConfig":
        """Build from a Hugging Face ``config.json`` dict of a Llama model (v4 or v5 layout)."""
        rope = dict(hf.get("rope_parameters") or {})
        legacy = hf.get("rope_scaling") or {}
        rope = {**legacy, **rope}
        theta = rope.get("rope_theta", hf.get("rope_theta", 10000.0))
        kind = rope.get("rope_type", rope.get("type", "default"))
        scaling = None
        if kind == "linear":
            scaling = RopeScaling("linear", float(rope["factor"]))
        elif kind == "llama3":
            scaling = RopeScaling("llama3", float(rope["factor"]), float(rope["low_freq_factor"]),
                                  float(rope["high_freq_factor"]), int(rope["original_max_position_embeddings"]))
        elif kind != "default":
            raise ValueError(f"rope scaling type {kind!r} is not implemented here; wrap the model with HFTarget")
        return cls(
            vocab_size=hf["vocab_size"],
            dim=hf["hidden_size"],
            n_layers=hf["num_hidden_layers"],
            n_heads=hf["num_attention_heads"],
            n_kv_heads=hf.get("num_key_value_heads") or hf["num_attention_heads"],
            intermediate_size=hf["intermediate_size"],
            head_dim=hf.get("head_dim") or 0,
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            rope_theta=float(theta),
            rope_scaling=scaling,
            max_position_embeddings=hf.get("max_position_embeddings", 2048),
            tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
            attention_bias=bool(hf.get("attention_bias", False)),
            mlp_bias=bool(hf.get("mlp_bias", False)),
        )


def rope_inverse_frequencies(config: LlamaConfig) -> torch.Tensor:
    """theta_i = base^(-2i/Dh) (RoFormer eq. 15), optionally rescaled.  (Dh/2,) float32."""
    dh = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dh, 2, dtype=torch.int64).float() / dh))
    s = config.rope_scaling
    if s is None:
        return inv_freq
    if s.kind == "linear":
        return inv_freq / s.factor
    low_wavelen = s.original_max_position_embeddings / s.low_freq_factor
    high_wavelen = s.original_max_position_embeddings / s.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / s.factor, inv_freq)
    smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    blended = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, blended, scaled)


class Linear(nn.Linear):
    """``nn.Linear`` that keeps a second, transposed copy of W for short multi-row inputs.

    Why: speculative decoding runs the target on gamma + 1 (or a tree's N) positions at a
    time, and its speed hinges on that pass costing about as much as a one-position pass
    (the verify cost v(N) of :func:`specbook.theory.speedup`).  With the weight stored
    (out, in), as ``nn.Linear`` does, the CPU BLAS (MKL) streams W once for 1-3 rows but
    switches to a packing kernel from 4 rows on.  Measured on SmolLM2-135M, a 2-core x86
    CPU, 2 threads, one forward after a 96-token context: v(4) = 1.69 and v(5) = 1.75 with
    ``nn.Linear``; with ``x @ W^T`` and W^T stored (in, out), 1.35 and 1.46 (and v(9) 2.22
    -> 1.90).  For 1-3 rows and for long prefills the usual layout is as fast or faster.

    So: on the CPU, without autograd, for 4 <= rows <= 64, use the transposed copy; it is
    built on first use and rebuilt whenever the weight changes (loading, training, moving
    to another device or dtype).  Results equal ``nn.Linear``'s up to float rounding (the
    products are summed in another order: up to 9e-5 on SmolLM2's logits, which reach
    ~30).  Costs one more copy of the weights in memory.  ``Linear.FAST_ROWS = None``
    switches the path off everywhere (``nn.Linear``'s kernels, bit for bit).
    """

    FAST_ROWS = (4, 64)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._wt: torch.Tensor | None = None
        self._wt_key: tuple | None = None

    def _transposed(self) -> torch.Tensor:
        w = self.weight
        key = (w.data_ptr(), w._version, w.dtype, w.device)
        if self._wt_key != key:
            self._wt = w.detach().t().contiguous()  # (in, out)
            self._wt_key = key
        return self._wt

    @classmethod
    def frozen(cls, weight: torch.Tensor) -> "Linear":
        """A bias-free Linear over a copy of ``weight`` (out, in) that is never trained (a draft head
        reusing rows of the target's LM head)."""
        lin = cls(weight.shape[1], weight.shape[0], bias=False, device="meta")  # no throwaway random init
        lin.weight = nn.Parameter(weight.detach().clone(), requires_grad=False)
        return lin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
        if (self.FAST_ROWS is not None and x.device.type == "cpu" and self.FAST_ROWS[0] <= rows <= self.FAST_ROWS[1]
                and not (torch.is_grad_enabled() and (self.weight.requires_grad or x.requires_grad))):
            y = x @ self._transposed()
            return y if self.bias is None else y + self.bias
        return super().forward(x)


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
        if x.dtype == torch.float32:  # the same arithmetic as below, as one fused kernel
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


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


@dataclass
class _Step:
    """What every layer of one forward shares: rotary tables, the cache plan, the mask."""

    cos: torch.Tensor  # (B, N, 1, Dh)
    sin: torch.Tensor  # (B, N, 1, Dh)
    plan: object  # AttentionPlan, or _NoCachePlan without a cache
    mask: torch.Tensor | None  # (B|1, 1, G*N, S) bool, for the folded query layout
    is_causal: bool


class Attention(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = config.n_heads, config.n_kv_heads, config.head_dim
        q_size, kv_size = config.n_heads * config.head_dim, config.n_kv_heads * config.head_dim
        self.wqkv = Linear(config.dim, q_size + 2 * kv_size, bias=config.attention_bias)
        self.wo = Linear(q_size, config.dim, bias=config.attention_bias)

    def forward(self, x: torch.Tensor, layer: int, cache: KVCache | None, step: _Step) -> torch.Tensor:
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

    def forward(self, x: torch.Tensor, layer: int, cache: KVCache | None, step: _Step) -> torch.Tensor:
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
        # Kept in float32 outside the module's buffers so that .to(bfloat16) cannot round it.
        self._inv_freq: dict[torch.device, torch.Tensor] = {}

    def _rope_inverse_frequencies(self, device: torch.device) -> torch.Tensor:
        if device not in self._inv_freq:
            self._inv_freq[device] = rope_inverse_frequencies(self.config).to(device)
        return self._inv_freq[device]

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
        Returns logits (B, N or logits_to_keep, V) in the model's dtype.
        """
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be (B, N), got shape {tuple(tokens.shape)}")
        B, N = tokens.shape
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

        x = self.embed(tokens)  # (B, N, D)
        freqs = position_ids[..., None].float() * self._rope_inverse_frequencies(x.device)  # (B, N, Dh/2)
        emb = torch.cat((freqs, freqs), dim=-1)[:, :, None]  # (B, N, 1, Dh), broadcast over heads
        mask, is_causal = fold_query_groups_mask(plan.mask, plan.is_causal,
                                                 self.config.n_heads // self.config.n_kv_heads, N)
        step = _Step(emb.cos().to(x.dtype), emb.sin().to(x.dtype), plan,
                     None if mask is None else mask.to(x.device), is_causal)

        wanted = [] if return_hidden is False else [n_run] if return_hidden is True else list(return_hidden)
        for i in wanted:
            if not 0 <= i <= n_run:
                raise ValueError(f"return_hidden layer index {i} not in [0, {n_run}]")
        hidden = {0: x} if 0 in wanted else {}
        for i, block in enumerate(self.layers[:n_run]):
            x = block(x, i, cache, step)
            if i + 1 in wanted:
                hidden[i + 1] = x
        if cache is not None:
            cache.advance(plan)

        last = x if logits_to_keep is None else x[:, N - logits_to_keep:]
        logits = self.lm_head(self.norm(last))  # (B, N, V)
        if return_hidden is False:
            return logits
        if return_hidden is True:
            return logits, hidden[n_run]
        return logits, [hidden[i] for i in wanted]
