"""One command's session: its PID line taken off, lines streamed, output after the exit kept."""

from __future__ import annotations

import os

from gpufleet.remote.commands import PID_MARK
from gpufleet.remote.session import LineSplitter, pump


def test_line_splitter_strips_marker_and_streams_whole_lines():
    pids: dict[str, int] = {}
    seen = []
    s = LineSplitter("node-3", False, lambda n, line, e: seen.append((n, line)), pids)
    for chunk in (f"{PID_MARK} 42".encode(), b"\nhel", b"lo\nwor", b"ld"):
        s.feed(chunk)
    assert s.close() == "hello\nworld"
    assert seen == [("node-3", "hello"), ("node-3", "world")]
    assert pids == {"node-3": 42}


def test_output_that_arrives_after_the_exit_status_is_kept():
    """sshd may send a command's exit status before the last bytes it read from the
    command's stderr pipe (RFC 4254 section 6.10 orders neither; seen against the sandbox's
    OpenSSH: 1 run in 80 lost `echo err >&2`); EOF marks the end of both streams."""
    import threading

    class LateStderr:
        closed = False

        def __init__(self):
            self.polls = 0
            self.eof_received = False
            self.pending = [b"err\n"]

        def recv_ready(self):
            return False

        def exit_status_ready(self):
            return True  # from the start: the exit status came first

        def recv_stderr_ready(self):
            self.polls += 1
            return self.polls > 3 and bool(self.pending)

        def recv_stderr(self, _n):
            self.eof_received = True
            return self.pending.pop()

        def fileno(self):
            return idle  # select() on it just waits out its timeout

    pids: dict[str, int] = {}
    seen = []
    out = LineSplitter("node-0", False, lambda n, line, e: None, pids)
    err = LineSplitter("node-0", True, lambda n, line, e: seen.append(line), pids)
    idle, w = os.pipe()
    try:
        assert pump(LateStderr(), out, err, None, threading.Event()) is False
    finally:
        os.close(idle)
        os.close(w)
    assert seen == ["err"]
    assert err.close().strip() == "err"


def test_wait_readable_takes_a_descriptor_above_select_s_1024():
    """A client of a few hundred nodes holds over 1024 fds; select() refuses those."""
    import resource

    from gpufleet.remote.session import wait_readable

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 1100), hard))
    r, w = os.pipe()
    high = os.dup2(r, 1050)

    class Chan:
        def fileno(self):
            return high

    try:
        assert wait_readable(Chan(), 0) is False
        os.write(w, b"x")
        assert wait_readable(Chan(), 5) is True
    finally:
        for fd in (r, w, high):
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
