"""A threaded SSH group: runs on every node at once and returns a node -> HostResult map."""

from __future__ import annotations

import io
import select
import shlex
import tarfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed, wait
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from gpufleet.components.spec import ClusterInfo, NodeInfo

PID_MARK = "__GPUFLEET_PID__"
KEEPALIVE_S = 5  # SSH keepalive on every connection: NATs and idle timeouts keep it open
PROBE_EVERY_S = 5.0  # liveness: how often each node is asked for a channel while a job runs
LOST_AFTER_S = 20.0  # liveness: a node that answers nothing for this long is lost
FAIL_FAST_GRACE_S = 3.0  # fail-fast: TERM, then KILL after this long
Stream = Callable[[str, str, bool], None]  # (node name, line without newline, is_stderr)
EOF_GRACE_S = 1.0  # output that arrives after the exit status, before EOF


def wrap_command(node: NodeInfo, command: str, tied: bool = False) -> str:
    """Run `command` in the node's workdir, first printing the PID that leads its process group.

    sshd starts each session's shell in a new session, so that PID is also the group
    cancel() kills; commands that `exec` their launcher keep it.

    tied: the command's process group ends with its SSH session. sshd leaves a session's
    processes running when the connection drops (no pty, so no SIGHUP): their shell is only
    re-parented. A watcher sees that and TERMs the group (KILL 5 s later). For machines
    gpufleet did not create, where no lease may stop a dead CLI's ranks; it writes nothing.
    """
    wd = shlex.quote(node.workdir)
    head = f"printf '{PID_MARK} %s\\n' $$; mkdir -p {wd} && cd {wd}"
    if not tied:
        return f"exec /bin/sh -c {shlex.quote(f'{head} && {command}')}"
    inner = f"{head} || exit 1\n{SESSION_WATCH}({command}\n)\nr=$?; kill $w 2>/dev/null; exit $r"
    return f"exec /bin/sh -c {shlex.quote(inner)}"


# Field 4 of /proc/PID/stat is the parent PID (field 2, "(sh)", holds no space). The
# watcher's own TERM is ignored only once it acts, so cancel() still ends it at once.
SESSION_WATCH = (
    "w=; if [ -r /proc/$$/stat ] && read -r _ _ _ s _ </proc/$$/stat; then "
    '( while read -r _ _ _ p _ </proc/$$/stat && [ "$p" = "$s" ]; do sleep 1; done; '
    "trap '' TERM; kill -TERM -$$; sleep 5; kill -KILL -$$ ) </dev/null >/dev/null 2>&1 & "
    "w=$!; fi\n"
)


def kill_group_command(pid: int, grace_s: float = 5.0) -> str:
    """TERM the process group, wait for it to go (up to grace_s), then KILL it.

    `kill -SIG -PGID` without `--`: dash's builtin kill rejects `--`.
    """
    steps = int(grace_s / 0.1)
    return (
        f"kill -TERM -{pid} 2>/dev/null || exit 0; i=0; "
        f"while [ $i -lt {steps} ]; do kill -0 -{pid} 2>/dev/null || exit 0; "
        f"sleep 0.1; i=$((i+1)); done; kill -KILL -{pid} 2>/dev/null; exit 0"
    )


LEASE_DIR_DEFAULT = "/var/lib/gpufleet"


def state_file_command(name: str, epoch: float | None) -> str:
    """Write epoch seconds to `name` in the node's gpufleet state directory, atomically; None
    removes the file.

    $GPUFLEET_STATE_DIR names it on the sandbox; real nodes use /var/lib/gpufleet (root's),
    through sudo when the SSH user cannot write there.
    """
    d = f'd="${{GPUFLEET_STATE_DIR:-{LEASE_DIR_DEFAULT}}}"; '
    if epoch is None:
        return d + f'rm -f "$d/{name}" 2>/dev/null || sudo -n rm -f "$d/{name}"'
    value = str(int(epoch))
    # The same temp-file-and-rename either way: `sudo tee` truncates the file in place, and
    # gpufleet-expire reading it in between would take the empty file for "no override".
    write = """'cat > "$1.tmp" && mv -f "$1.tmp" "$1"' sh"""
    # SSH answers before cloud-init's final stage, where the recipe makes the folder: the first
    # lease of a new cluster must not fail for want of it (seen on `--cloud vm`).
    mkdir = '{ [ -d "$d" ] || mkdir -p "$d" 2>/dev/null || sudo -n mkdir -p "$d"; } && '
    return (
        d + mkdir + f'{{ echo {value} | sh -c {write} "$d/{name}" 2>/dev/null '
        f'|| echo {value} | sudo -n sh -c {write} "$d/{name}"; }}'
    )


