"""The notice prompts (specbook.train.notices): seeded, split like every training prompt, asking
questions their context answers, and disjoint from both benchmark prompt files."""
from __future__ import annotations

import collections
from pathlib import Path

import pytest

from specbook.train.heads_data import overlaps
from specbook.train.notices import QA_TEMPLATES, notice_prompts
from specbook.train.prompts import BENCHMARK_PROMPTS, Prompt, benchmark_texts, split

HELDOUT_BENCH = benchmark_texts(BENCHMARK_PROMPTS.parent / "heldout_prompts.jsonl")


def test_notice_prompts_are_seeded_unique_and_split():
    ps = notice_prompts(500)
    assert ps == notice_prompts(500) and ps != notice_prompts(500, seed=1)
    assert notice_prompts(200) == ps[:200]  # a longer list keeps the shorter one (cached replies stay valid)
    assert len({p.id for p in ps}) == len(ps) == len({p.text for p in ps})
    assert collections.Counter(p.category for p in ps) == {"summarize_quote": 200, "rag_qa": 200, "json_extract": 100}
    train, held = split(ps)
    assert 0.05 < len(held) / len(ps) < 0.15 and len(train) + len(held) == len(ps)


def test_notice_prompts_share_nothing_with_the_benchmarks():
    ps = notice_prompts(1600)
    for texts in (benchmark_texts(), HELDOUT_BENCH):
        assert overlaps(texts, prompts=ps) == []
    assert overlaps(["Say: " + ps[3].text[20:140]], prompts=ps) != []  # the check can fail


# each question of the notice tables, by a phrase of it, and the phrase of the fact that answers it
ANSWERS = {"open?": "opens at", "entry cost?": "Entry costs", "run it": "will be run by", "large groups": "should book",
           "closed?": "is closed on", "were counted": "counted", "led the count": "was led by",
           "Where were most": "Most of the", "group meet": "The group meets", "How often": "will run every",
           "first and last": "The first", "tickets cost": "A single ticket", "travel free": "travel free",
           "When and where": "takes place on", "How much is entry": "entry is", "by bus": "come by bus",
           "rains?": "If it rains"}


def test_every_question_is_answered_by_its_context():
    """A retrieval prompt asks one of the questions its own facts answer, never one of a fact the
    notice left out."""
    asked = collections.Counter()
    for p in notice_prompts(400):
        if p.category != "rag_qa":
            continue
        context, question = _split_qa(p)
        (key,) = [k for k in ANSWERS if k.lower() in question.lower()]
        assert ANSWERS[key] in context, p.text
        asked[key] += 1
    assert set(asked) == set(ANSWERS)  # every kind of question was asked


def _split_qa(p: Prompt) -> tuple[str, str]:
    if "\n\nQuestion: " in p.text:
        context, question = p.text.rsplit("\n\nQuestion: ", 1)
    elif p.text.startswith("Context:\n"):
        context, question = p.text.split("\n\nAnswer this from the context above, quoting it where you can: ")
    else:
        context, question = p.text.rsplit("\n\nBased only on that information, ", 1)
    assert len(QA_TEMPLATES) == 4 and question.endswith("?")
    return context, question


def test_notice_prompts_refuse_a_negative_count():
    with pytest.raises(ValueError, match="count"):
        notice_prompts(-1)


@pytest.mark.model
def test_the_shipped_prompt_set_is_what_the_documented_command_writes(tmp_path):
    """specbook/data/eagle_prompts_notices.jsonl, the shipped EAGLE head's data, is rewritten byte for byte
    by `python -m specbook.train.notices --base specbook/data/eagle_prompts.jsonl --count 1600`."""
    from specbook.train import notices

    data = Path(notices.__file__).resolve().parents[1] / "data"
    out = tmp_path / "set.jsonl"
    notices.main(["--base", str(data / "eagle_prompts.jsonl"), "--count", "1600", "--out", str(out)])
    assert out.read_bytes() == (data / "eagle_prompts_notices.jsonl").read_bytes()
