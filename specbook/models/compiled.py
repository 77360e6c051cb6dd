"""Passes through ``torch.compile``: every pass after the prefill over a cache of fixed length.

Shape legend: L layers, T cache slots (fixed), V vocab, D model width, H query heads,
Hkv key/value heads, G = H // Hkv, Dh head width, W tokens in a pass (fixed per graph), S cache
slots attention reads (T at most; dynamic).

The readable model (:mod:`specbook.models.llama`) runs a decode step as some 400 PyTorch
operations, each dispatched from Python, and multiplies through oneDNN's prepacked kernel.
Compiled, the same step is one generated C++ function: the small operations are fused, the
Python is gone, and with ``max_autotune`` inductor times its own C++ matrix-product templates
against oneDNN's for every weight shape and keeps the faster (on a 2-core AMD EPYC without
AMX, its template streamed the LM head in 1.06 ms against oneDNN's 1.84 ms).  It times each
weight alone, held in the CPU's caches; ``products="timed"`` (the benchmark's) times whole passes
instead, on its choice and on the library's kernels alone, and keeps the faster per width.  Compiling
wants shapes fixed, so the cache is one buffer of T slots, a pass attends with a mask that
hides the slots not yet written, and a pass of N tokens runs in a graph of fixed width W >= N:
each width compiles once (about a minute, then cached by torch for this process).
Attention reads only the cache's first S slots, S the slots written so far rounded up to a
multiple of :data:`SPAN_BLOCK`; S is the one size left dynamic in the graph, so a width still
compiles once.  A pass of a few tokens attends in loops inductor writes itself (:func:`loop_attention`);
a wider one with float32 weights by two matrix products compiled with the rest of the pass, else by
torch's fused kernel.  Measured side by side on a 2-core Xeon with AMX
(``scripts/compiled_overheads.py``), one float32 token after 60 cached tokens of a 600-slot
cache: 28.6 ms over every slot, 26.1 ms over the span, 24.4 ms with the products as well;
calling the graph from inductor's generated C++ wrapper instead of Python changed nothing
measurable, so it stays off (docs/bench.md, "The time around the products").

:class:`CompiledTarget` is the same Target as :class:`~specbook.models.target.LlamaTarget`
(batch 1), so plain decoding and every drafter run through the one decoding loop
(:mod:`specbook.decode`) unchanged.  The eager model stays the reference: it runs the
prefill, and ``tests/models/test_compiled.py`` checks the compiled passes' tokens against
its own.  In bfloat16 the two multiply with different kernels, so their logits differ by a
rounding step and a greedy token can differ at a near tie (docs/bench.md, "Compiled
decoding").
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import torch
import torch._inductor.config as inductor_config
import torch.nn.functional as F
from torch import nn

from ..progress import progress_bar
from .cache import KVCache
from .llama import LlamaModel, matmul_attention, rotate_half
from .target import LlamaTarget

SPAN_BLOCK = 64  # attention reads the cache in spans of this many slots (rounded up): never 1, which torch specialises
# The product kernels a graph may run (inductor settings for each): "autotuned", inductor's C++ templates timed
# against the library's kernels (MKL, oneDNN) on each weight shape alone, the faster kept; "library", the
# library's kernels only.  Timed alone a weight sits in the CPU's caches; in a pass it streams from memory.
KERNELS = {"autotuned": {}, "library": {"max_autotune_gemm_backends": "ATEN"}}
PRODUCTS = ("autotuned", "library", "timed")  # CompiledTarget(products=...): "timed" picks per width, in warm_up
TIMING_CONTEXT, TIMING_ROUNDS, TIMING_PASSES = 128, 3, 3  # warm_up's timing: cached tokens, rounds, passes a round


ATTENTION = ("auto", "fused", "products", "loops")  # CompiledTarget(attention=...): see attention_form
LOOPS_MAX_WIDTH = 5  # "auto": loop_attention in passes of up to this many tokens, a library kernel above


def attention_form(attention: str, width: int, dtype: torch.dtype) -> str:
    """The attention a pass of ``width`` tokens runs: ``attention`` itself, or for "auto" :func:`loop_attention`
    up to :data:`LOOPS_MAX_WIDTH` tokens (a decode step, a short chain) and a library kernel above: two matrix
    products for float32 weights, torch's fused kernel otherwise.  Measured on a 2-core AMD EPYC (avx512_bf16),
    bfloat16, the library's product kernels, ms per pass, fused / products / loops: 1 token after 128 cached
    10.45 / 11.26 / 9.75, after 400 10.99 / 12.06 / 10.18; 5 tokens after 128 12.46 / 12.84 / 11.81; 9 tokens
    after 300 15.53 / 15.72 / 16.98; 17 tokens after 400 21.91 / 20.71 / 24.64 (the loops do the whole M x S x Dh
    work in plain vector code, which a wide pass makes large)."""
    if attention != "auto":
        return attention
    if width <= LOOPS_MAX_WIDTH:
        return "loops"
    return "products" if dtype == torch.float32 else "fused"


def loop_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(Dh)) v written as elementwise products and sums, in float32: q (1, Hkv, M, Dh), k and
    v (1, Hkv, S, Dh), mask (1, 1, M, S) bool -> (1, Hkv, M, Dh) in q's dtype.

    Run eagerly this would build a (1, Hkv, M, S, Dh) tensor; compiled, inductor fuses each product into the sum
    that reads it and writes the whole attention as a few loops of its own C++, inside the pass.  A decode step's
    attention is small (a few rows against a few hundred keys), so what a library kernel costs there is mostly its
    call: on a 2-core AMD EPYC (avx512_bf16), against torch's fused kernel, these loops took a bfloat16 step after
    128 cached tokens from 15.02 to 14.31 ms with inductor's products (``scripts/compiled_overheads.py``) and from
    10.45 to 9.75 ms with the library's (docs/bench.md, "Back on the avx512_bf16 AMD EPYC")."""
    scores = (q.float()[:, :, :, None, :] * k.float()[:, :, None, :, :]).sum(-1) * (q.shape[-1] ** -0.5)  # (1,Hkv,M,S)
    weights = scores.masked_fill(~mask, float("-inf")).softmax(-1)
    return (weights[..., None] * v.float()[:, :, None]).sum(-2).to(q.dtype)


