"""Sandbox processes: found by the folder their command line names, stopped TERM then KILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from gpufleet.provision import localprocs

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")


def _sleeper(*args: str, ignore_term: bool = False) -> subprocess.Popen:
    code = "import signal, time\n"
    if ignore_term:
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    code += "print('up', flush=True)\ntime.sleep(60)\n"
    p = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "up\n"  # its handlers are set
    return p


def test_folder_processes_are_those_naming_the_folder(tmp_path):
    ours = _sleeper(f"{tmp_path / 'c'}/")
    other = _sleeper(f"{tmp_path / 'cc'}/")  # a folder whose name starts the same
    try:
        found = localprocs.folder_processes(tmp_path / "c")
        assert ours.pid in found and other.pid not in found
        assert "time.sleep(60)" in localprocs._cmdline(ours.pid)
    finally:
        for p in (ours, other):
            p.kill()
            p.wait()


def test_terminate_kills_what_ignores_term_after_the_grace(tmp_path):
    polite, stubborn = _sleeper(), _sleeper(ignore_term=True)
    try:
        started = time.monotonic()
        localprocs.terminate([polite.pid, stubborn.pid], grace_s=0.5)
        assert not localprocs._alive(polite.pid)  # gone on TERM (and reaped: a zombie is gone)
        assert stubborn.wait(timeout=5) == -signal.SIGKILL
        assert time.monotonic() - started >= 0.5  # the grace it was given
    finally:
        for p in (polite, stubborn):
            p.kill()
            p.wait()


def test_descendants_are_children_and_theirs():
    code = (
        "import subprocess, sys, time; "
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print(c.pid, flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    try:
        assert localprocs._descendants(parent.pid) == [child]
    finally:
        localprocs.terminate([child, parent.pid], grace_s=1)
        parent.wait()


def test_descendants_from_one_parent_map():
    parents = {2: 1, 3: 2, 4: 2, 5: 3, 6: 1, 7: 99}  # 1 -> 2 -> {3 -> 5, 4}, 1 -> 6
    assert sorted(localprocs._descendants(2, parents)) == [3, 4, 5]
    assert sorted(localprocs._descendants(1, parents)) == [2, 3, 4, 5, 6]
    assert localprocs._descendants(5, parents) == []
