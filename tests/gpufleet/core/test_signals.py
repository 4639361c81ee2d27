"""Signals: SIGHUP is handled like SIGTERM; a signal deferred during teardown is not lost."""

from __future__ import annotations

import os
import signal

import pytest

from gpufleet.core import signals


def test_sighup_becomes_interrupted_with_exit_129(monkeypatch):
    old = {s: signal.getsignal(s) for s in signals.HANDLED}
    try:
        signals.install_handlers()
        with pytest.raises(signals.Interrupted) as e:
            os.kill(os.getpid(), signal.SIGHUP)
            signal.sigtimedwait([], 0)  # let the handler run
        assert e.value.exit_code == 129
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def test_a_signal_during_teardown_is_raised_after_it():
    old = {s: signal.getsignal(s) for s in signals.HANDLED}
    try:
        signals.install_handlers()
        with signals.shielded():
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0)
            assert signals.pending() == signal.SIGTERM  # remembered, not raised mid-cleanup
        with pytest.raises(signals.Interrupted) as e:
            signals.raise_pending()
        assert e.value.exit_code == 143
        assert signals.pending() is None
    finally:
        for s, h in old.items():
            signal.signal(s, h)
