"""The check every bad-input test uses: a clear ValueError or TypeError, in time, never silence.

``refuses(call, "alpha", "1.5")`` passes when ``call()`` raises ValueError or TypeError whose
message mentions every fragment (the argument's name, the bad value) within ``limit`` seconds.
Returning anything fails ("accepted silently"); running past the limit fails with
TimeoutError, raised by a SIGALRM watchdog (main thread only, which is where pytest runs tests).
"""
import contextlib
import signal

TIME_LIMIT = 5.0  # seconds; a refusal should take milliseconds, a hang is caught here


@contextlib.contextmanager
def watchdog(seconds: float):
    """Raise TimeoutError in the main thread if the body runs longer than ``seconds``."""
    def on_alarm(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def refuses(call, *fragments: str, limit: float = TIME_LIMIT) -> None:
    """Assert that ``call()`` raises ValueError or TypeError mentioning every fragment, in time."""
    with watchdog(limit):
        try:
            result = call()
        except (ValueError, TypeError) as err:
            message = str(err)
        else:
            raise AssertionError(f"accepted silently and returned {result!r}")
    for fragment in fragments:
        assert fragment in message, f"message {message!r} does not mention {fragment!r}"
