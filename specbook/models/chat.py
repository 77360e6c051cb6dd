"""Chat prompts as an instruct model sees them: one user turn under the tokenizer's chat template.

Shape legend: T prompt length (tokens).

The benchmark, the distillation data and the heads' training data all start from the same
ids, so there is one function that builds them.
"""
from __future__ import annotations


def chat_ids(tokenizer, text: str) -> list[int]:
    """Token ids (T,) of one user turn under the tokenizer's chat template, followed by the assistant header."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat template; cannot build chat prompts")
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
    if hasattr(ids, "keys"):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return [int(i) for i in ids]
