"""Which (engine, drafter) pairs one benchmark run times, and which it skips with the reason.

specbook times every drafter; ``compiled`` (:mod:`specbook.models.compiled`) times plain greedy
decoding only; transformers times the drafters it has an equivalent for; llama.cpp
(:mod:`specbook.bench.llamacpp`, optional) plain decoding and prompt lookup.
"""
from __future__ import annotations

from .engines import CompiledEngine, TransformersEngine
from .registry import get_drafter


def engine_combos(args, engines, drafters, sb, model, tokenizer, dtype, gamma_of, tree_of):
    """Every (engine, drafter, verifier) to time: ([(engine, drafter name, drafter object or generate
    kwargs, verifier name or None)], [skipped pairs with the reason], transformers' model or None).
    Plain decoding verifies nothing (verifier None); transformers' drafts are judged by its own
    token-wise rule ("token")."""
    combos, skipped, hf = [], [], None
    if "specbook" in engines:
        for d in drafters:
            extra = {} if tree_of(d) is None else {"tree": tree_of(d)}
            obj = get_drafter(d).make(model, tokenizer, gamma=gamma_of(d), device=args.device, dtype=dtype,
                                      target=sb.target, **extra)
            combos.extend((sb, d, obj, v) for v in ([None] if d == "none" else args.verifiers))
    if "compiled" in engines:  # plain greedy decoding only
        for d in drafters:
            why = ("greedy only" if args.temperature != 0 else None) if d == "none" else "plain decoding only"
            if why:
                skipped.append({"engine": "compiled", "drafter": d, "reason": why})
            else:
                combos.append((CompiledEngine(model, sb.target.max_length), d, None, None))
    if "transformers" in engines:
        from transformers import LlamaForCausalLM

        from ..models.smollm2 import model_dir

        hf = LlamaForCausalLM.from_pretrained(str(model_dir()), dtype=dtype, local_files_only=True).to(args.device)
        tf = TransformersEngine(hf, tokenizer)
        for d in drafters:
            spec = get_drafter(d)
            kwargs = spec.transformers_kwargs(hf, tokenizer, gamma=gamma_of(d)) if spec.transformers_kwargs else None
            if kwargs is None:
                skipped.append({"engine": "transformers", "drafter": d, "reason": "no transformers equivalent"})
            else:
                combos.append((tf, d, kwargs, None if d == "none" else "token"))
    if "llamacpp" in engines:
        from .llamacpp import llamacpp_combos

        more, why = llamacpp_combos(drafters, dtype, sb.target.max_length, gamma_of, args.temperature == 0)
        combos, skipped = combos + more, skipped + why
    return combos, skipped, hf
