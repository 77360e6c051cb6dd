"""Every stopwatch of the benchmark: one interleaved timer, one verify-cost curve, draft costs.

Shape legend: T context length, n new positions in one target forward.

Leviathan et al. (2023, Thm 3.8 and sec. 3.4) predict the speedup of speculative decoding
from alpha, the draft cost c (one draft step / one target step) and, on real hardware,
the verify cost v(n) (one target forward over n new positions / over one).  c and v are
measurements of this machine, and they are made here, all through :func:`interleaved_medians`:
each repetition visits the settings in an order rotated by one, so that drifting machine
load (other processes, frequency scaling) spreads over all of them instead of landing on
whichever ran last, and the median of each setting is reported.

* :func:`verify_cost_curve`: v(n) for a target (``LlamaTarget`` or a transformers model);
  :func:`machine_verify_cost` is the same curve for a bare ``LlamaModel``, after a fixed
  128-token context (what the adaptive drafters and the exit-layer survey use).
* :func:`relative_cost`: c of a draft model against its target.
* :func:`exit_layer_costs`: c(L) of the target's own early exit at layer L.
* the roofline of one token: :func:`matvec_read_bandwidth` (what the LM head's batch-1 product
  streams), :func:`memory_read_bandwidth` (summing a large buffer), :func:`streamed_bytes` (what
  a decode step must read) and :func:`add_roofline` (each run's fraction of the limit).
"""
from __future__ import annotations

import inspect
import statistics
import time
from collections.abc import Callable, Hashable, Sequence

import torch

from ..models import LlamaModel, LlamaTarget
from ..progress import progress_bar


