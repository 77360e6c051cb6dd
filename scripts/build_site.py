"""Build the lessons as a static HTML site: every notebook executed, with its outputs and figures.

    python scripts/build_site.py                 # all notebooks/*.ipynb -> build/site/
    python scripts/build_site.py --out DIR --jobs 2

Each ``notebooks/*.ipynb`` found at build time is executed top to bottom by
``nbclient`` in a ``python3`` kernel with ``SPECBOOK_FAST=1`` (the lessons'
quick path; ``--full`` runs them at full size), then rendered by nbconvert's
HTML exporter with the JupyterLab template. The exporter embeds figures as
data URIs, and the widgets' state, which nbclient stores in the notebook's
metadata, so sliders and their plots show their last drawn state without a
kernel; math is typeset by MathJax in the reader's browser. ``index.html``
lists the lessons, with the first heading of each as its title.

Solutions are folded: a code cell tagged ``solution`` (an exercise's answer cell) is wrapped,
input and output, in a closed ``<details>`` element, and the lessons' ``<details>`` solution
text in the markdown stays a closed ``<details>``; a reader opens either with one click.

A cell that raises stops the build with the lesson's name and the error: a
page with a traceback in it is never written. The site is plain files: open
``build/site/index.html`` in a browser, or serve the folder with
``python -m http.server -d build/site``.
"""
from __future__ import annotations

import argparse
import html
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
OUT = ROOT / "build" / "site"
IMAGE_MIMES = ("image/png", "image/jpeg", "image/svg+xml")


@dataclass(frozen=True)
class Page:
    """One lesson as rendered: where it went, what it is called, what it shows."""

    name: str  # notebook stem, e.g. "01_the_loop"
    title: str  # the notebook's first markdown heading
    figures: int  # image outputs (png, jpeg, svg) in the executed notebook
    seconds: float  # execution time


def lesson_title(nb, fallback: str) -> str:
    """The text of the first markdown heading in ``nb``, else ``fallback``."""
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for line in cell.source.splitlines():
            if line.startswith("#"):
                return line.lstrip("#").strip()
    return fallback


def count_figures(nb) -> int:
    """Image outputs in a notebook: what the page must show as <img> elements."""
    return sum(1 for cell in nb.cells if cell.cell_type == "code"
               for out in cell.get("outputs", []) if any(m in out.get("data", {}) for m in IMAGE_MIMES))


# The JupyterLab template, with every code cell tagged "solution" folded (input and output) in a
# closed <details> element. Markdown <details> blocks pass through as HTML and are closed already.
FOLD_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{% block codecell %}
{%- if 'solution' in cell.metadata.get('tags', []) -%}
<details class="specbook-solution"><summary>Solution (code and output): click to open</summary>
{{ super() }}
</details>
{%- else -%}
{{ super() }}
{%- endif -%}
{% endblock codecell %}
"""


def render_html(nb) -> str:
    """One executed notebook as a standalone HTML page (JupyterLab template, images inline, solutions folded)."""
    import jinja2
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab", template_file="specbook_fold.html.j2",
                            extra_loaders=[jinja2.DictLoader({"specbook_fold.html.j2": FOLD_TEMPLATE})])
    body, _resources = exporter.from_notebook_node(nb)
    return body


def build_page(path: Path, out: Path, timeout: int) -> Page:
    """Execute one notebook in its own folder and write ``out/<stem>.html``."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True,
                            resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    except CellExecutionError as err:
        raise RuntimeError(f"{path.name}: a cell raised; no page written.\n{err}") from None
    except CellTimeoutError as err:
        raise RuntimeError(f"{path.name}: a cell ran past {timeout} s (--timeout); no page written.\n{err}") from None
    seconds = time.perf_counter() - start
    skipped = [i for i, cell in enumerate(nb.cells)
               if cell.cell_type == "code" and cell.source.strip() and cell.get("execution_count") is None]
    if skipped:
        raise RuntimeError(f"{path.name}: code cells {skipped} did not run; no page written.")
    (out / f"{path.stem}.html").write_text(render_html(nb), encoding="utf-8")
    page = Page(path.stem, lesson_title(nb, path.stem), count_figures(nb), seconds)
    print(f"{page.name}.html: {page.figures} figures, executed in {page.seconds:.1f} s", flush=True)
    return page


def index_html(pages: list[Page], fast: bool) -> str:
    """The site's front page: one link per lesson, and how the pages were made."""
    import torch

    items = "\n".join(
        f'    <li><a href="{html.escape(p.name)}.html">{html.escape(p.title)}</a>'
        f' <span class="meta">({html.escape(p.name)}, {p.figures} figures)</span></li>' for p in pages)
    mode = "fast mode (SPECBOOK_FAST=1, smaller samples)" if fast else "full size"
    made = (f"Executed in {mode} on {time.strftime('%Y-%m-%d', time.gmtime())} with Python "
            f"{platform.python_version()} and torch {torch.__version__} ({platform.machine()} CPU).")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>specbook: the lessons</title>
  <style>
    body {{ font-family: system-ui, sans-serif; max-width: 46rem; margin: 3rem auto; line-height: 1.5; }}
    .meta {{ color: #666; font-size: 0.9em; }}
  </style>
</head>
<body>
  <h1>specbook: the lessons</h1>
  <p>Speculative decoding, taught in notebooks that prove by machine that it is lossless.
  These pages are the lessons as executed; to change a number and rerun a cell, open the
  notebooks themselves (<code>make lab</code>).</p>
  <ol id="lessons">
{items}
  </ol>
  <p class="meta">{html.escape(made)}</p>
</body>
</html>
"""


def build_site(out: Path = OUT, notebooks: Path = NOTEBOOKS, fast: bool = True, jobs: int = 1,
               timeout: int = 1200) -> list[Page]:
    """Execute and render every ``notebooks/*.ipynb`` into ``out``; returns the pages in order."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    if timeout < 1:
        raise ValueError(f"timeout must be at least 1 second, got {timeout}")
    paths = sorted(p for p in notebooks.glob("*.ipynb") if not p.name.startswith("."))
    if not paths:
        raise ValueError(f"notebooks: no .ipynb files in {notebooks}")
    print(f"executing {len(paths)} lessons ({'fast mode' if fast else 'full size'}) into {out}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.html"):  # pages of lessons that no longer exist
        stale.unlink()
    # The kernels inherit the environment: fast mode, and this checkout's
    # specbook ahead of any other installed copy.
    os.environ["SPECBOOK_FAST"] = "1" if fast else "0"
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    if jobs == 1:
        pages = [build_page(p, out, timeout) for p in paths]
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            pages = list(pool.map(build_page, paths, [out] * len(paths), [timeout] * len(paths)))
    (out / "index.html").write_text(index_html(pages, fast), encoding="utf-8")
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Execute the lessons and render them as a static HTML site.")
    parser.add_argument("--out", type=Path, default=OUT, help=f"output folder (default: {OUT.relative_to(ROOT)})")
    parser.add_argument("--notebooks", type=Path, default=NOTEBOOKS, help="folder of .ipynb lessons")
    parser.add_argument("--full", action="store_true", help="run the lessons at full size instead of fast mode")
    parser.add_argument("--jobs", type=int, default=1, help="lessons executed at once (default: 1)")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds one cell may run (default: 1200)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        pages = build_site(args.out, args.notebooks, fast=not args.full, jobs=args.jobs, timeout=args.timeout)
    except (ValueError, RuntimeError) as err:
        print(f"build_site: {err}", file=sys.stderr)
        return 1
    print(f"site: {args.out / 'index.html'} ({len(pages)} lessons, {time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
