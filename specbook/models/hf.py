"""Load Hugging Face Llama checkpoints into the readable ``LlamaModel``.

Shape legend: D model width, H query heads, Hkv key/value heads, Dh head width, I MLP width.

Everything here is offline: a model is read from a local directory or from the local
Hugging Face cache (``local_files_only``); nothing contacts a hub.  Models of another
architecture can still be used as targets through ``HFTarget`` (see ``target.py``).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from .config import LlamaConfig
from .dtype import resolve_dtype
from .llama import LlamaModel

LLAMA_ARCHITECTURES = ("LlamaForCausalLM",)


def convert_hf_state_dict(hf_state: dict[str, torch.Tensor], config: LlamaConfig) -> dict[str, torch.Tensor]:
    """Rename (and fuse) a Hugging Face ``LlamaForCausalLM`` state dict into ours.

    q/k/v projections are stacked into ``wqkv`` (rows: H*Dh, Hkv*Dh, Hkv*Dh) and gate/up
    into ``w_gate_up`` (rows: I, I).  Both use Hugging Face's rotate-half RoPE layout, so
    no row permutation is needed.
    """
    sd = {k.removeprefix("model."): v for k, v in hf_state.items()}
    out = {"embed.weight": sd.pop("embed_tokens.weight"), "norm.weight": sd.pop("norm.weight")}
    head = sd.pop("lm_head.weight", None)
    if config.tie_embeddings:
        out["lm_head.weight"] = out["embed.weight"]
    elif head is None:
        raise ValueError("checkpoint has no lm_head.weight but the config says embeddings are not tied")
    else:
        out["lm_head.weight"] = head
    for i in range(config.n_layers):
        p = f"layers.{i}."
        a, m = p + "self_attn.", p + "mlp."
        out[p + "attn_norm.weight"] = sd.pop(p + "input_layernorm.weight")
        out[p + "mlp_norm.weight"] = sd.pop(p + "post_attention_layernorm.weight")
        for kind in ("weight", "bias"):
            if a + "q_proj." + kind in sd:
                out[p + f"attn.wqkv.{kind}"] = torch.cat([sd.pop(a + f"{n}_proj.{kind}") for n in "qkv"])
            if a + "o_proj." + kind in sd:
                out[p + f"attn.wo.{kind}"] = sd.pop(a + f"o_proj.{kind}")
            if m + "gate_proj." + kind in sd:
                out[p + f"mlp.w_gate_up.{kind}"] = torch.cat([sd.pop(m + f"gate_proj.{kind}"),
                                                              sd.pop(m + f"up_proj.{kind}")])
            if m + "down_proj." + kind in sd:
                out[p + f"mlp.w_down.{kind}"] = sd.pop(m + f"down_proj.{kind}")
    leftover = [k for k in sd if not k.endswith("rotary_emb.inv_freq")]
    if leftover:
        raise ValueError(f"unexpected tensors in the checkpoint (not a plain Llama?): {leftover[:5]}")
    return out


def model_from_hf_state_dict(config: LlamaConfig, hf_state: dict[str, torch.Tensor], *,
                             device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> LlamaModel:
    """Build a ``LlamaModel`` holding these weights, on ``device`` in ``dtype``."""
    state = {k: v.to(device=device, dtype=dtype) for k, v in convert_hf_state_dict(hf_state, config).items()}
    with torch.device("meta"):
        model = LlamaModel(config)
    model.load_state_dict(state, assign=True, strict=True)
    if config.tie_embeddings:
        model.lm_head.weight = model.embed.weight
    return model.eval()


def resolve_model_dir(path_or_repo_id: str | Path) -> Path:
    """A local directory, or the local Hugging Face cache snapshot of a repo id (never downloads)."""
    path = Path(path_or_repo_id).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} has no config.json; is it a Hugging Face model directory?")
        return path
    name = str(path_or_repo_id)
    hint = ("For SmolLM2-135M-Instruct run `python -m specbook.models.smollm2` (or use "
            "specbook.models.load_smollm2()); for another model pass a local directory, or download it "
            "while online with `hf download <repo_id>`.")
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", name):
        raise FileNotFoundError(f"no model directory at {name!r}. {hint}")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name, local_files_only=True))
    except Exception as err:  # the hub client raises several kinds of "not cached"
        raise FileNotFoundError(f"model {name!r} is neither a local directory nor in the local "
                                f"Hugging Face cache ({type(err).__name__}). {hint}") from None


def read_hf_config(model_dir: Path) -> dict:
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    archs = cfg.get("architectures") or []
    if cfg.get("model_type") != "llama" or any(a not in LLAMA_ARCHITECTURES for a in archs):
        raise ValueError(f"{model_dir} holds a {cfg.get('model_type')!r} model {archs}, not a Llama; "
                         "load it with transformers and wrap it with specbook.models.HFTarget instead")
    return cfg


def weight_files(model_dir: Path, index_name: str, single: str, pattern: str) -> list[Path]:
    """The weight files of one format: those a shard index names, else the single file, else a glob.

    A sharded checkpoint lists its shards in ``<index_name>`` (``weight_map``: tensor -> file);
    other files in the directory (a stray copy, an older download) are not part of the model.
    """
    index = model_dir / index_name
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing = [s for s in shards if not (model_dir / s).is_file()]
        if missing:
            raise FileNotFoundError(f"{index} names shards that are not in {model_dir}: {missing[:3]}")
        return [model_dir / s for s in shards]
    if (model_dir / single).is_file():
        return [model_dir / single]
    return sorted(model_dir.glob(pattern))


def load_hf_weights(model_dir: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint: model.safetensors (single, or the shards its index names),
    else pytorch_model.bin (likewise)."""
    from safetensors.torch import load_file

    model_dir = Path(model_dir)
    state: dict[str, torch.Tensor] = {}
    files = weight_files(model_dir, "model.safetensors.index.json", "model.safetensors", "*.safetensors")
    if files:
        for f in files:
            state.update(load_file(f))
        return state
    bins = weight_files(model_dir, "pytorch_model.bin.index.json", "pytorch_model.bin", "pytorch_model*.bin")
    if bins:
        for f in bins:
            state.update(torch.load(f, map_location="cpu", weights_only=True))
        return state
    raise FileNotFoundError(f"no *.safetensors or pytorch_model*.bin weights in {model_dir}")


