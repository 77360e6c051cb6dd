import os

import pytest

os.environ.setdefault("SPECBOOK_FAST", "1")


def pytest_sessionfinish(session, exitstatus):
    from specbook.grading.twins import FAMILY_BUDGET
    from support import USED

    if USED:
        print(f"\nstatistical family: {len(USED)} chi-square tests of correct code (budget {FAMILY_BUDGET}, family-wise false-alarm rate <= 1e-3)")
    if len(USED) > FAMILY_BUDGET:
        session.exitstatus = 1
        print(f"\nstatistical family over budget: {len(USED)} tests > {FAMILY_BUDGET}; raise FAMILY_BUDGET (and so lower each test's level)")


@pytest.fixture(scope="module")
def chromium():
    """Headless Debian Chromium, driven by playwright; always closed (the browser and site tests)."""
    import contextlib

    from browser_server import CHROMIUM, CHROMIUM_ARGS, STEP_S, require_browser_tools

    require_browser_tools()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=STEP_S * 1000)
        try:
            yield browser
        finally:
            with contextlib.suppress(Exception):  # already gone if a watchdog fired
                browser.close()
