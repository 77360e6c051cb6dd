"""The lessons in a real browser: JupyterLab driven by headless Chromium.

Widgets that pass Python-level tests can still fail where students meet them:
a missing front-end extension, a version mismatch between ``ipywidgets`` and
``jupyterlab_widgets``, an exception thrown in the browser. So this test does
what a student does:

1. starts its own JupyterLab on a free loopback port, with token
   authentication, a temporary root holding a *copy* of ``notebooks/`` and
   temporary config/data/runtime/settings directories (nothing of the user's
   own Jupyter set-up leaks in, nothing is written into the repository);
   news, update checks and the extension manager are switched off, because
   they would reach for the network;
2. opens a lesson in Debian's Chromium through Python ``playwright``
   (``executable_path``: playwright never downloads a browser of its own);
3. runs every cell from the *Run* menu, waits for the kernel to go idle and
   the widgets to render;
4. moves sliders with the keyboard (focus the handle, press arrow keys) and
   checks that the table shows what :mod:`specbook.theory` computes for the
   slider values the page shows, and that the plot redraws;
5. saves the notebook and reads it back: no cell may hold an error output,
   every code cell must have run.

It fails on any error in the browser console (apart from the short, justified
list in ``BENIGN_CONSOLE_ERRORS``), any uncaught page error, any error output
in a cell, any "Error displaying widget" and any error-level entry in
JupyterLab's log console (where output of widget callbacks lands).

Screenshots of every step go to ``test-artifacts/browser/``; the README's
pictures are copied from there by ``scripts/browser_screenshots.py``.

Chromium is Debian's ``chromium`` (``scripts/ensure_chromium.sh`` installs it).
When it is missing the test fails under ``CI=true`` and is skipped elsewhere.
Kernels run with ``SPECBOOK_FAST=1`` so the lessons take their quick path.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
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
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
ARTIFACTS = REPO / "test-artifacts" / "browser"
CHROMIUM = Path(os.environ.get("SPECBOOK_CHROMIUM", "/usr/bin/chromium"))
IN_CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]

# Every wait has a deadline, so a wedged kernel or page fails the test instead
# of hanging CI. SERVER_START covers a cold import of jupyterlab + nbgrader on
# two cores; STEP is the default for one playwright action or wait; RUN_ALL is
# the budget for a whole lesson in fast mode.
SERVER_START_S = 90
STEP_S = 60
RUN_ALL_S = 150
TEST_BUDGET_S = 300  # hard stop per test (see Watchdog); a passing test takes about a minute

# Console messages at level "error" that are not failures, each with the
# reason. Keep this list short: anything not matched here fails the test.
BENIGN_CONSOLE_ERRORS: list[tuple[re.Pattern[str], str]] = []

pytestmark = pytest.mark.browser


# --------------------------------------------------------------------------- prerequisites

def _require_browser_tools() -> None:
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
    dirs = {name: base / name for name in ("config", "data", "runtime", "settings", "workspaces", "ipython", "mpl")}
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
        "IPYTHONDIR": str(dirs["ipython"]),
        "MPLCONFIGDIR": str(dirs["mpl"]),
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

def _descendants(pid: int) -> list[int]:
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


def _is_playwright_driver(pid: int) -> bool:
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
            doomed += [self.server.proc.pid, *_descendants(self.server.proc.pid)]
        for pid in _descendants(os.getpid()):
            if _is_playwright_driver(pid):
                doomed += [pid, *_descendants(pid)]
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> "Watchdog":
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()


# --------------------------------------------------------------------------- the page

@dataclass
class Lesson:
    """One notebook open in the browser, with what the page said while open."""

    page: object  # playwright.sync_api.Page
    server: LabServer
    name: str  # notebook file name, e.g. "03_yield_and_speedup.ipynb"
    tag: str  # short prefix for screenshots, e.g. "yield"
    console: list[str] = field(default_factory=list)  # every console message, for the artifact log
    errors: list[str] = field(default_factory=list)  # console errors not in the benign list
    shots: list[Path] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    timings: list[str] = field(default_factory=list)  # "step: seconds since the page opened"

    def mark(self, step: str) -> None:
        self.timings.append(f"{step}: {time.monotonic() - self.started:.1f} s")

    def shot(self, step: str, locator=None) -> Path:
        """Screenshot the page (or one element) as test-artifacts/browser/<tag>-NN-<step>.png."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{self.tag}-{len(self.shots) + 1:02d}-{step}.png"
        target = locator if locator is not None else self.page
        target.screenshot(path=str(path), animations="disabled")
        self.shots.append(path)
        return path

    def shot_widget(self, step: str, output) -> Path:
        """Screenshot just the widget inside a cell output, cropped to its controls, table and plot."""
        output.scroll_into_view_if_needed()
        box = output.evaluate(_WIDGET_BOX_JS)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{self.tag}-{len(self.shots) + 1:02d}-{step}.png"
        self.page.screenshot(path=str(path), clip=box, animations="disabled")
        self.shots.append(path)
        return path

    def write_console_log(self) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{self.tag}-console.log"
        path.write_text("\n".join(["# timings", *self.timings, "# console", *self.console]) + "\n")
        return path


