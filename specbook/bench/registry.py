"""The drafter registry of the benchmark: every drafter by name, and how to build it on a target.

Shape legend: none (factories build objects; no tensors here).

An entry knows how to build specbook's drafter for a target model and, where transformers
has the same idea built in, which ``generate`` keyword arguments switch it on there.
``none`` is plain decoding.  A new drafter only registers a factory::

    register_drafter("mine", make=lambda model, tokenizer, *, gamma, target=None, **_: MyDrafter(model))

The factories live here, not in the drafter files: a drafter (``specbook/drafters/``) knows
nothing of the benchmark, and what a benchmark entry adds (a tree size that was fast on
some machine, a verify-cost curve measured now) is benchmark policy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..drafters import NGramDrafter
from ..drafters.adaptive import AdaptiveGamma, GammaPolicy
from ..drafters.eagle import DynamicTree, EagleDrafter
from ..drafters.layer_skip import DEFAULT_EXIT_LAYER, LayerSkipDrafter
from ..drafters.lookup_first import LookupFirst
from ..drafters.lowbit import lowbit_drafter
from ..drafters.medusa import MedusaDrafter
from ..drafters.small_model import distilled_drafter
from ..models import LlamaModel
from ..models.dtype import auto_dtype
from .timing import machine_verify_cost, relative_cost

# Tree sizes for the benchmark.  The "-large" ones show how many tokens one target pass can
# yield; the others were the fastest in a sweep on a 2-core x86 CPU, where verifying n
# positions costs v(n) = 1.1 (n = 2), 1.45 (n = 5), 1.9 (n = 9) one-position passes
# (docs/heads.md).  The shipped weights' own default trees (EAGLE 24 nodes, Medusa 16) sit
# in between and serve the lessons and tests.
LARGE_EAGLE_TREE = DynamicTree(depth=8, top_k=8, num_nodes=64)
CPU_EAGLE_TREE = DynamicTree(depth=2, top_k=2, num_nodes=3)
CPU_MEDUSA_TREE = 4
# The budgets the benchmark pilots for "eagle" and "medusa" (bench.sizing picks one from the
# measured v(n) of this machine and dtype): deeper and wider as the budget grows.  Up to 16
# nodes, so that every candidate's verify pass (N + 1 positions) lies on the measured curve.  EAGLE's
# 1 and 2 are chains (its best guess, then the best guess after it): where a pass is cheap next to
# the head's drafting (the compiled engine) or wider passes cost much more (float32), one head call
# may pay where a tree's two or more do not.  4 and 8 fill the compiled widths 5 and 9 that 3 and 6
# leave a slot short of (the pending token plus N nodes), with the head passes of 3 and 6: the same
# pass and drafting cost there, one or two more nodes (and a prompt lookup one or two tokens longer
# behind lookup-eagle).
EAGLE_TREES = {1: DynamicTree(depth=1, top_k=1, num_nodes=1), 2: DynamicTree(depth=2, top_k=1, num_nodes=2),
               3: CPU_EAGLE_TREE, 4: DynamicTree(depth=2, top_k=2, num_nodes=4),
               6: DynamicTree(depth=3, top_k=3, num_nodes=6), 8: DynamicTree(depth=3, top_k=3, num_nodes=8),
               10: DynamicTree(depth=4, top_k=4, num_nodes=10), 16: DynamicTree(depth=5, top_k=4, num_nodes=16)}
MEDUSA_BUDGETS = (4, 8, 16)


@dataclass(frozen=True)
class DrafterSpec:
    """make(model, tokenizer, *, gamma, device, dtype, target) -> Drafter, or None for plain decoding.

    ``target`` is the ``LlamaTarget`` the loop decodes with (a drafter may share its cache);
    factories should accept and ignore keyword arguments they do not use (``**_``).

    transformers_kwargs(hf_model, tokenizer, *, gamma) -> extra ``generate`` kwargs, or None
    when transformers has no equivalent (that engine then skips this drafter).
    """

    name: str
    make: Callable
    transformers_kwargs: Callable | None = None
    description: str = ""
    sizing: str | None = None  # "chain": gamma chosen by bench.sizing; "replay": the same for drafts that depend on
    # the context alone, from a replay of the pilot's text; "tree": the node budget (make(tree=N))
    budgets: tuple[int, ...] = ()  # the node budgets a "tree" drafter is piloted at


DRAFTERS: dict[str, DrafterSpec] = {}


def register_drafter(name: str, make: Callable, *, transformers_kwargs: Callable | None = None,
                     description: str = "", replace: bool = False, sizing: str | None = None,
                     budgets: tuple[int, ...] = ()) -> DrafterSpec:
    if not isinstance(name, str) or not name or "," in name:
        raise ValueError(f"name must be a non-empty string without commas, got {name!r}")
    if name in DRAFTERS and not replace:
        raise ValueError(f"drafter {name!r} is already registered (pass replace=True to override)")
    if sizing not in (None, "chain", "replay", "tree"):
        raise ValueError(f"sizing must be None, 'chain', 'replay' or 'tree', got {sizing!r}")
    if sizing == "tree" and not budgets:
        raise ValueError(f"drafter {name!r}: sizing='tree' needs the node budgets to pilot (budgets=...)")
    DRAFTERS[name] = spec = DrafterSpec(name, make, transformers_kwargs, description, sizing, tuple(budgets))
    return spec


def get_drafter(name: str) -> DrafterSpec:
    if name not in DRAFTERS:
        raise ValueError(f"unknown drafter {name!r}; available: {', '.join(DRAFTERS)}")
    return DRAFTERS[name]


# --------------------------------------------------------------------------- factories

def measured_policy(model: LlamaModel, c: float = 0.0, max_positions: int = 9, reps: int = 3, **kwargs) -> GammaPolicy:
    """A "model" adaptive policy with this machine's verify-cost curve for ``model``, measured now."""
    return GammaPolicy(c=c, verify_cost=tuple(machine_verify_cost(model, max_positions, reps)), **kwargs)


