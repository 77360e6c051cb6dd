"""specbook: speculative decoding, taught and proved lossless by machine.

    import specbook as sb
    sb.theory.expected_tokens(0.8, 4)        # 3.3616
    sb.verify.verify_chain(target_probs, draft_probs, draft_tokens, generator)

Submodules are imported on first use, so ``import specbook`` stays fast.  The layers and
where each idea lives: docs/architecture.md.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_SUBMODULES = {
    # layer 0, the core
    "sampling", "protocols", "verify", "verify_tree", "tree", "decode", "laws", "tree_laws", "naive", "theory",
    "roofline", "stats", "toy",
    # layers 1 to 3 (packages)
    "models", "drafters", "grading", "train", "teach", "bench",
}


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'specbook' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _SUBMODULES)
