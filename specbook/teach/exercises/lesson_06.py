"""Graders of lesson 6 (batching versus speculation): the ridge batch, the crossover, the KV cache.

Every expected value is computed here from :mod:`specbook.roofline` and :mod:`specbook.theory`,
with the settings the lesson's questions state (the 7B example, bfloat16, gamma 4, alpha 0.8,
c 0.05); none is written into the notebook.
"""
from __future__ import annotations

from ... import roofline, theory
from . import Wrong, grader, register
from ._answers import near, number, pick, whole

GAMMA, ALPHA, C, DTYPE, DTYPE_BYTES = 4, 0.8, 0.05, "bfloat16", 2
KV_CONTEXT = 512  # cached tokens per row in exercise 06.4
GPUS = ("A100 SXM", "L4", "H200 SXM")
SEARCH = range(1, 4097)  # batch sizes searched for a crossover


def _one_of(value, options: tuple, name: str) -> str:
    if value not in options:
        raise Wrong(f"{name} must be one of {options}, got {value!r}")
    return value


def kv_crossovers(kv_reads: str) -> dict[str, int | None]:
    """Exercise 06.4's truth: the crossover per GPU for the 7B at ``KV_CONTEXT`` cached tokens."""
    return {hw: roofline.serving_crossover(hw, DTYPE, GAMMA, ALPHA, roofline.MODELS["7B"], SEARCH, draft=C,
                                           context=KV_CONTEXT, kv_reads=kv_reads, attention_flops=False)
            for hw in GPUS}


@grader("06.1")
def _l4_ridge_batches(plain_batch, verify_batch):
    """The first batch at which a plain step and a gamma = 4 verify step reach the L4's bfloat16 ridge."""
    got = (whole(plain_batch, "l4_plain"), whole(verify_batch, "l4_spec"))
    want = (roofline.ridge_batch("L4", DTYPE, 0, DTYPE_BYTES), roofline.ridge_batch("L4", DTYPE, GAMMA, DTYPE_BYTES))
    if got == want:
        return
    if got == want[::-1]:
        raise Wrong("the two numbers are swapped: a verify step has 5 positions per row, so it gets there first")
    if any(g == w - 1 for g, w in zip(got, want)):
        raise Wrong("one short: the ridge falls between two batch sizes, and the first batch at or over it is the "
                    "next whole number up")
    raise Wrong("in bfloat16 a step's intensity is its number of positions, B (γ + 1); the ridge is peak FLOP/s "
                "over bandwidth: find the smallest B whose positions reach it, once with γ = 0 and once with γ = 4")


@grader("06.2")
def _a100_ridge_and_crossover(ridge_batch, crossover):
    """The A100's ridge batch and crossover for the 7B example (plain roofline)."""
    rb, cross = whole(ridge_batch, "a100_ridge_batch"), whole(crossover, "a100_cross")
    want_rb = roofline.ridge_batch("A100 SXM", DTYPE, GAMMA, DTYPE_BYTES)
    want_cross = roofline.predicted_crossover("A100 SXM", DTYPE, 7e9, DTYPE_BYTES, ALPHA, GAMMA, C, SEARCH)
    if rb != want_rb:
        raise Wrong(f"a100_ridge_batch = {rb}: the verify step's intensity is 5B in bfloat16; find the first B at or "
                    "over the A100's ridge (312 TFLOP/s over 2.039 TB/s)")
    if cross == rb:
        raise Wrong("a100_cross is the ridge batch: that is where extra positions start to cost time, not where "
                    "speculation starts to lose; it loses once v_B(5) > E(0.8, 4) − 4c")
    if cross == want_cross - 1:
        raise Wrong(f"a100_cross = {cross} is one short: at that batch speculation is still (just) faster; the "
                    "crossover is the first batch at which it is slower")
    if cross != want_cross:
        raise Wrong(f"a100_cross = {cross}: above the ridge v_B(5) = 5B / ridge while the plain step is still "
                    "memory-bound; solve 5B / ridge > E(0.8, 4) − 4 × 0.05 for the smallest whole B")


@grader("06.3")
def _wasted_share(share):
    """The expected share of computed verify positions thrown away at alpha 0.6, gamma 4."""
    got = number(share, "waste6")
    e = float(theory.expected_tokens(0.6, GAMMA))
    want = (GAMMA - (e - 1)) / (GAMMA + 1)
    if abs(got - want) <= 5e-4:
        return
    if abs(got - (GAMMA - (e - 1)) / GAMMA) <= 5e-4:
        raise Wrong("that is the share of the drafts; the verify pass computes γ + 1 positions per row, the "
                    "drafts and the one after them, so divide by γ + 1")
    if got > 1 or got < 0:
        raise Wrong(f"a share lies between 0 and 1, got {got}")
    raise Wrong("of the γ + 1 positions a row verifies it keeps E(α, γ): the accepted drafts and one corrected "
                "or bonus token; the rest are thrown away")