# The union of the boxes of the widget's visible parts, with a margin: the
# output area itself spans the notebook's full width, mostly empty.
_WIDGET_BOX_JS = """(root) => {
    const parts = [...root.querySelectorAll('.widget-slider, .widget-dropdown, .widget-text, .widget-button,'
        + ' .widget-checkbox, .widget-html, .widget-image, img, table')]
        .map(el => el.getBoundingClientRect()).filter(r => r.width > 0 && r.height > 0);
    const pad = 8;
    const x = Math.max(0, Math.min(...parts.map(r => r.left)) - pad);
    const y = Math.max(0, Math.min(...parts.map(r => r.top)) - pad);
    const right = Math.min(window.innerWidth, Math.max(...parts.map(r => r.right)) + pad);
    const bottom = Math.min(window.innerHeight, Math.max(...parts.map(r => r.bottom)) + pad);
    return {x, y, width: right - x, height: bottom - y};
}"""


def scroll_cell_to_top(lesson: Lesson, output) -> None:
    """Bring the cell holding ``output`` to the top of the notebook (code and widget together).

    Cells off screen are laid out lazily (CSS content-visibility), so the first
    scroll can land short once they get their real heights; scroll until it holds."""
    for _ in range(5):
        output.evaluate("el => el.closest('.jp-Cell').scrollIntoView({block: 'start'})")
        lesson.page.wait_for_timeout(300)
        if abs(output.evaluate("""el => el.closest('.jp-Cell').getBoundingClientRect().top
            - el.closest('.jp-WindowedPanel-outer, .jp-Notebook').getBoundingClientRect().top""")) < 4:
            return


def _benign(text: str) -> bool:
    return any(pattern.search(text) for pattern, _why in BENIGN_CONSOLE_ERRORS)


def _watch_console(lesson: Lesson) -> None:
    def on_console(msg) -> None:
        line = f"[{msg.type}] {msg.text}"
        lesson.console.append(line)
        if msg.type == "error" and not _benign(msg.text):
            lesson.errors.append(line)

    def on_page_error(exc) -> None:  # an uncaught exception in page script is never benign
        line = f"[pageerror] {exc}"
        lesson.console.append(line)
        lesson.errors.append(line)

    lesson.page.on("console", on_console)
    lesson.page.on("pageerror", on_page_error)


_KERNEL_READY_JS = """() => {
    const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
    if (!panel) return false;
    const name = panel.querySelector('.jp-KernelName, .jp-Toolbar-kernelName');
    const status = panel.querySelector('.jp-Notebook-ExecutionIndicator');
    return !!name && !!status && !/no kernel/i.test(name.textContent) && name.textContent.trim() !== ''
        && status.dataset.status === 'idle';
}"""

