# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Primer — The statistics behind "this sampler is exactly lossless"
#
# Lesson 2 proved, on paper and in exact arithmetic, that the modified rejection
# sampler emits the target's distribution p. But a proof is about the rule, not about
# *your code*. Code is judged by sampling it and asking: could these tokens have come
# from p? Every lesson asks that question with four tools (lessons 1 and 2 already use
# them: read this primer first, or alongside those two), and this primer builds each one
# from scratch, checks it against `scipy`, and then against `specbook.stats`, the module
# the test suite and the grading checker use:
#
# 1. **counts** and the **chi-square statistic**, computed on raw counts (and why a
#    test on proportions can hardly ever fail);
# 2. **pooling**: why bins with an expected count below 5 are merged;
# 3. **p-values**, and why many tests at once need **Holm's correction**;
# 4. **power** and **sample size**: how many draws a test needs before a passing
#    result means something.
#
# The running case is one position with target p and draft q, sampled by the correct
# rule (`specbook.verify.verify_token`) and by a broken one that accepts with the right
# probability but, on a rejection, draws from p instead of the residual
# (`specbook.naive.resample_from_p`; lesson 2 computed its biased law exactly).
#
# Each section ends with a **predict, then run** exercise: write your prediction in place
# of the `...` in the answer cell, run it and the check cell below it (which says whether the
# prediction is right and, if not, what to look at again), then run the experiment. The
# course's own edition of the primer also has a worked *Solution* under each exercise.

# %% tags=["parameters"]
import os

FAST = os.environ.get("SPECBOOK_FAST", "0") == "1"  # the test suite sets SPECBOOK_FAST=1
N_DRAWS = 3000 if FAST else 30000  # tokens sampled from each rule
N_NULL = 20000 if FAST else 200000  # simulated samples from p for the null distribution (numpy, fast)
N_POWER = 200 if FAST else 2000  # repeated experiments for the empirical power
LEVEL = 0.01  # false-alarm rate of one test, or family-wise under Holm
SEED = 0

# %%
import time

import matplotlib.pyplot as plt
import numpy as np
import torch
from scipy import stats as sps
from tqdm.auto import tqdm

from specbook import naive, stats
from specbook.teach import exercises
from specbook.verify import verify_token

_started = time.perf_counter()
torch.set_num_threads(1)  # one position, six tokens: threads only add overhead
rng = np.random.default_rng(SEED)

# %% [markdown]
# ## The running case
#
# Six tokens. The last one is nearly impossible under p (probability 5e-4): it will
# matter when we pool. The draft q is poor, so the broken rule's bias is large.

# %%
p = torch.tensor([0.38, 0.25, 0.15, 0.12, 0.0995, 0.0005], dtype=torch.float64)  # (V,) target
q = torch.tensor([0.15, 0.35, 0.25, 0.05, 0.15, 0.05], dtype=torch.float64)  # (V,) draft
V = p.numel()
broken_law = naive.resample_from_p_law(p, q)  # (V,) exact law of the broken rule
p_np, broken_np = p.numpy(), broken_law.numpy()
print("p          ", np.round(p_np, 4))
print("broken law ", np.round(broken_np, 4))
print(f"total variation distance: {0.5 * np.abs(broken_np - p_np).sum():.3f}")


def draw(rule, n: int, seed: int) -> np.ndarray:
    """n emitted tokens from `rule(p, q, x, generator)`, each x drawn from q first."""
    g = torch.Generator().manual_seed(seed)
    drafts = torch.multinomial(q, n, replacement=True, generator=g)  # (n,)
    out = [rule(p, q, int(x), g) for x in tqdm(drafts, desc=rule.__name__, disable=FAST or n < 20000)]
    return np.asarray(out, dtype=np.int64)  # (n,)


correct_tokens = draw(verify_token, N_DRAWS, SEED)
broken_tokens = draw(naive.resample_from_p, N_DRAWS, SEED + 1)

