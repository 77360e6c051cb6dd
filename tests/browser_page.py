"""Test harness, part 2: a lesson open in JupyterLab, driven and inspected from playwright.

Used by ``tests/course/test_browser.py`` (read its docstring first): open a notebook
in its own workspace, run every cell from the Run menu, save it and read it
back, collect errors from every place they can show up (browser console, page
errors, cell outputs, widget views, JupyterLab's log console), move sliders
with the keyboard, fingerprint a plot, take screenshots.
"""
from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from browser_server import STEP_S, LabServer

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts" / "browser"
RUN_ALL_S = 150  # a whole lesson in fast mode, with room for a busy machine

# Console messages at level "error" that are not failures, as (pattern,
# reason). Anything not matched here fails the test. Empty on purpose: with
# news, update checks and the extension manager switched off (browser_server),
# JupyterLab 4.6 and these extensions log no error on a clean run, so nothing
# needs excusing. Add an entry only with the reason it is harmless.
BENIGN_CONSOLE_ERRORS: list[tuple[re.Pattern[str], str]] = []


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


WIDGET_SETTLE_S = 20  # how long a widget view may say "Loading widget..." before it counts as broken


def widget_render_errors(lesson: Lesson) -> list[str]:
    """Widget views that failed to render.

    The widget manager writes "Error displaying widget" in place of a view it
    could not build. A view whose model never arrives can instead stay at
    "Loading widget..." for good (the manager waits for the kernel's widget
    state before it gives up), so a view still loading after
    ``WIDGET_SETTLE_S`` seconds counts as broken too.
    """
    outputs = lesson.page.locator(".jp-OutputArea-output")
    loading = outputs.filter(has_text="Loading widget...")
    deadline = time.monotonic() + WIDGET_SETTLE_S
    while loading.count() and time.monotonic() < deadline:
        lesson.page.wait_for_timeout(250)
    failed = outputs.filter(has_text="Error displaying widget").all_inner_texts()
    stuck = loading.all_inner_texts()
    return ([f"[widget] {t[:500]}" for t in failed]
            + [f"[widget] never rendered after {WIDGET_SETTLE_S} s: {t[:200]}" for t in stuck])


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
    """The value the slider's readout shows (what the student reads), once the widget has drawn it."""
    readout = sl.locator(".widget-readout")
    deadline = time.monotonic() + STEP_S
    text = readout.inner_text().strip()
    while not text and time.monotonic() < deadline:  # a freshly rendered slider may show an empty readout
        time.sleep(0.1)
        text = readout.inner_text().strip()
    return float(text)


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


def fail_report(errors: list[str]) -> str:
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


CELLS_JS = """(root) => Object.fromEntries(
    [...root.querySelectorAll('[data-key]')].map(td => [td.dataset.key, td.textContent.trim()]))"""
