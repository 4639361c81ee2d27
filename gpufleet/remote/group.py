"""A threaded SSH group: runs on every node at once and returns a node -> HostResult map."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.core import limits
from gpufleet.core.errors import (
    GroupError,
    HostKeyMismatch,
    HostResult,
    HostsNotOurs,
    SSHUnreachable,
)
from gpufleet.core.providers import EXPIRY, HOST_KEY, LEASE, may_write
from gpufleet.core.signals import held, start_threads
from gpufleet.remote import knownhosts
from gpufleet.remote.commands import kill_group_command, tar_files, wrap_command
from gpufleet.remote.lease import expiry_command, lease_command, on_every_node
from gpufleet.remote.session import LineSplitter, Stream, await_ready, pump

if TYPE_CHECKING:
    from gpufleet.components.clusterinfo import NodeInfo
    from gpufleet.core.state import ClusterRecord

KEEPALIVE_S = 5  # SSH keepalive on every connection: NATs and idle timeouts keep it open
PROBE_EVERY_S = 5.0  # liveness: how often each node is asked for a channel while a job runs
LOST_AFTER_S = 20.0  # liveness: a node that answers nothing for this long is lost
STDIN_CHUNK = 1 << 20  # a file given as stdin is sent in pieces of this size, never read whole
FAIL_FAST_GRACE_S = 3.0  # fail-fast: TERM, then KILL after this long
OPEN_ATTEMPTS = 3  # a node's session channel, before its command is sent: tries per command
RETRY_DELAY_S = 0.2  # ... and the wait before the next try, times the try's number
HEAD_REOPENS = 1  # a dropped head connection is re-opened this often per run() (its workers' too)


class Group:
    """Connections to some or all of a cluster's nodes, reused across commands."""

    def __init__(
        self,
        info: ClusterRecord,
        nodes: list[str] | None = None,
        *,
        connect_timeout: float = 10.0,
        max_workers: int | None = None,
        share: Group | None = None,
        kill_marker: str | None = None,
    ):
        self.info = info
        # cancel() also ends every process of the user whose environment holds this line
        # (e.g. GPUFLEET_RUN_ID=<id>): ranks started in sessions of their own (torchrun's)
        self.kill_marker = kill_marker
        self.nodes = [info.node(n) for n in nodes] if nodes else list(info.nodes)
        self.connect_timeout = connect_timeout
        if share is None:
            limits.ensure(len(self.nodes))  # its fds and threads, before any is opened
        # One worker per node, never fewer: a job's command runs until the job ends, so a
        # node left waiting for a worker would never start (257 nodes with a cap of 256).
        self._pool = ThreadPoolExecutor(max_workers=max_workers or max(len(self.nodes), 1))
        self._pids: dict[str, int] = {}
        self._active: set[str] = set()
        self._lock = threading.Lock()
        # A group made with share= uses (and never closes) the connections of `share`.
        self._owner = share is None
        self._transports: dict[str, Any] = {} if share is None else share._transports
        self._tlock: threading.Lock = (
            threading.Lock() if share is None else share._tlock
        )  # _transports
        self._node_locks: dict[str, threading.RLock] = {} if share is None else share._node_locks
        self._creds: tuple[Any, dict] | None = None if share is None else share._creds
        self._stop = threading.Event()  # close()/interrupt: every wait and pump returns
        self.lost: dict[str, str] = {}  # node -> why it is considered lost
        self.lost_at: dict[str, float] = {}  # node -> when it went: dropped, or last answered
        self._probing: set[str] = set()
        self._reopens: int | None = None  # head re-opens left in this run(); None: not in one
        # What its provider lets gpufleet write on these machines outside the workdir; with no
        # lease there to stop a dead CLI's commands, they end with their SSH session.
        self.may_write = may_write(info.cloud)
        self.tied = LEASE not in self.may_write

    def subset(self, nodes: list[str]) -> Group:
        """A group of some of these nodes on the same connections (close() leaves them open)."""
        return Group(
            self.info,
            nodes,
            connect_timeout=self.connect_timeout,
            share=self,
            kill_marker=self.kill_marker,
        )

    def __enter__(self) -> Group:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _credentials(self) -> tuple[Any, dict]:
        if self._creds is None:
            import paramiko

            pkey = paramiko.PKey.from_path(self.info.ssh_key_path)
            self._creds = (pkey, knownhosts.load(self.info.known_hosts_path))
        return self._creds

    def _node_lock(self, node: NodeInfo) -> threading.RLock:
        with self._tlock:
            return self._node_locks.setdefault(node.name, threading.RLock())

    def _connect(self, node: NodeInfo) -> Any:
        """A new transport to `node`, replacing any old one. Per-node lock: the head is also
        connected by the threads of every worker that tunnels through it."""
        from gpufleet.components.nodelookup import jump_host
        from gpufleet.remote.connection import open_transport

        pkey, pinned = self._credentials()
        head = jump_host(self.info.nodes, node)
        via = None if head is None else self._transport(head)
        with self._node_lock(node):
            t = open_transport(
                node,
                user=self.info.ssh_user,
                pkey=pkey,
                pinned=pinned,
                timeout=self.connect_timeout,
                via=via,
                stop=self._stop,
            )
            t.set_keepalive(KEEPALIVE_S)
            with self._tlock:
                old = self._transports.get(node.name)
                self._transports[node.name] = t
        if old is not None:
            old.close()
        if self._stop.is_set():
            t.close()
            raise EOFError("group closed")
        return t

    def _transport(self, node: NodeInfo) -> Any:
        """The node's live transport, connecting once however many threads ask at once.

        Within run(), a head connection that dropped (every worker's tunnel with it) is
        re-opened HEAD_REOPENS times; after that its workers fail rather than loop."""
        with self._node_lock(node):
            t = self._transports.get(node.name)
            if t is None or not t.is_active():
                if (
                    t is not None
                    and node.name == self.info.nodes[0].name
                    and self._reopens is not None
                ):
                    if self._reopens <= 0:
                        raise EOFError(f"the connection to {node.name} (the head) dropped again")
                    self._reopens -= 1
                t = self._connect(node)
            return t

    def _open_session(self, node: NodeInfo) -> Any:
        """A session channel on the node's connection. Nothing has run on the node yet, so a
        failure (its connection or tunnel gone, the channel refused) is tried again, on a
        fresh connection when the old one dropped, OPEN_ATTEMPTS times in all."""
        for attempt in range(1, OPEN_ATTEMPTS + 1):
            try:
                return self._transport(node).open_session(timeout=self.connect_timeout)
            except HostKeyMismatch:
                raise
            except Exception:
                if attempt == OPEN_ATTEMPTS or self._stop.is_set() or node.name in self.lost:
                    raise
                self._stop.wait(RETRY_DELAY_S * attempt)
        raise AssertionError("unreachable")

    def wait_ready(
        self,
        timeout: float = 300.0,
        *,
        refused_fails: bool = False,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        """Connect to every node, retrying until `timeout`; a wrong host key fails at once.

        A node still serving the bootstrap host key from its user data gets a fresh one
        here, on this first contact (remote/hostkeys.py). refused_fails: the cluster already
        existed, so a refused connection means its node is gone (NodeRefused now), not
        still booting.
        """
        self._connect_all(timeout, refused_fails=refused_fails, progress=progress)
        if (
            getattr(self.info, "host_key_rotation", None)
            and HOST_KEY in self.may_write
            and any(getattr(n, "bootstrap_host_key", False) for n in self.nodes)
        ):
            from gpufleet.core import state
            from gpufleet.remote.hostkeys import replace_bootstrap_keys

            replace_bootstrap_keys(self, state.save)

    def forget_pins(self) -> None:
        """Re-read known_hosts before the next connection."""
        self._creds = None

    def reconnect(self, timeout: float = 30.0) -> None:
        """Close every connection and open them again (checking the pinned keys again)."""
        with self._tlock:
            transports = list(self._transports.values())
            self._transports.clear()
        for t in reversed(transports):
            t.close()
        self.forget_pins()
        self._connect_all(timeout)

    def _connect_all(
        self,
        timeout: float,
        *,
        refused_fails: bool = False,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        """Attempts run in daemon threads and the caller polls, so Ctrl-C/SIGTERM in the
        main thread take effect at once; close() ends the attempts."""
        from gpufleet.core.errors import NodeRefused

        deadline = time.monotonic() + timeout
        results: dict[str, str | None | BaseException] = {}

        def attempt(node: NodeInfo) -> str | None:
            delay, last = 0.05, "not tried"
            while not self._stop.is_set():
                try:
                    # not a fresh _connect: the head may already be up for a worker's tunnel
                    self._transport(node)
                    return None
                except HostKeyMismatch:
                    raise
                except Exception as e:
                    # refused: directly, or by the head for a worker's tunnel (code 2,
                    # OPEN_CONNECT_FAILED, in paramiko's ChannelException)
                    refused = isinstance(e, ConnectionRefusedError) or getattr(e, "code", 0) == 2
                    if refused and refused_fails:
                        raise NodeRefused(self.info.name, [node.name]) from e
                    last = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
                if time.monotonic() + delay > deadline:
                    return last
                self._stop.wait(delay)
                delay = min(delay * 2, 2.0)
            return "cancelled"

        def worker(node: NodeInfo) -> None:
            try:
                results[node.name] = attempt(node)
            except BaseException as e:  # re-raised in the caller's thread
                results[node.name] = e

        threads = [threading.Thread(target=worker, args=(n,), daemon=True) for n in self.nodes]
        start_threads(threads)
        started, shown = time.monotonic(), time.monotonic()
        try:
            while len(results) < len(self.nodes):
                time.sleep(0.05)  # polled: a signal reaches the main thread at once
                errors = [e for e in results.values() if isinstance(e, BaseException)]
                if errors:
                    raise errors[0]
                if progress and time.monotonic() - shown >= 10:
                    shown = time.monotonic()
                    left = [n.name for n in self.nodes if n.name not in results]
                    progress(
                        f"waiting for SSH on {', '.join(left)} "
                        f"({shown - started:.0f}s of {timeout:.0f}s)"
                    )
        except BaseException:
            self._stop.set()  # the attempts end within one connect timeout, off our clock
            raise
        errors = [e for e in results.values() if isinstance(e, BaseException)]
        if errors:
            refused = [e for e in errors if isinstance(e, NodeRefused)]
            if refused:
                raise NodeRefused(self.info.name, sorted(n for e in refused for n in e.nodes))
            raise errors[0]
        failures = {k: v for k, v in results.items() if isinstance(v, str)}
        if failures:
            raise SSHUnreachable(failures, timeout)

    def run(
        self,
        command: str | dict[str, str],
        *,
        stream: Stream | None = None,
        check: bool = True,
        timeout: float | None = None,
        stdin: bytes | Path | None = None,
        what: str | None = None,
        fail_fast: bool = False,
        liveness: bool = False,
    ) -> dict[str, HostResult]:
        """Run on every node (or per-node commands) in its workdir; a failure raises GroupError.

        stdin: bytes, or a file streamed in chunks (each node reads it for itself).

        fail_fast: the first node to fail (or be lost) stops the command on every other node.
        liveness: probe each node while the command runs; one that answers nothing for
        LOST_AFTER_S (or whose connection drops) is recorded in `lost` and its result ends.
        """
        cmds = command if isinstance(command, dict) else {n.name: command for n in self.nodes}
        targets = [n for n in self.nodes if n.name in cmds]
        done = threading.Event()
        self._reopens = HEAD_REOPENS
        if liveness:
            start_threads(
                [threading.Thread(target=self._probe_loop, args=(n, done), daemon=True)
                 for n in targets]
            )  # fmt: skip
        try:
            with held():  # submit starts the pool's threads
                futures = {
                    self._pool.submit(
                        self._run_one, n, cmds[n.name], stream, timeout, stdin
                    ): n.name
                    for n in targets
                }
            out: dict[str, HostResult] = {}
            stopping = False
            for fut in as_completed(futures):
                r = fut.result()
                out[futures[fut]] = r
                if fail_fast and not r.ok and not stopping:
                    stopping = True
                    self.cancel(grace_s=FAIL_FAST_GRACE_S)
        finally:
            done.set()
            self._reopens = None
        results = {n.name: out[n.name] for n in targets}
        if check and not all(r.ok for r in results.values()):
            label = what or (command if isinstance(command, str) else "command")
            raise GroupError(label, results)
        return results

    def _probe_loop(self, node: NodeInfo, done: threading.Event) -> None:
        """Liveness of one node while a command runs: a channel open must succeed regularly."""
        last_ok = time.monotonic()
        while not done.wait(PROBE_EVERY_S) and not self._stop.is_set():
            t = self._transports.get(node.name)
            if t is None or not t.is_active():
                if node.name in self._active:
                    self._mark_lost(node.name, "its SSH connection dropped", time.time())
                return
            try:
                chan = t.open_session(timeout=PROBE_EVERY_S)
                chan.close()
                last_ok = time.monotonic()
            except Exception:
                pass
            silent = time.monotonic() - last_ok
            if silent >= LOST_AFTER_S and not done.is_set():
                self._mark_lost(node.name, f"no answer for {silent:.0f} s", time.time() - silent)
                t.close()  # ends the pump on this node; the command is beyond our reach
                return

    def _mark_lost(self, node: str, why: str, at: float) -> str:
        """The first word on a lost node stays: why, and when it went (epoch seconds)."""
        with self._lock:
            self.lost_at.setdefault(node, at)
            return self.lost.setdefault(node, why)

    def _run_one(
        self,
        node: NodeInfo,
        command: str,
        stream: Stream | None,
        timeout: float | None,
        stdin: bytes | Path | None,
    ) -> HostResult:
        from gpufleet.remote.connection import send_eof

        started = time.time()
        deadline = None if timeout is None else time.monotonic() + timeout
        out = LineSplitter(node.name, False, stream, self._pids)
        err = LineSplitter(node.name, True, stream, self._pids)
        chan = None
        try:
            chan = self._open_session(node)
            with self._lock:
                self._active.add(node.name)
            chan.exec_command(wrap_command(node, command, self.tied))
            if isinstance(stdin, Path):
                with stdin.open("rb") as f:
                    while chunk := f.read(STDIN_CHUNK):
                        chan.sendall(chunk)
            elif stdin:
                chan.sendall(stdin)
            send_eof(chan)
            timed_out = pump(chan, out, err, deadline, self._stop)
            if timed_out:
                # a short timeout on a busy machine can beat the PID line: wait for it a bit
                until = time.monotonic() + 3
                while node.name not in self._pids and time.monotonic() < until:
                    if not pump(chan, out, err, time.monotonic() + 0.1, self._stop):
                        break  # the command ended by itself
                self._kill(node)
                return HostResult(
                    node.name,
                    None,
                    out.close(),
                    err.close(),
                    f"timed out after {timeout:.0f}s",
                    started,
                    time.time(),
                )
            code = chan.recv_exit_status()
            transport = chan.get_transport()
            if code == -1 and not (transport and transport.is_active()) or node.name in self.lost:
                # no exit status and the connection is gone: the node went, not the command
                why = self._mark_lost(node.name, "its SSH connection dropped", time.time())
                return HostResult(
                    node.name, None, out.close(), err.close(), f"lost: {why}", started, time.time()
                )
            return HostResult(node.name, code, out.close(), err.close(), None, started, time.time())
        except HostKeyMismatch:
            raise
        except Exception as e:
            msg = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            if node.name in self.lost:
                msg = f"lost: {self.lost[node.name]}"
            return HostResult(node.name, None, out.close(), err.close(), msg, started, time.time())
        finally:
            with self._lock:
                self._active.discard(node.name)
            if chan is not None:
                chan.close()

    def hold(self, node_name: str, command: str, ready: str, timeout: float = 120.0) -> Any:
        """Start a long-lived command on one node; its open channel once it prints `ready`.

        The command is meant to run until its stdin closes: closing the channel (or losing
        the connection) ends it.
        """
        node = self.info.node(node_name)
        chan = self._transport(node).open_session(timeout=self.connect_timeout)
        chan.exec_command(wrap_command(node, command, self.tied))
        return await_ready(chan, node_name, command, ready, timeout)

    def put(self, files: Mapping[str, bytes | str], *, stream: Stream | None = None) -> None:
        """Write relative path -> content under every node's workdir."""
        self.run("tar -xf -", stdin=tar_files(files), what="upload", stream=stream)

    def _kill(self, node: NodeInfo, grace_s: float = 5.0) -> None:
        pid = self._pids.get(node.name)
        if pid is None or node.name in self.lost:
            return
        try:
            chan = self._transport(node).open_session(timeout=self.connect_timeout)
            chan.exec_command(kill_group_command(pid, grace_s, self.kill_marker))
            chan.recv_exit_status()
            chan.close()
        except Exception:
            pass  # the node or connection is gone: nothing left to kill through it

    def cancel(self, grace_s: float = 5.0) -> None:
        """Kill the process group of every command still running, on every node at once."""
        with self._lock:
            running = [n for n in self.nodes if n.name in self._active]
        if running:
            # not self._pool: its workers are the ones blocked on the commands being killed
            pool = ThreadPoolExecutor(max_workers=len(running))
            wait([pool.submit(self._kill, n, grace_s) for n in running], timeout=2 * grace_s + 15)
            pool.shutdown(wait=False)

    def write_lease(self, seconds: float | None, timeout: float = 20.0) -> dict[str, str | None]:
        """Renew the node-side lease: every node removes itself at min(expiry, `seconds` from
        now by its own clock); None removes the lease.

        Runs on its own threads over the open connections (the group's workers may all be
        busy with the job); node -> None, or why it failed. HostsNotOurs, writing nothing, on
        machines whose provider does not allow a lease (the rule in provision.Provider).
        """
        self._allowed(LEASE)
        return self._on_every_node(lease_command(seconds), timeout)

    def write_expiry(self, expires_at: float, timeout: float = 20.0) -> dict[str, str | None]:
        """Move every node's hard expiry (`gpufleet extend`); node -> None, or why it failed.
        HostsNotOurs, writing nothing, where the provider does not allow it."""
        self._allowed(EXPIRY)
        return self._on_every_node(expiry_command(expires_at), timeout)

    def _allowed(self, what: str) -> None:
        if what not in self.may_write:
            raise HostsNotOurs(self.info.name, self.info.cloud, what)

    def _on_every_node(self, cmd: str, timeout: float) -> dict[str, str | None]:
        # A provider whose nodes are slow by nature (--cloud vm under TCG) says so in its record.
        timeout = max(timeout, float(self.info.provider.get("command_timeout_s") or 0))
        from gpufleet.remote import tree

        if tree.by_default(len(self.nodes)):
            # one command on the head writes every node's; direct if the head cannot fan out
            try:
                return tree.on_every_node(self.info, [n.name for n in self.nodes], cmd, timeout)
            except tree.TreeFailed:
                pass
        return on_every_node(self.nodes, self._transport, cmd, timeout)

    def close(self) -> None:
        self._stop.set()
        transports = []
        if self._owner:
            with self._tlock:
                transports = list(self._transports.values())
                self._transports.clear()
        for t in reversed(transports):  # tunnelled ones before the head's they run inside
            t.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
