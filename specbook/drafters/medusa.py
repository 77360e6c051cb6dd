"""Medusa heads: K extra decoding heads on the target's last hidden state (Cai et al., 2024).

Shape legend: B batch, K heads, D width, Vd draft vocabulary, V target vocabulary,
N tree nodes, S top-k candidates per head.

Cai, Li, Geng, Peng, Lee, Chen & Dao, "Medusa: Simple LLM Inference Acceleration Framework
with Multiple Decoding Heads" (ICML 2024, arXiv:2401.10774).  Head k reads the target's
feature at the last cached position t and guesses x_{t+k+1}, the token k positions after
the one the target's own LM head predicts (x_{t+1}).  The paper's heads (its eq. 1) are
residual blocks with an output matrix of their own, W_2^(k) of shape d x V per head,
initialised from the LM head.  specbook's heads keep the residual block but share one output
matrix, the target's frozen LM head (a variant of eq. 1, not eq. 1 itself):

    p_t^(k) = softmax( W_lm · (z_t + SiLU(W_k z_t + b_k)) )            k = 1..K

z_t is the target's last hidden state after its final norm, so with W_k = 0 a head starts
out as the target's own next-token head; only W_k, b_k are trained (Medusa-1: the backbone
is frozen).  W_lm is the target's frozen LM head, restricted to a draft vocabulary of the
Vd tokens the target uses most (``vocab``, draft id -> target id; 8,192 for SmolLM2), which
keeps the shipped file small and a draft step cheap (it streams the heads and those Vd rows
of W_lm, not V output matrices); a token outside it is simply never drafted.

The heads cannot see each other's guesses, so Medusa proposes a *tree*: the top few
candidates of each head, combined along the paths of a choice list (sec. 2.1.2).  The
best list for a given tree size follows from how often each head's rank-r candidate is
right (:func:`specbook.train.medusa.best_choices`, from ranks measured after training).  In
the decoding loop the pending token plays the part of the LM head's own prediction, so the
tree hangs below it.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..models.linear import Linear
from ..protocols import Draft
from ..sampling import SamplingParams, logits_to_probs, sample
from ..tree_paths import ChoiceTree, from_paths
from .target_features import TargetFeatures

WEIGHTS_DIR = Path(__file__).resolve().parent.parent / "weights"


@dataclass(frozen=True)
class MedusaConfig:
    dim: int  # the target's width D
    num_heads: int  # K
    draft_vocab_size: int  # Vd
    target_vocab_size: int  # V

    def __post_init__(self):
        for name in ("dim", "num_heads", "draft_vocab_size", "target_vocab_size"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) <= 0:
                raise ValueError(f"{name} must be a positive int, got {getattr(self, name)!r}")
        if self.draft_vocab_size > self.target_vocab_size:
            raise ValueError(f"draft_vocab_size ({self.draft_vocab_size}) exceeds target_vocab_size ({self.target_vocab_size})")


class MedusaHeads(nn.Module):
    """K residual blocks; ``forward(z, lm_weight)`` -> logits (..., K, Vd) over the draft vocabulary."""

    def __init__(self, config: MedusaConfig, vocab: torch.Tensor | None = None):
        super().__init__()
        self.config = config
        self.blocks = nn.ModuleList(Linear(config.dim, config.dim) for _ in range(config.num_heads))
        for blk in self.blocks:  # start as copies of the target's own head (Medusa sec. 2.2.1)
            nn.init.zeros_(blk.weight)
            nn.init.zeros_(blk.bias)
        vocab = torch.arange(config.draft_vocab_size) if vocab is None else vocab.long()
        check_vocab(vocab, config.draft_vocab_size, config.target_vocab_size)
        self.register_buffer("vocab", vocab)  # (Vd,) draft id -> target id

    def hidden(self, z: torch.Tensor) -> torch.Tensor:
        """z (..., D) -> each head's residual output (..., K, D)."""
        return torch.stack([z + F.silu(blk(z)) for blk in self.blocks], dim=-2)  # (..., K, D)

    def forward(self, z: torch.Tensor, lm_weight: torch.Tensor) -> torch.Tensor:
        """z (..., D), lm_weight (Vd, D) -> logits (..., K, Vd)."""
        return self.hidden(z) @ lm_weight.T


def check_vocab(vocab: torch.Tensor, draft_vocab_size: int, target_vocab_size: int) -> None:
    if vocab.shape != (draft_vocab_size,):
        raise ValueError(f"vocab must have shape ({draft_vocab_size},), got {tuple(vocab.shape)}")
    if len(vocab) and (vocab.min() < 0 or vocab.max() >= target_vocab_size or len(vocab.unique()) != len(vocab)):
        raise ValueError(f"vocab must hold distinct target token ids in [0, {target_vocab_size})")


def save_head(head: nn.Module, path: str | Path, meta: dict | None = None) -> None:
    """``path``.safetensors (float16 weights + vocab) and ``path``.json (``head.config`` + meta):
    the file pair of Medusa heads and of an EAGLE head."""
    from safetensors.torch import save_file

    path = Path(path)
    state = {k: (v.half() if v.is_floating_point() else v.int()).contiguous() for k, v in head.state_dict().items()}
    save_file(state, str(path.with_suffix(".safetensors")))
    path.with_suffix(".json").write_text(json.dumps({"config": asdict(head.config), **(meta or {})}, indent=1) + "\n")


