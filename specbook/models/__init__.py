"""Real models: a readable Llama with a per-row KV cache, Target adapters, offline loaders."""
from .. import _lazy_submodules
from .cache import AttentionPlan, KVCache
from .chat import chat_ids
from .config import LlamaConfig, RopeScaling
from .dtype import auto_dtype, cpu_multiplies_bf16, dtype_name, resolve_dtype
from .hf import check_same_tokenizer, load_llama, load_tokenizer
from .linear import Linear
from .llama import LlamaModel
from .target import HFTarget, LlamaTarget, tree_structure

__all__ = [
    "AttentionPlan", "KVCache", "LlamaConfig", "LlamaModel", "Linear", "RopeScaling", "LlamaTarget", "HFTarget",
    "tree_structure", "chat_ids", "auto_dtype", "cpu_multiplies_bf16", "dtype_name", "resolve_dtype",
    "load_llama", "load_smollm2", "load_tokenizer", "check_same_tokenizer",
]


_submodule, __dir__ = _lazy_submodules(globals())


def __getattr__(name):
    # Imported lazily so that `python -m specbook.models.smollm2` runs the module only once.
    if name == "load_smollm2":
        from .smollm2 import load_smollm2

        return load_smollm2
    return _submodule(name)  # every submodule resolves on first use
