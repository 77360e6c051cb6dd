"""Which (engine, drafter) pairs one benchmark run times, and which it skips with the reason.

specbook times every drafter; ``compiled`` (:mod:`specbook.models.compiled`) times them too, in one
engine whose compiled pass widths fit every drafter's chain or tree (the sizes chosen for
specbook's); transformers times the drafters it has an equivalent for; llama.cpp
(:mod:`specbook.bench.llamacpp`, optional) plain decoding and prompt lookup.
"""
from __future__ import annotations

from .engines import CompiledEngine, TransformersEngine
from .registry import get_drafter


def draft_width(drafter, gamma: int) -> int:
    """The most tokens one draft of ``drafter`` holds: its tree's nodes, else the chain's gamma."""
    tree = getattr(drafter, "tree", None)
    if tree is None:
        return gamma
    return tree.num_nodes if hasattr(tree, "num_nodes") else len(tree.parents)  # EAGLE's dynamic, Medusa's fixed


def engine_combos(args, engines, drafters, sb, model, tokenizer, dtype, gamma_of, tree_of):
    """Every (engine, drafter, verifier) to time: ([(engine, drafter name, drafter object or generate
    kwargs, verifier name or None)], [skipped pairs with the reason], transformers' model or None).
    Plain decoding verifies nothing (verifier None); transformers' drafts are judged by its own
    token-wise rule ("token")."""
    combos, skipped, hf = [], [], None

    def make(d, target):
        extra = {} if tree_of(d) is None else {"tree": tree_of(d)}
        return get_drafter(d).make(model, tokenizer, gamma=gamma_of(d), device=args.device, dtype=dtype,
                                   target=target, **extra)

    def verifiers(d):
        return [None] if d == "none" else args.verifiers

    if "specbook" in engines:
        for d in drafters:
            obj = make(d, sb.target)
            combos.extend((sb, d, obj, v) for v in verifiers(d))
    if "compiled" in engines:  # one engine: each new target compiles its own graphs
        engine = CompiledEngine(model, sb.target.max_length)
        for d in drafters:
            obj = make(d, engine.target)
            if obj is not None:
                engine.target.allow_width(draft_width(obj, gamma_of(d)) + 1)  # the pending token and the draft
            combos.extend((engine, d, obj, v) for v in verifiers(d))
        engine.target.warm_up()  # every width compiled before anything is timed
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