@grader("06.4")
def _kv_crossovers(once, per_position):
    """The crossover on A100, L4 and H200 with KV bytes, for both attention kernels."""
    for name, answer in (("crossover_once", once), ("crossover_per_position", per_position)):
        if not isinstance(answer, dict) or set(answer) != set(GPUS):
            raise Wrong(f"{name} must be a dict with the keys {GPUS}, got {answer!r}")
        for hw, value in answer.items():
            if value is not None:
                whole(value, f"{name}[{hw!r}]")
    for name, answer, reads in (("crossover_once", once, "once"), ("crossover_per_position", per_position,
                                                                   "per_position")):
        want = kv_crossovers(reads)
        for hw in GPUS:
            got, right = answer[hw], want[hw]
            if got == right:
                continue
            if right is None:
                raise Wrong(f"{name}[{hw!r}] = {got}: with these sizes speculation never falls below plain decoding "
                            "on this GPU; compare the verify step's time with the plain step's as B grows without "
                            "bound (both compute-bound in the weights, the KV reads growing with B)")
            if got is None:
                raise Wrong(f"{name}[{hw!r}] is None, but speculation does fall below plain decoding on this GPU "
                            "within 4096 rows")
            if abs(got - right) == 1:
                raise Wrong(f"{name}[{hw!r}] = {got} is off by one: the crossover is the first batch at which "
                            "speculation is strictly slower")
            if reads == "once" and got < roofline.predicted_crossover(hw, DTYPE, 7e9, DTYPE_BYTES, ALPHA, GAMMA, C,
                                                                      SEARCH):
                raise Wrong(f"{name}[{hw!r}] = {got} is before the weights-only crossover: read once per row, the KV "
                            "cache adds the same time to the plain and the verify step, which brings v_B closer to "
                            "1, not further")
            raise Wrong(f"{name}[{hw!r}] = {got}: a step is two kernels, weights max(2PBn / peak, 2P / bandwidth) "
                        "plus attention, whose time is the KV bytes it reads over the bandwidth: B × kv per row "
                        "once, or B × kv × n with one read per position")


def _at_the_ridge() -> str:
    """c1: at the ridge batch of the H100 example, is speculation still faster (c) or already slower (a)?"""
    rb = roofline.ridge_batch("H100 SXM", DTYPE, GAMMA, DTYPE_BYTES)
    at_ridge = roofline.predict("H100 SXM", DTYPE, rb, GAMMA, ALPHA, C, 7e9, DTYPE_BYTES).speedup
    return "c" if at_ridge > 1 else "a"


@grader("06.c2")
def _context_moves_the_crossover(once, per_position):
    """Which way a longer context moves the crossover, for each attention kernel."""
    options = ("smaller batch", "larger batch", "unchanged")
    _one_of(once, options, "c2_once")
    _one_of(per_position, options, "c2_per_position")
    model, sizes = roofline.MODELS["7B"], range(1, 8193)

    def direction(reads):
        short = roofline.serving_crossover("H100 SXM", DTYPE, GAMMA, ALPHA, model, sizes, draft=C, context=128,
                                           kv_reads=reads)
        long = roofline.serving_crossover("H100 SXM", DTYPE, GAMMA, ALPHA, model, sizes, draft=C, context=256,
                                          kv_reads=reads)
        return "unchanged" if short == long else ("larger batch" if long is None or long > short else "smaller batch")

    if once != direction("once"):
        raise Wrong("c2_once: read once per row, the KV cache adds the same bytes to the plain and the verify step; "
                    "does that make v_B(γ + 1) larger or smaller at a given B?")
    if per_position != direction("per_position"):
        raise Wrong("c2_per_position: read once per position, the verify step reads the cache γ + 1 times and the "
                    "plain step once; what does that do to v_B(γ + 1)?")


@grader("06.c4")
def _this_machines_ridge_batch(batch, hardware):
    """The first batch at which a gamma = 4 float32 verify step reaches this machine's measured ridge."""
    got = whole(batch, "c4")
    if not isinstance(hardware, roofline.Hardware):
        raise ValueError(f"hardware must be the lesson's measured Hardware, got {hardware!r}")
    want = roofline.ridge_batch(hardware, "float32", GAMMA, roofline.DTYPE_BYTES["float32"])
    if got != want:
        raise Wrong(f"c4 = {got}: in float32 a verify step's intensity is 2B(γ + 1) / 4 FLOP per byte; use the "
                    f"float32 ridge this machine measured above ({roofline.ridge(hardware, 'float32'):.2f})")


def _min_of_rows(batch: int = 8) -> float:
    """c3: rows that must advance together, the expected minimum of ``batch`` rows' tokens per round."""
    return sum(ALPHA ** ((k - 1) * batch) for k in range(1, GAMMA + 2))  # P(min >= k) = (alpha^(k-1))^B


def _kernel_efficiency() -> str:
    """c5: what reaching 60% of peak FLOP/s and 90% of bandwidth does to the ridge and the crossover."""
    full = roofline.serving_crossover("H100 SXM", DTYPE, GAMMA, ALPHA, roofline.MODELS["7B"], SEARCH, draft=C)
    partial = roofline.serving_crossover("H100 SXM", DTYPE, GAMMA, ALPHA, roofline.MODELS["7B"], SEARCH, draft=C,
                                         compute_efficiency=0.6, bandwidth_efficiency=0.9)
    lower_ridge = 0.6 / 0.9 < 1
    return {(True, True): "b", (True, False): "a", (False, True): "d", (False, False): "c"}[
        (lower_ridge, partial is not None and partial < full)]


register({
    "06.c1": pick(_at_the_ridge, **dict.fromkeys("abc", "compute the speedup at the ridge batch: E(0.8, 4) / (4c + "
                                                         "v_B(5)) with v_B(5) just at 1")),
    "06.c3": near(_min_of_rows(), "c3", tol=5e-3, traps={
        float(theory.expected_tokens(ALPHA, GAMMA)): "that is one row's mean; the batch advances by the smallest of "
                                                      "8 rows' counts, which is lower",
    }, hint="the minimum is at least k when every row keeps at least k tokens: P(min ≥ k) = P(one row ≥ k)^8, "
            "and a row keeps at least k tokens when its first k − 1 drafts are accepted; sum over k = 1 .. γ + 1"),
    "06.c5": pick(_kernel_efficiency, **dict.fromkeys("abcd", (
        "the attained ridge is (0.6 × peak) / (0.9 × bandwidth); is that above or below the datasheet's? And a "
        "lower ridge is reached by fewer positions"))),
})
