"""A wall-clock limit on a whole `run`: at the deadline the run stops as if interrupted."""

from __future__ import annotations

import signal

from gpufleet.core.signals import Interrupted, _shielded

EXIT_TIMEOUT = 124  # what timeout(1) exits with, so CI scripts read it the same way


class TimedOut(Interrupted):
    """The run passed its --timeout: the job is stopped on every node and teardown runs."""

    def __init__(self, seconds: float):
        super().__init__(signal.SIGALRM)
        self.message = f"timed out after {seconds:g}s (--timeout)"
        self.hint = "raise --timeout, or make the job shorter"
        self.exit_code = EXIT_TIMEOUT


def arm(seconds: float) -> None:
    """Raise TimedOut in the main thread after `seconds` (not during a shielded teardown)."""

    def _fire(signum: int, frame: object) -> None:
        if getattr(_shielded, "on", False):
            return  # teardown is already under way; let it finish
        raise TimedOut(seconds)

    signal.signal(signal.SIGALRM, _fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)


def disarm() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)
