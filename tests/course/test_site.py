"""``make site`` in a real browser: every lesson page loads, shows its figures, holds no error.

The site builder (``scripts/build_site.py``) executes every ``notebooks/*.ipynb``
in fast mode and renders it with nbconvert. This test builds the site into a
temporary folder and opens each page from disk in headless Debian Chromium
(playwright with ``executable_path``, as ``tests/course/test_browser.py`` does), with
every request that leaves the machine blocked: the pages must stand on their
own, figures included (MathJax and the widget renderer come from a CDN when a
reader is online; offline the math stays as TeX source and the page still reads).

A page fails when it does not load, when it lacks the lesson's closing "all lesson-N
checks passed ... (fast mode: True)" line, when an uncaught script error is thrown
on it, when an image output is missing or has no size, or when an output
holds a traceback or an ``...Error`` (error outputs and stderr streams both
render as ``application/vnd.jupyter.stderr``). The index must link to exactly
the lessons that exist. ``test_page_checks_catch_a_broken_page`` shows each
check firing on a deliberately broken page and staying quiet on a clean one.

Solutions are folded: every code cell tagged ``solution`` renders inside a closed
``<details class="specbook-solution">``, and markdown ``<details>`` solution text stays closed;
``test_solutions_are_folded_until_opened`` checks in Chromium that neither is visible until its
summary is clicked (a figure inside a folded solution is not required to have a size).
"""
from __future__ import annotations

import base64
import contextlib
import importlib.util
import io
import re
import sys
from pathlib import Path

import nbformat
import pytest
from browser_server import STEP_S

ROOT = Path(__file__).resolve().parents[2]
# A hard stop, not a target: five lessons in fast mode, one after another, on two cores
# that other work may share (the real-model lesson 4 dominates). CELL_TIMEOUT_S is
# per cell, as in build_site's --timeout.
BUILD_BUDGET_S = 1500
CELL_TIMEOUT_S = 1200

pytestmark = pytest.mark.browser


def _load_builder():
    spec = importlib.util.spec_from_file_location("build_site", ROOT / "scripts" / "build_site.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_site"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


build_site = _load_builder()

# Figures inside cell outputs, with what the reader sees of them.
_FIGURES_JS = """() => [...document.querySelectorAll('.jp-OutputArea-output img, .jp-OutputArea-output svg')]
    .map(el => {
        const box = el.getBoundingClientRect();
        const decoded = el.tagName.toLowerCase() !== 'img' || (el.complete && el.naturalWidth > 0);
        const folded = el.closest('details:not([open])') !== null;  // inside a closed solution: no size yet
        return {tag: el.tagName.toLowerCase(), width: box.width, height: box.height, decoded, folded};
    })"""

_STDERR_JS = """() => [...document.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"]')]
    .map(el => el.innerText)"""

_OUTPUT_TEXT_JS = """() => [...document.querySelectorAll('.jp-OutputArea-output')].map(el => el.innerText)"""

_ERROR_WORD = re.compile(r"Traceback|\b\w*Error\b")
_CHECKS_PASSED = re.compile(r"all (?:lesson-\d+[a-z]?|primer) checks passed .*\(fast mode: True\)")  # lesson-4b too


@pytest.fixture
def page(chromium):
    """A fresh page that may read local files and nothing else."""
    context = chromium.new_context(viewport={"width": 1200, "height": 900})
    context.set_default_timeout(STEP_S * 1000)
    context.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
                  else route.abort())
    try:
        yield context.new_page()
    finally:
        with contextlib.suppress(Exception):
            context.close()