def lease_command(until: float | None) -> str:
    """The lease: the node removes itself at min(hard expiry, lease); None: the hard expiry
    alone applies again."""
    return state_file_command(LEASE, until)


def expiry_command(expires_at: float) -> str:
    """A new hard expiry (`gpufleet extend`), which the node's expiry prefers to the one it
    booted with (images/ttl/gpufleet-expire; the sandbox watchdog)."""
    return state_file_command(EXPIRY, expires_at)


def tar_files(files: dict[str, bytes | str]) -> bytes:
    """An uncompressed tar of relative path -> content (dirs are created by tar)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            ti = tarfile.TarInfo(path)
            ti.size = len(data)
            ti.mode = 0o755 if path.endswith((".sh", ".py")) else 0o644
            ti.mtime = int(time.time())
            tar.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


class _LineSplitter:
    def __init__(self, node: str, is_err: bool, stream: Stream | None, group: Group):
        self.node, self.is_err, self.stream, self.group = node, is_err, stream, group
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
            self.group._pids[self.node] = int(text.split()[1])
            return rest
        return first + b"\n" + rest

    def close(self) -> str:
        if self.stream and self.pending:
            self.stream(self.node, self.pending.decode(errors="replace"), self.is_err)
        return b"".join(self.chunks).decode(errors="replace")


class Group:
    """Connections to some or all of a cluster's nodes, reused across commands."""

    def __init__(
        self,
        info: ClusterInfo,
        nodes: list[str] | None = None,
        *,
        connect_timeout: float = 10.0,
        max_workers: int | None = None,
        share: Group | None = None,
    ):
        self.info = info
        self.nodes = [info.node(n) for n in nodes] if nodes else list(info.nodes)
        self.connect_timeout = connect_timeout
        self._pool = ThreadPoolExecutor(max_workers=max_workers or min(len(self.nodes), 256))
        self._pids: dict[str, int] = {}
        self._active: set[str] = set()
        self._lock = threading.Lock()
        # A group made with share= uses (and never closes) the connections of `share`.
        self._owner = share is None
        self._transports: dict[str, Any] = {} if share is None else share._transports
        self._tlock = threading.Lock() if share is None else share._tlock  # _transports
        self._node_locks: dict[str, threading.RLock] = {} if share is None else share._node_locks
        self._creds: tuple[Any, dict] | None = None if share is None else share._creds
        self._stop = threading.Event()  # close()/interrupt: every wait and pump returns
        self.lost: dict[str, str] = {}  # node -> why it is considered lost
        self._probing: set[str] = set()
        # What its provider lets gpufleet write on these machines outside the workdir; with no
        # lease there to stop a dead CLI's commands, they end with their SSH session.
        self.may_write = may_write(info.cloud)
        self.tied = LEASE not in self.may_write

    def subset(self, nodes: list[str]) -> Group:
        """A group of some of these nodes on the same connections (close() leaves them open)."""
        return Group(self.info, nodes, connect_timeout=self.connect_timeout, share=self)

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
        """The node's live transport, connecting once however many threads ask at once."""
        with self._node_lock(node):
            t = self._transports.get(node.name)
            if t is None or not t.is_active():
                t = self._connect(node)
            return t

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
        stdin: bytes | None = None,
        what: str | None = None,
        fail_fast: bool = False,
        liveness: bool = False,
    ) -> dict[str, HostResult]:
        """Run on every node (or per-node commands) in its workdir; a failure raises GroupError.

        fail_fast: the first node to fail (or be lost) stops the command on every other node.
        liveness: probe each node while the command runs; one that answers nothing for
        LOST_AFTER_S (or whose connection drops) is recorded in `lost` and its result ends.
        """
        cmds = command if isinstance(command, dict) else {n.name: command for n in self.nodes}
        targets = [n for n in self.nodes if n.name in cmds]
        done = threading.Event()
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
                    self.lost.setdefault(node.name, "its SSH connection dropped")
                return
            try:
                chan = t.open_session(timeout=PROBE_EVERY_S)
                chan.close()
                last_ok = time.monotonic()
            except Exception:
                pass
            silent = time.monotonic() - last_ok
            if silent >= LOST_AFTER_S and not done.is_set():
                self.lost.setdefault(node.name, f"no answer for {silent:.0f} s")
                t.close()  # ends the pump on this node; the command is beyond our reach
                return

    def _run_one(
        self,
        node: NodeInfo,
        command: str,
        stream: Stream | None,
        timeout: float | None,
        stdin: bytes | None,
    ) -> HostResult:
        started = time.time()
        deadline = None if timeout is None else time.monotonic() + timeout
        out = _LineSplitter(node.name, False, stream, self)
        err = _LineSplitter(node.name, True, stream, self)
        chan = None
        try:
            chan = self._transport(node).open_session(timeout=self.connect_timeout)
            with self._lock:
                self._active.add(node.name)
            chan.exec_command(wrap_command(node, command, self.tied))
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            timed_out = self._pump(chan, out, err, deadline, self._stop)
            if timed_out:
                # a short timeout on a busy machine can beat the PID line: wait for it a bit
                until = time.monotonic() + 3
                while node.name not in self._pids and time.monotonic() < until:
                    if not self._pump(chan, out, err, time.monotonic() + 0.1, self._stop):
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
                why = self.lost.setdefault(node.name, "its SSH connection dropped")
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

    @staticmethod
    def _pump(
        chan: Any,
        out: _LineSplitter,
        err: _LineSplitter,
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
                        select.select([chan], [], [], 0.05)
            if deadline is not None and time.monotonic() > deadline:
                return True
            if stop.is_set():
                return False  # closed under us: the caller reports no exit status
            select.select([chan], [], [], 0.2)

    def hold(self, node_name: str, command: str, ready: str, timeout: float = 120.0) -> Any:
        """Start a long-lived command on one node; its open channel once it prints `ready`.

        The command is meant to run until its stdin closes: closing the channel (or losing
        the connection) ends it.
        """
        from gpufleet.core.errors import GpufleetError

        node = self.info.node(node_name)
        chan = self._transport(node).open_session(timeout=self.connect_timeout)
        chan.exec_command(wrap_command(node, command, self.tied))
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
            select.select([chan], [], [], 0.2)
        return chan

    def put(self, files: dict[str, bytes | str], *, stream: Stream | None = None) -> None:
        """Write relative path -> content under every node's workdir."""
        self.run("tar -xf -", stdin=tar_files(files), what="upload", stream=stream)

    def _kill(self, node: NodeInfo, grace_s: float = 5.0) -> None:
        pid = self._pids.get(node.name)
        if pid is None or node.name in self.lost:
            return
        try:
            chan = self._transport(node).open_session(timeout=self.connect_timeout)
            chan.exec_command(kill_group_command(pid, grace_s))
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
            wait([pool.submit(self._kill, n, grace_s) for n in running], timeout=grace_s + 10)
            pool.shutdown(wait=False)

    def write_lease(self, until: float | None, timeout: float = 20.0) -> dict[str, str | None]:
        """Renew the node-side lease: every node removes itself at min(expiry, `until`).

        Runs on its own threads over the open connections (the group's workers may all be
        busy with the job); node -> None, or why it failed. HostsNotOurs, writing nothing, on
        machines whose provider does not allow a lease (the rule in provision.Provider).
        """
        self._allowed(LEASE)
        return self._on_every_node(lease_command(until), timeout)

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
        out: dict[str, str | None] = {}

        def one(node: NodeInfo) -> None:
            try:
                chan = self._transport(node).open_session(timeout=timeout)
                chan.settimeout(timeout)
                chan.exec_command(cmd)
                code = chan.recv_exit_status()
                chan.close()
                out[node.name] = None if code == 0 else f"exit {code}"
            except Exception as e:
                out[node.name] = f"{type(e).__name__}: {e}"

        threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in self.nodes]
        start_threads(threads)
        for t in threads:
            t.join(timeout)
        return {n.name: out.get(n.name, "timed out") for n in self.nodes}

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
