"""SIGINT/SIGTERM become an Interrupted error, so cleanup code runs and the exit code is 130/143."""

from __future__ import annotations

import signal
import threading

from components.errors import GpufleetError


class Interrupted(GpufleetError):
    """The user (SIGINT, exit 130) or the system (SIGTERM, exit 143) asked us to stop."""

    def __init__(self, signum: int):
        name = signal.Signals(signum).name
        super().__init__(f"interrupted by {name}")
        self.signum = signum
        self.exit_code = 128 + signum


_deferred: list[int] = []
_shielded = threading.local()


def _handler(signum: int, frame: object) -> None:
    if getattr(_shielded, "on", False):
        _deferred.append(signum)  # cleanup in progress: finish it, then stop
        return
    raise Interrupted(signum)


def install_handlers() -> None:
    """Raise Interrupted in the main thread on SIGINT and SIGTERM."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _handler)
        signal.signal(signal.SIGTERM, _handler)


class shielded:
    """Context manager: signals during teardown are remembered, not raised mid-cleanup."""

    def __enter__(self) -> shielded:
        _shielded.on = True
        return self

    def __exit__(self, *exc: object) -> None:
        _shielded.on = False


def pending() -> int | None:
    """A signal that arrived while shielded, if any."""
    return _deferred[0] if _deferred else None