def page_problems(page, path: Path, min_figures: int) -> list[str]:
    """Everything wrong with one rendered page, as readable lines (empty when it is fine)."""
    script_errors: list[str] = []
    on_error = lambda exc: script_errors.append(str(exc))  # noqa: E731
    page.on("pageerror", on_error)
    try:
        response = page.goto(path.as_uri(), wait_until="load")
        if response is None or not response.ok:
            return [f"{path.name}: did not load ({response.status if response else 'no response'})"]
        figures = page.evaluate(_FIGURES_JS)
        stderr, outputs = page.evaluate(_STDERR_JS), page.evaluate(_OUTPUT_TEXT_JS)
    finally:
        page.remove_listener("pageerror", on_error)
    problems = []
    if len(figures) < min_figures:
        problems.append(f"{path.name}: {len(figures)} figures shown, the notebook has {min_figures}")
    for i, fig in enumerate(figures):
        if not (fig["decoded"] and (fig["folded"] or (fig["width"] > 0 and fig["height"] > 0))):
            problems.append(f"{path.name}: figure {i} ({fig['tag']}) shows nothing: {fig}")
    problems += [f"{path.name}: error output: {text[:300]}" for text in stderr if _ERROR_WORD.search(text)]
    problems += [f"{path.name}: traceback in an output: {text[:300]}" for text in outputs
                 if "Traceback (most recent call last)" in text]
    problems += [f"{path.name}: script error: {e}" for e in script_errors]
    return problems


@pytest.mark.model
def test_site_pages_load_show_figures_and_hold_no_errors(tmp_path, page):
    """Build the site from every lesson, then read each page and the index in Chromium."""
    import time

    start = time.monotonic()
    pages = build_site.build_site(tmp_path / "site", timeout=CELL_TIMEOUT_S)
    seconds = time.monotonic() - start
    lessons = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert [p.name for p in pages] == lessons

    problems = []
    for built in pages:
        path = tmp_path / "site" / f"{built.name}.html"
        problems += page_problems(page, path, max(built.figures, 1))
        # Every lesson ends by printing that its checks passed, and in which mode it ran.
        if not _CHECKS_PASSED.search(page.inner_text("body")):
            problems.append(f"{built.name}.html: no 'all lesson-N checks passed ... (fast mode: True)' line")
        # Every answer cell is folded, and nothing folded is open when the page loads.
        solutions = solution_cells(nbformat.read(ROOT / "notebooks" / f"{built.name}.ipynb", as_version=4))
        folded = page.locator("details.specbook-solution").count()
        if folded != solutions:
            problems.append(f"{built.name}.html: {folded} folded solution cells, the notebook has {solutions}")
        if page.eval_on_selector_all("details", "els => els.filter(e => e.open).length"):
            problems.append(f"{built.name}.html: a <details> block is open when the page loads")
    assert not problems, "\n".join(problems)

    page.goto((tmp_path / "site" / "index.html").as_uri())
    hrefs = page.eval_on_selector_all("#lessons a", "links => links.map(a => a.getAttribute('href'))")
    assert hrefs == [f"{name}.html" for name in lessons]
    for href in hrefs:  # the links resolve: follow each one from the index
        page.goto((tmp_path / "site" / "index.html").as_uri())
        page.click(f'#lessons a[href="{href}"]')
        page.wait_for_load_state("load")
        assert page.url.endswith("/" + href) and page.locator(".jp-Notebook").count() == 1, page.url
    print(f"site: {len(pages)} lessons built in {seconds:.0f} s")
    assert seconds < BUILD_BUDGET_S, f"building the site took {seconds:.0f} s (budget {BUILD_BUDGET_S} s)"


def _png(width: int, height: int) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(width / 100, height / 100), dpi=100)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def solution_cells(nb) -> int:
    """Code cells tagged ``solution``: what the page must fold."""
    return sum(1 for c in nb.cells if c.cell_type == "code" and "solution" in c.metadata.get("tags", []))


def _page_of(tmp_path: Path, name: str, outputs: list) -> Path:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x = 1", execution_count=1)
    cell.outputs = outputs
    nb.cells = [nbformat.v4.new_markdown_cell("# A page"), cell]
    path = tmp_path / f"{name}.html"
    path.write_text(build_site.render_html(nb), encoding="utf-8")
    return path