def make_ngram_adaptive(model: LlamaModel, tokenizer=None, **_) -> AdaptiveGamma:
    """Prompt lookup with the measured-cost policy, shadow scoring, free to stop drafting."""
    return AdaptiveGamma(NGramDrafter(max_ngram=6), measured_policy(model, min_gamma=0), shadow=True)


def make_distilled(model: LlamaModel, tokenizer=None, *, target=None, **_):
    """The shipped distilled draft; its cache is sized by ``target`` (the loop's LlamaTarget) when given."""
    return distilled_drafter(target if target is not None else model)


def make_draft_adaptive(model: LlamaModel, tokenizer=None, *, target=None, **_) -> AdaptiveGamma:
    """The distilled draft model with the measured-cost policy (c measured on this machine)."""
    drafter = make_distilled(model, target=target)
    return AdaptiveGamma(drafter, measured_policy(model, c=relative_cost(drafter.model.model, model)))


def make_lowbit(model: LlamaModel, tokenizer=None, *, target=None, bits: int = 8, **_):
    """The target's own weight-only ``bits``-bit copy as a draft model (``drafters/lowbit.py``); its cache
    is sized by ``target`` (the loop's LlamaTarget) when given.  gamma is the run's (4 under ``--gamma
    auto``: the chain sizing prices drafts as free, which a draft model is not)."""
    return lowbit_drafter(target if target is not None else model, bits=bits)


def make_layer_skip(model: LlamaModel, tokenizer=None, *, target=None, exit_layer: int = DEFAULT_EXIT_LAYER, **_):
    """Early exit; shares ``target``'s cache when given (the LlamaTarget the loop decodes with), else own cache."""
    return LayerSkipDrafter(target if target is not None else model, exit_layer)


def make_medusa(model: LlamaModel, tokenizer=None, *, tree="default", **_) -> MedusaDrafter:
    """The shipped Medusa heads on ``model``; ``tree`` is "default", a measured tree size, or None for a
    chain of ``min(gamma, 4)`` drafts."""
    return MedusaDrafter.shipped(model, tree=tree)


def make_eagle(model: LlamaModel, tokenizer=None, *, tree="default", fast_dtype: bool = False, **_) -> EagleDrafter:
    """The shipped EAGLE head on ``model``; ``tree="default"`` is the recorded dynamic tree, None a chain
    of ``gamma`` drafts, or a :class:`DynamicTree`.  ``fast_dtype``: the head runs in the dtype this
    machine multiplies fastest (:func:`~specbook.models.dtype.auto_dtype`: bfloat16 where native), not
    the target's; under a float32 target on a CPU with AMX one guess took 2.4 ms instead of 3.5."""
    device = model.embed.weight.device
    return EagleDrafter.shipped(model, tree=tree, dtype=auto_dtype(device) if fast_dtype else None)