class CompiledPass(nn.Module):
    """W tokens through every layer, their keys and values written at ``slots`` of the cache.

    tokens (1, W) long, positions (1, W) long (rotary positions), slots (W,) long (cache slots
    written), k_cache and v_cache: L tensors (1, Hkv, S, Dh), one per layer, the cache's first S
    slots (written in place), visible (1, 1, W, S) bool (True = token w may attend to that slot;
    its own slot included)
    -> (logits (1, W, V) float32, the last block's output (1, W, D) before the final norm, the
    residual stream after each of ``layers`` blocks (1, W, D), a tuple).
    A decode step is W = 1; a verify pass of a chain or a tree is W = its width (padded)."""

    def __init__(self, model: LlamaModel, max_length: int, attention: str = "auto", layers: Sequence[int] = ()):
        super().__init__()
        self.model, self.layers = model, tuple(layers)
        self.attention = attention  # one of ATTENTION; "auto" is resolved per width (attention_form)
        w = model.embed.weight
        self.cos, self.sin = model._rope_tables(max_length, w.device, w.dtype)  # (P, Dh) each

    def forward(self, tokens, positions, slots, k_cache, v_cache, visible, kernels: str = "autotuned"):
        """``kernels``: the product kernels this graph is compiled with (a key of :data:`KERNELS`, the
        setting itself patched in by the caller); the arithmetic ignores it, but torch.compile guards on
        its value once read (here), so each kind gets a graph of its own (else the second reused the first's)."""
        if kernels not in KERNELS:
            raise ValueError(f"kernels must be one of {', '.join(map(repr, KERNELS))}, got {kernels!r}")
        m, c = self.model, self.model.config
        H, Hkv, Dh = c.n_heads, c.n_kv_heads, c.head_dim
        G, W = H // Hkv, tokens.shape[1]
        form = attention_form(self.attention, W, m.embed.weight.dtype)  # W is fixed per graph: one form per width
        cos, sin = self.cos[positions][:, :, None], self.sin[positions][:, :, None]  # (1, W, 1, Dh)
        mask = visible.expand(1, G, W, visible.shape[-1]).reshape(1, 1, G * W, -1)  # row g*W + w: head g, token w
        x = m.embed(tokens)  # (1, W, D)
        states = {0: x} if 0 in self.layers else {}  # block count -> residual stream (drafters that read them)
        for i, block in enumerate(m.layers):
            attn, mlp = block.attn, block.mlp
            qkv = F.linear(block.attn_norm(x), attn.wqkv.weight, attn.wqkv.bias)  # (1, W, (H + 2 Hkv) Dh)
            qk = qkv[..., :(H + Hkv) * Dh].view(1, W, H + Hkv, Dh)
            qk = qk * cos + rotate_half(qk) * sin
            q = qk[:, :, :H].transpose(1, 2).reshape(1, Hkv, G * W, Dh)  # the G query heads of a key/value head as rows
            k = qk[:, :, H:].transpose(1, 2)  # (1, Hkv, W, Dh)
            v = qkv[..., (H + Hkv) * Dh:].view(1, W, Hkv, Dh).transpose(1, 2)
            k_cache[i][:, :, slots] = k  # W slots of this layer's own tensor: written in place
            v_cache[i][:, :, slots] = v
            if form == "loops":
                y = loop_attention(q, k_cache[i], v_cache[i], mask)  # (1, Hkv, G W, Dh)
            elif form == "products":
                y = matmul_attention(q, k_cache[i], v_cache[i], mask, False)
            else:
                y = F.scaled_dot_product_attention(q, k_cache[i], v_cache[i], attn_mask=mask)
            y = y.reshape(1, H, W, Dh).transpose(1, 2).reshape(1, W, H * Dh)
            x = x + F.linear(y, attn.wo.weight, attn.wo.bias)
            gate, up = F.linear(block.mlp_norm(x), mlp.w_gate_up.weight, mlp.w_gate_up.bias).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, mlp.w_down.weight, mlp.w_down.bias)
            if i + 1 in self.layers:
                states[i + 1] = x
        normed = m.norm(x)
        logits = F.linear(normed, m.lm_head.weight)  # (1, W, V)
        if logits.dtype in (torch.bfloat16, torch.float16):
            logits = m._top_in_float32(normed, logits)  # as the eager model: the top candidates in float32
        return logits.float(), x, tuple(states[i] for i in self.layers)