# %% [markdown]
# ## 1. Counts and the chi-square statistic
#
# A test never looks at the tokens in order, only at how often each one came out: the
# **counts** O(z). Under the null hypothesis "the sampler emits p", the **expected**
# count is E(z) = n p(z). Pearson's statistic adds the squared misses, each scaled by
# what chance alone would make it:
#
# $$X^2 = \sum_z \frac{(O(z) - E(z))^2}{E(z)}.$$
#
# Why divide by E(z)? A count is roughly Poisson, so its variance is about E(z); each
# term is a squared standardised deviation, and for large expected counts X² follows
# a chi-square distribution with (bins − 1) degrees of freedom (one is lost because
# the counts must add up to n).

# %%
correct_counts = stats.counts_of(correct_tokens, V)  # (V,) int64
broken_counts = stats.counts_of(broken_tokens, V)  # (V,)
expected = N_DRAWS * p_np  # (V,)


def pearson(counts, expected) -> float:
    counts, expected = np.asarray(counts, dtype=float), np.asarray(expected, dtype=float)
    return float(np.sum((counts - expected) ** 2 / expected))


for name, counts in [("correct", correct_counts), ("broken", broken_counts)]:
    print(f"{name:8s} counts {counts.tolist()}  X^2 = {pearson(counts, expected):.1f}")
print(f"expected         {np.round(expected, 1).tolist()}")
for counts in (correct_counts, broken_counts):  # our five lines against scipy, on the same raw counts
    assert np.isclose(pearson(counts, expected), sps.chisquare(counts, expected).statistic, rtol=1e-12)

# %% [markdown]
# **Raw counts, never proportions.** It is tempting to compare frequencies O/n with p.
# Dividing every count by n divides X² by n, and the test loses almost all its power.
# scipy will not stop you (its own test suite does exactly this in places);
# `specbook.stats` refuses non-integer counts.

# %%
freq_stat = sps.chisquare(broken_counts / N_DRAWS, p_np)
print(f"broken rule on proportions: X^2 = {freq_stat.statistic:.4f}, p-value = {freq_stat.pvalue:.3f}  (passes!)")
try:
    stats.chisquare_gof(broken_counts / N_DRAWS, p_np)
    refused = False
except ValueError as err:
    refused = True
    print("specbook.stats refuses:", err)

# %% [markdown]
# ### Exercise 1 (predict, then run)
#
# The broken rule's X² on raw counts is in the hundreds (printed above). **Predict** X² for
# the same data if you (wrongly) divide the counts, and the expected counts, by 10 before the
# test, so that the counts look like a tenth of the sample. Give it as `x2_on_tenth`; the cell
# after the check computes it.
#
# <details><summary>Solution</summary>
#
# Every term (O − E)²/E scales like its numerator over its denominator: (1/10)² / (1/10)
# = 1/10. So X² is divided by 10, exactly, and by n when you divide by n. The bias is
# still there; the test just sees ten (or n) times fewer tokens than it was given.
# </details>

# %% tags=["solution"]
### BEGIN SOLUTION
x2_on_tenth = pearson(broken_counts, expected) / 10
### END SOLUTION

# %%
exercises.check("02b.1", x2_on_tenth, broken_counts, expected)

# %%
print(f"X^2 on counts / 10 = {pearson(broken_counts / 10, expected / 10):.1f}")

# %% [markdown]
# ## 2. Why bins with a small expected count are pooled
#
# The chi-square distribution is a large-sample approximation: each term must behave
# like the square of a normal variable. For our nearly impossible token, E = n p is
# tiny; its count is 0 most of the time and occasionally 2 or 3, and one such count
# adds (3 − E)²/E, a huge term, by luck alone. The test then raises false alarms more
# often than its stated level. The usual rule (Cochran 1954) merges bins with expected
# count below 5 until every pooled bin reaches 5. The merge is decided from the null
# law alone, never from the data, so it cannot be tuned to make a test pass.
#
# We measure it: draw many honest samples from p with numpy (fast, vectorised), test
# each at level 0.01 with and without pooling, and count the false alarms.

