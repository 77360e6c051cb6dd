"""The glossary exists, defines every symbol once, and "alpha" means accepted / verified.

``docs/glossary.md`` fixes one meaning per symbol.  The grep test below fails when a notebook,
assignment, doc or library file calls accepted / proposed "alpha" (that figure is the *draft
efficiency*).  Files written before the glossary are listed in ``PENDING_RENAME`` until they
are fixed; an entry that no longer matches fails too, so the list can only shrink.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GLOSSARY = ROOT / "docs" / "glossary.md"

# alpha (or the Greek letter) within a short stretch of "accepted / proposed", in either order.
ALPHA_AS_PROPOSED = re.compile(
    r"(\balpha\b|α)[^\n]{0,40}accepted ?/ ?proposed|accepted ?/ ?proposed[^\n]{0,40}(\balpha\b|α)", re.IGNORECASE)

# Files that still use the old meaning; remove an entry when its file is renamed.
PENDING_RENAME: set[str] = set()


def course_files() -> list[Path]:
    files = [*ROOT.glob("notebooks/*.py"), *ROOT.glob("assignments/src/*.py"), *ROOT.glob("docs/*.md"),
             ROOT / "README.md", *ROOT.glob("specbook/**/*.py")]
    return sorted(f for f in files if f != GLOSSARY)  # the glossary quotes the old meaning to retire it


def test_glossary_defines_each_symbol_and_lists_the_readings():
    text = GLOSSARY.read_text()
    for term in ["**α** (alpha)", "**acceptance rate**", "**draft efficiency**", "**τ** (tau)", "**γ** (gamma)",
                 "**c**", "**v(n)**", "**E(α, γ)**", "**residual**", "**bonus token**", "**level**"]:
        assert term in text, f"the glossary does not define {term}"
    for work in ["Leviathan", "Chen, Borgeaud", "SpecInfer", "Medusa", "EAGLE:", "EAGLE-2", "EAGLE-3", "LayerSkip",
                 "Prompt Lookup Decoding", "Spec-Bench"]:
        assert work in text, f"the reading list misses {work}"
    assert text.count("**α** (alpha)") == 1, "alpha is defined once"


def test_alpha_never_names_accepted_per_proposed():
    offending = {}
    for path in course_files():
        rel = path.relative_to(ROOT).as_posix()
        hits = [m.group(0) for m in ALPHA_AS_PROPOSED.finditer(path.read_text(encoding="utf-8"))]
        if hits:
            offending[rel] = hits
    new = {f: h for f, h in offending.items() if f not in PENDING_RENAME}
    assert not new, f"alpha is accepted / verified (docs/glossary.md); accepted / proposed is the draft efficiency: {new}"
    fixed = PENDING_RENAME - set(offending)
    assert not fixed, f"these files no longer use the old meaning: remove them from PENDING_RENAME: {sorted(fixed)}"


def test_the_grep_catches_the_old_meaning():
    assert ALPHA_AS_PROPOSED.search('"alpha": accepted / proposed if proposed else 0.0')
    assert ALPHA_AS_PROPOSED.search("α = accepted / proposed drafts")
    assert ALPHA_AS_PROPOSED.search("accepted / proposed guesses = {spec.alpha:.2f}")
    assert not ALPHA_AS_PROPOSED.search("alpha = accepted / verified; draft efficiency = accepted / proposed drafts")
