"""Copy the browser test's screenshots that the README shows into docs/figures/.

The pictures of the widgets in the README are not drawn separately: they are
the screenshots ``tests/course/test_browser.py`` takes while it drives JupyterLab in
headless Chromium (see ``test-artifacts/browser/``).

    python scripts/browser_screenshots.py          # copy from the last test run
    python scripts/browser_screenshots.py --run    # run the browser test first, then copy
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts" / "browser"
FIGURES = REPO / "docs" / "figures"

# README picture <- screenshot of the browser test (NN is the step number).
PICTURES = {
    "browser-yield-lesson.png": "yield-*-explorer.png",  # JupyterLab, lesson 3 at the explorer
    "browser-yield-explorer.png": "yield-*-gamma-moved.png",  # the explorer after α and γ moved by keyboard
    "browser-proof-explorer.png": "proof-*-quality-moved.png",  # chi-square explorer, correct rule selected
    "browser-proof-broken-rule.png": "proof-*-rule-changed.png",  # the same with a broken rule's histogram
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="store_true", help="run tests/course/test_browser.py first")
    args = parser.parse_args(argv)
    if args.run:
        test = subprocess.run([sys.executable, "-m", "pytest", "tests/course/test_browser.py", "-q"], cwd=REPO)
        if test.returncode != 0:
            print("browser test failed; README pictures left as they were", file=sys.stderr)
            return test.returncode
    missing = []
    FIGURES.mkdir(parents=True, exist_ok=True)
    for picture, pattern in PICTURES.items():
        found = sorted(ARTIFACTS.glob(pattern))
        if len(found) != 1:
            missing.append(f"{pattern}: {len(found)} match(es) in {ARTIFACTS.relative_to(REPO)}")
            continue
        shutil.copyfile(found[0], FIGURES / picture)
        print(f"{found[0].relative_to(REPO)} -> {(FIGURES / picture).relative_to(REPO)}")
    if missing:
        print("no screenshot for: " + "; ".join(missing) + " (run with --run)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
