"""Calling code under test safely: exceptions and bad outputs as data; the in-process timer.

The checker must never crash because the function it checks misbehaves.  An
exception, a timeout or a malformed return value becomes a :class:`CallFailed`
carrying a message meant for a student.

Normally the calls run in a worker process that the checker kills when a call
overruns (:mod:`specbook.grading.worker`).  :class:`LimitedCaller` is the
fallback for a function that cannot be sent to a worker (a spawn-only platform
and a function that cannot be pickled), and it is weaker: a student's bare
``except:`` inside a loop can swallow its alarm, and code that ignores the alarm
runs on.  A limit of ``math.inf`` (or anything above ``MAX_ALARM`` seconds, which
``setitimer`` cannot represent on every platform) arms no alarm at all.

Time limit.  On POSIX, in the main thread (a script, pytest, a Jupyter kernel),
each call runs under ``signal.setitimer(ITIMER_REAL, limit)``; the alarm raises
:class:`_Deadline` (a ``BaseException``, so a student's ``except Exception`` cannot
swallow it) inside the running Python code.  Code stuck inside one long C call
(one huge tensor operation) is interrupted when that call returns to Python.

Elsewhere (Windows, or the checker itself running in a worker thread) the calls
run on one daemon worker thread and the checker waits for each result with a
timeout.  Python cannot kill a thread: a call that exceeds the limit keeps
running in the background until it finishes (or the interpreter exits), and the
checker makes no further calls to that function.
"""
from __future__ import annotations

import numbers
import os
import queue
import signal
import threading
import traceback
from typing import Any, Callable

import torch


class CallFailed(Exception):
    """The function under test raised, timed out or returned something unusable.

    kind: "raised" | "timeout" | "bad output" | "modified input" | "crashed" | "budget"
    """

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


MAX_ALARM = 1e6  # seconds; a longer per-call limit is treated as "no limit" by the in-process timer


class _Deadline(BaseException):
    """Raised by the alarm handler inside the function under test."""


def _on_alarm(signum, frame):  # pragma: no cover - runs inside the signal handler
    raise _Deadline()


def describe_exception(exc: BaseException) -> str:
    """One readable paragraph: the exception and the last lines of its traceback."""
    if isinstance(exc, NotImplementedError):
        return "raised NotImplementedError: the function is still a stub (fill in the solution)"
    here = os.path.dirname(os.path.abspath(__file__))
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(here)][-2:]
    where = "; ".join(f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}: {(f.line or '').strip()}"
                      for f in frames)
    return f"raised {type(exc).__name__}: {exc}" + (f"  (at {where})" if where else "")


