"""What the checker hands back: one :class:`Check` per property or law, gathered in a :class:`Report`.

A check is either a *property* (deterministic: it holds for every call or it
fails, e.g. "never emits a token the target gives probability 0") or a *law*
(statistical: a p-value from a goodness-of-fit or binomial test against an
exact law).  All law checks of one report form one family judged by Holm's
step-down procedure at ``alpha`` (Holm 1979), which controls the family-wise
error in the strong sense: whichever of the tested laws are false, the chance of
rejecting any *true* one is at most ``alpha``, whatever the seed.

Two verdicts come out of the one family:

* ``lossless``: no property failed and no law test of scope "lossless" was
  rejected.  Those tests ask only whether the emitted tokens follow the target
  (they need no knowledge of how the sampler uses the draft);
* ``standard``: no check failed at all, so the sampler also has the block law of
  the modified rejection sampler for the draft probabilities it was given.

A lossless sampler therefore passes ``lossless`` with probability at least
1 - alpha even when it is not the standard algorithm (its standard-scope laws
are false, and strong control still covers the true lossless ones).
``Report.passed`` is the verdict named by ``require``.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field, replace

from ..stats import holm

PASS, FAIL, WARN, NOT_RUN, INFO = "pass", "FAIL", "warn", "not run", "info"
REQUIRE = ("standard", "lossless")


@dataclass(frozen=True)
class Check:
    """One line of a report.

    name:    what is checked ("acceptance probability", "outputs well-formed", ...)
    case:    which input case ("mixed", "p == q", ...)
    kind:    "property" (deterministic), "law" (statistical), "advice" (never fails the report) or
             "cost" (measured acceptance, shown for samplers that are lossless but not standard)
    verdict: "pass", "FAIL", "warn", "not run" or "info"
    statistic, dof, pvalue, n: the test's numbers (law checks); None for properties
    reason:  what was compared, and on failure what was observed
    hint:    what to fix, shown when the check fails
    evidence: the raw material of a power calculation (used by ``specbook.grading.detection``):
             ("chi2", statistic, dof, split) for a chi-square component tested at level alpha / split,
             or ("rare", k, n, planned) for k calls out of n that showed an outcome impossible for a
             correct sampler, in a test that makes ``planned`` calls at the default sample size
    scope:   for law checks, "lossless" (the emitted tokens against the target alone) or "standard"
             (the modified rejection sampler's own law); properties count for both verdicts
    """

    name: str
    case: str
    kind: str
    verdict: str = NOT_RUN
    statistic: float | None = None
    dof: int | None = None
    pvalue: float | None = None
    n: int | None = None
    reason: str = ""
    hint: str = ""
    evidence: tuple = ()
    scope: str = "standard"

    @property
    def failed(self) -> bool:
        return self.verdict == FAIL

    def line(self) -> str:
        p = "" if self.pvalue is None else f"p = {_fmt_p(self.pvalue)}"
        stat = "" if self.statistic is None else f"stat {self.statistic:.4g} (dof {self.dof}, n {self.n})"
        return f"{self.verdict:7s}  {self.case:14s}  {self.name:40s}  {p:13s}  {stat}".rstrip()


def _fmt_p(p: float) -> str:
    if p == 0:
        return "0"
    return f"{p:.2g}" if p >= 1e-300 else "<1e-300"


def judge_family(checks: list[Check], alpha: float, family_size: int) -> list[Check]:
    """Set the verdict of every law check that has a p-value by Holm at family-wise level ``alpha``.

    ``family_size`` is the number of law tests planned; tests that were not run (the
    function failed a property first, or the check stopped early) count as p = 1, so
    stopping early can only make the procedure more conservative.
    """
    idx = [i for i, c in enumerate(checks) if c.kind == "law" and c.pvalue is not None]
    out = list(checks)
    if not idx:
        return out
    if len(idx) > family_size:
        raise ValueError(f"family_size {family_size} is smaller than the {len(idx)} tests run")
    pvals = [checks[i].pvalue for i in idx] + [1.0] * (family_size - len(idx))
    rejected = holm(pvals, alpha)
    for i, rej in zip(idx, rejected):
        out[i] = replace(checks[i], verdict=FAIL if rej else PASS)
    return out


@dataclass(frozen=True, repr=False)
class Report:
    """The checker's answer: two verdicts, ``lossless`` and ``standard``; ``passed`` is the one ``require`` names.

    subject:  "token rule" or "verifier";  function: the checked function's name
    alpha:    family-wise false-alarm rate of the law checks (Holm)
    calls:    how many times the function was called;  seconds: wall time of the whole check
    timings:  case -> seconds spent in that case
    family_size: number of statistical tests planned (the Holm family; some may not have run)
    require:  "standard" (the default: the modified rejection sampler) or "lossless"
    notes:    lines about how the check ran (e.g. which timer was used)
    """

    subject: str
    function: str
    seed: int
    alpha: float
    checks: tuple[Check, ...]
    calls: int
    seconds: float
    timings: dict = field(default_factory=dict, hash=False)
    family_size: int = 0
    require: str = "standard"
    notes: tuple = ()

    @property
    def lossless(self) -> bool:
        """No property failed and no lossless-scope law was rejected: the output follows the target."""
        return not any(c.failed and (c.kind == "property" or c.scope == "lossless") for c in self.checks)

    @property
    def standard(self) -> bool:
        """No check failed: the block law of the modified rejection sampler (which is also lossless)."""
        return not any(c.failed for c in self.checks)

    @property
    def passed(self) -> bool:
        return self.lossless if self.require == "lossless" else self.standard

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.failed)

    def summary(self) -> str:
        verdict = "PASSED" if self.passed else f"FAILED ({len(self.failures)} of {len(self.checks)} checks)"
        yes = {True: "yes", False: "NO"}
        return (f"check of {self.subject} {self.function} (seed {self.seed}, require={self.require!r}): {verdict}\n"
                f"lossless (the output follows the target): {yes[self.lossless]};  the standard algorithm "
                f"(modified rejection sampling, acceptance min(1, p/q)): {yes[self.standard]}\n"
                f"{self.family_size} statistical tests, Holm family-wise false-alarm rate <= {self.alpha:g}; "
                f"{self.calls} calls in {self.seconds:.1f} s")

    @property
    def cost(self) -> tuple[Check, ...]:
        """Measured acceptance against min(1, p/q)'s, per case (what a non-standard lossless sampler keeps)."""
        return tuple(c for c in self.checks if c.kind == "cost")

    def __str__(self) -> str:
        lines = [self.summary(), ""]
        lines += ["  " + c.line() for c in self.checks if c.kind != "cost"]
        if self.lossless and not self.standard:
            lines += ["", "Lossless, but not the standard algorithm. What it keeps, against the modified rejection "
                          "sampler (min(1, p/q) is the most a verifier that judges each draft on its own can keep; one "
                          "that judges the whole block, as block verification does, can keep more):"]
            lines += [f"  * [{c.case}] {c.name}: {c.reason}" for c in self.cost]
        fails = self.failures
        if fails:
            lines += ["", "What went wrong:"]
            for c in fails:
                lines.append(f"  * [{c.case}] {c.name}: {c.reason}")
                if c.hint:
                    lines.append(f"    Hint: {c.hint}")
        warns = [c for c in self.checks if c.verdict == WARN]
        if warns:
            lines += ["", "Advice (does not fail the check):"]
            lines += [f"  * {c.name}: {c.reason}" for c in warns]
        if self.notes:
            lines += ["", "Notes:"] + [f"  * {n}" for n in self.notes]
        return "\n".join(lines)

    __repr__ = __str__  # evaluating a report in a console prints the whole table, like a DataFrame

    def _repr_html_(self) -> str:
        colour = {PASS: "#1a7f37", FAIL: "#cf222e", WARN: "#9a6700", NOT_RUN: "#6e7781", INFO: "#0969da"}
        head = html.escape(self.summary()).replace("\n", "<br>")
        rows = []
        for c in self.checks:
            if c.kind == "cost" and not (self.lossless and not self.standard):
                continue
            p = "" if c.pvalue is None else _fmt_p(c.pvalue)
            detail = html.escape(c.reason) + (f"<br><b>Hint:</b> {html.escape(c.hint)}" if c.failed and c.hint else "")
            rows.append(
                f"<tr><td style='color:{colour.get(c.verdict, '#000')};font-weight:bold'>{html.escape(c.verdict)}</td>"
                f"<td>{html.escape(c.case)}</td><td>{html.escape(c.name)}</td><td>{p}</td>"
                f"<td style='text-align:left'>{detail}</td></tr>")
        border = colour[PASS] if self.passed else colour[FAIL]
        return (f"<div style='border-left:4px solid {border};padding-left:8px'><p>{head}</p>"
                "<table><thead><tr><th>verdict</th><th>case</th><th>check</th><th>p-value</th><th>detail</th>"
                "</tr></thead>"
                f"<tbody>{''.join(rows)}</tbody></table></div>")


def assert_passed(report: Report) -> Report:
    """Raise AssertionError carrying the report's text (and the report as ``.report``) unless it passed
    (``passed`` follows the report's ``require``)."""
    if not report.passed:
        err = AssertionError(str(report))
        err.report = report
        raise err
    return report


def assert_with_retry(check, fn, retry_seed: int | None = None, **kwargs) -> Report:
    """``check(fn, **kwargs)``, run once more with ``seed=retry_seed`` if it failed, then
    :func:`assert_passed` on the verdict that stands.

    A correct function then fails with probability at most ``alpha ** 2`` (the two runs are
    independent), and a wrong one passes with at most twice its single-run miss rate.
    """
    report = check(fn, **kwargs)
    if not report.passed and retry_seed is not None:
        report = check(fn, **{**kwargs, "seed": retry_seed})
    return assert_passed(report)
