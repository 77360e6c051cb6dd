"""The test suite's own helpers, in one module (scripts share specbook.grading.twins instead).

* refusal: the check every bad-input test uses: a clear ValueError or TypeError, in time, never
  silence (``refuses``, ``watchdog``);
* the statistical family: every chi-square test of *correct* code calls :func:`check_fit` at the
  Bonferroni level ``PER_TEST_ALPHA = FAMILY_ALPHA / FAMILY_BUDGET`` (level, block-law helpers and
  broken twins: :mod:`specbook.grading.twins`); ``conftest.py`` counts the tests (``USED``) and fails
  the session over budget; broken twins must be *rejected* (:func:`check_rejects`); the exact law of
  a model's first two sampled tokens (:func:`exact_two_token_law`) and draws of them
  (:func:`sample_two_tokens`);
* ``WrappedTarget``: a target that hands every call to the model it wraps, for tests that count or
  corrupt one call;
* ``md_tables``: markdown tables read back into cells, for tests of rendered reports;
* ``load_script``: a file of ``scripts/`` imported as a module.
"""
from __future__ import annotations

import contextlib
import importlib.util
import signal
from pathlib import Path

from specbook.grading.twins import PER_TEST_ALPHA, fit_pvalue


# ----------------------------------------------------------------------------- refusals

TIME_LIMIT = 5.0  # seconds; a refusal should take milliseconds, a hang is caught here


@contextlib.contextmanager
def watchdog(seconds: float):
    """Raise TimeoutError in the main thread if the body runs longer than ``seconds``."""
    def on_alarm(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def refuses(call, *fragments: str, limit: float = TIME_LIMIT) -> None:
    """Assert that ``call()`` raises ValueError or TypeError mentioning every fragment, in time."""
    with watchdog(limit):
        try:
            result = call()
        except (ValueError, TypeError) as err:
            message = str(err)
        else:
            raise AssertionError(f"accepted silently and returned {result!r}")
    for fragment in fragments:
        assert fragment in message, f"message {message!r} does not mention {fragment!r}"


# ----------------------------------------------------------------------------- the statistical family

USED: list[str] = []


def check_fit(name: str, law: dict, observed: list) -> float:
    """Assert that ``observed`` follows ``law`` at the family's per-test level; return the p-value."""
    USED.append(name)
    p = fit_pvalue(law, observed)
    assert p > PER_TEST_ALPHA, f"{name}: chi-square p = {p:.3g} <= {PER_TEST_ALPHA:g} (observed outcomes do not follow the exact law)"
    return p


def check_rejects(name: str, law: dict, observed: list) -> float:
    """Assert that a broken twin is caught: p-value below the per-test level."""
    p = fit_pvalue(law, observed)
    assert p <= PER_TEST_ALPHA, f"broken twin {name!r} was NOT caught: p = {p:.3g} > {PER_TEST_ALPHA:g}"
    return p


def exact_two_token_law(model, prompt: list[int], params) -> dict:
    """{(x1, x2): P(the target emits x1 then x2 after prompt)}, computed exactly from ``model``."""
    import torch

    from specbook.sampling import logits_to_probs

    V = model.config.vocab_size
    with torch.no_grad():
        p1 = logits_to_probs(model(torch.tensor([prompt]))[0, -1].double(), params)
        rows = torch.tensor([prompt + [x] for x in range(V)])
        p2 = logits_to_probs(model(rows)[:, -1].double(), params)  # (V, V)
    return {(a, b): float(p1[a] * p2[a, b]) for a in range(V) for b in range(V) if p1[a] * p2[a, b] > 0}


def sample_two_tokens(model, drafter, prompt: list[int], params, n: int, seed: int) -> list[tuple[int, int]]:
    """``n`` draws (a multiple of 200) of the first two tokens speculative decoding with ``drafter`` emits
    after ``prompt``, in batches of 200 identical rows, gamma 3."""
    import torch

    from specbook.decode import speculative_generate
    from specbook.models import LlamaTarget

    target, g, out = LlamaTarget(model, max_length=32), torch.Generator().manual_seed(seed), []
    for _ in range(n // 200):
        res = speculative_generate(target, drafter, torch.tensor([prompt] * 200), 2, params=params, gamma=3,
                                   generator=g)
        out.extend(tuple(r) for r in res.new_tokens.tolist())
    return out


# ----------------------------------------------------------------------------- a pass-through target

class WrappedTarget:
    """Every Target method, optional capabilities included, passed through to ``inner``."""

    def __init__(self, inner):
        self.inner, self.vocab_size = inner, inner.vocab_size

    def reset(self, batch_size):
        self.inner.reset(batch_size)

    @property
    def cache_lengths(self):
        return self.inner.cache_lengths

    def rollback(self, lengths):
        self.inner.rollback(lengths)

    def select_rows(self, rows):
        self.inner.select_rows(rows)

    def keep(self, indices):
        self.inner.keep(indices)

    def forward(self, tokens, parents=None):
        return self.inner.forward(tokens, parents)


# ----------------------------------------------------------------------------- markdown tables

def md_tables(text: str) -> list[list[list[str]]]:
    """Each markdown table of ``text`` as rows of cells, header and rule line dropped."""
    tables, current = [], None
    for line in text.splitlines():
        if line.startswith("|"):
            if current is None:
                current = []
                tables.append(current)
            current.append([c.strip() for c in line.strip("|").split("|")])
        else:
            current = None
    return [t[2:] for t in tables]


# ----------------------------------------------------------------------------- scripts

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str):
    """``scripts/<name>.py`` imported as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def greedy(target, prompt: list[int], n: int, *, drafter=None, eos: int | None = None) -> list[int]:
    """The new tokens of greedy decoding of one prompt, up to ``n`` (or through ``eos``): plain, or speculative
    with ``drafter`` at 3 drafts a pass (a chain of 3 runs a compiled target's width-4 pass)."""
    import torch

    from specbook.decode import generate, speculative_generate
    from specbook.sampling import GREEDY

    ids = torch.tensor([prompt])
    if drafter is None:
        out = generate(target, ids, n, params=GREEDY, eos_token_id=eos)
    else:
        out = speculative_generate(target, drafter, ids, n, params=GREEDY, gamma=3, eos_token_id=eos)
    return out.new_tokens[0].tolist()
