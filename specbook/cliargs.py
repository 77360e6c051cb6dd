"""Argument types for every command line of specbook: a bad value is refused while parsing.

Each function here is an ``argparse`` ``type=``: it turns the text of one flag into a
value or raises :class:`argparse.ArgumentTypeError` with a sentence saying what is wanted
and what was given.  ``argparse`` then prints ``usage: ...`` and ``argument --flag: <that
sentence>`` and exits with status 2, before the command loads a model or any data, so a
typo never costs a run and no traceback reaches the user.

Nothing here imports torch at module level: ``--help`` and a refused flag stay fast.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

__all__ = ["positive_int", "nonnegative_int", "positive_float", "nonnegative_float", "threads", "device",
           "int_list", "writable_dir", "writable_file", "existing_file", "file_name"]


def _number(text: str, kind: type, what: str):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
    if kind is float and value != value:  # NaN compares unequal to itself
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """A whole number >= 1."""
    value = _number(text, int, "a whole number >= 1")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def nonnegative_int(text: str) -> int:
    """A whole number >= 0."""
    value = _number(text, int, "a whole number >= 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = _number(text, float, "a finite number > 0")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def nonnegative_float(text: str) -> float:
    """A finite number >= 0."""
    value = _number(text, float, "a finite number >= 0")
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def threads(text: str) -> int:
    """torch CPU threads: a whole number >= 1 (leave the flag out for torch's own default)."""
    value = _number(text, int, "a whole number of threads >= 1")
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"must be a whole number of threads >= 1 (leave the flag out for torch's default), got {text!r}")
    return value


def int_list(text: str) -> tuple[int, ...]:
    """Comma-separated whole numbers >= 0, at least one: ``"0,10,20"``."""
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"must be comma-separated whole numbers >= 0 such as 0,10,20, got {text!r}")
    return tuple(int(p) for p in parts)


def device(text: str) -> str:
    """A torch device this machine has: ``cpu``, ``cuda``, ``cuda:1``, ``mps``.

    A CUDA device is refused on a build or a machine without one, and ``cuda:N`` past the
    number of devices, so the run stops here instead of after the model is read.
    """
    import torch  # only when the flag is given: keeps --help light

    try:
        dev = torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"must be a torch device such as cpu, cuda or cuda:1, got {text!r}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = "this torch build has no CUDA support" if torch.version.cuda is None else "none is visible"
            raise argparse.ArgumentTypeError(f"{text!r} is not available: no CUDA device ({why}, torch "
                                             f"{torch.__version__}); use --device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise argparse.ArgumentTypeError(f"{text!r} is not available: this machine has "
                                             f"{torch.cuda.device_count()} CUDA device(s)")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise argparse.ArgumentTypeError(f"{text!r} is not available on this machine; use --device cpu")
    elif dev.type != "cpu":
        raise argparse.ArgumentTypeError(f"must be cpu, cuda, cuda:N or mps, got {text!r}")
    return text


def _creatable(path: Path) -> Path | None:
    """The nearest existing ancestor of ``path`` if a directory could be made there, else None."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            return None
        probe = probe.parent
    if not probe.is_dir():
        return None
    try:  # a real write: permission bits say nothing for root or on a read-only file system
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError:
        return None
    return probe


def writable_dir(text: str) -> str:
    """A directory that exists and is writable, or one that can be created (returns ``text``)."""
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} exists and is not a directory")
    if _creatable(path) is None:
        raise argparse.ArgumentTypeError(f"cannot write to {text!r}: permission denied or a parent is not a "
                                         "directory; choose a directory you can write")
    return text


def writable_file(text: str) -> str:
    """A file path whose directory exists and is writable, or can be created (returns ``text``)."""
    path = Path(text).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory; give a file name")
    if _creatable(path.parent) is None:
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: its directory is not writable")
    return text


def existing_file(text: str) -> str:
    """A file that exists (returns ``text``)."""
    if not Path(text).expanduser().is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text!r}")
    return text


def file_name(text: str) -> str:
    """A bare file name: not empty, no directory separator."""
    if not text or text in (".", "..") or "/" in text or "\\" in text:
        raise argparse.ArgumentTypeError(f"must be a bare file name (no directory), got {text!r}")
    return text
