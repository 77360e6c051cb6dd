"""Plain decoding through ``torch.compile``: one token per step over a cache of fixed length.

Shape legend: L layers, T cache length (fixed), V vocab, D model width, H query heads,
Hkv key/value heads, G = H // Hkv, Dh head width.

The readable model (:mod:`specbook.models.llama`) runs a decode step as some 400 PyTorch
operations, each dispatched from Python, and multiplies through oneDNN's prepacked kernel.
Compiled, the same step is one generated C++ function: the small operations are fused, the
Python is gone, and with ``max_autotune`` inductor times its own C++ matrix-product templates
against oneDNN's for every weight shape and keeps the faster (on a 2-core AMD EPYC without
AMX, its template streamed the LM head in 1.06 ms against oneDNN's 1.84 ms).  Compiling
needs every shape fixed, so the step attends over the whole cache buffer of T slots with a
mask that hides the slots not yet written: a decode step's shapes never change, and the step
compiles once (about a minute, then cached by torch for this process).

Only plain decoding: a verify pass has other shapes (and each would compile separately).
The eager model stays the reference: :class:`CompiledDecoder` fills the cache with the eager
model's prefill, and ``tests/models/test_compiled.py`` checks its tokens against the eager
model's.  In bfloat16 the two multiply with different kernels, so their logits differ by a
rounding step and a greedy token can differ at a near tie (docs/bench.md, "Compiled plain
decoding").
"""
from __future__ import annotations

import torch
import torch._inductor.config as inductor_config
import torch.nn.functional as F
from torch import nn

from .llama import LlamaModel, rotate_half


class DecodeStep(nn.Module):
    """One token through every layer, its keys and values written at ``position`` of the cache.

    token (1, 1) long, position (1,) long, k_cache and v_cache (L, 1, Hkv, T, Dh) (written in
    place), visible (1, 1, 1, T) bool (True = a written slot, this token's own included)
    -> logits (1, V) float32."""

    def __init__(self, model: LlamaModel, max_length: int):
        super().__init__()
        self.model = model
        w = model.embed.weight
        self.cos, self.sin = model._rope_tables(max_length, w.device, w.dtype)  # (P, Dh) each

    def forward(self, token, position, k_cache, v_cache, visible):
        m, c = self.model, self.model.config
        H, Hkv, Dh = c.n_heads, c.n_kv_heads, c.head_dim
        cos, sin = self.cos[position].view(1, 1, 1, Dh), self.sin[position].view(1, 1, 1, Dh)
        x = m.embed(token)  # (1, 1, D)
        for i, block in enumerate(m.layers):
            attn, mlp = block.attn, block.mlp
            qkv = F.linear(block.attn_norm(x), attn.wqkv.weight, attn.wqkv.bias)  # (1, 1, (H + 2 Hkv) Dh)
            qk = qkv[..., :(H + Hkv) * Dh].view(1, 1, H + Hkv, Dh)
            qk = qk * cos + rotate_half(qk) * sin
            q = qk[:, :, :H].reshape(1, Hkv, H // Hkv, Dh)  # the G query heads of a key/value head as rows
            k = qk[:, :, H:].transpose(1, 2)  # (1, Hkv, 1, Dh)
            v = qkv[..., (H + Hkv) * Dh:].view(1, 1, Hkv, Dh).transpose(1, 2)
            k_cache[i].index_copy_(2, position, k)
            v_cache[i].index_copy_(2, position, v)
            y = F.scaled_dot_product_attention(q, k_cache[i], v_cache[i], attn_mask=visible)  # (1, Hkv, G, Dh)
            x = x + F.linear(y.reshape(1, 1, H * Dh), attn.wo.weight, attn.wo.bias)
            gate, up = F.linear(block.mlp_norm(x), mlp.w_gate_up.weight, mlp.w_gate_up.bias).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, mlp.w_down.weight, mlp.w_down.bias)
        normed = m.norm(x)
        logits = F.linear(normed, m.lm_head.weight)  # (1, 1, V)
        if logits.dtype in (torch.bfloat16, torch.float16):
            logits = m._top_in_float32(normed, logits)  # as the eager model: the top candidates in float32
        return logits[:, -1].float()


class CompiledDecoder:
    """Greedy plain decoding with a compiled :class:`DecodeStep` (batch 1).

    ``autotune=True`` compiles in mode "max-autotune": inductor times its own matrix-product
    templates against oneDNN's (slower to compile, faster to run).  Weights are frozen into the
    compiled code (inductor's ``freezing``, switched on around each call; passed as
    ``torch.compile(options=...)`` instead it did not take effect here: 48 ms a token instead
    of 22), so the model must not change after the first call."""

    def __init__(self, model: LlamaModel, max_length: int, autotune: bool = True):
        if max_length < 2:
            raise ValueError(f"max_length must be at least 2, got {max_length}")
        self.model, self.max_length = model, max_length
        self.cache = model.make_cache(1, max_length)
        self.step = torch.compile(DecodeStep(model, max_length), fullgraph=True,
                                  mode="max-autotune" if autotune else None)

    @torch.no_grad()
    def generate(self, prompt_ids: list[int], max_new_tokens: int, eos_token_id: int | None = None) -> list[int]:
        """The greedy continuation of ``prompt_ids``: at most ``max_new_tokens`` new tokens,
        ending at ``eos_token_id`` (included) if given."""
        if not prompt_ids:
            raise ValueError("prompt_ids is empty")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if len(prompt_ids) + max_new_tokens > self.max_length:
            raise ValueError(f"prompt ({len(prompt_ids)} tokens) plus max_new_tokens ({max_new_tokens}) exceeds "
                             f"max_length ({self.max_length})")
        device = self.model.embed.weight.device
        self.cache.reset()
        logits = self.model(torch.tensor([prompt_ids], device=device), self.cache, logits_to_keep=1)  # eager prefill
        token = logits[:, -1].argmax(-1, keepdim=True)  # (1, 1)
        new = [int(token)]
        visible = torch.zeros(1, 1, 1, self.max_length, dtype=torch.bool, device=device)
        visible[..., :len(prompt_ids)] = True
        for position in range(len(prompt_ids), len(prompt_ids) + max_new_tokens - 1):
            if eos_token_id is not None and new[-1] == eos_token_id:
                break
            visible[..., position] = True
            with inductor_config.patch(freezing=True):  # weights as constants (the first call compiles)
                logits = self.step(token, torch.tensor([position], device=device), self.cache.k, self.cache.v, visible)
            token = logits.argmax(-1, keepdim=True)  # (1, 1)
            new.append(int(token))
        return new
