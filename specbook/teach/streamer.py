"""Stream speculative decoding as it happens: each token coloured by how it was produced.

Shape legend: B batch, K draft length, V vocab.

Speculative decoding emits tokens in bursts, one burst per target pass: the drafts the target
accepted, then one token of the target's own (Leviathan et al. 2023, Algorithm 1):

* ``accepted``  a draft the verifier kept;
* ``corrected`` the target's token after the first rejected draft (drawn from the residual
  max(0, p - q), or the argmax when greedy);
* ``bonus``     the target's token after a pass whose drafts were all accepted;
* ``target``    a pass with nothing drafted (plain decoding, or a lookup that found no match).

:class:`TokenStreamer` is the decode loop's ``on_step`` hook (one :class:`~specbook.decode.DecodeStep`
per pass) and also speaks transformers' streamer protocol (``put(ids)`` / ``end()``, as
``TextStreamer`` does), so the same object can follow ``model.generate(..., streamer=s)``; tokens
that arrive through ``put`` have no draft history and count as ``target``.  In Jupyter it
redraws one HTML cell output; in a terminal it writes ANSI colours; elsewhere plain text::

    streamer = TokenStreamer(tokenizer)
    speculative_generate(target, drafter, prompt, 64, on_step=streamer, eos_token_id=tokenizer.eos_token_id)
    streamer.end()
"""
from __future__ import annotations

import html
import sys
from typing import TextIO

import torch

from .html import KIND_COLOURS

KINDS = ("accepted", "corrected", "bonus", "target")
ANSI = {"accepted": "\033[30;42m", "corrected": "\033[30;43m", "bonus": "\033[30;46m", "target": ""}
ANSI_RESET = "\033[0m"
_COLOURS = {**KIND_COLOURS, "target": ("#ffffff", "none")}
MEANING = {"accepted": "draft accepted", "corrected": "target's token after a rejection",
           "bonus": "target's token after all drafts were accepted", "target": "no draft: the target's token"}


def step_kinds(step, slot: int) -> list[str]:
    """The kind of each token batch slot ``slot`` kept in one :class:`~specbook.decode.DecodeStep`."""
    n, kept = int(step.num_emitted[slot]), int(step.kept[slot])
    drafted = step.draft.num_tokens
    if step.path is not None and drafted:  # a tree: all accepted iff the last accepted node is a leaf
        path = [int(i) for i in step.path[slot].tolist() if i >= 0]
        parents = step.draft.parents.tolist()
        all_in = (path[-1] not in parents) if path else drafted == 0
    else:
        all_in = n - 1 == drafted
    last = "target" if drafted == 0 else ("bonus" if all_in else "corrected")
    return ["accepted" if i < n - 1 else last for i in range(kept)]


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


