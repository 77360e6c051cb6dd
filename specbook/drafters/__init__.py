"""Drafters: everything that proposes tokens for the target to verify (one idea per file)."""
from .. import _lazy_submodules
from .adaptive import AdaptiveGamma, GammaPolicy
from .draft_model import DraftModelDrafter
from .layer_skip import EarlyExitModel, LayerSkipDrafter, exit_layer_agreement
from .lookup_first import LookupFirst
from .lowbit import QuantLinear, lowbit_copy, lowbit_drafter
from .ngram import NGramDrafter
from .small_model import DraftConfig, ReducedHead, distilled_drafter, load_draft

__all__ = [
    "AdaptiveGamma", "GammaPolicy", "DraftModelDrafter", "EarlyExitModel", "LayerSkipDrafter",
    "exit_layer_agreement", "LookupFirst", "QuantLinear", "lowbit_copy", "lowbit_drafter", "NGramDrafter",
    "DraftConfig", "ReducedHead", "distilled_drafter", "load_draft",
]

__getattr__, __dir__ = _lazy_submodules(globals())  # every submodule resolves on first use
