"""The everyday prompts (specbook.train.everyday): seeded, unique, split like every training
prompt, well formed, and disjoint from both benchmark prompt files."""
from __future__ import annotations

import collections
import re
from pathlib import Path

import pytest

from specbook.train.everyday import STEPS, everyday_prompts
from specbook.train.heads_data import overlaps
from specbook.train.prompts import BENCHMARK_PROMPTS, benchmark_texts, split

HELDOUT_BENCH = benchmark_texts(BENCHMARK_PROMPTS.parent / "heldout_prompts.jsonl")


def test_everyday_prompts_are_seeded_unique_and_split():
    ps = everyday_prompts(600)
    assert ps == everyday_prompts(600) and ps != everyday_prompts(600, seed=1)
    assert everyday_prompts(250) == ps[:250]  # a longer list keeps the shorter one (cached replies stay valid)
    assert len({p.id for p in ps}) == len(ps) == len({p.text for p in ps})
    assert collections.Counter(p.category for p in ps) == {"chat": 360, "math": 120, "summarize_quote": 120}
    assert all(p.id == f"everyday/{p.category}/{i}" for i, p in enumerate(ps))
    train, held = split(ps)
    assert 0.05 < len(held) / len(ps) < 0.15 and len(train) + len(held) == len(ps)


def test_everyday_prompts_share_nothing_with_the_benchmarks():
    ps = everyday_prompts(1200)
    for texts in (benchmark_texts(), HELDOUT_BENCH):
        assert overlaps(texts, prompts=ps) == []
    assert overlaps(["Say: " + ps[3].text[10:130]], prompts=ps) != []  # the check can fail


def test_everyday_prompts_are_well_formed():
    """Chat prompts are one request; word problems state a step-by-step instruction then one
    question with numbers; every report to summarise quotes someone."""
    for p in everyday_prompts(300):
        if p.category == "chat":
            assert p.text.endswith(("?", ".")) and "{" not in p.text and "\n" not in p.text, p.text
        elif p.category == "math":
            instruction, question = p.text.split("\n\n")
            assert instruction in STEPS and re.search(r"\d", question) and question.endswith("?"), p.text
        else:
            assert re.search(r"\"[A-Z][^\"]+,\" said [A-Z]\w+ [A-Z]\w+, ", p.text), p.text


def test_everyday_prompts_refuse_a_negative_count():
    with pytest.raises(ValueError, match="count"):
        everyday_prompts(-1)


@pytest.mark.model
def test_the_shipped_prompt_set_is_what_the_documented_command_writes(tmp_path):
    """specbook/data/eagle_prompts_everyday.jsonl, the shipped EAGLE head's data, is rewritten byte for
    byte by `python -m specbook.train.everyday --base specbook/data/eagle_prompts_notices.jsonl --count 1200`."""
    from specbook.train import everyday

    data = Path(everyday.__file__).resolve().parents[1] / "data"
    out = tmp_path / "set.jsonl"
    everyday.main(["--base", str(data / "eagle_prompts_notices.jsonl"), "--count", "1200", "--out", str(out)])
    assert out.read_bytes() == (data / "eagle_prompts_everyday.jsonl").read_bytes()
