"""Write one picture per lesson to docs/figures/ (the README shows them).

    python scripts/make_figures.py [--out DIR]

Everything is seeded, so running it again gives the same images (for a given
matplotlib version).  The figures come from :mod:`specbook.teach.plots`, the same
functions the notebooks call.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

from specbook.drafters import DraftModelDrafter
from specbook.naive import NAIVE_RULES
from specbook.teach import plots, rules
from specbook.teach.trace import trace_speculative
from specbook.toy import make_toy_pair

REPO = Path(__file__).resolve().parents[1]
WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "."]
WORKED_CASES = [(0.8, 0.05), (0.8, 0.15), (0.5, 0.15), (0.4, 0.30)]


def lesson1():
    """A speculative generation on the toy pair, each guess coloured by its fate."""
    target, draft = make_toy_pair(vocab_size=8, order=1, match=0.7, seed=0)
    trace = trace_speculative(target, DraftModelDrafter(draft), [0], 40, gamma=4,
                              generator=torch.Generator().manual_seed(0), token_names=WORDS)
    fig = plots.plot_trace(trace, max_steps=10)
    fig.suptitle("Lesson 1: draft γ = 4, verify once, keep the survivors", fontsize=11)
    return fig


def lesson2():
    """What each naive rule emits against the target p, and the bias it leaves."""
    setup = rules.position_setup(match=0.3, temperature=1.0, seed=2)
    laws = {r.name: r.law(setup.target_probs, setup.draft_probs) for r in NAIVE_RULES}
    fig = plots.new_figure(8.0, 6.0)
    top, bottom = fig.subplots(2, 1)
    plots.plot_laws(setup.target_probs, laws, token_names=WORDS, ax=top,
                    title="Lesson 2: naive acceptance rules do not emit p")
    plots.plot_bias(setup.target_probs, laws, token_names=WORDS, ax=bottom,
                    title="bias (emitted − p); modified rejection sampling has none")
    return fig


def lesson3():
    """Yield against draft length, and the break-even line in the (alpha, c) plane."""
    fig = plots.new_figure(11.0, 4.2)
    left, right = fig.subplots(1, 2)
    plots.plot_yield(alphas=(0.5, 0.6, 0.7, 0.8, 0.9), max_gamma=16, ax=left)
    plots.plot_break_even(gammas=(1, 2, 4, 8), points=WORKED_CASES, ax=right)
    fig.suptitle("Lesson 3: yield saturates; speculation pays only below the break-even line", fontsize=11)
    return fig


FIGURES = {"lesson1_loop.png": lesson1, "lesson2_rules.png": lesson2, "lesson3_yield.png": lesson3}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "figures", help="output folder")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, make in FIGURES.items():
        path = args.out / name
        path.write_bytes(plots.figure_to_png(make(), dpi=110))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