def load_head(path: str | Path, build, name: str, trainer: str, renamed: dict | None = None) -> tuple[nn.Module, dict]:
    """(head in float32, meta dict) from a :func:`save_head` pair; ``build(config dict, vocab)`` makes
    the empty head, ``renamed`` maps old weight names to new, ``trainer`` is named when no file is there."""
    from safetensors.torch import load_file

    path = Path(path)
    if not path.with_suffix(".safetensors").is_file():
        raise FileNotFoundError(f"no {name} weights at {path.with_suffix('.safetensors')}; "
                                f"train them with `python -m {trainer}`")
    meta = json.loads(path.with_suffix(".json").read_text())
    state = {(renamed or {}).get(k, k): v for k, v in load_file(str(path.with_suffix(".safetensors"))).items()}
    head = build(meta["config"], state["vocab"].long())
    head.load_state_dict({k: v.float() if v.is_floating_point() else v.long() for k, v in state.items()})
    return head.eval(), meta


def draft_lm_head(model, config, vocab: torch.Tensor, made: str) -> Linear:
    """The target's LM head restricted to the draft vocabulary, a frozen (Vd, D) weight, after
    checking that the head (``made``: "heads were" / "head was") fits ``model``."""
    if model.config.dim != config.dim or model.config.vocab_size != config.target_vocab_size:
        raise ValueError(f"{made} made for width {config.dim} / vocab {config.target_vocab_size}, the model has "
                         f"{model.config.dim} / {model.config.vocab_size}")
    with torch.no_grad():
        return Linear.frozen(model.lm_head.weight[vocab.to(model.lm_head.weight.device)])


save_medusa = save_head


def load_medusa(path: str | Path = WEIGHTS_DIR / "medusa_smollm2-135m") -> tuple[MedusaHeads, dict]:
    """(heads in float32, meta dict) from ``path``.safetensors + ``path``.json."""
    return load_head(path, lambda config, vocab: MedusaHeads(MedusaConfig(**config), vocab),
                     "Medusa", "specbook.train.medusa")


class MedusaDrafter:
    """Drafts from Medusa heads over the target's last cached feature; a chain or a choice tree.

    model: the target's ``LlamaModel`` (its final norm and LM head are reused, frozen).
    tree:  None -> a chain of the heads' top-1 guesses (``min(gamma, K)`` of them);
           a choice list or :class:`~specbook.tree_paths.ChoiceTree` -> that tree every step
           (its size replaces ``gamma``).
    Chains at temperature > 0 sample each head and return its distribution; trees are
    top-k lists, i.e. deterministic candidates, verified by the lossless tree rule.
    Needs the loop's ``observe`` hook (:mod:`specbook.decode`).
    """

    def __init__(self, heads: MedusaHeads, model, tree: ChoiceTree | list | None = None):
        c = heads.config
        self._lm = draft_lm_head(model, c, heads.vocab, "heads were")
        self.heads = heads.eval()
        self.model = model
        self.tree = from_paths(tree) if isinstance(tree, (list, tuple)) else tree
        if self.tree is not None and int(self.tree.depth.max()) >= c.num_heads:
            raise ValueError(f"the tree is {int(self.tree.depth.max()) + 1} deep but there are only {c.num_heads} heads")
        self.features = TargetFeatures(transform=model.norm)
        self.passes = 0

    @classmethod
    def shipped(cls, model, tree: str | int | None = "default") -> "MedusaDrafter":
        """The heads shipped for SmolLM2-135M with one of their measured trees: ``"default"``,
        a size (4, 8, 16, 24, 32, 48, 64) or None for a chain."""
        heads, meta = load_medusa()
        heads = heads.to(model.embed.weight.device, model.embed.weight.dtype)
        if tree is None:
            return cls(heads, model)
        key = meta["default_tree"] if tree == "default" else str(tree)
        if key not in meta["trees"]:
            raise ValueError(f"tree must be 'default', None or one of {sorted(meta['trees'], key=int)}, got {tree!r}")
        return cls(heads, model, tree=meta["trees"][key])

    def observe(self, target, kept: list[list[int]]) -> None:
        self.features.observe(target, kept)

    def select_rows(self, rows: list[int]) -> None:
        """Keep only batch rows ``rows``' target features."""
        self.features.select_rows(rows)

    @torch.no_grad()
    def head_logits(self) -> torch.Tensor:
        """(B, K, Vd) logits of every head at each row's last cached position."""
        z = self.features.last().to(self._lm.weight.dtype)  # (B, D)
        return self._lm(self.heads.hidden(z))  # (B, K, Vd)

    @torch.no_grad()
    def propose(self, contexts: list[torch.Tensor], gamma: int, params: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        self.features.check_contexts(contexts)
        B, V, K = len(contexts), self.heads.config.target_vocab_size, self.heads.config.num_heads
        device = contexts[0].device
        vocab = self.heads.vocab.to(device)
        if self.tree is None and min(gamma, K) == 0:
            return Draft(torch.zeros(B, 0, dtype=torch.long, device=device), None if params.greedy else torch.zeros(B, 0, V))
        logits = self.head_logits().to(device)  # (B, K, Vd)
        self.passes += 1
        if self.tree is not None:
            S = self.tree.max_rank
            top = logits.topk(S, dim=-1).indices  # (B, K, S)
            picked = top[:, self.tree.depth.to(device), self.tree.rank.to(device)]  # (B, N)
            return Draft(vocab[picked], None, self.tree.parents.to(device))
        logits = logits[:, : min(gamma, K)]  # (B, k, Vd)
        if params.greedy:
            return Draft(vocab[logits.argmax(-1)], None)
        q = logits_to_probs(logits, params)  # (B, k, Vd)
        draft = sample(q, generator)  # (B, k)
        probs = q.new_zeros(*q.shape[:-1], V).index_copy_(-1, vocab, q)  # (B, k, V)
        return Draft(vocab[draft], probs)