# After Run All every non-blank code cell shows "[*]:" (queued or running)
# until it finishes with "[n]:". If a cell raises, the kernel aborts the
# queue and the rest go back to "[ ]:". So the run has *started* once any
# prompt is "[*]" or numbered, and is *over* once nothing is "[*]" and the
# kernel is idle; whether every cell ran is checked on the saved notebook.
_RUN_STATE_JS = """() => {
    const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
    const status = panel.querySelector('.jp-Notebook-ExecutionIndicator');
    const prompts = [...panel.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')].map(p => p.textContent);
    const running = prompts.some(p => p.includes('*'));
    const started = running || prompts.some(p => /\\[\\d+\\]/.test(p));
    return {started, over: started && !running && !!status && status.dataset.status === 'idle'};
}"""


def _menu(page, *labels: str) -> None:
    """Click through the main menu, e.g. _menu(page, "Run", "Run All Cells")."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(rf"^{re.escape(labels[0])}$")).click()
    for label in labels[1:]:
        page.locator(".lm-Menu-itemLabel", has_text=re.compile(rf"^{label}$")).first.click()


def open_lesson(page, server: LabServer, name: str, tag: str) -> Lesson:
    """Open a notebook in JupyterLab and wait until its kernel is connected and idle."""
    lesson = Lesson(page, server, name, tag)
    for stale in ARTIFACTS.glob(f"{tag}-*"):  # screenshots of an earlier run of this lesson
        stale.unlink()
    _watch_console(lesson)
    # A workspace of its own, reset: JupyterLab would otherwise restore the
    # tabs (and kernels) of the lessons opened before in the shared default one.
    page.goto(server.url(f"/lab/workspaces/{tag}/tree/{name}?reset"))
    page.wait_for_function(_KERNEL_READY_JS, timeout=STEP_S * 1000, polling=250)
    page.keyboard.press("Control+b")  # hide the file browser: more room for the lesson
    lesson.mark("kernel ready")
    return lesson


def run_all_cells(lesson: Lesson) -> float:
    """Run > Run All Cells, then wait for every cell to finish; returns seconds taken."""
    start = time.monotonic()
    # Clear first: a notebook saved with outputs already shows "[n]:" prompts,
    # which would make the wait below succeed before anything ran.
    _menu(lesson.page, "Edit", "Clear Outputs of All Cells")
    _menu(lesson.page, "Run", "Run All Cells")
    lesson.page.wait_for_function(f"() => ({_RUN_STATE_JS})().started", timeout=STEP_S * 1000, polling=100)
    lesson.page.wait_for_function(f"() => ({_RUN_STATE_JS})().over", timeout=RUN_ALL_S * 1000, polling=500)
    lesson.mark("all cells ran")
    return time.monotonic() - start


# --------------------------------------------------------------------------- what went wrong

_LOG_ENTRIES_JS = """() => [...document.querySelectorAll('.jp-LogConsolePanel .jp-OutputArea-child')]
    .filter(el => el.offsetParent !== null)
    .map(el => {
        const prompt = el.querySelector('.jp-OutputArea-prompt');
        const out = el.querySelector('.jp-OutputArea-output');
        return [prompt ? prompt.dataset.logLevel : '', out ? out.innerText.slice(0, 3000) : ''];
    })"""


def log_console_errors(lesson: Lesson) -> list[str]:
    """Error-level entries of JupyterLab's log console for this notebook.

    Output that a widget callback produces (a traceback in an ``observe``
    handler, say) has no cell to go to: JupyterLab routes it to the log
    console, so a broken slider shows nothing in the cells or the browser
    console. This opens the log console and reads it.
    """
    panel = lesson.page.locator(".jp-LogConsolePanel")
    if not panel.first.is_visible():
        _menu(lesson.page, "View", "Show Log Console")
        panel.first.wait_for(state="visible")
    entries = lesson.page.evaluate(_LOG_ENTRIES_JS)
    return [f"[log console, {level}] {text}" for level, text in entries if level in {"error", "critical"}]


def widget_render_errors(lesson: Lesson) -> list[str]:
    """Widget views that failed to render: the widget manager writes this text in their place."""
    texts = lesson.page.locator(".jp-OutputArea-output", has_text="Error displaying widget").all_inner_texts()
    return [f"[widget] {t[:500]}" for t in texts]


def save_and_read(lesson: Lesson):
    """File > Save, then read the notebook back from the server's root as nbformat."""
    import nbformat

    _menu(lesson.page, "File", "Save( Notebook)?")
    lesson.page.wait_for_function(
        "() => !document.querySelector('.lm-TabBar-tab.lm-mod-current.jp-mod-dirty')",
        timeout=STEP_S * 1000, polling=250)
    lesson.mark("saved")
    return nbformat.read(lesson.server.root / lesson.name, as_version=4)


