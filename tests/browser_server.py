"""Test harness, part 1: a private JupyterLab server, Chromium prerequisites, a watchdog.

Used by ``tests/course/test_browser.py`` (read its docstring first). The server runs
on a free loopback port with token authentication, over a temporary root, with
temporary Jupyter config/data/runtime/settings/workspace directories, so that
nothing of the user's own Jupyter set-up leaks in and nothing is written into
the repository. News, update checks and the extension manager are switched
off: they would reach for the network.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

CHROMIUM = Path(os.environ.get("SPECBOOK_CHROMIUM", "/usr/bin/chromium"))
IN_CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]

# Every wait has a deadline, so a wedged kernel or page fails the test instead
# of hanging CI. SERVER_START covers a cold import of jupyterlab + nbgrader on
# two busy cores; STEP is the default for one playwright action or wait.
SERVER_START_S = 90
STEP_S = 60


# --------------------------------------------------------------------------- prerequisites

def require_browser_tools() -> None:
    """Chromium and playwright, or a failure in CI / a skip with a reason locally."""
    problems = []
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        problems.append(f"{CHROMIUM} not found (run: bash scripts/ensure_chromium.sh)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        problems.append("python package 'playwright' is not installed (pip install -e '.[dev]')")
    if problems:
        message = "browser test cannot run: " + "; ".join(problems)
        if IN_CI:
            pytest.fail(message + " (CI=true: a missing browser is a failure, not a skip)")
        pytest.skip(message)


# --------------------------------------------------------------------------- the server

def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LabServer:
    """A JupyterLab server this test started, and how to reach it."""

    base_url: str
    token: str
    root: Path
    proc: subprocess.Popen
    log_path: Path

    def url(self, path: str) -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.base_url}{path}{sep}token={self.token}"

    def api(self, method: str, path: str, timeout: float = 10.0):
        req = urllib.request.Request(
            f"{self.base_url}{path}", method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no server log)"


def _write_isolated_config(base: Path) -> dict[str, str]:
    """Fresh Jupyter directories; returns the environment variables that select them."""
    # Not MPLCONFIGDIR: kernels and this process must draw with the same
    # matplotlib settings, since the tests compare plots byte for byte.
    dirs = {name: base / name for name in ("config", "data", "runtime", "settings", "workspaces", "ipython")}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    # Plugins that call out to the network: the extension manager (PyPI) and
    # the news/update announcements. Switched off for the test's server only.
    (dirs["config"] / "labconfig").mkdir()
    (dirs["config"] / "labconfig" / "page_config.json").write_text(json.dumps({
        "disabledExtensions": {
            "@jupyterlab/extensionmanager-extension": True,
            "@jupyterlab/apputils-extension:announcements": True,
        }
    }))
    notification = dirs["settings"] / "@jupyterlab" / "apputils-extension"
    notification.mkdir(parents=True)
    (notification / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    return {
        "JUPYTER_CONFIG_DIR": str(dirs["config"]),
        "JUPYTER_DATA_DIR": str(dirs["data"]),
        "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
        "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]),
        "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"]),
        "IPYTHONDIR": str(dirs["ipython"]),  # no user start-up scripts in the kernels
    }


def start_lab(base: Path, notebooks: Path) -> LabServer:
    """Start JupyterLab with root ``base/root`` (a copy of ``notebooks``)."""
    root = base / "root"
    shutil.copytree(notebooks, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    env = dict(os.environ)
    env.update(_write_isolated_config(base / "jupyter"))
    env["SPECBOOK_FAST"] = "1"  # the kernels inherit it: lessons take their quick path
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.pop("JUPYTER_PATH", None)
    port, token = _free_port(), secrets.token_hex(24)
    cmd = [
        sys.executable, "-m", "jupyterlab", "--no-browser",
        "--ip=127.0.0.1", f"--port={port}", "--port-retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # CI containers run as root
    log_path = base / "jupyterlab.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    server = LabServer(f"http://127.0.0.1:{port}", token, root, proc, log_path)
    deadline = time.monotonic() + SERVER_START_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with code {proc.returncode}:\n{server.log_tail()}")
        try:
            server.api("GET", "/api/status", timeout=2)
            return server
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        if time.monotonic() > deadline:
            stop_lab(server)
            raise RuntimeError(f"JupyterLab did not answer within {SERVER_START_S}s:\n{server.log_tail()}")
        time.sleep(0.25)


def stop_lab(server: LabServer) -> None:
    """Shut the server (and so its kernels) down; escalate to signals if it lingers."""
    if server.proc.poll() is None:
        with contextlib.suppress(Exception):
            server.api("POST", "/api/shutdown", timeout=5)  # also shuts down the kernels
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.proc.wait(timeout=15)
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        if server.proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.proc.wait(timeout=wait_s)


# --------------------------------------------------------------------------- the watchdog

def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the name in (...) may hold spaces
            children.setdefault(ppid, []).append(int(entry))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def is_playwright_driver(pid: int) -> bool:
    import playwright

    driver_dir = os.path.realpath(os.path.join(os.path.dirname(playwright.__file__), "driver"))
    try:
        return os.path.realpath(f"/proc/{pid}/exe").startswith(driver_dir + os.sep)
    except OSError:
        return False


class Watchdog:
    """If a test outlives its budget, kill what it started so that it fails instead of hanging.

    Every playwright wait already has a timeout, but ``evaluate`` has none and a
    wedged browser or kernel could stall a call forever. On expiry this kills
    the JupyterLab server with its kernels and the playwright driver with its
    Chromium (only processes this test process started); the pending playwright
    call then raises and the test fails with the message below.
    """

    def __init__(self, budget_s: float, server: LabServer | None = None):
        self.budget_s, self.server, self.fired = budget_s, server, False
        self._timer = threading.Timer(budget_s, self._fire)
        self._timer.daemon = True

    def _fire(self) -> None:
        self.fired = True
        sys.stderr.write(f"\nbrowser test: over its {self.budget_s:.0f}s budget; killing server and browser\n")
        doomed = []
        if self.server is not None and self.server.proc.poll() is None:
            doomed += [self.server.proc.pid, *descendants(self.server.proc.pid)]
        for pid in descendants(os.getpid()):
            if is_playwright_driver(pid):
                doomed += [pid, *descendants(pid)]
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> "Watchdog":
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()