register_drafter("none", lambda model, tokenizer, **_: None, transformers_kwargs=lambda hf, tok, **_: {},
                 description="plain autoregressive decoding (the baseline)")
register_drafter("ngram", lambda model, tokenizer, **_: NGramDrafter(max_ngram=3),
                 transformers_kwargs=lambda hf, tok, *, gamma, **_: {"prompt_lookup_num_tokens": gamma,
                                                                     "max_matching_ngram_size": 3},
                 description="prompt lookup: longest suffix match of up to 3 tokens (no model); gamma sized by "
                 "this machine's verify cost and what it would have drafted on a pilot's text", sizing="replay")
register_drafter("ngram-adaptive", make_ngram_adaptive, description="prompt lookup (n <= 6), draft length chosen "
                 "per step from recent acceptance (per row and draft position) and the measured verify cost")
register_drafter("layerskip", make_layer_skip, description=f"the target's first {DEFAULT_EXIT_LAYER} blocks + its "
                 "norm and head draft (early exit); shares the target's cache when given target=",
                 transformers_kwargs=lambda hf, tok, *, gamma, **_: {"assistant_early_exit": DEFAULT_EXIT_LAYER,
                                                                     "num_assistant_tokens": gamma,
                                                                     "num_assistant_tokens_schedule": "constant"})
register_drafter("draft", make_distilled, description="2-block distilled draft model, 8192-token head (shipped)")
register_drafter("draft-adaptive", make_draft_adaptive, description="the distilled draft with the adaptive policy")
register_drafter("int8-self", make_lowbit, description="the target's own copy with int8 weights (per output channel, "
                 "weight-only) as a draft model, verified by the full-precision target")
register_drafter("int4-self", lambda model, tokenizer=None, **kw: make_lowbit(model, tokenizer, **{**kw, "bits": 4}),
                 description="the target's own copy with int4 weights (groups of 32 inputs, weight-only) as a "
                 "draft model, verified by the full-precision target")
register_drafter("medusa", lambda model, tokenizer=None, *, tree=CPU_MEDUSA_TREE, **_: make_medusa(model, tree=tree),
                 description=f"4 Medusa heads on the last hidden state, one of their measured trees "
                 f"({', '.join(map(str, MEDUSA_BUDGETS))} nodes) sized by this machine's verify cost "
                 f"(default {CPU_MEDUSA_TREE})", sizing="tree", budgets=MEDUSA_BUDGETS)
register_drafter("medusa-chain", lambda model, tokenizer=None, **_: make_medusa(model, tree=None),
                 description="the Medusa heads as a chain (one guess per head)")
register_drafter("eagle", lambda model, tokenizer=None, *, tree=3, **_: make_eagle(model, tree=EAGLE_TREES[tree],
                                                                                     fast_dtype=True),
                 description=f"EAGLE feature head, EAGLE-2 dynamic tree of {', '.join(map(str, EAGLE_TREES))} "
                 "nodes sized by this machine's verify cost (default 3 nodes, depth 2); the head in the machine's "
                 "fastest dtype (bfloat16 where native)",
                 sizing="tree", budgets=tuple(EAGLE_TREES))
register_drafter("lookup-eagle", lambda model, tokenizer=None, *, tree=3, **_: LookupFirst(
                     make_eagle(model, tree=EAGLE_TREES[tree], fast_dtype=True)),
                 description="prompt lookup where the context's last 2+ tokens occur earlier in it, else the EAGLE "
                 "drafter as `eagle` (its tree sized the same way; a lookup drafts as many tokens as the tree has "
                 "nodes)",
                 sizing="tree", budgets=tuple(EAGLE_TREES))
register_drafter("eagle-chain", lambda model, tokenizer=None, **_: make_eagle(model, tree=None),
                 description="the EAGLE head as a chain of gamma drafts")
register_drafter("medusa-large", lambda model, tokenizer=None, **_: make_medusa(model, tree=64),
                 description="the Medusa heads with their measured 64-node tree (tokens per pass, not speed)")
register_drafter("eagle-large", lambda model, tokenizer=None, **_: make_eagle(model, tree=LARGE_EAGLE_TREE),
                 description="the EAGLE head with a 64-node dynamic tree, depth 8 (tokens per pass, not speed)")
