"""The target's earlier hidden states at every position of the training data, for EAGLE heads
that read more than the last layer (EAGLE-3's low and middle features; Li et al., 2025,
arXiv:2503.01840, sec. 3.2).

Shape legend: S sequences, Ntot tokens of all sequences, B sequences per pass, T tokens of the
longest, n layers, D width.

The cached replies (:mod:`specbook.train.features`) keep only the last block's output, the
feature EAGLE reads.  The residual stream after other blocks is recomputed here by one forward
pass over each whole sequence (prompt and reply: the tokens are all known, so no generation, no
LM head and no block after the last one asked for), in the same float32 model, and cached
beside the replies.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .features import FeatureSet


def data_key(fs: FeatureSet, layers: tuple[int, ...]) -> str:
    """A name for ``fs``'s tokens and sequence bounds and the layers asked for."""
    h = hashlib.sha256(fs.tokens.numpy().tobytes())
    h.update(fs.starts.numpy().tobytes())
    return f"layers-{'-'.join(map(str, layers))}-{h.hexdigest()[:16]}.pt"


@torch.no_grad()
def layer_features(fs: FeatureSet, model, layers: tuple[int, ...], *, batch_tokens: int = 4096,
                   cache_dir: str | Path | None = None, progress: bool = True) -> torch.Tensor:
    """(Ntot - S, n * D) float16: for each position but each sequence's last, the residual stream
    after each of ``layers`` blocks, concatenated in that order (rows aligned with ``fs.hidden``).

    Sequences of similar length go through ``model`` together, right-padded (causal attention:
    padding after a sequence never reaches it), about ``batch_tokens`` tokens per pass.  With
    ``cache_dir``, the result is read from / written to a file named by :func:`data_key`.
    """
    layers = tuple(int(i) for i in layers)
    if not layers or any(not 1 <= i <= model.config.n_layers for i in layers):
        raise ValueError(f"layers must be block counts in [1, {model.config.n_layers}], got {layers}")
    path = None if cache_dir is None else Path(cache_dir) / data_key(fs, layers)
    if path is not None and path.is_file():
        return torch.load(path, weights_only=True)
    device = model.embed.weight.device
    lengths = (fs.starts[1:] - fs.starts[:-1]).tolist()
    out = torch.empty(int(fs.starts[-1]) - fs.num_sequences, len(layers) * model.config.dim, dtype=torch.float16)
    order = sorted(range(fs.num_sequences), key=lambda s: lengths[s])
    batches, batch = [], []
    for s in order:
        if batch and (len(batch) + 1) * lengths[s] > batch_tokens:
            batches.append(batch)
            batch = []
        batch.append(s)
    batches.append(batch)
    for batch in tqdm(batches, desc="target layers", disable=not progress):
        T = max(lengths[s] for s in batch)
        toks = torch.zeros(len(batch), T, dtype=torch.long)
        for b, s in enumerate(batch):
            toks[b, : lengths[s]] = fs.tokens[fs.starts[s] : fs.starts[s + 1]]
        _, hidden = model(toks.to(device), return_hidden=list(layers), logits_to_keep=0,
                          exit_layer=max(layers))  # n x (B, T, D); the blocks after the last asked for never run
        cat = torch.cat(hidden, dim=-1).half().cpu()  # (B, T, n * D)
        for b, s in enumerate(batch):
            a = int(fs.starts[s]) - s
            out[a : a + lengths[s] - 1] = cat[b, : lengths[s] - 1]
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(out, path)
    return out
