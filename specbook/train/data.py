"""Offline training text for drafters: prompts from the Python standard library, the target's replies.

Shape legend: B batch, T tokens of one sequence, k stored top-k entries, V vocab.

Nothing is downloaded.  Prompts are built from text that every Python installation
carries: the source of the standard library's pure-Python modules (functions of 6 to 30
lines to edit or explain) and its docstrings (paragraphs to summarise or ask about),
plus general questions written out below.  The training *text* is then the target's own
greedy reply to each prompt (self-distillation: Kim & Rush 2016, "Sequence-Level
Knowledge Distillation"; DistillSpec, Zhou et al. 2024, sec. 3, finds on-policy data
from the model being imitated gives the best acceptance), and the *labels* are the
target's next-token distributions at every position, kept as the top-k probabilities.

Split.  Each prompt has a stable id (source file + object name + template); a fixed hash
of the id puts about 10 % of them in the held-out split, used only to report acceptance.
Benchmark prompts must not appear in either split: :func:`check_disjoint` compares any
evaluation texts against the training prompts and raises if one shares a long span.

Reproducibility: the prompts depend on the Python version's standard library (the id
list and a sha256 of all prompt texts are recorded next to the trained weights).

    python -m specbook.train.data        # prompt counts per category and split, and samples
"""
from __future__ import annotations

import ast
import hashlib
import os
import random
import sysconfig
import textwrap
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..drafters.small_model import weights_digest
from ..models.chat import chat_ids
from .prompts import Prompt, prompts_digest, split

# Pure-Python standard-library modules whose functions and docstrings become prompts.
STDLIB_MODULES = (
    "textwrap string shlex fnmatch posixpath colorsys bisect heapq calendar difflib statistics fractions "
    "json.encoder json.decoder csv html urllib.parse base64 quopri pprint reprlib ipaddress gettext cmd "
    "sched glob configparser dataclasses enum functools copy wave netrc mimetypes smtplib ftplib imaplib "
    "poplib email.utils http.cookies http.server socketserver logging zipfile tarfile shutil tempfile "
    "secrets uuid hmac random locale codecs traceback linecache tokenize keyword platform optparse getopt "
    "plistlib graphlib contextlib numbers decimal"
).split()

CODE_EDIT = [
    "Add type hints to this Python function and return the full function:\n\n```python\n{code}\n```",
    "Add a clear docstring to this function. Return the whole function:\n\n```python\n{code}\n```",
    "Rename the local variables of this function to more descriptive names and show the result:"
    "\n\n```python\n{code}\n```",
    "Refactor this function to make it easier to read, keeping its behaviour:\n\n```python\n{code}\n```",
    "Add comments explaining each step of this function:\n\n```python\n{code}\n```",
    "Rewrite this function with early returns where it helps readability:\n\n```python\n{code}\n```",
]
CODE_EXPLAIN = [
    "Explain what this Python function does:\n\n```python\n{code}\n```",
    "Write a unit test for this function:\n\n```python\n{code}\n```",
    "Is there a bug or an edge case this function does not handle?\n\n```python\n{code}\n```",
]
SUMMARIZE = [
    "Summarize the following documentation in two sentences:\n\n{text}",
    "Give a short summary of this text:\n\n{text}",
    "Rewrite the following text in plain English for a beginner:\n\n{text}",
    "List the key points of this documentation as bullet points:\n\n{text}",
    "What is the main purpose described in this text?\n\n{text}",
]
DOC_QA = [
    "Read the documentation and answer the question.\n\nDocumentation:\n{text}\n\nQuestion: What does it return?",
    "Use only the text below to answer.\n\n{text}\n\nQuestion: Which arguments or options are mentioned, "
    "and what do they do?",
    "Documentation:\n{text}\n\nBased on this documentation, when would a programmer use it?",
]
CODE_JSON = [
    "Describe this function as a JSON object with the keys \"name\", \"parameters\" (a list of strings) "
    "and \"summary\". Answer with JSON only.\n\n```python\n{code}\n```",
    "Return a JSON object listing the function name and every variable assigned in this code, as "
    "{{\"function\": ..., \"variables\": [...]}}.\n\n```python\n{code}\n```",
]
ARITHMETIC = [
    "A train travels {a} kilometres in {b} hours. What is its average speed? Explain your reasoning.",
    "Maria buys {b} notebooks at {c} euros each and pays with a {d}-euro note. How much change does she get?",
    "A recipe needs {c} eggs for {b} people. How many eggs are needed for {a} people? Show the steps.",
    "What is {a} multiplied by {c}, minus {b}? Work it out step by step.",
    "A garden is {a} metres long and {b} metres wide. What is its area and its perimeter?",
]
CHAT_TOPICS = [
    "how a refrigerator keeps food cold", "why leaves change colour in autumn", "how tides work",
    "what a compiler does", "how to brew a good cup of tea", "the rules of tic-tac-toe",
    "how vaccines train the immune system", "what causes seasons on Earth", "how a bill becomes a law",
    "what an API is", "how to care for a houseplant", "why the sky is blue", "how bicycles stay upright",
    "the difference between weather and climate", "how to write a good cover letter",
    "what a prime number is", "how airplanes fly", "how to start running as a beginner",
    "what machine learning is", "how batteries store energy", "what a sorting algorithm is",
    "how to make a simple budget", "why we need sleep", "how elections are counted",
    "what a black hole is", "how to learn to play the guitar", "the history of the bicycle",
    "what recursion means in programming", "how the heart pumps blood", "how to plan a trip abroad",
    "what an operating system does", "how bread rises", "how GPS finds your position",
    "what a regular expression is", "how to prepare for a job interview", "what inflation means",
]
CHAT = [
    "Explain {topic}.", "Can you describe {topic} in simple terms?", "Write a short paragraph about {topic}.",
    "Give me three facts about {topic}.", "What should a student know about {topic}?",
]


