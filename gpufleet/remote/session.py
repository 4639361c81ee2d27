"""One command's session on one node's SSH channel: its PID line, streamed output, exit status."""

from __future__ import annotations

import select
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpufleet.core.errors import GpufleetError
from gpufleet.remote.commands import PID_MARK

if TYPE_CHECKING:
    import threading

Stream = Callable[[str, str, bool], None]  # (node name, line without newline, is_stderr)
EOF_GRACE_S = 1.0  # output that arrives after the exit status, before EOF


def wait_readable(chan: Any, timeout: float) -> bool:
    """Until `chan` has something to read (True) or `timeout` passes (False).

    poll(), never select(): select() refuses a descriptor at or above FD_SETSIZE (1024,
    "filedescriptor out of range in select()"), and a client of a few hundred nodes holds
    more than that (each channel's fileno() is a pipe of 2 fds, each direct node a socket).
    """
    p = select.poll()
    p.register(chan.fileno(), select.POLLIN)
    return bool(p.poll(timeout * 1000))


class LineSplitter:
    """One output stream of a command: its PID line taken off into `pids`, whole lines streamed."""

    def __init__(self, node: str, is_err: bool, stream: Stream | None, pids: dict[str, int]):
        self.node, self.is_err, self.stream, self.pids = node, is_err, stream, pids
        self.pending = b""
        self.chunks: list[bytes] = []
        self.marker_seen = is_err

    def feed(self, data: bytes) -> None:
        if not self.marker_seen:
            data = self._take_marker(data)
            if not self.marker_seen:
                return
        self.chunks.append(data)
        if self.stream:
            self.pending += data
            *lines, self.pending = self.pending.split(b"\n")
            for line in lines:
                self.stream(self.node, line.decode(errors="replace"), self.is_err)

    def _take_marker(self, data: bytes) -> bytes:
        self.pending += data
        if b"\n" not in self.pending:
            return b""
        first, rest = self.pending.split(b"\n", 1)
        self.pending = b""
        self.marker_seen = True
        text = first.decode(errors="replace")
        if text.startswith(PID_MARK):
            self.pids[self.node] = int(text.split()[1])
            return rest
        return first + b"\n" + rest

    def close(self) -> str:
        if self.stream and self.pending:
            self.stream(self.node, self.pending.decode(errors="replace"), self.is_err)
        return b"".join(self.chunks).decode(errors="replace")


def pump(
    chan: Any,
    out: LineSplitter,
    err: LineSplitter,
    deadline: float | None,
    stop: threading.Event,
) -> bool:
    """Move output into the splitters until the command ends; True if the deadline hit."""
    while True:
        progressed = False
        if chan.recv_ready():
            out.feed(chan.recv(65536))
            progressed = True
        if chan.recv_stderr_ready():
            err.feed(chan.recv_stderr(65536))
            progressed = True
        if progressed:
            continue
        if chan.exit_status_ready() or chan.closed:
            # sshd may send the exit status before the last output it read from the
            # command's pipes (RFC 4254 puts no order on them; seen: a lost stderr line);
            # EOF follows once both are drained, unless a background process holds them
            # open, so wait for it only briefly.
            grace = time.monotonic() + EOF_GRACE_S
            while True:
                if chan.recv_ready():
                    out.feed(chan.recv(65536))
                elif chan.recv_stderr_ready():
                    err.feed(chan.recv_stderr(65536))
                elif chan.closed or chan.eof_received or time.monotonic() > grace:
                    return False
                else:
                    wait_readable(chan, 0.05)
        if deadline is not None and time.monotonic() > deadline:
            return True
        if stop.is_set():
            return False  # closed under us: the caller reports no exit status
        wait_readable(chan, 0.2)


def await_ready(chan: Any, node_name: str, command: str, ready: str, timeout: float) -> Any:
    """The channel of a started command once it prints `ready`; GpufleetError (channel closed)
    if it exits first or is not ready within `timeout`."""
    deadline = time.monotonic() + timeout
    seen = b""
    while ready.encode() not in seen:
        if chan.recv_ready():
            seen += chan.recv(65536)
            continue
        why = None
        if chan.exit_status_ready():
            why = f"it exited {chan.recv_exit_status()}"
        elif time.monotonic() > deadline:
            why = f"it was not ready after {timeout:.0f}s"
        if why:
            err = chan.recv_stderr(65536).decode(errors="replace").strip().splitlines()
            chan.close()
            raise GpufleetError(
                f"{node_name}: `{command}` failed: {why}" + (f" ({err[-1]})" if err else "")
            )
        wait_readable(chan, 0.2)
    return chan