_ERROR_WORD = re.compile(r"Traceback|\b\w*Error\b")


def cell_output_errors(nb) -> list[str]:
    """Error outputs, and stderr streams that carry a traceback or an ...Error, per code cell."""
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if cell.source.strip() and cell.get("execution_count") is None:
            found.append(f"[cell {index}] did not run")
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                found.append(f"[cell {index}] {out.ename}: {out.evalue}")
            elif out.output_type == "stream" and out.name == "stderr" and _ERROR_WORD.search(out.text):
                found.append(f"[cell {index}] stderr: {out.text[:500]}")
    return found


# --------------------------------------------------------------------------- driving widgets

def slider(lesson: Lesson, scope, label: str):
    """The ipywidgets slider inside ``scope`` whose description matches ``label`` (a regex)."""
    page = lesson.page
    found = scope.locator(".widget-slider").filter(
        has=page.locator(".widget-label", has_text=re.compile(label)))
    assert found.count() == 1, f"expected one slider labelled /{label}/, found {found.count()}"
    return found


def slider_value(sl) -> float:
    """The value the slider's readout shows (what the student reads)."""
    return float(sl.locator(".widget-readout").inner_text().strip())


def press_keys(lesson: Lesson, sl, key: str, times: int) -> None:
    """Focus the slider handle (no mouse) and press ``key`` ``times`` times."""
    sl.locator(".noUi-handle").focus()
    for _ in range(times):
        lesson.page.keyboard.press(key)


_IMAGE_DIGEST_JS = """async (root) => {
    const img = root.querySelector('img');
    if (!img || !img.src) return null;
    await img.decode();  // the picture on screen is this src, not a previous one still decoding
    const bytes = await (await fetch(img.src)).arrayBuffer();
    const hash = await crypto.subtle.digest('SHA-256', bytes);
    return [...new Uint8Array(hash)].map(b => b.toString(16).padStart(2, '0')).join('');
}"""


def image_digest(locator) -> str | None:
    """SHA-256 of the bytes behind the first <img> in ``locator`` (data: or blob: URL)."""
    return locator.evaluate(_IMAGE_DIGEST_JS)


def wait_until(lesson: Lesson, predicate, timeout_s: float, what) -> None:
    """Poll ``predicate()`` (a bool) until true; on timeout fail with ``what()`` (a message)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s: {what()}")
        lesson.page.wait_for_timeout(200)  # keeps playwright's event loop (console events) running


def wait_kernel_idle(lesson: Lesson) -> None:
    """Wait for the notebook's kernel to be idle: the output of the last request has arrived
    (the kernel publishes its outputs before it reports idle)."""
    lesson.page.wait_for_function(_KERNEL_READY_JS, timeout=STEP_S * 1000, polling=250)


def collect_errors(lesson: Lesson, nb) -> list[str]:
    """Everything that went wrong, from every place an error can show up."""
    wait_kernel_idle(lesson)
    errors = [*lesson.errors, *widget_render_errors(lesson), *cell_output_errors(nb), *log_console_errors(lesson)]
    lesson.mark("errors collected")
    return errors


def _fail_report(errors: list[str]) -> str:
    return f"{len(errors)} error(s) in the browser:\n" + "\n".join(f"  - {e}" for e in errors)


@contextlib.contextmanager
def keep_evidence(lesson: Lesson):
    """On any failure, screenshot the page; always write the console log next to the screenshots."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            lesson.shot("FAILED")
        raise
    finally:
        with contextlib.suppress(Exception):
            lesson.write_console_log()


