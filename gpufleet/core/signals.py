"""SIGINT/SIGTERM/SIGHUP become an Interrupted error, so cleanup runs; exit 130/143/129."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

from gpufleet.components.errors import GpufleetError

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(GpufleetError):
    """Ctrl-C (SIGINT, 130), the system (SIGTERM, 143) or a closed terminal (SIGHUP, 129)."""

    def __init__(self, signum: int):
        name = signal.Signals(signum).name
        super().__init__(f"interrupted by {name}")
        self.signum = signum
        self.exit_code = 128 + signum


_deferred: list[int] = []
_shielded = threading.local()


def _handler(signum: int, frame: object) -> None:
    if getattr(_shielded, "on", False) and not _deferred:
        _deferred.append(signum)  # cleanup in progress: finish it, then stop
        # os.write, not print: the interrupted code may hold the stderr lock
        with contextlib.suppress(OSError):  # SIGHUP: the terminal may be gone
            os.write(2, b"gpufleet: finishing the teardown first (signal again to abandon it)\n")
        return
    # a second signal during cleanup abandons it; the caller names `gpufleet down`
    _deferred.clear()
    raise Interrupted(signum)


def install_handlers() -> None:
    """Raise Interrupted in the main thread on SIGINT, SIGTERM and SIGHUP.

    A closed terminal or a dropped SSH session sends SIGHUP; without a handler the CLI
    would die on the spot and leave the cluster running.
    """
    if threading.current_thread() is threading.main_thread():
        for sig in HANDLED:
            signal.signal(sig, _handler)


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


def raise_pending() -> None:
    """After a shielded cleanup: a signal it deferred becomes Interrupted now (never swallowed)."""
    if _deferred:
        signum = _deferred[0]
        _deferred.clear()
        raise Interrupted(signum)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Hold our signals back while starting threads (directly or through a pool's submit):
    a signal raised inside Thread.start() leaves CPython's thread bookkeeping half done (a
    KeyError traceback from the new thread). Held signals are delivered right after."""
    main = threading.current_thread() is threading.main_thread()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED) if main else None
    try:
        yield
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def start_threads(threads: list[threading.Thread]) -> None:
    with held():
        for t in threads:
            t.start()