# %%
n_small = 300  # a small sample, so that the rare token's expected count is 0.15
null_counts = rng.multinomial(n_small, p_np, size=N_NULL)  # (R, V): honest samples from p
e_small = n_small * p_np  # (V,)
unpooled = ((null_counts - e_small) ** 2 / e_small).sum(1)  # (R,)

# The pooled bins, read off the library on one sample (they depend on e_small only).
pooled_obs, pooled_exp = stats.pool_bins(null_counts[0], p_np)
print(f"{V} bins -> {pooled_obs.size} pooled bins, expected counts {np.round(pooled_exp, 2).tolist()}")
# Here the rare token (E = 0.15) joins the smallest large bin (token 4, E = 29.9).
groups = [[0], [1], [2], [3], [4, 5]]
pooled_counts = np.stack([null_counts[:, g].sum(1) for g in groups], 1)  # (R, M)
assert np.allclose(pooled_counts[0], pooled_obs) and np.allclose([e_small[g].sum() for g in groups], pooled_exp)
pooled = ((pooled_counts - pooled_exp) ** 2 / pooled_exp).sum(1)  # (R,)

fa_unpooled = float(np.mean(sps.chi2.sf(unpooled, V - 1) <= LEVEL))
fa_pooled = float(np.mean(sps.chi2.sf(pooled, len(groups) - 1) <= LEVEL))
print(f"false-alarm rate at level {LEVEL}: unpooled {fa_unpooled:.4f}, pooled {fa_pooled:.4f}")

# %%
fig, ax = plt.subplots(figsize=(7, 3.2))
grid = np.linspace(0, 25, 300)
ax.hist(pooled, bins=np.arange(0, 26, 0.5), density=True, alpha=0.6, label=f"pooled X² ({len(groups)} bins)")
ax.plot(grid, sps.chi2.pdf(grid, len(groups) - 1), "k-", label=f"chi-square, {len(groups) - 1} dof")
ax.axvline(sps.chi2.isf(LEVEL, len(groups) - 1), color="r", ls="--", label=f"critical value at {LEVEL}")
ax.set_xlabel("X² of an honest sample of 300 tokens")
ax.set_ylabel("density")
ax.legend()
plt.show()
# The pooled statistic sits on the chi-square curve and 1% of it lies beyond the red line.
# Without pooling, the rare token's lucky counts push about twice as many honest samples past it.

# %% [markdown]
# ### Exercise 2 (predict, then run)
#
# Pooling depends on n only through the expected counts n p(z). **Predict** the smallest
# sample size at which the rare token (p = 0.0005) gets a bin of its own (`n_own_bin`), and
# how many bins the test then has (`bins_then`). The cell after the check pools samples of
# 3,000, 9,990 and 10,010 draws.
#
# <details><summary>Solution</summary>
#
# A bin stands alone once its expected count reaches 5: n × 0.0005 ≥ 5, so n ≥ 10,000.
# Below that the rare token is merged into the smallest other bin (5 bins, 4 degrees of
# freedom); from 10,000 draws on the test has all 6 bins and 5 degrees of freedom. The
# grading checker's cases are chosen so that the bins that matter for a bug are large.
# </details>

# %% tags=["solution"]
### BEGIN SOLUTION
n_own_bin = int(np.ceil(5 / 0.0005))
bins_then = V
### END SOLUTION

# %%
exercises.check("02b.2", n_own_bin, bins_then, p_np)

# %%
bins_at = {}
for n_try in (3000, 9990, 10010):
    bins_at[n_try] = stats.pool_bins(rng.multinomial(n_try, p_np), p_np)[0].size
    print(f"n = {n_try:6d}: {bins_at[n_try]} pooled bins")