def explorer_output(lesson: Lesson, table_class: str):
    """The one cell output that holds the widget with ``<table class=table_class>``, once rendered."""
    page = lesson.page
    out = page.locator(".jp-OutputArea-output").filter(has=page.locator(f"table.{table_class}"))
    out.first.wait_for(state="attached", timeout=STEP_S * 1000)
    assert out.count() == 1, f"expected one output with table.{table_class}, found {out.count()}"
    out.scroll_into_view_if_needed()
    out.locator("img").first.wait_for(state="visible")
    lesson.mark("widget rendered")
    return out


_CELLS_JS = """(root) => Object.fromEntries(
    [...root.querySelectorAll('[data-key]')].map(td => [td.dataset.key, td.textContent.trim()]))"""


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server over a temporary copy of notebooks/; always shut down."""
    _require_browser_tools()
    # Import the library (torch and all) while JupyterLab starts: the tests
    # compute the expected tables and plots in this process.
    warm = threading.Thread(target=__import__, args=("specbook.widgets",), daemon=True)
    warm.start()
    server = start_lab(tmp_path_factory.mktemp("jupyterlab"), NOTEBOOKS)
    try:
        yield server
    finally:
        stop_lab(server)


@pytest.fixture(scope="module")
def chromium():
    """Headless Debian Chromium, driven by playwright; always closed."""
    _require_browser_tools()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=STEP_S * 1000)
        try:
            yield browser
        finally:
            with contextlib.suppress(Exception):  # already gone if the watchdog fired
                browser.close()


@pytest.fixture
def page(chromium, lab):
    """A fresh browser context and page, under a watchdog of TEST_BUDGET_S."""
    with Watchdog(TEST_BUDGET_S, lab) as dog:
        context = chromium.new_context(viewport={"width": 1400, "height": 1000}, device_scale_factor=1)
        context.set_default_timeout(STEP_S * 1000)
        try:
            yield context.new_page()
        finally:
            with contextlib.suppress(Exception):
                context.close()
    assert not dog.fired, f"the test ran past its {TEST_BUDGET_S}s budget and was stopped"


# --------------------------------------------------------------------------- lesson 3: yield and speedup

@functools.lru_cache(maxsize=None)
def yield_table_from_theory(alpha: float, gamma: int, c: float, v: float) -> dict[str, str]:
    """What the yield table must show for these inputs, computed here by specbook.theory."""
    from specbook import theory

    best_gamma, best_speedup = theory.optimal_gamma(alpha, c, v)
    return {
        "expected_tokens": f"{theory.expected_tokens(alpha, gamma):.4f}",
        "speedup": f"{theory.speedup(alpha, gamma, c, v):.4f}",
        "limit": f"{theory.expected_tokens_limit(alpha):.4f}",
        "break_even_alpha": f"{theory.break_even_alpha(gamma, c, v):.4f}",
        "optimal_gamma": f"{best_gamma}",
        "optimal_speedup": f"{best_speedup:.4f}",
    }


@functools.lru_cache(maxsize=None)
def library_yield_plot(alpha: float, gamma: int, c: float, v: float) -> str:
    """SHA-256 of the PNG that specbook's YieldExplorer draws for these inputs, rendered here."""
    from specbook.widgets import YieldExplorer

    return hashlib.sha256(YieldExplorer(alpha=alpha, gamma=gamma, c=c, v=v).plot.value).hexdigest()