def synchronize(device: torch.device | str | None) -> None:
    """Wait for queued work on a CUDA device (a no-op elsewhere), so a stopwatch reads finished work."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def rotated(keys: Sequence, r: int) -> list:
    """``keys`` starting at index r mod len(keys): round r's order, so that drift on a shared machine
    falls on every setting alike."""
    start = r % len(keys)
    return list(keys[start:]) + list(keys[:start])


def interleaved_medians(keys: Sequence[Hashable], run: Callable, *, reps: int, warmup: int = 0,
                        after: Callable | None = None, device=None, progress: str | None = None,
                        reduce: Callable = statistics.median) -> dict:
    """{key: median seconds of ``run(key)``} over ``reps`` timed rounds after ``warmup`` untimed ones.

    ``reduce``: how a key's timings become one figure (``min`` estimates a kernel's own cost on a
    shared machine, where other work only ever adds time).

    Round r visits ``keys`` starting at index r mod len(keys).  ``after(key)``, untimed, runs
    after every call (e.g. rolling a cache back to where the timed forward started).
    ``progress``: the label of a bar over the rounds (shown on a terminal only), or None.
    """
    if not isinstance(reps, int) or reps < 1:
        raise ValueError(f"reps must be an int >= 1, got {reps!r}")
    if not keys:
        raise ValueError("keys must name at least one setting to time")
    keys = list(keys)
    times: dict = {k: [] for k in keys}
    for rnd in progress_bar(range(warmup + reps), disable=progress is None, desc=progress, unit="round"):
        for k in rotated(keys, rnd):
            synchronize(device)
            t0 = time.perf_counter()
            run(k)
            synchronize(device)
            if rnd >= warmup:
                times[k].append(time.perf_counter() - t0)
            if after is not None:
                after(k)
    return {k: reduce(times[k]) for k in keys}


class _HFChain:
    """The smallest Target-like wrapper of a transformers model: append a chain, crop back."""

    def __init__(self, hf_model):
        self.model = hf_model
        self.device = next(hf_model.parameters()).device
        self.cache, self.length = None, 0
        # transformers 5 renamed `past_key_values` to `cache`
        self._cache_kwarg = "cache" if "cache" in inspect.signature(hf_model.forward).parameters else "past_key_values"

    def reset(self, batch_size: int = 1) -> None:
        from transformers import DynamicCache

        self.cache, self.length = DynamicCache(), 0

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, parents=None) -> torch.Tensor:
        if parents is not None:
            raise ValueError("a transformers model is timed on chains only (parents must be None)")
        n = tokens.shape[1]
        positions = torch.arange(self.length, self.length + n, device=self.device)[None]
        out = self.model(input_ids=tokens, position_ids=positions, use_cache=True,
                         **{self._cache_kwarg: self.cache})
        self.length += n
        return out.logits

    def rollback(self, lengths) -> None:
        keep = int(lengths[0])
        if keep < self.length:
            self.cache.crop(keep - self.length)  # negative = tokens to drop (transformers 4 and 5)
        self.length = keep


def verify_cost_curve(target, context_ids: list[int], max_positions: int = 17, reps: int = 5, *,
                      sizes: Sequence[int] | None = None, tree: bool = False, progress: bool = True) -> dict:
    """Median time of one forward over n new positions after ``context_ids``, for n = 1..max_positions.

    target: a :class:`LlamaTarget`, or a transformers causal LM (timed through its own
            ``forward`` with a ``DynamicCache``).
    sizes:  the n to time instead of 1..max_positions (must include 1, the unit of v).
    tree:   pass the n positions as a tree (a chain written as parent links), so the
            ``LlamaTarget`` builds its tree mask as a verify pass over a draft tree does.
    progress: a bar over the repetitions (on a terminal only; ``SPECBOOK_PROGRESS=0`` hides it).
    Returns {"n": [...], "seconds": [...], "v": [t(n) / t(1)], "context": T, "reps": reps}.
    """
    if not isinstance(max_positions, int) or max_positions < 1:
        raise ValueError(f"max_positions must be an int >= 1, got {max_positions!r}")
    if not isinstance(reps, int) or reps < 1:
        raise ValueError(f"reps must be an int >= 1, got {reps!r}")
    if not context_ids:
        raise ValueError("context_ids must hold at least one token")
    ns = list(range(1, max_positions + 1)) if sizes is None else [int(n) for n in sizes]
    if 1 not in ns or min(ns) < 1:
        raise ValueError(f"sizes must be positive and include 1 (the unit of v), got {sizes!r}")
    chain = target if isinstance(target, LlamaTarget) else _HFChain(target)
    if tree and not isinstance(chain, LlamaTarget):
        raise ValueError("tree=True needs a LlamaTarget (a transformers model is timed on chains)")
    device, m = chain.device, max(ns)
    ctx = torch.tensor([context_ids], dtype=torch.long, device=device)  # (1, T)
    chain.reset(1)
    chain.forward(ctx)
    base = torch.tensor([len(context_ids)])
    fresh = ctx[:, -m:].repeat(1, m)[:, :m]  # (1, m) any tokens
    parents = {n: torch.arange(-1, n - 1) if tree else None for n in ns}  # a chain as parent links
    chain.forward(fresh[:, :1])  # warm-up
    chain.rollback(base)
    med = interleaved_medians(ns, lambda n: chain.forward(fresh[:, :n], parents[n]), reps=reps,
                              after=lambda n: chain.rollback(base), device=device,
                              progress="verify-cost curve" if progress else None)
    seconds = [med[n] for n in ns]
    return {"n": ns, "seconds": seconds, "v": [s / med[1] for s in seconds], "context": len(context_ids),
            "reps": reps}


def machine_verify_cost(model: LlamaModel, max_positions: int = 9, reps: int = 3) -> list[float]:
    """[v(1), ..., v(max_positions)] for ``model`` on this machine, measured now after a 128-token context."""
    target = LlamaTarget(model, max_length=160)
    return verify_cost_curve(target, list(range(1000, 1128)), max_positions=max_positions, reps=reps)["v"]


@torch.no_grad()
def relative_cost(draft: LlamaModel, target: LlamaModel, context: int = 128, reps: int = 7) -> float:
    """c: median time of one draft step over one target step (one token on a cached context), interleaved."""
    models = {"target": target, "draft": draft}
    caches = {k: m.make_cache(1, context + 2) for k, m in models.items()}
    x = torch.zeros(1, context, dtype=torch.long, device=target.embed.weight.device)  # (1, T)
    for k, m in models.items():
        m(x, caches[k], logits_to_keep=1)
    base = {k: c.lengths.clone() for k, c in caches.items()}
    med = interleaved_medians(list(models), lambda k: models[k](x[:, :1], caches[k]).float().argmax(-1).item(),
                              reps=reps, warmup=1, after=lambda k: caches[k].rollback(base[k]))
    return med["draft"] / med["target"]


@torch.no_grad()
def exit_layer_costs(model: LlamaModel, layers: list[int], context: int = 128, reps: int = 15) -> dict[int, float]:
    """c(L): time of one early-exit step at layer L over one full target step (1 token, cached context)."""
    n = model.config.n_layers
    for L in layers:
        if not isinstance(L, int) or not 1 <= L < n:
            raise ValueError(f"exit layers must be ints in [1, {n - 1}], got {L!r}")
    cache = model.make_cache(1, context + 2)
    x = torch.zeros(1, context, dtype=torch.long, device=model.embed.weight.device)  # (1, T)
    model(x, cache, logits_to_keep=1)
    base = cache.lengths.clone()
    # .item(): wait for the device
    med = interleaved_medians([*layers, n], lambda L: model(x[:, :1], cache, exit_layer=L).float().argmax(-1).item(),
                              reps=reps, warmup=1, after=lambda L: cache.rollback(base))
    return {L: med[L] / med[n] for L in layers}


# --------------------------------------------------------------------------- the roofline of one token

def memory_read_bandwidth(megabytes: int = 256, reps: int = 7, device: torch.device | str = "cpu") -> float:
    """Bytes per second that torch reads from memory here: the median over ``reps`` of summing a
    ``megabytes`` float32 buffer (far larger than any cache), with the current thread count.

    A reduction is the easiest way to read memory (one add per element, nothing to pack or
    scale), so it is an upper bound that no product a decode step makes need reach; the
    benchmark's roofline fraction divides by :func:`matvec_read_bandwidth` instead and keeps
    this figure beside it (``roofline_fraction_sum_read``; docs/bench.md compares the two)."""
    if not isinstance(megabytes, int) or megabytes < 1:
        raise ValueError(f"megabytes must be an int >= 1, got {megabytes!r}")
    if not isinstance(reps, int) or reps < 1:
        raise ValueError(f"reps must be an int >= 1, got {reps!r}")
    buf = torch.ones(megabytes * 2**20 // 4, dtype=torch.float32, device=device)
    buf.sum()  # touch every page once
    med = interleaved_medians(["sum"], lambda _: buf.sum().item(), reps=reps, device=device)
    return buf.numel() * 4 / med["sum"]


@torch.no_grad()
def matvec_read_bandwidth(model: LlamaModel, reps: int = 7) -> float:
    """Bytes per second that decoding's own kind of product streams: the model's LM head (its largest
    matrix, V x D) times one row, in the model's dtype and on its device, through the same module a
    decode step calls; the head's weight bytes over the median time of ``reps`` products.

    This is the ceiling a decode step can reach (Williams, Waterman & Patterson, 2009, "Roofline",
    CACM 52(4): a kernel at arithmetic intensity I runs at most at min(peak, I x bandwidth); a
    batch-1 matrix-vector product has I below 1 flop/byte, so it is bound by the bandwidth it
    reaches, which is what is measured here).  One warm-up product first (it also builds a
    prepacked weight, ``models/linear.py``)."""
    if not isinstance(model, LlamaModel):
        raise ValueError(f"model must be a LlamaModel, got {type(model).__name__}")
    if not isinstance(reps, int) or reps < 1:
        raise ValueError(f"reps must be an int >= 1, got {reps!r}")
    head = model.lm_head
    w = head.weight
    x = torch.randn(1, 1, w.shape[1], dtype=w.dtype, device=w.device)  # (1, 1, D): one row, as in decoding
    med = interleaved_medians(["lm_head"], lambda _: head(x), reps=reps, warmup=1, device=w.device)
    return w.numel() * w.element_size() / med["lm_head"]


def streamed_bytes(model: LlamaModel, context: float) -> dict:
    """What one batch-1 decode step must read: every weight once (the embedding table only as the
    tied LM head; a lookup reads one row) plus the keys and values of ``context`` cached tokens.

    Returns {"weights": bytes, "kv_cache": bytes, "total": bytes}."""
    c = model.config
    weights = 0
    for name, p in model.named_parameters():
        if name.startswith("embed.") and not c.tie_embeddings:
            continue  # an untied embedding is a lookup, not a stream
        weights += p.numel() * p.element_size()
    elem = model.embed.weight.element_size()
    kv = 2 * c.n_layers * c.n_kv_heads * c.head_dim * elem * float(context)
    return {"weights": weights, "kv_cache": kv, "total": weights + kv}


def add_roofline(records: list[dict], model, bandwidth: float, sum_read_bandwidth: float | None = None) -> dict:
    """Give every record its weight-streaming limit (tokens/s) and the fraction of it reached.

    A batch-1 decode step streams every weight once plus the cached keys and values; at
    ``bandwidth`` bytes/s (:func:`matvec_read_bandwidth`: what the LM head's matrix-vector product
    streams) no plain decoder can beat bandwidth / those bytes.  The context is the run's mean
    (prompt + half the new tokens).  ``sum_read_bandwidth`` (:func:`memory_read_bandwidth`), when
    given, yields ``roofline_fraction_sum_read``: the same tokens/s over the limit at that rate."""
    if not bandwidth > 0:
        raise ValueError(f"bandwidth must be > 0 bytes/s, got {bandwidth!r}")
    if sum_read_bandwidth is not None and not sum_read_bandwidth > 0:
        raise ValueError(f"sum_read_bandwidth must be > 0 bytes/s or None, got {sum_read_bandwidth!r}")
    for r in records:
        per_token = streamed_bytes(model, r["prompt_tokens"] + r["new_tokens"] / 2)["total"]
        rate = r["new_tokens"] / r["seconds"] if r["seconds"] > 0 else None
        r["limit_tokens_per_s"] = bandwidth / per_token
        r["roofline_fraction"] = None if rate is None else rate / r["limit_tokens_per_s"]
        if sum_read_bandwidth is not None:
            r["roofline_fraction_sum_read"] = None if rate is None else rate * per_token / sum_read_bandwidth
    b = streamed_bytes(model, 0)
    info = {"bandwidth_bytes_per_s": round(bandwidth), "weights_bytes": b["weights"],
            "kv_bytes_per_cached_token": streamed_bytes(model, 1)["kv_cache"],
            "weight_streaming_limit_tokens_per_s": round(bandwidth / b["weights"], 2),
            "how": "bandwidth: the LM head's weight bytes over the median time of its product with one row "
                   "(the model's dtype, batch 1), before and after the runs (mean); bytes per token: weights "
                   "once + KV cache at the run's mean context"}
    if sum_read_bandwidth is not None:
        info["sum_read_bandwidth_bytes_per_s"] = round(sum_read_bandwidth)
        info["how_sum_read"] = ("roofline_fraction_sum_read divides by the median rate of summing a 256 MB float32 "
                                "buffer, before and after the runs (mean)")
    return info