class TokenStreamer:
    """Show one row's new tokens as they are accepted, coloured by kind (see the module docstring).

    tokenizer:   anything with ``decode(list[int]) -> str`` (None: tokens shown as ``[id]``)
    mode:        "auto" (HTML in Jupyter, ANSI on a terminal, else plain), "html", "ansi" or "plain"
    row:         which row of the batch to follow (its original index in the prompt)
    skip_prompt: ignore the first ``put`` (transformers' ``generate`` sends the prompt first)
    out:         where "ansi" and "plain" write (default sys.stdout)
    """

    def __init__(self, tokenizer=None, *, mode: str = "auto", row: int = 0, skip_prompt: bool = True,
                 out: TextIO | None = None):
        if mode not in ("auto", "html", "ansi", "plain"):
            raise ValueError(f"mode must be 'auto', 'html', 'ansi' or 'plain', got {mode!r}")
        if not isinstance(row, int) or row < 0:
            raise ValueError(f"row must be an int >= 0, got {row!r}")
        self.out = out or sys.stdout
        if mode == "auto":
            mode = "html" if _in_notebook() else ("ansi" if getattr(self.out, "isatty", lambda: False)() else "plain")
        self.tokenizer, self.mode, self.row, self.skip_prompt = tokenizer, mode, row, skip_prompt
        self.tokens: list[int] = []
        self.kinds: list[str] = []
        self.segments: list[tuple[str, str]] = []  # (text, kind): what has been shown
        self._text = ""  # decode(tokens) up to the last shown piece
        self._shown = 0  # tokens whose text has been shown
        self._puts = 0
        self._handle = None
        self.ended = False

    # ------------------------------------------------------------------ feeding
    def __call__(self, step) -> None:
        """The ``on_step`` hook of :func:`specbook.decode.speculative_generate`."""
        if self.row not in step.rows:
            return  # this row has ended (or is not in the batch)
        slot = step.rows.index(self.row)
        kinds = step_kinds(step, slot)
        self._add(step.tokens[slot, : len(kinds)].tolist(), kinds)

    def put(self, value) -> None:
        """transformers' streamer protocol: ``value`` is a (1, T) or (T,) tensor, or a list, of new ids."""
        self._puts += 1
        if self.skip_prompt and self._puts == 1:
            return
        ids = value.reshape(-1).tolist() if torch.is_tensor(value) else [int(v) for v in value]
        self._add(ids, ["target"] * len(ids))

    def end(self) -> None:
        """Flush what is left (a character split across tokens) and finish the line."""
        self._flush(final=True)
        if self.mode != "html":
            self.out.write((ANSI_RESET if self.mode == "ansi" else "") + "\n")
            self.out.flush()
        self.ended = True

    # ------------------------------------------------------------------ rendering
    @property
    def text(self) -> str:
        return "".join(t for t, _ in self.segments)

    def counts(self) -> dict[str, int]:
        """Tokens of each kind so far."""
        return {k: self.kinds.count(k) for k in KINDS}

    def _add(self, ids: list[int], kinds: list[str]) -> None:
        self.tokens += [int(i) for i in ids]
        self.kinds += kinds
        self._flush(final=False)

    def _decode(self, ids: list[int]) -> str:
        if self.tokenizer is None:
            return "".join(f"[{i}]" for i in ids)
        return self.tokenizer.decode(ids)

    def _flush(self, final: bool) -> None:
        """Show each new token's piece of text; hold a piece that ends inside a multi-byte character."""
        new = []
        while self._shown < len(self.tokens):
            end = self._shown + 1
            text = self._decode(self.tokens[:end])
            while text.endswith("\ufffd") and end < len(self.tokens):  # a character split across tokens
                end += 1
                text = self._decode(self.tokens[:end])
            if text.endswith("\ufffd") and not final:
                break
            piece = text[len(self._text):] if text.startswith(self._text) else text
            new.append((piece, self.kinds[self._shown]))
            self._text, self._shown = text, end
        if not new:
            return
        self.segments += new
        if self.mode == "html":
            self._show_html()
        else:
            for piece, kind in new:
                colour = ANSI[kind] if self.mode == "ansi" else ""
                self.out.write(f"{colour}{piece}{ANSI_RESET}" if colour else piece)
            self.out.flush()

    def html(self) -> str:
        """The stream so far as HTML, with a legend."""
        spans = []
        for piece, kind in self.segments:
            bg, deco = _COLOURS[kind]
            spans.append(f'<span data-kind="{kind}" title="{MEANING[kind]}" style="background:{bg};'
                         f'text-decoration:{deco};white-space:pre-wrap">{html.escape(piece)}</span>')
        counts = self.counts()
        legend = " ".join(f'<span style="background:{_COLOURS[k][0]};padding:0 4px">{MEANING[k]}: {counts[k]}</span>'
                          for k in KINDS)
        return (f'<div style="font-family:monospace;line-height:1.6">{"".join(spans)}</div>'
                f'<div style="font-size:smaller;margin-top:4px">{legend}</div>')

    def _repr_html_(self) -> str:
        return self.html()

    def _show_html(self) -> None:
        from IPython.display import HTML, display

        if self._handle is None:
            self._handle = display(HTML(self.html()), display_id=True)
        else:
            self._handle.update(HTML(self.html()))