def test_page_checks_catch_a_broken_page(tmp_path, page):
    """Each check fires on the fault it looks for, and none fires on a clean page."""
    new_output = nbformat.v4.new_output
    figure = new_output("display_data", data={"image/png": _png(200, 120), "text/plain": "<Figure>"})
    clean = _page_of(tmp_path, "clean", [figure])
    assert page_problems(page, clean, 1) == []

    broken_image = new_output("display_data", data={"image/png": base64.b64encode(b"not a png").decode()})
    error = new_output("error", ename="ValueError", evalue="gamma must be at least 1, got 0",
                       traceback=["Traceback (most recent call last):", "ValueError: gamma must be at least 1, got 0"])
    warning = new_output("stream", name="stderr", text="RuntimeError: the kernel died\n")
    faults = {
        "missing figure": ([], "0 figures shown"),
        "image with no size": ([broken_image], "shows nothing"),
        "error output": ([figure, error], "error output"),
        "stderr error": ([figure, warning], "error output: RuntimeError"),
    }
    for name, (outputs, expected) in faults.items():
        found = page_problems(page, _page_of(tmp_path, name.replace(" ", "_"), outputs), 1)
        assert any(expected in line for line in found), f"{name}: not caught; checks said {found}"

    thrown = _page_of(tmp_path, "thrown", [figure])
    thrown.write_text(thrown.read_text().replace("</body>", "<script>null.boom()</script></body>"))
    assert any("script error" in line for line in page_problems(page, thrown, 1))


def test_solutions_are_folded_until_opened(tmp_path, page):
    """A solution cell (input, output, figure) and a markdown solution stay hidden until their summary is clicked."""
    new_output = nbformat.v4.new_output
    nb = nbformat.v4.new_notebook()
    question = nbformat.v4.new_markdown_cell("**Exercise.** How many?\n\n<details><summary>Solution</summary>\n\n"
                                             "Exactly seventeen, because of the bonus token.\n\n</details>")
    answer = nbformat.v4.new_code_cell("### BEGIN SOLUTION\nanswer_value = 17\n### END SOLUTION", execution_count=1)
    answer.metadata["tags"] = ["solution"]
    answer.outputs = [new_output("stream", name="stdout", text="the answer printed here\n"),
                      new_output("display_data", data={"image/png": _png(200, 120), "text/plain": "<Figure>"})]
    check = nbformat.v4.new_code_cell('exercises.check("01.1", answer_value)', execution_count=2)
    check.outputs = [new_output("stream", name="stdout", text="a visible check line\n")]
    nb.cells = [question, answer, check]
    path = tmp_path / "folded.html"
    path.write_text(build_site.render_html(nb), encoding="utf-8")
    assert page_problems(page, path, 1) == []  # the folded figure is no missing figure

    def visible(text: str) -> bool:
        return page.get_by_text(text).first.is_visible()

    assert page.locator("details.specbook-solution").count() == 1
    assert not visible("Exactly seventeen") and not visible("the answer printed here")
    assert not page.locator("details.specbook-solution img").first.is_visible()
    assert visible("How many?") and visible("a visible check line")
    page.locator("details.specbook-solution > summary").click()
    assert visible("the answer printed here") and page.locator("details.specbook-solution img").first.is_visible()
    assert not visible("Exactly seventeen")  # each fold opens on its own
    page.locator("details:not(.specbook-solution) > summary").click()
    assert visible("Exactly seventeen")
    # The broken twin: the plain lab template folds nothing.
    from nbconvert import HTMLExporter

    plain = tmp_path / "plain.html"
    plain.write_text(HTMLExporter(template_name="lab").from_notebook_node(nb)[0], encoding="utf-8")
    page.goto(plain.as_uri(), wait_until="load")
    assert page.locator("details.specbook-solution").count() == 0 and visible("the answer printed here")
