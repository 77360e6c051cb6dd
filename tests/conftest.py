import os

import pytest

os.environ.setdefault("SPECBOOK_FAST", "1")


def pytest_sessionfinish(session, exitstatus):
    from statfamily import FAMILY_BUDGET, USED  # noqa: E402

    if USED:
        print(f"\nstatistical family: {len(USED)} chi-square tests of correct code (budget {FAMILY_BUDGET}, family-wise false-alarm rate <= 1e-3)")
    if len(USED) > FAMILY_BUDGET:
        session.exitstatus = 1
        print(f"\nstatistical family over budget: {len(USED)} tests > {FAMILY_BUDGET}; raise FAMILY_BUDGET (and so lower each test's level)")
