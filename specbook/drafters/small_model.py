"""A small distilled draft model for SmolLM2-135M: two Llama blocks and a reduced-vocabulary head.

Shape legend: B batch, N tokens, D width (576), V target vocab (49152), Vd draft vocab.

Architecture.  The draft is a ``LlamaModel`` with the target's tokenizer and width:

* input embedding: the target's own (49152 x 576), shared and frozen, so it is not shipped;
* ``n_layers`` Llama blocks (default 2), initialised from target blocks and then trained
  by distillation (``python -m specbook.train.distill``);
* final RMSNorm, then a head over only the Vd most frequent target tokens (default 8192).

Why a reduced head.  One SmolLM2 block is about 3.5 M multiply-adds per token; the LM
head over the full vocabulary is 576 x 49152 = 28 M, eight blocks' worth.  A two-block
draft with the full head would spend 80 % of its time in the head.  Keeping only Vd rows
(EAGLE-3, Li et al. 2025, sec. 3, "draft vocabulary"; FR-Spec, Zhao et al. 2025) cuts the
head to 576 x Vd, and the ids ``vocab_ids`` map draft indices back to target token ids.

Losslessness.  The drafter must hand the verifier a distribution over the *full*
vocabulary: :class:`ReducedHead` returns full-size logits that are -inf outside the draft
vocabulary, so q(x) = 0 there.  Such tokens are never drafted, and when the target wants
them the residual max(0, p - q) = p there supplies them: the output law is still exactly
the target's (Leviathan et al. 2023, Appendix A.1 holds for any q).
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from pathlib import Path

import torch
from torch import nn

from ..models.llama import LlamaModel

WEIGHTS_DIR = Path(__file__).resolve().parent.parent / "weights"
DEFAULT_NAME = "draft_smollm2"


class ReducedHead(nn.Module):
    """LM head over a subset of the vocabulary; ``forward`` scatters into full-size logits (-inf elsewhere)."""

    def __init__(self, weight: torch.Tensor, vocab_ids: torch.Tensor, full_vocab: int):
        super().__init__()
        if weight.shape[0] != vocab_ids.shape[0]:
            raise ValueError(f"weight has {weight.shape[0]} rows but vocab_ids has {vocab_ids.shape[0]} entries")
        if vocab_ids.numel() != vocab_ids.unique().numel() or vocab_ids.min() < 0 or vocab_ids.max() >= full_vocab:
            raise ValueError(f"vocab_ids must be distinct token ids in [0, {full_vocab})")
        self.weight = nn.Parameter(weight)  # (Vd, D)
        self.register_buffer("vocab_ids", vocab_ids.long(), persistent=False)  # (Vd,)
        self.full_vocab = full_vocab

    def reduced(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.t()  # (..., Vd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        small = self.reduced(x)  # (..., Vd)
        full = small.new_full((*small.shape[:-1], self.full_vocab), float("-inf"))  # (..., V)
        return full.index_copy_(-1, self.vocab_ids, small)


@dataclasses.dataclass(frozen=True)
class DraftConfig:
    n_layers: int = 2
    init_layers: tuple[int, ...] = (0, 1)  # target blocks copied in before training
    draft_vocab: int = 8192

    def __post_init__(self):
        if self.n_layers < 1 or len(self.init_layers) != self.n_layers:
            raise ValueError(f"need n_layers >= 1 and one init layer per block, got {self.n_layers}, {self.init_layers}")
        if self.draft_vocab < 2:
            raise ValueError(f"draft_vocab must be >= 2, got {self.draft_vocab}")


def build_draft_model(target: LlamaModel, config: DraftConfig, vocab_ids: torch.Tensor) -> LlamaModel:
    """A draft initialised from ``target``: copies of its blocks ``config.init_layers``, its final norm,
    and head rows = its (tied) output embedding rows of ``vocab_ids``.  The input embedding is the
    target's module itself (shared; freeze it before training)."""
    for i in config.init_layers:
        if not 0 <= i < target.config.n_layers:
            raise ValueError(f"init layer {i} not in [0, {target.config.n_layers})")
    if vocab_ids.numel() != config.draft_vocab:
        raise ValueError(f"vocab_ids has {vocab_ids.numel()} entries, config.draft_vocab is {config.draft_vocab}")
    cfg = dataclasses.replace(target.config, n_layers=config.n_layers, tie_embeddings=False)
    with torch.device("meta"):
        draft = LlamaModel(cfg)
    draft.embed = target.embed
    draft.layers = nn.ModuleList(copy.deepcopy(target.layers[i]) for i in config.init_layers)
    draft.norm = copy.deepcopy(target.norm)
    head_rows = target.lm_head.weight.detach()[vocab_ids.to(target.lm_head.weight.device)].clone()
    draft.lm_head = ReducedHead(head_rows, vocab_ids.to(head_rows.device), target.config.vocab_size)
    return draft.eval()


