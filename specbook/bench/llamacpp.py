"""llama.cpp as the benchmark's third engine, through its Python binding (optional).

Shape legend: T prompt length, N new tokens.

On a CPU, llama.cpp is what one would run instead of specbook, so ``python -m specbook bench
--engines specbook,llamacpp`` times it beside specbook's loop.  It needs ``llama_cpp`` (PyPI
``llama-cpp-python``, which compiles llama.cpp when installed: ``pip install llama-cpp-python``);
without it the engine is skipped with one line saying why (:func:`import_llama_cpp`).

What it runs, and what is kept the same as in the other engines:

* the weights: SmolLM2's own GGUF re-written at the run's dtype (:mod:`specbook.bench.gguf_export`:
  the same values as specbook's cache; float32 or bfloat16, norms in float32), with the KV cache
  in that dtype too (llama.cpp's default would be float16);
* the prompt: the bench's token ids (the chat template applied by the tokenizer, as for specbook),
  fed to ``Llama.generate`` as ids, so nothing is tokenized or templated twice;
* greedy decoding (a greedy sampler; no repetition penalty), stopping right after the end-of-turn
  token, or after exactly ``max_new_tokens`` when the bench ignores it; sampling is not run;
* the threads: ``n_threads`` and ``n_threads_batch`` are torch's thread count (``--threads``);
* the timer: from the call to the last new token, prompt evaluation included, as in the other
  engines; the KV cache is cleared first (``Llama.reset``), so no run reuses a previous run's prompt.

Drafters: ``none`` is plain decoding; ``ngram`` is the binding's prompt lookup,
``llama_cpp.llama_speculative.LlamaPromptLookupDecoding`` passed as ``draft_model`` (Python code that
proposes up to ``num_pred_tokens`` tokens following the earliest earlier match of the last
``max_ngram_size`` tokens; the bench sets num_pred_tokens to the gamma of specbook's ``ngram`` and
max_ngram_size to its 3).  It is the binding's loop, not llama.cpp's C++ speculative example: with a
draft model the binding keeps the logits of every position (``logits_all``) and copies them into a
NumPy array on every pass, the prompt's included.  Every other drafter has no llama.cpp equivalent
here and is skipped.  Passes and accepted drafts are counted from the ids fed to each ``eval``
(:func:`specbook.bench.engines.result_from_calls`, as for transformers).
"""
from __future__ import annotations

import time

import torch

from ..sampling import SamplingParams
from .engines import RunResult, result_from_calls
from .gguf_export import smollm2_gguf

NAME = "llamacpp"
INSTALL = "pip install llama-cpp-python (specbook's llamacpp extra)"
PROMPT_LOOKUP = {"ngram": 3}  # specbook drafter -> the max_ngram_size of the binding's prompt lookup
GGML_TYPES = {torch.float32: 0, torch.bfloat16: 30}  # ggml's GGML_TYPE_F32, GGML_TYPE_BF16 (the KV cache)


def import_llama_cpp():
    """(the ``llama_cpp`` module, None), or (None, one line saying why it cannot be used)."""
    try:
        import llama_cpp
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding  # noqa: F401
    except ImportError as err:  # not installed, or its compiled library does not load
        return None, f"llama_cpp is not importable ({err}); install it with {INSTALL} (compiles llama.cpp)"
    return llama_cpp, None


class LlamaCppEngine:
    """One ``llama_cpp.Llama`` on a GGUF file; ``lookup`` = (max_ngram_size, num_pred_tokens) for the
    binding's prompt lookup, None for plain decoding."""

    name = NAME

    def __init__(self, path, dtype: torch.dtype, n_ctx: int, threads: int, lookup: tuple[int, int] | None = None):
        llama_cpp, why = import_llama_cpp()
        if why:
            raise ImportError(why)
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        draft = None if lookup is None else LlamaPromptLookupDecoding(max_ngram_size=lookup[0],
                                                                      num_pred_tokens=lookup[1])
        self.lookup = lookup
        self.llm = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_ctx, n_threads=threads,
                                   n_threads_batch=threads, type_k=GGML_TYPES[dtype], type_v=GGML_TYPES[dtype],
                                   draft_model=draft, seed=0, verbose=False)
        self._calls: list[list[int]] | None = None  # the ids fed to each pass of the current run
        evaluate = self.llm.eval

        def recording_eval(tokens):
            if self._calls is not None:
                self._calls.append([int(t) for t in tokens])
            return evaluate(tokens)

        self.llm.eval = recording_eval  # generate() calls self.eval once per pass

    def run(self, prompt_ids: list[int], drafter, params: SamplingParams, max_new_tokens: int, gamma: int,
            generator: torch.Generator | None = None, eos_token_id: int | None = None,
            verifier: str = "token") -> RunResult:
        # drafter, gamma, generator, verifier: fixed when the engine was built (greedy, the binding's own rule)
        if not params.greedy:
            raise ValueError("the llamacpp engine runs greedy decoding only (temperature 0)")
        self.llm.reset()  # an empty KV cache: no prompt prefix reused from the previous run
        self._calls, new = [], []
        t0 = time.perf_counter()
        for token in self.llm.generate(list(prompt_ids), temp=0.0, top_k=1, top_p=1.0, min_p=0.0,
                                       repeat_penalty=1.0, reset=True):
            new.append(int(token))
            if len(new) == max_new_tokens or new[-1] == eos_token_id:
                break
        seconds = time.perf_counter() - t0
        calls, self._calls = self._calls, None
        return result_from_calls(list(prompt_ids), calls, new, seconds, params, drafted=self.lookup is not None)

    def close(self) -> None:
        self.llm.close()


def llamacpp_combos(drafters: list[str], dtype: torch.dtype, n_ctx: int, gamma_of, greedy: bool,
                    threads: int | None = None) -> tuple[list[tuple], list[dict]]:
    """The bench's (engine, drafter, drafter object, verifier) for llama.cpp, and the skipped pairs with
    the reason; every pair skipped with one reason when ``llama_cpp`` cannot be imported or the run
    samples.  Writes the GGUF copy at ``dtype`` first if it is not cached."""
    _, why = import_llama_cpp()
    if why is None and not greedy:
        why = "greedy only: the bench runs llama.cpp at temperature 0"
    if why is None and dtype not in GGML_TYPES:
        why = f"runs float32 or bfloat16 weights, not {str(dtype).removeprefix('torch.')}"
    if why:
        return [], [{"engine": NAME, "drafter": ",".join(drafters), "reason": why}]
    threads = threads or torch.get_num_threads()
    path = smollm2_gguf(dtype)
    combos, skipped = [], []
    for d in drafters:
        if d == "none":
            combos.append((LlamaCppEngine(path, dtype, n_ctx, threads), d, None, None))
        elif d in PROMPT_LOOKUP:
            lookup = (PROMPT_LOOKUP[d], gamma_of(d))
            combos.append((LlamaCppEngine(path, dtype, n_ctx, threads, lookup), d, None, "token"))
        else:
            skipped.append({"engine": NAME, "drafter": d, "reason": "no llama.cpp equivalent"})
    return combos, skipped
