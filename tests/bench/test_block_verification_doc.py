"""docs/block_verification.md shows the tables of the JSON committed beside it, and the script that
writes them computes what it says: exact expectations, medians over seeds, paired ratios."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
from support import load_script

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "block_verification.md"
DATA = ROOT / "docs" / "data" / "block_verification.json"


def test_the_doc_shows_the_tables_of_the_committed_json():
    bv = load_script("block_verification")
    report = bv.read_json(DATA)
    report["path"] = str(DATA)
    rendered = bv.render(report)
    assert rendered in DOC.read_text(), ("docs/block_verification.md does not show the tables that "
                                         "`python scripts/block_verification.py table docs/data/block_verification.json` prints")
    assert report["command"].startswith("python scripts/block_verification.py run")
    for s in report["laws"].values():  # block verification never keeps fewer drafts (Sun et al., Theorem 2)
        assert s["block_never_below_token"] and s["ratio_min"] >= 1


def test_block_keeps_at_least_as_much_and_one_hot_drafts_exactly_as_much():
    bv = load_script("block_verification")
    rng = random.Random(1)
    for K in (2, 3):
        p_rows = [bv.random_law(rng, 4) for _ in range(K + 1)]
        q_rows = [bv.random_law(rng, 4) for _ in range(K)]
        token, block = bv.kept_pair(p_rows, q_rows, K)
        assert block >= token - 1e-12
        token, block = bv.kept_pair(p_rows, None, K, drafts=[rng.randrange(4) for _ in range(K)])
        assert block == pytest.approx(token, abs=1e-12)
    token, block = bv.kept_pair([[1 / 3, 2 / 3]] * 3, [[2 / 3, 1 / 3]] * 2, 2)  # Sun et al., section 2
    assert (token, block) == pytest.approx((10 / 9, 11 / 9))


def run_report(temperature, seed, tau_token, tau_block, seconds):
    """A run as scripts/block_verification.py keeps it: overall rows and per-prompt records."""
    def overall(v, tau):
        return {"drafter": "draft", "verifier": v, "tau": tau, "mean_acceptance_length": tau + 0.1,
                "draft_acceptance_rate": 0.2, "tokens_per_s": 10 * tau}

    per_prompt = [{"drafter": "draft", "verifier": v, "id": f"p{i}", "new_tokens": 10, "seconds": s}
                  for i, (st, sb) in enumerate(seconds) for v, s in (("token", st), ("block", sb))]
    return {"temperature": temperature, "seed": seed, "overall": [overall("token", tau_token), overall("block", tau_block),
                                                                  {"drafter": "none", "verifier": None}],
            "per_prompt": per_prompt}


def test_rows_are_medians_over_seeds_and_ratios_are_paired():
    bv = load_script("block_verification")
    reports = [run_report(1.0, 0, 1.5, 1.5, [(2.0, 1.0), (1.0, 1.0)]),
               run_report(1.0, 1, 1.2, 1.8, [(1.0, 2.0)]),
               run_report(1.0, 2, 1.0, 1.1, [(3.0, 3.0)])]
    token, block = bv.rows(reports)
    assert (token["verifier"], block["verifier"]) == ("token", "block") and token["seeds"] == 3
    assert token["tau"] == 1.2 and block["tau"] == 1.5 and block["tau_range"] == [1.1, 1.8]
    assert block["tau_ratio_median"] == 1.1  # median of 1.0, 1.5, 1.1
    assert block["pairs"] == 4 and block["tokens_per_s_ratio_median"] == 1.0  # median of 2, 1, 0.5, 1
    assert block["tokens_per_s_ratio_range"] == [0.5, 2.0] and "tau_ratio_median" not in token
