"""The Llama configuration: sizes, rotary settings, and the rotary inverse frequencies.

Shape legend: Dh head width.

Fields follow Hugging Face's ``LlamaConfig`` names where they differ only in spelling
(``from_hf`` maps them); rotary embeddings are RoFormer's (Su et al., 2021, arXiv:2104.09864,
eq. 15) with the optional context-extension rescalings of position interpolation (Chen et
al., 2023) and Llama 3.1.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch


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
