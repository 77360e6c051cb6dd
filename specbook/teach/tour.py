"""``python -m specbook tour``: the whole argument in one minute, headless, on CPU.

1. The yield table E[tokens] = (1 - a^(g+1)) / (1 - a) and a few speedups.
2. A chi-square confirmation that the modified rejection sampler emits exactly p.
3. The naive rules' bias, exact and measured.
4. One speculative decode on toy Markov models, with its statistics.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from .. import theory
from ..decode import generate, speculative_generate
from ..drafters import DraftModelDrafter
from ..laws import emission_law
from ..naive import NAIVE_RULES
from ..sampling import SamplingParams
from ..stats import chisquare_gof, counts_of
from ..toy import make_toy_pair
from ..verify import verify_chain


def _yield_table() -> str:
    alphas, gammas = (0.5, 0.6, 0.7, 0.8, 0.9), (1, 2, 3, 4, 5, 8, 10)
    lines = ["E[tokens per target pass] = (1 - a^(g+1)) / (1 - a)", "alpha \\ gamma " + "".join(f"{g:>8}" for g in gammas) + "   limit"]
    for a in alphas:
        row = "".join(f"{theory.expected_tokens(a, g):8.3f}" for g in gammas)
        lines.append(f"{a:>13.1f} {row}{theory.expected_tokens_limit(a):8.2f}")
    lines.append("speedup = E / (gamma*c + 1) at gamma 4: " + ", ".join(
        f"(a {a}, c {c}) {theory.speedup(a, 4, c):.2f}x" for a, c in ((0.8, 0.05), (0.8, 0.15), (0.5, 0.15), (0.4, 0.30))))
    return "\n".join(lines)


def _one_position_case():
    target_probs = torch.tensor([0.40, 0.25, 0.20, 0.10, 0.05, 0.0], dtype=torch.float64)
    draft_probs = torch.tensor([0.10, 0.05, 0.30, 0.30, 0.05, 0.20], dtype=torch.float64)
    return target_probs, draft_probs


def _chi_square(n: int, generator: torch.Generator) -> str:
    p, q = _one_position_case()
    V = len(p)
    drafts = torch.multinomial(q, n, replacement=True, generator=generator)[:, None]  # (n, 1)
    tokens, _ = verify_chain(torch.stack([p, p])[None].expand(n, 2, V), q[None, None].expand(n, 1, V), drafts, generator)
    # emitted token at the single draft position: accepted draft or residual; the bonus is ignored
    first = tokens[:, 0]
    res = chisquare_gof(counts_of(first, V), p)
    freq = (counts_of(first, V) / n).round(3).tolist()
    return (f"target p          {p.tolist()}\ndraft q           {q.tolist()}\nemitted (n={n}) {freq}\n"
            f"chi-square vs p: X2 = {res.statistic:.2f}, dof {res.dof}, p-value {res.pvalue:.3f} "
            f"-> {'consistent with p (lossless)' if res.pvalue > 1e-3 else 'REJECTED'}")


def _naive(n: int, generator: torch.Generator) -> str:
    p, q = _one_position_case()
    lines = [f"  {'rule':<39} {'emitted law (exact)':<42} chi-square p-value vs p (n={n})",
             f"  {'modified rejection sampling':<39} {[round(x, 3) for x in emission_law(p, q).tolist()]}"]
    for rule in NAIVE_RULES:
        law = rule.law(p, q)
        drafts = torch.multinomial(q, n, replacement=True, generator=generator).tolist()
        samples = [rule.sampler(p, q, x, generator) for x in drafts]
        pval = chisquare_gof(counts_of(samples, len(p)), p).pvalue
        lines.append(f"  {rule.name:<39} {str([round(x, 3) for x in law.tolist()]):<42} {pval:.1e}")
    return "\n".join(lines)


def _decode(generator: torch.Generator) -> str:
    target, draft = make_toy_pair(8, 2, match=0.8, seed=0)
    prompt = torch.tensor([1, 2, 3])
    params = SamplingParams(temperature=1.0)
    n_new = 400
    spec = speculative_generate(target, DraftModelDrafter(draft), prompt, n_new, params=params, gamma=4, generator=generator)
    plain = generate(target, prompt, n_new, params=params, generator=generator)
    s = spec.stats
    return (f"toy target: order-2 Markov chain over 8 tokens; draft: 80% target + 20% unrelated chain\n"
            f"first speculative tokens: {spec.new_tokens[0, :32].tolist()} ...\n"
            f"{s.summary()}\nper-position acceptance: {[round(x, 2) for x in s.position_acceptance]}\n"
            f"target passes: {s.target_passes} speculative vs {plain.stats.target_passes} plain for {n_new} tokens\n"
            f"theory, E[tokens] at the measured acceptance rate: {theory.expected_tokens(s.acceptance_rate, 4):.2f} "
            f"vs measured tau {s.tau:.2f} (the formula assumes one acceptance rate at every position)")


def run_tour(fast: bool = False) -> None:
    """Print the four parts of the tour; ``fast`` uses smaller samples (about 4x quicker)."""
    g = torch.Generator().manual_seed(0)
    n = 4000 if fast else 20000
    t0 = time.perf_counter()
    for title, body in (("1. Yield and speedup", _yield_table()),
                        ("2. The sampler is lossless: chi-square", _chi_square(n, g)),
                        ("3. Naive acceptance rules are biased", _naive(n // 4, g)),
                        ("4. One speculative decode on toy models", _decode(g))):
        print(f"\n== {title} ==\n{body}")
    print(f"\n(tour took {time.perf_counter() - t0:.1f} s)")


def main(argv: list[str] | None = None) -> int:
    """``specbook tour [--fast]``: every flag is checked; an unknown one is refused, not ignored."""
    parser = argparse.ArgumentParser(prog="specbook tour", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fast", action="store_true", help="smaller samples (4,000 instead of 20,000 draws)")
    args = parser.parse_args(argv)
    run_tour(fast=args.fast)
    return 0


if __name__ == "__main__":
    sys.exit(main())
