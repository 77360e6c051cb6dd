"""The machine a measurement ran on, as plain data for a JSON report.

Every number a report writes depends on where it was measured: the CPU, how many threads
torch used, the torch and Python versions, and how busy the machine was.  A timing taken at one
thread under a niceness of 19 beside another job is not a quiet machine's timing, so the report
says so itself: the niceness, ``OMP_NUM_THREADS`` and the load average at the start (and, from
:func:`load_average`, at the end) are recorded with the rest.

    info = machine_info()          # at the start of a run (machine_info("cuda:0"): and the device used)
    info["load_average_end"] = load_average()
"""
from __future__ import annotations

import os
import platform
from importlib import metadata
from pathlib import Path

import torch


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux), else what :mod:`platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> float | None:
    """The one-minute load average, or None where the platform has none (Windows)."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def machine_info(device: str | torch.device | None = None) -> dict:
    """CPU, threads, niceness, load and the versions that matter, for the ``machine`` key of a report;
    with ``device``, also the device the run used (and the GPU's name on CUDA)."""
    info = {
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "logical_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "niceness": os.nice(0) if hasattr(os, "nice") else None,
        "torch": torch.__version__,
        "transformers": _version("transformers"),
        "numpy": _version("numpy"),
        "scipy": _version("scipy"),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "load_average_start": load_average(),
    }
    if device is not None:
        info["device"] = str(device)
        if torch.device(device).type == "cuda":
            info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info