def test_yield_lesson_in_jupyterlab(lab, page):
    """Lesson 3 runs in JupyterLab; keyboard moves of α and γ update table and plot to theory's numbers."""
    lesson = open_lesson(page, lab, "03_yield_and_speedup.ipynb", "yield")
    with keep_evidence(lesson):
        lesson.shot("opened")
        run_all_cells(lesson)
        nb = save_and_read(lesson)
        assert not cell_output_errors(nb), _fail_report(cell_output_errors(nb))

        out = explorer_output(lesson, "specbook-yield-table")
        table = out.locator("table.specbook-yield-table")
        sliders = {name: slider(lesson, out, label) for name, label in
                   (("alpha", "α"), ("gamma", "γ"), ("c", "draft cost"), ("v", "verify cost"))}

        def inputs() -> tuple[float, int, float, float]:
            a, g, c, v = (slider_value(sliders[k]) for k in ("alpha", "gamma", "c", "v"))
            return a, int(g), c, v

        def shown() -> dict[str, str]:
            return table.evaluate(_CELLS_JS)

        def expect_theory(step: str) -> dict[str, str]:
            """Wait for the table to show theory's numbers for the sliders' readouts."""
            want = {}

            def ok() -> bool:
                nonlocal want
                want = dict(yield_table_from_theory(*inputs()))
                return shown() == want

            wait_until(lesson, ok, 30, lambda: f"{step}: table {shown()} != theory {want} for {inputs()}")
            return want

        def expect_library_plot(step: str) -> str:
            """Wait for the plot to be, byte for byte, the library's picture for the readouts."""
            want = ""

            def ok() -> bool:
                nonlocal want
                want = library_yield_plot(*inputs())
                return image_digest(out) == want

            wait_until(lesson, ok, 30, lambda: f"{step}: the plot is not the library's plot for {inputs()}")
            return want

        assert set(shown()) >= {"expected_tokens", "speedup", "limit", "break_even_alpha", "optimal_gamma"}
        start_inputs = inputs()
        start_table = expect_theory("as rendered")
        start_plot = expect_library_plot("as rendered")
        scroll_cell_to_top(lesson, out)
        lesson.shot("explorer")
        lesson.shot_widget("widget", out)

        press_keys(lesson, sliders["alpha"], "ArrowLeft", 5)  # one step is 0.01
        assert inputs()[0] == pytest.approx(start_inputs[0] - 0.05, abs=1e-9)
        alpha_table = expect_theory("alpha moved")
        alpha_plot = expect_library_plot("alpha moved")
        assert alpha_table != start_table
        lesson.shot_widget("alpha-moved", out)
        lesson.mark("alpha-moved")

        press_keys(lesson, sliders["gamma"], "ArrowRight", 3)
        assert inputs()[1] == start_inputs[1] + 3
        gamma_table = expect_theory("gamma moved")
        gamma_plot = expect_library_plot("gamma moved")
        assert gamma_table != alpha_table and len({start_plot, alpha_plot, gamma_plot}) == 3
        lesson.shot_widget("gamma-moved", out)
        lesson.mark("gamma-moved")

        # Back to where we started: the same numbers and, byte for byte, the same picture.
        press_keys(lesson, sliders["gamma"], "ArrowLeft", 3)
        press_keys(lesson, sliders["alpha"], "ArrowRight", 5)
        assert inputs() == pytest.approx(start_inputs)
        assert expect_theory("moved back") == start_table
        wait_until(lesson, lambda: image_digest(out) == start_plot, 30,
                   lambda: "moved back: the plot is not the starting plot")
        lesson.mark("moved back")

        errors = collect_errors(lesson, nb)
        lesson.shot("log-console")
        assert not errors, _fail_report(errors)


# --------------------------------------------------------------------------- lesson 2: the rule and its proof

_CHI2_ROWS_JS = """(table) => Object.fromEntries([...table.querySelectorAll('tr[data-rule]')].map(tr => [
    tr.dataset.rule,
    Object.fromEntries([...tr.querySelectorAll('[data-key]')].map(td => [td.dataset.key, td.textContent.trim()])),
]))"""