def load_tokenizer(model_dir: str | Path):
    """The tokenizer saved next to the model, loaded offline; None if there is none."""
    model_dir = Path(model_dir)
    if not any((model_dir / f).is_file() for f in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)


def load_llama(path_or_repo_id: str | Path, device: torch.device | str = "cpu",
               dtype: torch.dtype | str = "auto"):
    """Load any Llama-family checkpoint into ``LlamaModel``; returns (model, tokenizer or None).

    ``dtype="auto"`` picks bfloat16 where the device multiplies it natively, else float32
    (:func:`specbook.models.dtype.auto_dtype`); pass ``torch.float32`` for exact comparisons
    or training.

    Raises FileNotFoundError (with what to do) if the model is not available offline,
    ValueError if it is not a Llama (use ``HFTarget`` for those).
    """
    model_dir = resolve_model_dir(path_or_repo_id)
    config = LlamaConfig.from_hf(read_hf_config(model_dir))
    dtype = resolve_dtype(dtype, device)
    model = model_from_hf_state_dict(config, load_hf_weights(model_dir), device=device, dtype=dtype)
    return model, load_tokenizer(model_dir)


def check_same_tokenizer(tok_a, tok_b) -> None:
    """Raise ValueError unless the two tokenizers map every token string to the same id.

    A draft model and its target must share a vocabulary: verification compares token
    ids, so a mismatch silently turns into garbage acceptance decisions.
    """
    vocab_a, vocab_b = tok_a.get_vocab(), tok_b.get_vocab()
    problems = []
    if len(vocab_a) != len(vocab_b):
        problems.append(f"vocabulary sizes differ: {len(vocab_a)} vs {len(vocab_b)}")
    diff = [t for t in vocab_a.keys() | vocab_b.keys() if vocab_a.get(t) != vocab_b.get(t)]
    if diff:
        diff.sort(key=lambda t: min(i for i in (vocab_a.get(t), vocab_b.get(t)) if i is not None))
        shown = ", ".join(f"{t!r}: {vocab_a.get(t)} vs {vocab_b.get(t)}" for t in diff[:5])
        problems.append(f"{len(diff)} tokens have different ids, e.g. {shown}")
    for name in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"):
        a, b = getattr(tok_a, name, None), getattr(tok_b, name, None)
        if a != b:
            problems.append(f"{name} differs: {a} vs {b}")
    if problems:
        raise ValueError("tokenizers differ: " + "; ".join(problems))
