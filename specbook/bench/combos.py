"""Which (engine, drafter) pairs one benchmark run times, and which it skips with the reason.

specbook times every drafter; ``compiled`` (:mod:`specbook.models.compiled`) times them too, in one
engine: either the one the benchmark sized by its own verify-cost curve (its widths cover every
draft), or, without that curve, one whose compiled widths fit the sizes chosen for specbook's;
transformers times the drafters it has an equivalent for; llama.cpp
(:mod:`specbook.bench.llamacpp`, optional) plain decoding and prompt lookup (with specbook's sizes).
"""
from __future__ import annotations

from .engines import CompiledEngine, TransformersEngine
from .registry import get_drafter


def draft_width(drafter, gamma: int) -> int:
    """The most tokens one draft of ``drafter`` holds: its tree's nodes, else the chain's gamma."""
    tree = getattr(drafter, "tree", None)
    if tree is None:
        return gamma
    return tree.num_nodes  # EAGLE's DynamicTree and Medusa's ChoiceTree both name their node count


def engine_combos(args, engines, drafters, sb, model, tokenizer, dtype, gamma_of, tree_of, compiled=None):
    """Every (engine, drafter, verifier) to time: ([(engine, drafter name, drafter object or generate
    kwargs, verifier name or None)], [skipped pairs with the reason], transformers' model or None).
    Plain decoding verifies nothing (verifier None); transformers' drafts are judged by its own
    token-wise rule ("token").

    gamma_of(d, engine="specbook"), tree_of(d, engine="specbook"): the chain length and tree budget
    of drafter ``d`` for an engine (the compiled engine's own when it was sized apart).
    compiled: a :class:`CompiledEngine` already built and compiled for every draft width, or None
    (then one is built here with the widths the chosen sizes need)."""
    combos, skipped, hf = [], [], None

    def make(d, target, engine="specbook"):
        extra = {} if tree_of(d, engine) is None else {"tree": tree_of(d, engine)}
        return get_drafter(d).make(model, tokenizer, gamma=gamma_of(d, engine), device=args.device, dtype=dtype,
                                   target=target, **extra)

    def verifiers(d):
        return [None] if d == "none" else args.verifiers

    if "specbook" in engines:
        for d in drafters:
            obj = make(d, sb.target)
            combos.extend((sb, d, obj, v) for v in verifiers(d))
    if "compiled" in engines:  # one engine: each new target compiles its own graphs
        engine = compiled or CompiledEngine(model, sb.target.max_length)
        for d in drafters:
            obj = make(d, engine.target, "compiled")
            if obj is not None and compiled is None:
                engine.target.allow_width(draft_width(obj, gamma_of(d, "compiled")) + 1)  # pending token + draft
            combos.extend((engine, d, obj, v) for v in verifiers(d))
        if compiled is None:  # every width compiled before anything is timed
            engine.target.warm_up(progress=not getattr(args, "no_progress", True))
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