@functools.lru_cache(maxsize=None)
def library_proof_explorer(match: float, temperature: float, sample_size: int, rule: str, seed: int):
    """(rows, plot sha256) that specbook's ProofExplorer computes for these controls, here."""
    import html

    from specbook.widgets import ProofExplorer

    ex = ProofExplorer(match=match, temperature=temperature, sample_size=sample_size, rule=rule, seed=seed)
    rows = {}
    for name, body in re.findall(r'<tr data-rule="([^"]+)"[^>]*>(.*?)</tr>', ex.table.value):
        rows[html.unescape(name)] = {k: html.unescape(v) for k, v in re.findall(r'data-key="(\w+)">([^<]*)<', body)}
    return rows, hashlib.sha256(ex.plot.value).hexdigest()


def test_proof_lesson_in_jupyterlab(lab, page):
    """Lesson 2 runs in JupyterLab; its chi-square explorer renders and follows keyboard changes."""
    lesson = open_lesson(page, lab, "02_rule_and_proof.ipynb", "proof")
    with keep_evidence(lesson):
        run_all_cells(lesson)
        nb = save_and_read(lesson)
        assert not cell_output_errors(nb), _fail_report(cell_output_errors(nb))

        out = explorer_output(lesson, "specbook-chi2-table")
        table = out.locator("table.specbook-chi2-table")
        quality = slider(lesson, out, "draft quality")
        rule_select = out.locator(".widget-dropdown select")
        assert rule_select.count() == 1, "expected one rule selector"

        def controls() -> tuple[float, float, int, str, int]:
            return (slider_value(quality), slider_value(slider(lesson, out, "temperature")),
                    int(slider_value(slider(lesson, out, "sample size"))), rule_select.input_value(),
                    int(out.locator(".widget-text input").first.input_value()))

        def expect_library(step: str):
            """Wait until table and histogram are the library's for the controls the page shows."""
            want_rows, want_plot, got_rows = {}, "", {}

            def ok() -> bool:
                nonlocal want_rows, want_plot, got_rows
                want_rows, want_plot = library_proof_explorer(*controls())
                got_rows = table.evaluate(_CHI2_ROWS_JS)
                return got_rows == want_rows and image_digest(out) == want_plot

            wait_until(lesson, ok, 60, lambda: f"{step}: page {got_rows} / plot {image_digest(out)} "
                                               f"!= library {want_rows} / plot {want_plot} for {controls()}")
            for rule, row in got_rows.items():
                assert 0.0 <= float(row["pvalue"]) <= 1.0, (rule, row)
            return got_rows, want_plot

        start = controls()
        start_rows, start_plot = expect_library("as rendered")
        assert len(start_rows) >= 2 and all("pvalue" in row for row in start_rows.values())
        scroll_cell_to_top(lesson, out)
        lesson.shot("explorer")
        lesson.shot_widget("widget", out)

        press_keys(lesson, quality, "ArrowRight", 2)  # one step is 0.05
        assert controls()[0] == pytest.approx(start[0] + 0.10, abs=1e-9)
        moved_rows, moved_plot = expect_library("draft quality moved")
        assert [r["pvalue"] for r in moved_rows.values()] != [r["pvalue"] for r in start_rows.values()]
        assert moved_plot != start_plot
        lesson.shot_widget("quality-moved", out)
        lesson.mark("quality-moved")

        # Pick another rule from the selector. (Not with arrow keys: inside a
        # notebook, ArrowDown on a focused dropdown does not change it.)
        options = rule_select.locator("option").all_inner_texts()
        assert len(options) >= 2, options
        rule_select.select_option(label=next(o for o in reversed(options) if o != start[3]))
        assert controls()[3] != start[3], "the rule selector did not change"
        _, rule_plot = expect_library("rule changed")
        assert rule_plot != moved_plot
        lesson.shot_widget("rule-changed", out)
        lesson.mark("rule-changed")

        errors = collect_errors(lesson, nb)
        lesson.shot("log-console")
        assert not errors, _fail_report(errors)