# %% [markdown]
# ## 3. p-values, and many tests at once
#
# The **p-value** is the chance, if the sampler really emits p, of a statistic at least
# as large as the one observed: P(χ²_{M−1} ≥ X²). A test at **level** ℓ rejects when the
# p-value is ≤ ℓ, so ℓ is the false-alarm rate we accept: a correct sampler is flagged
# with probability ℓ. When the null is true, the p-value is uniform on [0, 1]. (Statistics
# texts, scipy and `specbook.stats` call the level `alpha`; this course keeps α for the
# acceptance rate, see `docs/glossary.md`.)
#
# The library's `chisquare_gof` pools, computes X² and the p-value in one call; with no
# bin to pool, it agrees with scipy to the last digit:

# %%
big = 30000
honest = rng.multinomial(big, p_np)  # (V,) all expected counts >= 15: nothing to pool
assert np.isclose(stats.chisquare_gof(honest, p_np).pvalue, sps.chisquare(honest, big * p_np).pvalue, rtol=1e-10)
correct_gof = stats.chisquare_gof(correct_counts, p_np)
broken_gof = stats.chisquare_gof(broken_counts, p_np)
print(f"correct rule: X^2 = {correct_gof.statistic:.2f} on {correct_gof.dof} dof, p = {correct_gof.pvalue:.3f}")
print(f"broken rule:  X^2 = {broken_gof.statistic:.1f} on {broken_gof.dof} dof, p = {broken_gof.pvalue:.2g}")
null_p = sps.chi2.sf(pooled, len(groups) - 1)  # (R,) p-values of honest samples: uniform

# %% [markdown]
# **Many tests.** A lesson or the grading checker runs many tests: one per position, per
# case, per quantity. Each honest test raises a false alarm with probability ℓ, so with
# k independent tests the chance of at least one false alarm is 1 − (1 − ℓ)^k, which
# grows quickly. **Holm's step-down procedure** (Holm 1979) keeps the *family-wise*
# false-alarm rate at ℓ for any dependence between the tests: sort the p-values,
# compare the smallest with ℓ/k, the next with ℓ/(k − 1), and so on, and stop at the
# first that is not small enough. It is never weaker than Bonferroni (every p ≤ ℓ/k).

# %%
def holm_by_hand(pvalues, level):
    order = np.argsort(pvalues, kind="stable")
    rejected = np.zeros(len(pvalues), dtype=bool)
    for rank, i in enumerate(order):
        if pvalues[i] > level / (len(pvalues) - rank):
            break
        rejected[i] = True
    return rejected.tolist()


for trial in range(200):  # the library's holm against ours, on random families with some tiny p-values
    ps = rng.uniform(size=rng.integers(1, 12)) ** rng.choice([1, 6])
    assert stats.holm(ps, LEVEL) == holm_by_hand(ps, LEVEL)