def raise_recompile_limit(limit: int = 128) -> None:
    """Let torch keep up to ``limit`` compiled graphs of one function.  Each target compiles its
    own (its graphs hold its weights as constants), one per width, and torch's default of 8 per
    function would otherwise run out within one process (the test suite, a notebook)."""
    import torch._dynamo.config as dynamo_config

    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, limit)


class CompiledTarget(LlamaTarget):
    """A :class:`LlamaTarget` (batch 1) whose passes after the prefill run compiled.

    ``widths``: the pass widths compiled, each once (about a minute each in mode
    "max-autotune" for SmolLM2-135M on 2 cores).  A pass of N tokens runs the narrowest width
    W >= N, its W - N spare rows fed token 0 at the slots after the real ones (each sees every
    slot up to its own; no real token sees a spare row); their outputs are dropped and their slots
    stay beyond the row's length, hidden from later passes and overwritten by them.  Plain
    decoding needs width 1; a chain of gamma drafts gamma + 1; a tree its node count plus one.
    Wider passes (the prefill) and ``logits_to_keep`` run eagerly, on the same cache.

    ``autotune=True`` compiles in mode "max-autotune": inductor times its own matrix-product
    templates against oneDNN's (slower to compile, faster to run).  ``span_block``: attention
    reads the cache's written slots rounded up to a multiple of this (at least 2; None: every
    slot, the span static); ``cpp_wrapper``: the graph called from a generated C++ function
    rather than Python (off: it bought nothing measurable); ``attention``: "fused" (torch's
    ``F.scaled_dot_product_attention``), "products" (:func:`~specbook.models.llama.matmul_attention`,
    two matrix products that inductor compiles with the rest of the pass), "loops"
    (:func:`loop_attention`, inductor's own loops) or "auto" (:func:`attention_form`: loops for
    passes of up to 5 tokens, else products for float32 weights and fused otherwise; on a 2-core
    Xeon with AMX the products took a float32 pass from 26.1 to 24.4 ms and a bfloat16 one from
    16.2 to 18.7).  All stay switchable so that ``scripts/compiled_overheads.py`` can time what each
    buys; :meth:`attention_at` says which a width runs.  Weights are frozen into the
    compiled code (inductor's ``freezing``, switched on around each call; passed as
    ``torch.compile(options=...)`` instead it did not take effect here: 48 ms a token instead
    of 22), so the model must not change after the first pass.  ``hidden_layers`` (as for
    :class:`LlamaTarget`: an EAGLE head that reads earlier blocks) is compiled in too: set it here.

    ``products``: the matrix-product kernels each width runs (:data:`KERNELS`).  "autotuned" (the
    default): inductor's choice, shape by shape, timed on each weight alone; "library": MKL's and
    oneDNN's kernels only; "timed" (the benchmark's): :meth:`warm_up` compiles each width both ways,
    times whole passes and keeps the faster (``kernels_of``, ``kernel_ms``; twice the compile time
    and more memory; a width first met outside ``warm_up`` runs "autotuned").  Inductor's own
    timing keeps a weight in the CPU's caches, where a pass streams it from memory: on a 2-core
    Xeon with AMX, float32, a pass of 3 and of 5 tokens ran 36.2 and 38.9 ms autotuned against
    33.6 and 36.1 ms on the library's kernels, while 1 and 2 tokens ran faster autotuned (25.8 and
    29.0 ms against 28.7 and 30.7).

    ``ahead_of_time=True``: each (kernels, width) pass is exported and compiled by AOTInductor instead
    (:mod:`specbook.models.aot`), and called as one C++ function, without ``torch.compile``'s guards and
    Python wrapper; the same graph, its logits equal up to a rounding step (about 1.5 ms less a bfloat16 step on a
    2-core AMD EPYC; ``cpp_wrapper`` does not apply)."""

    def __init__(self, model: LlamaModel, max_length: int = 2048, widths: Sequence[int] = (1,),
                 autotune: bool = True, span_block: int | None = SPAN_BLOCK, cpp_wrapper: bool = False,
                 attention: str = "auto", products: str = "autotuned", hidden_layers: Sequence[int] | None = None,
                 ahead_of_time: bool = False):
        if attention not in ATTENTION:
            raise ValueError(f"attention must be one of {', '.join(map(repr, ATTENTION))}, got {attention!r}")
        if products not in PRODUCTS:
            raise ValueError(f"products must be one of {', '.join(map(repr, PRODUCTS))}, got {products!r}")
        if span_block is not None and (isinstance(span_block, bool) or not isinstance(span_block, int)
                                       or span_block < 2):
            raise ValueError(f"span_block must be an int >= 2 or None, got {span_block!r}")
        super().__init__(model, max_length, hidden_layers)
        self.span_block, self.cpp_wrapper = span_block, cpp_wrapper
        self.attention = attention
        self.widths: tuple[int, ...] = ()
        for w in widths:
            self.allow_width(w)
        # since construction: passes run compiled, run eagerly, and run eagerly after a prefill because
        # they were wider than every compiled width (a drafter's pass the widths did not cover)
        self.compiled_passes = self.eager_passes = self.wide_passes = 0
        self._traced: set[tuple[str, int]] = set()  # (kernels, width) whose graph exists (its span marked dynamic)
        raise_recompile_limit()
        self._layers = self.hidden_layers or ()  # compiled into the passes: fixed from here on
        self.pass_module = CompiledPass(model, max_length, attention, self._layers)
        self.passes = torch.compile(self.pass_module, fullgraph=True, dynamic=False,
                                    mode="max-autotune" if autotune else None)
        self.autotune, self.ahead_of_time = autotune, ahead_of_time
        self._runners: dict[tuple[str, int], object] = {}  # (kernels, width) -> its AOTInductor runner
        # the cache buffer the views were made of, its slot ids 0..T-1, and span -> views (made by _views)
        self._views_of, self._slot_ids, self._view_cache = None, None, {}
        self.products = products
        self.kernels_of: dict[int, str] = {}  # width -> the kernels its passes run, once "timed" chose them
        self.kernel_ms: dict[int, dict[str, float]] = {}  # width -> {kernels: median ms of a pass}, as timed

    def attention_at(self, width: int) -> str:
        """The attention form passes of ``width`` tokens run ("fused", "products" or "loops")."""
        return attention_form(self.attention, width, self.dtype)

    def allow_width(self, width: int) -> None:
        """Run passes of up to ``width`` tokens compiled too (the graph compiles on its first pass,
        or in :meth:`warm_up`).  Call before the first :meth:`reset`."""
        if isinstance(width, bool) or not isinstance(width, int) or width < 1:
            raise ValueError(f"width must be a positive int, got {width!r}")
        if self.cache is not None and width > self.widths[-1]:
            raise ValueError(f"width {width} is wider than the cache was built for ({self.widths[-1]}): "
                             "allow every width before the first reset")
        self.widths = tuple(sorted({*self.widths, width}))

    def warm_up(self, progress: bool = False) -> None:
        """Compile every width now (a dummy pass each, on a scratch cache), not in a timed pass;
        ``progress``: a bar over the widths (about a minute each, twice that with ``products="timed"``;
        on a terminal only).  With ``products="timed"`` each width is compiled with both kinds of
        product kernels, its passes timed after :data:`TIMING_CONTEXT` cached tokens, and the faster kept."""
        self.reset(1)
        context = max(1, min(TIMING_CONTEXT, self.max_length - self.widths[-1]))
        self.forward(torch.zeros(1, context, dtype=torch.long, device=self.device))  # the eager prefill
        timed = self.products == "timed"
        bar = progress_bar(self.widths, disable=not progress,
                           desc=f"compiling pass widths (about {2 if timed else 1} min each)")
        for w in bar:
            tokens = torch.zeros(1, w, dtype=torch.long, device=self.device)
            if not timed or w in self.kernel_ms:  # compile only (or nothing: timed by an earlier warm_up)
                self.forward(tokens)
                self.rollback([context])
                continue
            ms: dict[str, list[float]] = {kind: [] for kind in KERNELS}
            for rep in range(1 + TIMING_ROUNDS):  # the first round compiles, and is not counted
                for kind in KERNELS:
                    self.kernels_of[w] = kind
                    for _ in range(TIMING_PASSES if rep else 1):
                        t0 = time.perf_counter()
                        self.forward(tokens)
                        if rep:
                            ms[kind].append(1e3 * (time.perf_counter() - t0))
                        self.rollback([context])
            self.kernel_ms[w] = {kind: statistics.median(v) for kind, v in ms.items()}
            self.kernels_of[w] = min(KERNELS, key=self.kernel_ms[w].get)
            for kind in set(KERNELS) - {self.kernels_of[w]}:  # the package left out, and its copy of the weights
                self._runners.pop((kind, w), None)
        self.reset(1)

    def kernel_report(self) -> dict[str, dict]:
        """{width: {"chosen": its kernels, "ms": {kernels: median ms of a pass}}} per width (str keys, for JSON);
        None where :meth:`warm_up` did not time them (``products`` other than "timed")."""
        return {str(w): {"chosen": self.kernels_of.get(w), "ms": self.kernel_ms.get(w)} for w in self.widths}

    def keep_layers(self, layers: Sequence[int]) -> None:
        """Refused unless ``layers`` were compiled in (``CompiledTarget(..., hidden_layers=)``)."""
        if any(int(i) not in self._layers for i in layers):
            raise ValueError(f"this drafter reads the target's states after blocks {tuple(layers)}, and the compiled "
                             f"passes keep {self._layers or 'none'}: build CompiledTarget(..., hidden_layers=) "
                             "with them")

    def reset(self, batch_size: int) -> None:
        if batch_size != 1:
            raise ValueError(f"CompiledTarget supports batch_size=1 only, got {batch_size}")
        super().reset(batch_size)

    def _compile_ahead(self, kind: str, width: int, keys, values):
        """Export and compile the ``width`` pass on ``kind`` kernels with AOTInductor (:mod:`.aot`), on placeholder
        tokens, positions, slots and mask and this pass's own cache views ``keys``, ``values`` (export reads only
        their shapes and strides; the span dynamic up to T - 1 slots, or fixed)."""
        from .aot import compile_ahead

        tokens, positions = (torch.zeros(1, width, dtype=torch.long, device=self.device) for _ in range(2))
        example = (tokens, positions, torch.arange(width, device=self.device), keys, values,  # no input twice:
                   torch.ones(1, 1, width, keys[0].shape[2], dtype=torch.bool, device=self.device))  # export ties them
        configs = {"freezing": True, "max_autotune": self.autotune, **KERNELS[kind]}
        span = None if self.span_block is None else self._require_cache().max_length - 1
        self._runners[(kind, width)] = compile_ahead(self.pass_module, kind, configs, example, span)
        return self._runners[(kind, width)]

    def _new_cache(self, batch_size: int) -> KVCache:
        slots = self.max_length + self.widths[-1]  # room for the spare rows of the last pass
        return KVCache(self.config.n_layers, batch_size, self.config.n_kv_heads, self.config.head_dim,
                       slots, dtype=self.dtype, device=self.device)

    def _views(self, cache: KVCache, span: int) -> tuple[torch.Tensor, list, list]:
        """(slot ids 0..T-1, then each layer's keys and values over the first ``span`` slots as lists of views of
        the cache's (L, 1, Hkv, T, Dh) buffers), made once per buffer and span: 60 views took 0.1 ms a pass.
        One tensor per layer: handed the whole buffer, the compiled code copied all L layers' slots after every
        layer's write (12 of 30 ms)."""
        if self._views_of is not cache.k:  # a new cache, or its buffers replaced (select_rows)
            self._views_of, self._view_cache = cache.k, {}
            self._slot_ids = torch.arange(cache.max_length, device=self.device)
        if span not in self._view_cache:
            self._view_cache[span] = (list(cache.k[..., :span, :].unbind(0)), list(cache.v[..., :span, :].unbind(0)))
        return self._slot_ids, *self._view_cache[span]

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, parents: torch.Tensor | None = None, *,
                logits_to_keep: int | None = None) -> torch.Tensor:
        """As :meth:`LlamaTarget.forward`; compiled when a width fits and all logits are wanted."""
        cache = self._require_cache()
        n = tokens.shape[-1]
        if logits_to_keep is not None or tokens.dim() != 2 or tokens.shape[0] != 1 or n > self.widths[-1]:
            self.eager_passes += 1
            self.wide_passes += int(n > self.widths[-1] and max(cache.length_list()) > 0)
            return super().forward(tokens, parents, logits_to_keep=logits_to_keep)  # checks its arguments
        self.model._check_inputs(tokens, None, None, None)  # the eager model's checks: N >= 1, ids in the vocabulary
        if (self.hidden_layers or ()) != self._layers:
            raise ValueError(f"hidden_layers is compiled into the passes ({self._layers or 'none'}): give it to "
                             f"CompiledTarget(..., hidden_layers=) rather than changing it to {self.hidden_layers}")
        start = cache.length_list()[0]
        if start + n > self.max_length:
            raise ValueError(f"a row would hold {start + n} tokens, more than max_length={self.max_length} "
                             "(prompt plus generation longer than the context)")
        width = next(w for w in self.widths if w >= n)
        span = cache.max_length  # the slots attention reads
        if self.span_block is not None:  # T - 1 at most (start + width < T always): a span of all T slots is a
            span = min(span - 1, -(-(start + width) // self.span_block) * self.span_block)  # case graphs guard apart
        ids, keys, values = self._views(cache, span)
        slots = ids[start:start + width]  # (W,) the slots this pass writes: its n tokens, then the spare rows
        padded = tokens.new_zeros(1, width)  # (1, W) a fresh tensor (a caller's slice has other strides, on which
        padded[:, :n] = tokens  # torch.compile guards: a recompile), the spare rows fed token 0
        # row w sees every slot up to its own: the cached context, then a chain's earlier tokens and itself.  Spare
        # rows see the real ones too: their outputs are dropped, and their slots lie past the row's length
        visible = (ids[:span] <= slots[:, None])[None, None]  # (1, 1, W, S)
        positions = slots[None].clone()  # a chain: token w at position start + w (a copy: no input passed twice)
        if parents is None:
            plist = list(range(-1, n - 1))
        else:
            if parents.shape != (n,):
                raise ValueError(f"parents must have shape ({n},) for {n} tokens, got {tuple(parents.shape)}")
            ancestors, depth = self._tree(parents)
            plist = parents.tolist()
            positions[0, :n] = start + depth  # a node's position is its depth past the cached context
            visible[0, 0, :n, start:start + n] = ancestors
        kind = self.kernels_of.get(width, "library" if self.products == "library" else "autotuned")
        if self.ahead_of_time:
            run = self._runners.get((kind, width)) or self._compile_ahead(kind, width, keys, values)
            logits, hidden, states = run(padded, positions, slots, keys, values, visible)
        else:
            if self.span_block is not None and (kind, width) not in self._traced:  # once a graph exists, S stays
                for t in (*keys, *values, visible):  # dynamic; S: one graph for every span
                    torch._dynamo.mark_dynamic(t, t.dim() - 2 if t is not visible else 3)
            # weights as constants (the first pass of a width compiles)
            with inductor_config.patch(freezing=True, cpp_wrapper=self.cpp_wrapper, **KERNELS[kind]):
                logits, hidden, states = self.passes(padded, positions, slots, keys, values, visible, kind)
            self._traced.add((kind, width))
        cache.appended(n)
        self.compiled_passes += 1
        self.last_hidden = hidden[:, :n]  # (1, N, D)
        self.last_hidden_layers = tuple(h[:, :n] for h in states) if self.hidden_layers is not None else None
        self._last_tree = ([start], plist, cache.length_list())
        return logits[:, :n]  # (1, N, V) float32

    __call__ = forward