# --------------------------------------------------------------------------- the detectors can fail

_BROKEN_NOTEBOOK_CELLS = [
    "import ipywidgets as w\n"
    "trip = w.IntSlider(description='trip')\n"
    "trip.observe(lambda change: 1 / 0, names='value')  # fails only when moved in the browser\n"
    "trip",
    "from IPython.display import Javascript, display\n"
    "display(Javascript(\"console.error('specbook harness check')\"))",
    "raise ValueError('specbook harness check')",
    "print('never reached')",
]
# Shown right after the slider (cell 1): a widget view whose model does not exist.
_MISSING_MODEL_CELL = (
    "display({'application/vnd.jupyter.widget-view+json':"
    " {'model_id': 'no-such-model', 'version_major': 2, 'version_minor': 0}}, raw=True)")


def test_browser_checks_catch_broken_notebooks(lab, page):
    """Broken twin: a notebook with a console error, a cell error and a failing widget
    callback must trip each detector the lesson tests rely on."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cells = [_BROKEN_NOTEBOOK_CELLS[0], _MISSING_MODEL_CELL, *_BROKEN_NOTEBOOK_CELLS[1:]]
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    nbformat.write(nb, lab.root / "harness_check.ipynb")

    lesson = open_lesson(page, lab, "harness_check.ipynb", "harness-check")
    with keep_evidence(lesson):
        run_all_cells(lesson)
        saved = save_and_read(lesson)
        press_keys(lesson, slider(lesson, page.locator(".jp-NotebookPanel"), "trip"), "ArrowRight", 1)
        wait_until(lesson, lambda: bool(log_console_errors(lesson)), 30,
                   lambda: "the failing widget callback left no error in the log console")
        errors = collect_errors(lesson, saved)
        lesson.shot("caught")

    report = "\n".join(errors)
    assert any("[error]" in e and "specbook harness check" in e for e in lesson.errors), report
    assert any(e.startswith("[widget]") for e in errors), report
    assert any(e.startswith("[cell 3] ValueError: specbook harness check") for e in errors), report
    assert any(e.startswith("[cell 4] did not run") for e in errors), report
    assert any(e.startswith("[log console, error]") and "ZeroDivisionError" in e for e in errors), report


_HANG_SCRIPT = """
import os, sys, time
sys.path.insert(0, sys.argv[1])
import test_browser as tb
from playwright.sync_api import Error, sync_playwright

with sync_playwright() as pw:
    browser = pw.chromium.launch(executable_path=str(tb.CHROMIUM), args=tb.CHROMIUM_ARGS)
    page = browser.new_page()
    with tb.Watchdog(2.0) as dog:
        try:
            page.evaluate("() => new Promise(() => {})")  # never settles, and evaluate has no timeout
            print("evaluate returned")
        except Error as exc:
            print("raised:", type(exc).__name__)
    print("fired:", dog.fired)
    try:
        browser.close()
    except Error:
        pass
print("left:", [pid for pid in tb._descendants(os.getpid()) if tb._is_playwright_driver(pid)])
"""


def test_watchdog_turns_a_hang_into_a_failure():
    """A browser call that never returns is ended by the watchdog, in a child process."""
    _require_browser_tools()
    if not Path("/proc/self/stat").exists():
        pytest.skip("the watchdog finds its processes through /proc (Linux)")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", _HANG_SCRIPT, str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=60)
    took = time.monotonic() - start
    assert done.returncode == 0, done.stdout + done.stderr
    assert "raised: TargetClosedError" in done.stdout and "fired: True" in done.stdout, done.stdout + done.stderr
    assert "left: []" in done.stdout, done.stdout
    assert took < 30, f"the hang took {took:.0f}s to end"