K_TESTS = 20
families = null_p[: (len(null_p) // K_TESTS) * K_TESTS].reshape(-1, K_TESTS)  # (F, 20) honest p-values
fwer_raw = float(np.mean((families <= LEVEL).any(1)))
fwer_holm = float(np.mean([any(stats.holm(f, LEVEL)) for f in families]))
print(f"{K_TESTS} honest tests at {LEVEL} each: some false alarm in {fwer_raw:.3f} of families "
      f"(theory {1 - (1 - LEVEL) ** K_TESTS:.3f}); with Holm: {fwer_holm:.4f}")
family = stats.run_family({"correct rule": correct_gof.pvalue, "broken rule": broken_gof.pvalue}, LEVEL)
print(family)

# %% [markdown]
# ### Exercise 3 (predict, then run)
#
# Suppose a checker runs 30 tests on one submission. **Predict** the chance that
# a *correct* submission fails at least one of them if each is run at level 0.01 with no
# correction (`p_alarm_uncorrected`), and the most it can be with Holm at family-wise
# level 0.01 (`p_alarm_holm`).
#
# <details><summary>Solution</summary>
#
# Without correction, 1 − 0.99^30 ≈ 0.26: one honest student in four would be told
# their correct code is wrong. With Holm at family-wise level 0.01, at most 0.01 (the
# checker in fact runs at 0.001). The simulation above shows the same thing for 20
# tests: about 17% of honest families raise an alarm without correction, under 1% with Holm.
# </details>

# %% tags=["solution"]
### BEGIN SOLUTION
p_alarm_uncorrected = 1 - 0.99**30
p_alarm_holm = 0.01
### END SOLUTION

# %%
exercises.check("02b.3", p_alarm_uncorrected, p_alarm_holm)

# %%
print(f"30 tests at 0.01, without correction: {1 - (1 - LEVEL) ** 30:.3f}; the simulated families of {K_TESTS}: "
      f"{fwer_raw:.3f} without correction, {fwer_holm:.4f} with Holm")

# %% [markdown]
# ## 4. Power and sample size
#
# Passing a test is only evidence if the test could have failed. The **power** of a
# test against a given bug is the chance that it rejects when the bug is present. For
# chi-square, X² under an alternative law a follows approximately a *noncentral*
# chi-square with noncentrality λ = n Σ (a(z) − p(z))² / p(z) (Cohen 1988): it grows
# linearly with n and quadratically with the size of the deviation. So any fixed bug is
# caught once n is large enough, and a bug half as large needs about four times as many
# draws for the same power, as long as the pooling, and with it the degrees of freedom
# and the critical value, stays the same (exercise 4 meets a case where it does not).
#
# `stats.chisquare_power` computes it; we check it against scipy's noncentral chi-square
# by hand, then against simulation.

# %%
n_check = 200
obs_groups = [[0], [1], [2], [3], [4, 5]]  # the test's own pooling at n = 200 (token 5 has E = 0.1)
pn = np.array([p_np[g].sum() for g in obs_groups])
an = np.array([broken_np[g].sum() for g in obs_groups])
lam = n_check * np.sum((an - pn) ** 2 / pn)
power_by_hand = sps.ncx2.sf(sps.chi2.isf(LEVEL, len(pn) - 1), len(pn) - 1, lam)
power_lib = stats.chisquare_power(p_np, broken_np, n_check, alpha=LEVEL)
assert np.isclose(power_lib, power_by_hand, rtol=1e-9)

alt_counts = rng.multinomial(n_check, broken_np, size=N_POWER)  # (N_POWER, V): the broken rule's counts
power_sim = float(np.mean([stats.chisquare_gof(c, p_np).pvalue <= LEVEL for c in alt_counts]))
print(f"n = {n_check}: predicted power {power_lib:.3f}, simulated {power_sim:.3f} ({N_POWER} experiments)")

# %% [markdown]
# The broken rule above is a gross bug. With a **good draft** the same bug is much
# harder to see: the rule only misbehaves after a rejection, and rejections become
# rare. Below, the draft moves towards p; for each we ask how many draws a test needs
# to catch the bug with power 0.99.

# %%
matches = [0.0, 0.5, 0.8, 0.9, 0.95]  # q = match * p + (1 - match) * q_poor
needed = {}
for m in matches:
    q_m = m * p + (1 - m) * q
    law_m = naive.resample_from_p_law(p, q_m).numpy()
    needed[m] = stats.sample_size_for_power(p_np, law_m, alpha=LEVEL, power=0.99)
    print(f"draft match {m:.2f}: TV = {0.5 * np.abs(law_m - p_np).sum():.4f}, "
          f"draws needed for power 0.99: {needed[m]:,}")

ns = np.unique(np.geomspace(20, 5000, 40).astype(int))
fig, ax = plt.subplots(figsize=(7, 3.2))
for m in (0.0, 0.5, 0.8):
    law_m = naive.resample_from_p_law(p, m * p + (1 - m) * q).numpy()
    ax.semilogx(ns, [stats.chisquare_power(p_np, law_m, int(n), alpha=LEVEL) for n in ns], label=f"match {m}")
ax.axhline(0.99, color="gray", ls=":")
ax.set_xlabel("draws n")
ax.set_ylabel(f"power at level {LEVEL}")
ax.set_title("resample-from-p: the better the draft, the more draws to see the bug")
ax.legend()
plt.show()

# %% [markdown]
# ### Exercise 4 (predict, then run)
#
# At match 0.9 (q = 0.9 p + 0.1 q_poor), **predict** how many times more draws than at
# match 0 a test needs to reach power 0.99 (`draws_ratio`), before looking at the ratio of the
# table's numbers. Hint: how does the rejection mass Σ max(0, p − q) change with the match,
# and how does λ depend on it?
#
# <details><summary>Solution</summary>
#
# The law's deviation a − p is proportional to the rejection mass Σ max(0, p − q),
# which at match m is (1 − m) times that of the poor draft. λ/n is quadratic in the
# deviation, so it shrinks by (1 − m)² = 1/100 at m = 0.9, and the same λ takes about
# 100 times the draws. About, not exactly: the table asks for 354 draws at match 0 and
# over 37,000 at match 0.9, and exercise 2 showed that from 10,000 draws on the rare
# token has a bin of its own. So the test at match 0.9 has 6 bins and 5 degrees of
# freedom where the one at match 0 had 5 and 4; its critical value at level 0.01 rises
# from 13.3 to 15.1, and power 0.99 needs λ ≈ 33.5 instead of 31.8, 5% more. (Splitting
# the bin adds nothing to λ here: this bug's deviation is proportional to p on both
# tokens of the pooled bin.) Hence a ratio of about 105. This is why the grading
# checker's cases use poor drafts and probabilities far from each other: a lossless
# test is only as strong as the bugs it is given a chance to see.
# </details>

# %% tags=["solution"]
### BEGIN SOLUTION
draws_ratio = (1 / (1 - 0.9)) ** 2  # about 100; the extra degree of freedom adds about 5%
### END SOLUTION

# %%
exercises.check("02b.4", draws_ratio, p, q)

# %%
from scipy import optimize


def lambda_for_power(dof: int, level: float = LEVEL, power: float = 0.99) -> float:
    """The noncentrality λ at which a chi-square test with `dof` degrees of freedom has this power."""
    critical = sps.chi2.isf(level, dof)
    return optimize.brentq(lambda lam: sps.ncx2.sf(critical, dof, lam) - power, 1e-9, 1e4)


dof_at = {m: stats.pool_bins(rng.multinomial(needed[m], p_np), p_np)[0].size - 1 for m in (0.0, 0.9)}
dof_factor = lambda_for_power(dof_at[0.9]) / lambda_for_power(dof_at[0.0])
quadratic_ratio = 1 / (1 - 0.9) ** 2  # λ/n is quadratic in the deviation, which scales with 1 - match
print(f"ratio of draws needed, match 0.9 vs 0: {needed[0.9] / needed[0.0]:.1f}")
print(f"degrees of freedom: {dof_at[0.0]} at match 0 ({needed[0.0]:,} draws), {dof_at[0.9]} at match 0.9 "
      f"({needed[0.9]:,} draws); λ needed for power 0.99 grows by {dof_factor:.3f}; predicted ratio "
      f"{quadratic_ratio * dof_factor:.1f}, table {needed[0.9] / needed[0.0]:.1f}")

# %% [markdown]
# ## Concept check
#
# Five short questions on the whole primer. Give numbers as numbers and a choice as its
# letter in quotes (`"b"`), then run the check cell.
#
# 1. Why must a chi-square test get raw counts, not proportions? (`c1`) (a) scipy refuses
#    proportions; (b) dividing every count by n divides X² by n, so the test almost never
#    rejects; (c) proportions change the degrees of freedom.
# 2. Four tests give p-values 0.001, 0.004, 0.02 and 0.3. How many does Holm's procedure
#    reject at family-wise level 0.01? (`c2`)
# 3. A bug whose deviation a − p is half as large: about how many times as many draws does
#    a test need for the same power, if the pooling stays the same? (`c3`)
# 4. A test at level 0.01 passes your sampler; its power against the bug you fear is 0.2 at
#    this sample size. What may you conclude? (`c4`) (a) the sampler has no such bug, with
#    99% confidence; (b) little: the test misses that bug four times in five at this size,
#    so draw more; (c) the sampler has the bug with probability 0.2.
# 5. Which bins are pooled? (`c5`) (a) those with fewer than 5 observed draws; (b) those
#    whose expected count under the null law is below 5, decided before looking at the data;
#    (c) whichever make the p-value largest.
#
# <details><summary>Answers</summary>
#
# 1. (b). 2. One: 0.001 ≤ 0.01/4, but 0.004 > 0.01/3, and Holm stops there. 3. About 4: λ is
# quadratic in the deviation. 4. (b). 5. (b): the merge cannot be tuned to the data.
#
# </details>

# %% tags=["solution"]
### BEGIN SOLUTION
c1, c2, c3, c4, c5 = "b", 1, 4, "b", "b"
### END SOLUTION

# %%
for key, answer in {"02b.c1": c1, "02b.c2": c2, "02b.c3": c3, "02b.c4": c4, "02b.c5": c5}.items():
    exercises.check(key, answer)

# %% [markdown]
# ## Checks
#
# What this primer taught, as assertions (they also run in the test suite, in fast mode):

# %%
# 1. X^2 is computed on raw counts and matches scipy; proportions shrink it by n and let the broken rule pass.
assert np.isclose(broken_gof.statistic, sps.chisquare(*stats.pool_bins(broken_counts, p_np)).statistic, rtol=1e-12)
assert freq_stat.pvalue > 0.5 and refused
# 2. Pooling: the unpooled test raises too many false alarms; the pooled one keeps its level.
se = np.sqrt(LEVEL * (1 - LEVEL) / N_NULL)
assert fa_unpooled > LEVEL + 4 * se, fa_unpooled
assert abs(fa_pooled - LEVEL) < 4 * se, fa_pooled
# 3. p-values: honest p-values are uniform; the correct rule passes, the broken rule is rejected, under Holm.
assert abs(np.mean(null_p <= 0.1) - 0.1) < 4 * np.sqrt(0.09 / len(null_p))
assert family.rejected == ("broken rule",), family
assert fwer_raw > 0.1 and fwer_holm <= LEVEL + 4 * np.sqrt(LEVEL / len(families))
# 4. Power: the noncentral approximation matches scipy by hand and simulation; better drafts need more draws.
assert abs(power_sim - power_lib) < 4 * np.sqrt(power_lib * (1 - power_lib) / N_POWER) + 0.03
assert all(needed[a] < needed[b] for a, b in zip(matches, matches[1:]))
# 5. The exercises' experiments: dividing counts by n divides X^2 by n; the rare token stands alone from 10,000
#    draws on; 20 honest tests alarm as often as independence predicts; the draws ratio is (1 - match)^-2 times
#    the degrees-of-freedom factor.
assert np.isclose(freq_stat.statistic, pearson(broken_counts, expected) / N_DRAWS)
assert bins_at == {3000: V - 1, 9990: V - 1, 10010: V}
assert abs(fwer_raw - (1 - (1 - fa_pooled) ** K_TESTS)) < 4 * np.sqrt(0.2 * 0.8 / len(families))
assert dof_at == {0.0: V - 2, 0.9: V - 1}  # the rare token pooled at match 0, on its own bin at match 0.9
assert abs((needed[0.9] / needed[0.0]) / (quadratic_ratio * dof_factor) - 1) < 0.01
# 6. Your exercises and concept check, as graded above.
graded = exercises.results("02b")
print(f"exercises and concept check: {sum(r.passed for r in graded)} of {len(graded)} right")
### BEGIN SOLUTION
assert len(graded) == 9 and all(r.passed for r in graded), [str(r) for r in graded]
### END SOLUTION
print(f"all primer checks passed in {time.perf_counter() - _started:.1f} s (fast mode: {FAST})")
