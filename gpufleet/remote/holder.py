"""A per-cluster process holding SSH connections open; later `exec`s reach it over a socket.

Started in the background by the first `exec` on a cluster, it keeps one authenticated
transport per node, so a warm command costs a channel per node instead of a handshake.
It listens on a Unix socket in the cluster's state folder (0600, and it checks that the
peer is this user), serves one JSON request per connection, and exits when `down` asks
it to, when the cluster's record goes or is replaced, at the cluster's expiry, or after
GPUFLEET_HOLDER_IDLE seconds (default 900) without a request.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from gpufleet.core import state
from gpufleet.core.errors import HostResult

IDLE_S = 900.0
CHECK_S = 1.0
# Requests served at once on the held connections; one more is turned away unanswered and its
# client connects afresh. A request is a session on every node's one connection, two while its
# kill runs, and sshd allows MaxSessions per connection (sshd_config(5): 10 by default, so on
# a BYO host; 64 on the nodes gpufleet creates): an 11th at once failed on every node.
CONCURRENT = 4


def enabled() -> bool:
    """GPUFLEET_HOLDER=0 turns the holder off (every command then connects afresh)."""
    return os.environ.get("GPUFLEET_HOLDER", "1") != "0"


def socket_path(name: str) -> Path:
    return state.cluster_dir(name) / "holder.sock"


def _pid_path(name: str) -> Path:
    return state.cluster_dir(name) / "holder.pid"


def _record_id(name: str) -> float | None:
    """Which cluster the record describes (its creation time); None once it is gone.

    Not the file's mtime: the record is rewritten in place (host keys rotated on first
    contact, a renewed lease) and stays the same cluster.
    """
    try:
        return json.loads((state.cluster_dir(name) / "cluster.json").read_text())["created_at"]
    except (OSError, ValueError, KeyError):
        return None


def spawn(name: str) -> None:
    """Start the holder for `name` in the background (a second one exits at once)."""
    with contextlib.suppress(OSError), open(state.cluster_dir(name) / "holder.log", "ab") as log:
        subprocess.Popen(
            # the folder in argv lets folder-based cleanup (sweep, a test's teardown) find it
            [sys.executable, "-m", "gpufleet.remote.holder", name, f"{state.cluster_dir(name)}/"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
            env={**os.environ, "GPUFLEET_HOME": str(state.home())},
        )


def _connect(name: str) -> socket.socket | None:
    path = socket_path(name)
    if not path.exists():
        return None
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(str(path))
    except OSError:
        s.close()
        return None
    return s


def _send(s: socket.socket, obj: Any) -> None:
    s.sendall(json.dumps(obj).encode() + b"\n")


def request(
    name: str,
    command: str,
    nodes: list[str],
    timeout: float | None,
    stream: Any,
) -> dict[str, HostResult] | None:
    """Run on `nodes` through the holder: node -> HostResult, or None when no holder answers."""
    s = _connect(name)
    if s is None:
        return None
    with s:
        try:
            _send(s, {"cmd": command, "nodes": nodes, "timeout": timeout})
        except OSError:
            return None
        f = s.makefile("rb")
        started = False
        for raw in f:
            msg = json.loads(raw)
            started = True
            if msg[0] == "o":
                if stream is not None:
                    stream(msg[1], msg[2], msg[3])
            elif msg[0] == "r":
                return {n: HostResult(**r) for n, r in msg[1].items()}
            elif msg[0] == "e":  # the holder could not serve this (e.g. unknown node)
                raise _error(*msg[1:])
        if not started:
            return None  # it went away before taking the request: connect afresh
        now = time.time()
        return {n: HostResult(n, None, "", "", "connection holder exited", now, now) for n in nodes}


def _error(text: str, hint: str | None = None, exit_code: int | None = None) -> Exception:
    """The holder's refusal as a GpufleetError with the message, fix and exit code the holder
    saw (an unknown node is bad input, 2, as on every other path)."""
    from gpufleet.core.errors import GpufleetError

    return GpufleetError(text, hint=hint, exit_code=exit_code)


def stop(name: str, wait_s: float = 3.0) -> None:
    """Ask the holder to exit and wait for it; a no-op when none runs."""
    s = _connect(name)
    if s is not None:
        with s, contextlib.suppress(OSError):
            _send(s, {"op": "stop"})
            s.recv(16)
    pid_file = _pid_path(name)
    with contextlib.suppress(OSError, ValueError):
        pid = int(pid_file.read_text())
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _is_holder(pid, name):
            time.sleep(0.02)
        if _is_holder(pid, name):
            os.kill(pid, 15)


def _is_holder(pid: int, name: str) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    folder = f"{state.cluster_dir(name)}/".encode()
    return b"gpufleet.remote.holder" in cmd and name.encode() in cmd and folder in cmd


class Holder:
    """The server side: one shared Group, a thread per request."""

    def __init__(self, name: str, idle_s: float):
        from gpufleet.core import limits
        from gpufleet.remote import Group

        self.name = name
        self.idle_s = idle_s
        self.info = state.load(name)  # validated: first contact may rotate host keys
        limits.ensure(len(self.info.nodes), commands=CONCURRENT)  # or no holder: execs go cold
        self.record = _record_id(name)
        self.group = Group(self.info)  # holds the transports; requests run on subsets
        self.busy = 0
        self.last = time.monotonic()
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(CONCURRENT)

    def should_exit(self) -> bool:
        if self.stopping.is_set():
            return True
        if _record_id(self.name) != self.record:
            return True  # `down`, the sandbox watchdog, or a new cluster of the same name
        expires = getattr(self.info, "expires_at", None)
        if expires and time.time() > expires:
            return True
        with self.lock:
            return self.busy == 0 and time.monotonic() - self.last > self.idle_s

    def serve(self, sock: socket.socket) -> None:
        sock.settimeout(CHECK_S)
        while not self.should_exit():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            if not _same_user(conn):
                conn.close()
                continue
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def handle(self, conn: socket.socket) -> None:
        with self.lock:
            self.busy += 1
        try:
            with conn:
                self._handle(conn)
        except Exception:
            pass  # the client went away; its commands were cancelled
        finally:
            with self.lock:
                self.busy -= 1
                self.last = time.monotonic()

    def _handle(self, conn: socket.socket) -> None:
        f = conn.makefile("rb")
        req = json.loads(f.readline() or b"{}")
        if req.get("op") == "stop":
            self.stopping.set()
            conn.sendall(b"ok\n")
            return
        if req.get("op") == "ping" or "cmd" not in req:
            conn.sendall(b"ok\n")
            return
        if not self.slots.acquire(blocking=False):
            return  # closed unanswered: request() returns None, the client connects itself
        try:
            self._serve(conn, req)
        finally:
            self.slots.release()

    def _serve(self, conn: socket.socket, req: dict[str, Any]) -> None:
        try:
            sub = self.group.subset(req["nodes"] or [n.name for n in self.info.nodes])
        except Exception as e:
            # the error as the client raises it: its message, fix and exit code
            _send(conn, ["e", str(e), getattr(e, "hint", None), getattr(e, "exit_code", None)])
            return
        out_lock = threading.Lock()
        done = threading.Event()

        def stream(node: str, line: str, is_err: bool) -> None:
            with out_lock:
                _send(conn, ["o", node, line, is_err])

        def watch() -> None:  # the client hung up (Ctrl-C): stop its commands everywhere
            with contextlib.suppress(OSError):
                while not done.is_set() and conn.recv(1):
                    pass
            if not done.is_set():
                sub.cancel()

        threading.Thread(target=watch, daemon=True).start()
        try:
            results = sub.run(req["cmd"], stream=stream, check=False, timeout=req.get("timeout"))
        finally:
            done.set()
            sub.close()
        with out_lock:
            _send(conn, ["r", {n: r.__dict__ for n, r in results.items()}])


def _same_user(conn: socket.socket) -> bool:
    if not hasattr(socket, "SO_PEERCRED"):
        return True  # not Linux: the socket file's 0600 mode is the guard
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid == os.getuid()


def main(name: str) -> None:
    import fcntl

    cdir = state.cluster_dir(name)
    lock = open(cdir / "holder.lock", "w")  # noqa: SIM115 - held for the process's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return  # another holder serves this cluster
    holder = Holder(name, float(os.environ.get("GPUFLEET_HOLDER_IDLE", IDLE_S)))
    with contextlib.suppress(Exception):
        holder.group.wait_ready(timeout=30)
    path = socket_path(name)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    sock.listen(128)
    _pid_path(name).write_text(str(os.getpid()))
    try:
        holder.serve(sock)
    finally:
        sock.close()
        with contextlib.suppress(OSError):
            if _record_id(name) == holder.record:
                path.unlink()
                _pid_path(name).unlink()
        holder.group.close()


if __name__ == "__main__" and len(sys.argv) == 3:  # NAME FOLDER/ (the folder: for cleanup)
    main(sys.argv[1])
