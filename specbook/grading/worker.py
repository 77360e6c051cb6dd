"""Running the code under test in a child process that can be stopped for sure.

A time limit enforced inside the checker's own process can be defeated: an alarm
raises an exception in the student's code, and a bare ``except:`` inside a loop
swallows it; code that ignores the alarm (or blocks it) runs on.  A child process
cannot resist ``SIGKILL``.  So one worker process per check runs the whole batch
of calls of each case (one process per *call* would cost more than the calls
themselves), and the checker kills it when a call overruns ``call_timeout`` or the
check overruns ``time_budget``.

The worker and the checker share two numbers (a ``multiprocessing.RawArray``): the
index of the call in progress and the time it started.  The checker polls them
while it waits for the case's result, so it knows which call hung.

Start method.  ``fork`` where the platform has it (Linux, macOS): the child gets
the function, the plan and the cases by copy-on-write memory, so a function
defined in a notebook or in ``__main__`` works and nothing is pickled on the way
in.  ``spawn`` elsewhere (Windows): the function must be picklable (defined at
module level in an importable file); if it is not, :func:`open_runner` returns
``None`` and the checker runs the calls in its own process with the older,
weaker timer (see :mod:`specbook.grading.calls`), and says so in the report.

Generators do not cross the boundary: the worker builds the case's generators
from their seeds, exactly as the in-process path does, so a case's data are the
same wherever it ran.  What comes back is a :class:`~specbook.grading.engine.Collected`
of numpy arrays and plain Python values.
"""
from __future__ import annotations

import math
import multiprocessing as mp
import pickle
import time
from typing import Any, Callable

import torch

from .calls import CallFailed, describe_exception

# fork keeps notebook/__main__ functions usable; spawn is the portable fallback (Windows).
START_METHOD = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
POLL_SECONDS = 0.01  # how often the checker looks at the worker's progress while it waits
KILL_GRACE = 1.0  # seconds past the time budget before the checker stops waiting for a result


def _serve(conn, progress, fn: Callable, plan, run_case: Callable, run_replay: Callable) -> None:
    """The worker's loop: one request per case ("case", index, seed, seconds_left) or ("replay", seed)."""
    torch.set_num_threads(1)

    def call(*args) -> Any:
        progress[0] += 1
        progress[1] = time.monotonic()
        try:
            return fn(*args)
        except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt are failures here too
            raise CallFailed("raised", describe_exception(exc)) from None
        finally:
            progress[1] = 0.0

    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        if request[0] == "case":
            _, index, seed, seconds_left = request
            progress[0] = 0
            result = run_case(plan, index, call, seed, seconds_left)
        else:
            result = run_replay(plan, call, request[1])
        conn.send(result)


class Runner:
    """A worker process for one check: ``run(request) -> result``, or a CallFailed / budget failure.

    ``limit``: seconds per call (``math.inf``: none); ``budget_end``: ``time.monotonic()`` value at
    which the whole check must stop.
    """

    def __init__(self, fn: Callable, plan, run_case: Callable, run_replay: Callable, limit: float,
                 budget_end: float, method: str):
        ctx = mp.get_context(method)
        self.limit = limit
        self.budget_end = budget_end
        self.progress = ctx.RawArray("d", 2)  # [calls started in this case, start time of the call running]
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, self.progress, fn, plan, run_case, run_replay),
                                   name="specbook-grading-worker", daemon=True)
        self.process.start()
        child.close()
        self.dead = False

    def run(self, request: tuple) -> Any:
        """Send one request and wait for its answer; kill the worker if a call or the budget overruns.

        Raises CallFailed("timeout" | "crashed" | "budget") when no answer comes back.
        """
        if self.dead:
            raise CallFailed("timeout", "an earlier call ran past the time limit; no further calls are made")
        self.conn.send(request)
        while True:
            if self.conn.poll(POLL_SECONDS):
                try:
                    return self.conn.recv()
                except (EOFError, OSError):
                    break  # the worker died while sending
            now = time.monotonic()
            started = self.progress[1]
            if started and now - started > self.limit:
                self.kill()
                raise CallFailed("timeout", f"did not return within the per-call limit of {self.limit:g} s "
                                            "(the worker process running it was stopped)")
            if now > self.budget_end + KILL_GRACE:
                self.kill()
                raise CallFailed("budget", "the time budget ran out during a call (the worker process was stopped)")
            if not self.process.is_alive():
                break
        self.dead = True
        self.process.join(5)
        code = self.process.exitcode
        raise CallFailed("crashed", f"the process running the function died (exit code {code}) during call "
                                    f"{int(self.progress[0])}: the function crashed the interpreter or called "
                                    "os._exit")

    @property
    def call_index(self) -> int:
        """1-based index, within the current case, of the last call started."""
        return int(self.progress[0])

    def kill(self) -> None:
        self.dead = True
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)

    def close(self) -> None:
        if not self.dead and self.process.is_alive():
            try:
                self.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self.process.join(2)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self.conn.close()


def open_runner(fn: Callable, plan, run_case: Callable, run_replay: Callable, limit: float,
                budget_end: float, method: str | None = None) -> tuple[Runner | None, str]:
    """A :class:`Runner`, or (None, why) when the function cannot be sent to a spawned worker."""
    method = method or START_METHOD
    if method == "spawn":
        try:
            pickle.dumps((fn, plan))
        except Exception as exc:  # noqa: BLE001 - any pickling error means "cannot spawn"
            return None, (f"this platform starts worker processes by spawn, and the function cannot be pickled "
                          f"({type(exc).__name__}: {exc}); the calls ran in the checker's own process, where a "
                          "function that catches every exception or ignores the alarm cannot be stopped. Define "
                          "the function at module level in an importable .py file to get the safe timer.")
    return Runner(fn, plan, run_case, run_replay, limit, budget_end, method), ""


def normalise_limit(call_timeout, name: str = "call_timeout") -> float:
    """Seconds per call as a float; None or math.inf mean "no limit" (math.inf)."""
    if call_timeout is None:
        return math.inf
    if isinstance(call_timeout, bool) or not isinstance(call_timeout, (int, float)) or not call_timeout > 0:
        raise ValueError(f"{name} must be a positive number of seconds (or None / math.inf for no limit), "
                         f"got {call_timeout!r}")
    return float(call_timeout)
