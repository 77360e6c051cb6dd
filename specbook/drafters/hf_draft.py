"""Any Hugging Face causal LM the user has on disk as the draft model, through ``HFTarget``.

Shape legend: B batch (1 for transformers models), V vocab.

Leviathan et al. (2023) and Chen et al. (2023) draft with a smaller model of the same family;
all the loop needs is that the draft and the target share a tokenizer (verification compares
token ids).  ``hf_drafter`` loads the model offline with transformers, checks the tokenizer
against the target's (``check_same_tokenizer``: every token string must map to the same id),
wraps it in :class:`~specbook.models.HFTarget` (its own ``DynamicCache``, cropped on
rollback) and returns a :class:`~specbook.drafters.DraftModelDrafter`.  Batch size 1.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..models.hf import check_same_tokenizer, load_tokenizer, resolve_model_dir
from ..models.target import HFTarget
from .draft_model import DraftModelDrafter


def hf_drafter(model_or_path, target_tokenizer, *, dtype: torch.dtype = torch.float32,
               device: torch.device | str = "cpu", **from_pretrained_kwargs) -> DraftModelDrafter:
    """A drafter around a transformers causal LM: a loaded model, a local directory or a cached repo id.

    ``from_pretrained_kwargs`` go to ``AutoModelForCausalLM.from_pretrained`` (never downloads:
    ``local_files_only=True``).  Raises ValueError if the draft's tokenizer differs from the target's.
    """
    if isinstance(model_or_path, (str, Path)):
        from transformers import AutoModelForCausalLM

        path = resolve_model_dir(model_or_path)
        tokenizer = load_tokenizer(path)
        if tokenizer is None:
            raise ValueError(f"{path} has no tokenizer files: cannot check it matches the target's")
        check_same_tokenizer(tokenizer, target_tokenizer)
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, local_files_only=True,
                                                     **from_pretrained_kwargs).to(device)
    else:
        model = model_or_path
        vocab = int(model.get_output_embeddings().weight.shape[0])
        if vocab != len(target_tokenizer):
            raise ValueError(f"the draft's vocabulary has {vocab} entries, the target's tokenizer {len(target_tokenizer)}")
    return DraftModelDrafter(HFTarget(model))
