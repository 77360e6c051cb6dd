"""Checks of the benchmark's command line that must fail before a model loads.

Shape legend: none (argument values only).

Each raises ``ValueError`` with a message that names the flag and the bad value; the command
line prints it and exits with status 2.  Loading SmolLM2 and transformers takes seconds to
minutes on a small machine, so a typo in ``--device`` or an unwritable ``--json`` path is
refused first, not after the runs.  ``--plot`` and ``--from-json`` are argparse types instead
(:func:`plot_path`, :func:`specbook.cliargs.existing_file`): argparse names the flag.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch

from .. import cliargs

PLOT_SUFFIXES = (".png", ".svg", ".pdf")  # what the speedup chart can be written as


def check_device(text: str) -> str:
    """The --device value if torch can run on it here; ValueError naming the flag otherwise."""
    if text.strip().lower().startswith("gpu"):
        raise ValueError(f"--device {text!r}: torch calls GPUs 'cuda' (or 'cuda:0'); use --device cuda")
    try:
        device = torch.device(text)
    except RuntimeError as err:
        raise ValueError(f"--device {text!r} is not a torch device ({err})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        why = "this torch is a CPU-only build" if torch.version.cuda is None else "no CUDA device is visible"
        raise ValueError(f"--device {text!r}: {why}; use --device cpu")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"--device {text!r}: the benchmark runs on cpu or cuda")
    return text


def check_json_path(path: str | None) -> None:
    """Refuse, before any model loads, a --json path that could not be written at the end."""
    if path is None:
        return
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"--json {path!r} is a directory; give a file name")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise ValueError(f"--json {path!r}: the directory {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise ValueError(f"--json {path!r} is not writable")


def parse_gamma(text: str) -> int | None:
    """--gamma: None for 'auto', else an int >= 1."""
    if str(text).strip().lower() == "auto":
        return None
    try:
        gamma = int(text)
    except ValueError:
        raise ValueError(f"--gamma must be 'auto' or an int >= 1, got {text!r}") from None
    if gamma < 1:
        raise ValueError(f"--gamma must be 'auto' or an int >= 1, got {gamma}")
    return gamma


def plot_path(text: str) -> str:
    """``--plot``, an argparse type: a writable file path ending in .png, .svg or .pdf."""
    if Path(text).suffix.lower() not in PLOT_SUFFIXES:
        raise argparse.ArgumentTypeError(f"must end in {', '.join(PLOT_SUFFIXES)} (the chart's format), got {text!r}")
    return cliargs.writable_file(text)