def _stdlib_source(name: str) -> str | None:
    base = os.path.join(sysconfig.get_paths()["stdlib"], *name.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return Path(path).read_text(encoding="utf-8")
    return None


def stdlib_snippets() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(functions, docstrings): lists of (stable id, text) from STDLIB_MODULES, in a fixed order."""
    functions, docs = [], []
    for mod in STDLIB_MODULES:
        source = _stdlib_source(mod)
        if source is None:
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef) and 6 <= node.end_lineno - node.lineno + 1 <= 30:
                code = ast.get_source_segment(source, node, padded=True)  # methods keep their indent
                if code and len(code) <= 800:
                    functions.append((f"{mod}:{node.name}:{node.lineno}", textwrap.dedent(code)))
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= 300:
                    docs.append((f"{mod}:{getattr(node, 'name', '<module>')}:{getattr(node, 'lineno', 0)}", doc[:800]))
    return functions, docs


def all_prompts(per_category: int = 40, seed: int = 0) -> list[Prompt]:
    """``per_category`` prompts of each category (fewer if the sources run out), in a fixed order."""
    functions, docs = stdlib_snippets()
    rng = random.Random(seed)
    out: list[Prompt] = []

    def pick(items, templates, category, field, once=True):
        pairs = [(i, t) for i in range(len(items)) for t in range(len(templates))]
        rng.shuffle(pairs)
        used = set()
        for i, t in pairs:
            if len(used) >= per_category:
                break
            if once and i in used:  # each source text at most once per category
                continue
            used.add(i if once else (i, t))
            sid, text = items[i]
            out.append(Prompt(f"{category}/{t}/{sid}", category, templates[t].format(**{field: text})))

    pick(functions, CODE_EDIT, "code-edit", "code")
    pick(functions, CODE_EXPLAIN, "code-explain", "code")
    pick(docs, SUMMARIZE, "summarize", "text")
    pick([(str(i), topic) for i, topic in enumerate(CHAT_TOPICS)], CHAT, "chat", "topic", once=False)
    pick(docs, DOC_QA, "doc-qa", "text")
    pick(functions, CODE_JSON, "code-json", "code")
    numbers = random.Random(seed + 1)
    for i in range(per_category):
        t = i % len(ARITHMETIC)
        a, b, c = numbers.randint(12, 480), numbers.randint(2, 9), numbers.randint(2, 15)
        out.append(Prompt(f"arithmetic/{t}/{i}", "arithmetic",
                          ARITHMETIC[t].format(a=a, b=b, c=c, d=10 * (b * c // 10 + 1))))
    return out


def check_disjoint(train: list[Prompt], eval_texts: list[str], span: int = 60) -> None:
    """Raise ValueError if an evaluation text shares a ``span``-character stretch with a training prompt."""
    def pieces(text: str):
        text = " ".join(text.split())
        return {text[i:i + span] for i in range(0, max(1, len(text) - span + 1), span // 2)}

    seen = set()
    for p in train:
        t = " ".join(p.text.split())
        seen.update(t[i:i + span] for i in range(0, max(1, len(t) - span + 1)))
    for j, text in enumerate(eval_texts):
        shared = pieces(text) & seen
        if shared:
            raise ValueError(f"evaluation text {j} overlaps the training prompts, e.g. {next(iter(shared))!r}")


@torch.no_grad()
def teacher_replies(model, prompt_ids: list[list[int]], max_new_tokens: int, eos_id: int, top_k: int = 16,
                    batch_size: int = 32, progress: bool = True) -> list[dict]:
    """Greedy replies of ``model`` (a LlamaModel) with its top-k next-token probabilities everywhere.

    Returns, per prompt: ``tokens`` (T,) int32 = prompt + reply (EOS included if reached),
    ``prompt_length``, and ``topk_ids`` (T-1, k) int32 / ``topk_probs`` (T-1, k) float16:
    the target's distribution (temperature 1) at positions 0..T-2, i.e. for tokens 1..T-1.
    Rows of a batch are right-padded for the prefill, then rolled back to their own lengths
    (the cache keeps rows out of step), so padding is never attended to.
    """
    order = sorted(range(len(prompt_ids)), key=lambda i: len(prompt_ids[i]))
    out: list[dict | None] = [None] * len(prompt_ids)
    bar = tqdm(total=len(prompt_ids), disable=not progress, desc="teacher replies", unit="prompt")
    for first in range(0, len(order), batch_size):
        idx = order[first:first + batch_size]
        rows = [prompt_ids[i] for i in idx]
        B, lengths = len(rows), [len(r) for r in rows]
        padded = torch.full((B, max(lengths)), eos_id, dtype=torch.long)
        for b, r in enumerate(rows):
            padded[b, :len(r)] = torch.tensor(r)
        cache = model.make_cache(B, max(lengths) + max_new_tokens)
        _, hidden = model(padded, cache, return_hidden=True, logits_to_keep=0)  # (B, Tmax, D)
        cache.rollback(lengths)
        tops = []
        for b in range(B):
            logits = model.lm_head(model.norm(hidden[b, :lengths[b]])).float()  # (T_b, V)
            top = logits.softmax(-1).topk(top_k, dim=-1)
            tops.append(([top.indices], [top.values]))
        nxt = torch.stack([tops[b][0][0][-1, 0] for b in range(B)])  # (B,) greedy = top-1
        replies = [[] for _ in range(B)]
        done = [False] * B
        for step in range(max_new_tokens):
            for b in range(B):
                if not done[b]:
                    replies[b].append(int(nxt[b]))
                    done[b] = int(nxt[b]) == eos_id or step == max_new_tokens - 1
            if all(done):
                break
            logits = model(nxt[:, None], cache)[:, -1].float()  # (B, V)
            top = logits.softmax(-1).topk(top_k, dim=-1)
            for b in range(B):
                if not done[b]:
                    tops[b][0].append(top.indices[b:b + 1])
                    tops[b][1].append(top.values[b:b + 1])
            nxt = top.indices[:, 0]
        for b, i in enumerate(idx):
            tokens = rows[b] + replies[b]
            n = len(tokens) - 1
            out[i] = {"tokens": torch.tensor(tokens, dtype=torch.int32), "prompt_length": lengths[b],
                      "topk_ids": torch.cat(tops[b][0])[:n].int(), "topk_probs": torch.cat(tops[b][1])[:n].half()}
        bar.update(B)
    bar.close()
    return out


def distillation_set(model, tokenizer, prompts: list[Prompt], *, max_new_tokens: int = 96, top_k: int = 16,
                     batch_size: int = 32, cache_dir: str | Path | None = None, progress: bool = True) -> list[dict]:
    """``teacher_replies`` for ``prompts`` (chat template applied), cached on disk by content.

    The cache key covers the prompt texts, the generation settings and the target's weights, so a
    changed prompt list or target never reuses stale replies.  Default directory:
    ``$SPECBOOK_CACHE/distill`` (``~/.cache/specbook/distill``), never the repository.
    """
    from ..models.smollm2 import cache_root

    key = hashlib.sha256(f"{prompts_digest(prompts)}|{max_new_tokens}|{top_k}|{weights_digest(model)}".encode())
    path = Path(cache_dir or cache_root() / "distill") / f"replies-{key.hexdigest()[:16]}.pt"
    if path.is_file():
        return torch.load(path, weights_only=True)
    eos = tokenizer.eos_token_id
    ids = [chat_ids(tokenizer, p.text) for p in prompts]
    data = teacher_replies(model, ids, max_new_tokens, eos, top_k, batch_size, progress)
    for d, p in zip(data, prompts):
        d["id"], d["category"] = p.id, p.category
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(data, tmp)
    tmp.rename(path)
    return data


def main() -> None:
    prompts = all_prompts()
    train, held = split(prompts)
    cats = sorted({p.category for p in prompts})
    for c in cats:
        print(f"{c:13s} train {sum(p.category == c for p in train):4d}  held-out {sum(p.category == c for p in held):3d}")
    print(f"prompt digest {prompts_digest(prompts)[:16]}")
    for c in cats:
        p = next(p for p in prompts if p.category == c)
        print(f"\n--- {p.id}\n{p.text[:400]}")


if __name__ == "__main__":
    main()
