"""The roofline of one decode step: why batching and speculation draw on one pool of arithmetic.

Everything lives in :mod:`specbook.roofline.plain` for now; this package re-exports it, so
``specbook.roofline.predict`` and the rest keep their names.
"""
from .. import _lazy_submodules
from .plain import *  # noqa: F401,F403 (the public names, listed in plain.__all__)
from .plain import __all__, _step_flops_bytes  # noqa: F401 (an assignment's own-work check names the private one)

__getattr__, __dir__ = _lazy_submodules(globals())  # every submodule resolves on first use