class LimitedCaller:
    """Context manager calling ``fn(*args)`` with a per-call time limit (seconds).

    >>> with LimitedCaller(fn, limit=2.0) as call:
    ...     out = call(x, y)          # raises CallFailed on exception or timeout
    """

    def __init__(self, fn: Callable, limit: float):
        if not callable(fn):
            raise ValueError(f"fn must be callable, got {type(fn).__name__}")
        if isinstance(limit, bool) or not (isinstance(limit, (int, float)) and limit > 0):
            raise ValueError(f"call_timeout must be a positive number of seconds, got {limit!r}")
        self.fn = fn
        self.limit = float(limit)
        self.armed = self.limit <= MAX_ALARM
        self.use_signal = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
        self._old_handler = None
        self._worker: threading.Thread | None = None
        self._jobs: queue.Queue = queue.Queue()
        self._results: queue.Queue = queue.Queue()
        self.hung = False  # a call ran past the limit: no further calls are made

    # -- signal mode ---------------------------------------------------------------------------
    def __enter__(self) -> "LimitedCaller":
        if self.use_signal:
            self._old_handler = signal.signal(signal.SIGALRM, _on_alarm)
        return self

    def __exit__(self, *exc) -> None:
        if self.use_signal:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._old_handler if self._old_handler is not None else signal.SIG_DFL)
        elif self._worker is not None and not self.hung:
            self._jobs.put(None)

    def __call__(self, *args) -> Any:
        if self.hung:
            raise CallFailed("timeout", "an earlier call ran past the time limit; no further calls are made")
        if not self.use_signal:
            return self._call_threaded(args)
        try:
            if self.armed:
                signal.setitimer(signal.ITIMER_REAL, self.limit)
            try:
                return self.fn(*args)
            finally:
                if self.armed:
                    signal.setitimer(signal.ITIMER_REAL, 0)
        except _Deadline:
            self.hung = True
            raise CallFailed("timeout", f"did not return within the per-call limit of {self.limit:g} s") from None
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # SystemExit from student code is a failure too, not an exit
            raise CallFailed("raised", describe_exception(exc)) from None

    # -- thread mode ---------------------------------------------------------------------------
    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                self._results.put((True, self.fn(*job)))
            except BaseException as exc:  # noqa: BLE001 - reported, never re-raised in the worker
                self._results.put((False, exc))

    def _call_threaded(self, args) -> Any:
        if self._worker is None:
            self._worker = threading.Thread(target=self._serve, name="specbook-grading-call", daemon=True)
            self._worker.start()
        self._jobs.put(args)
        try:
            ok, value = self._results.get(timeout=self.limit if self.armed else None)
        except queue.Empty:
            self.hung = True
            raise CallFailed("timeout", f"did not return within the per-call limit of {self.limit:g} s "
                                        "(it keeps running in a background thread)") from None
        if ok:
            return value
        raise CallFailed("raised", describe_exception(value))


# --------------------------------------------------------------------------- output coercion

def as_token(out: Any) -> int:
    """A token id from a token rule's return value: an int, a numpy integer or a one-element integer tensor."""
    if type(out) is int:
        return out
    if isinstance(out, bool) or out is None:
        raise CallFailed("bad output", f"returned {out!r}; return the emitted token id as an int")
    if isinstance(out, numbers.Integral):
        return int(out)
    if isinstance(out, torch.Tensor):
        if out.dtype == torch.bool or out.is_floating_point() or out.is_complex():
            raise CallFailed("bad output", f"returned a {out.dtype} tensor {_short(out)}; return an int token id "
                                           "(for example int(torch.multinomial(...)))")
        if out.numel() != 1:
            raise CallFailed("bad output", f"returned a tensor of shape {tuple(out.shape)}; return one int token id")
        return int(out.reshape(()).item())
    if isinstance(out, float):
        raise CallFailed("bad output", f"returned the float {out!r}; return an int token id")
    raise CallFailed("bad output", f"returned a {type(out).__name__} ({_short(out)}); return an int token id")


def as_block(out: Any, max_len: int) -> list[int]:
    """The emitted tokens from a verifier's return value: a 1-D integer tensor of 1..max_len entries."""
    if not isinstance(out, torch.Tensor):
        raise CallFailed("bad output",
                         f"returned a {type(out).__name__} ({_short(out)}); return a 1-D torch.LongTensor")
    if out.dtype == torch.bool or out.is_floating_point() or out.is_complex():
        raise CallFailed("bad output",
                         f"returned a {out.dtype} tensor {_short(out)}; return a LongTensor of token ids")
    if out.ndim != 1:
        raise CallFailed("bad output", f"returned a tensor of shape {tuple(out.shape)}; return a 1-D tensor of the "
                                       "emitted tokens (no batch dimension)")
    if not 1 <= out.shape[0] <= max_len:
        raise CallFailed("bad output", f"returned {out.shape[0]} tokens {_short(out)}; a verifier emits between 1 and "
                                       f"K+1 = {max_len} tokens (the accepted drafts, then one corrected or bonus token)")
    return out.tolist()


def _short(x: Any, limit: int = 60) -> str:
    text = repr(x)
    return text if len(text) <= limit else text[: limit - 3] + "..."
