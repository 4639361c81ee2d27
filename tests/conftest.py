"""Shared fixtures: an isolated state dir, and golden files for rendered text."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture(autouse=True)
def gpufleet_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Every test gets its own $GPUFLEET_HOME, so no test sees another's clusters."""
    home = tmp_path_factory.mktemp("gpufleet-home")
    monkeypatch.setenv("GPUFLEET_HOME", str(home))
    yield home
    # Safety net for a test that failed before its own teardown: nothing started under this
    # home (sshd, watchdog, QEMU, holder) outlives it. Fixtures that assert "no leftovers"
    # tear down before this one, so a real leak still fails its test.
    stop_processes_under(home / "clusters")


def _processes_under(root: Path) -> list[int]:
    marker = (str(root) + "/").encode()
    found = []
    for p in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if int(p.name) != os.getpid() and marker in (p / "cmdline").read_bytes():
                found.append(int(p.name))
    return found


def stop_processes_under(root: Path, grace_s: float = 2.0) -> None:
    """TERM, then KILL after a grace, every process whose command line names `root`."""
    pids = _processes_under(root)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and (pids := _processes_under(root)):
            time.sleep(0.05)
        if not pids:
            return


@pytest.fixture
def golden():
    """golden(name, text): compare with tests/golden/<name>; GPUFLEET_UPDATE_GOLDEN=1 rewrites.

    Regenerate after an intended change with `make golden`, then review the diff.
    """

    def check(name: str, text: str) -> None:
        path = GOLDEN / name
        if os.environ.get("GPUFLEET_UPDATE_GOLDEN") == "1":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return
        assert path.exists(), f"missing golden file {path}; create it with `make golden`"
        assert text == path.read_text(), f"{name} differs from its golden file (`make golden`)"

    return check