def weights_digest(model) -> str:
    """A short fingerprint of a model's input embedding (identifies the target a draft was distilled from)."""
    w = model.embed.weight.detach().float().cpu()
    return hashlib.sha256(w[:: max(1, w.shape[0] // 512)].numpy().tobytes()).hexdigest()[:16]


def trainable_state(draft: LlamaModel) -> dict[str, torch.Tensor]:
    """Everything the draft owns (not the shared embedding), plus the vocabulary map."""
    state = {k: v for k, v in draft.state_dict().items() if not k.startswith("embed.")}
    state["lm_head.vocab_ids"] = draft.lm_head.vocab_ids.to(torch.int32)
    return state


def save_draft(draft: LlamaModel, config: DraftConfig, meta: dict, directory: str | Path = WEIGHTS_DIR,
               name: str = DEFAULT_NAME, dtype: torch.dtype = torch.float16) -> Path:
    """Write ``<name>.safetensors`` (weights in ``dtype``) and ``<name>.json`` (config + ``meta``)."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: (v.to(dtype) if v.is_floating_point() else v).contiguous().cpu() for k, v in trainable_state(draft).items()}
    path = directory / f"{name}.safetensors"
    save_file(state, str(path))
    info = {"draft": dataclasses.asdict(config), "dtype": str(dtype).removeprefix("torch."),
            "target_digest": weights_digest(draft), **meta}  # draft.embed is the target's embedding
    (directory / f"{name}.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return path


def draft_info(directory: str | Path = WEIGHTS_DIR, name: str = DEFAULT_NAME) -> dict:
    """The json written next to the weights (config, training command, data digest, measured figures)."""
    path = Path(directory) / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(f"no draft model at {path}; train one with `python -m specbook.train.distill`")
    return json.loads(path.read_text())


def load_draft(target: LlamaModel, directory: str | Path = WEIGHTS_DIR, name: str = DEFAULT_NAME,
               dtype: torch.dtype | None = None, check_target: bool = True) -> LlamaModel:
    """The distilled draft for ``target``, in ``dtype`` (default: the target's) on the target's device.

    Raises ValueError if the target's embedding is not the one the draft was distilled against
    (its fingerprint is stored in the json), unless ``check_target=False``.  The fingerprint is of
    the float32 weights, so a target loaded in a lower precision (bfloat16 by ``dtype="auto"``)
    cannot be compared with it and is not checked.
    """
    from safetensors.torch import load_file

    info = draft_info(directory, name)
    comparable = target.embed.weight.dtype == torch.float32
    if check_target and comparable and info.get("target_digest") not in (None, weights_digest(target)):
        raise ValueError(f"this draft was distilled from a target with embedding digest {info['target_digest']}, "
                         f"not {weights_digest(target)}; pass check_target=False to use it anyway")
    config = DraftConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in info["draft"].items()})
    state = load_file(str(Path(directory) / f"{name}.safetensors"))
    vocab_ids = state.pop("lm_head.vocab_ids").long()
    draft = build_draft_model(target, config, vocab_ids)
    dtype = dtype or target.embed.weight.dtype
    device = target.embed.weight.device
    missing = draft.load_state_dict({k: v.to(device=device, dtype=dtype) for k, v in state.items()}, strict=False)
    unexpected = [k for k in missing.missing_keys if not k.startswith("embed.")] + list(missing.unexpected_keys)
    if unexpected:
        raise ValueError(f"draft weights do not match the architecture: {unexpected[:5]}")
    for name_, p in draft.named_parameters():
        if not name_.startswith("embed."):
            p.data = p.data.to(device=device, dtype=dtype)
        p.requires_grad_(False)
    return draft.eval()


def distilled_drafter(target, directory: str | Path = WEIGHTS_DIR, name: str = DEFAULT_NAME, max_length: int = 2048):
    """A ``DraftModelDrafter`` around the shipped distilled draft.

    target: a ``LlamaTarget`` of SmolLM2 (its ``max_length`` sizes the draft's cache) or the bare ``LlamaModel``.
    """
    from ..models.target import LlamaTarget
    from .draft_model import DraftModelDrafter

    model = target if isinstance(target, LlamaModel) else target.model
    length = getattr(target, "max_length", max_length)
    return DraftModelDrafter(LlamaTarget(load_draft(model, directory, name), max_length=length))
