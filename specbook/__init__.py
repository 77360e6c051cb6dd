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


def _lazy_submodules(namespace: dict):
    """``__getattr__`` and ``__dir__`` for a package whose submodules are imported on first use.

    Every module and subpackage on the package's ``__path__`` resolves (``sb.rows``,
    ``sb.models.smollm2``), those added after this was written included: nothing lists them by
    hand. A package calls it with its own ``globals()``.
    """
    package, path = namespace["__name__"], namespace["__path__"]

    def submodules() -> set[str]:
        import pkgutil  # here, not at the top: `import specbook` loads no more than it needs

        return {info.name for info in pkgutil.iter_modules(path)}

    def __getattr__(name: str):
        if name in submodules():
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | submodules())

    return __getattr__, __dir__


__getattr__, __dir__ = _lazy_submodules(globals())
