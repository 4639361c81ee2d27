"""Tree mode: this machine reaches the head only; the head runs the fan-out to workers.

For clusters of hundreds of nodes this machine's work no longer grows with N (one SSH
connection, kept between commands); the head opens and keeps one OpenSSH connection per
worker. `exec --tree` takes it, and from GPUFLEET_TREE_FROM nodes on (when set) exec, the lease
and hard expiry by default (on_every_node). A node's stderr arrives merged into its stdout;
Ctrl-C stops the command on every node (stop_command), a timeout (the lease's) only the fan-out.
"""

from __future__ import annotations

import os
import shlex
import shutil
import time
from typing import TYPE_CHECKING, Any

from gpufleet.components.exitcodes import ExitCode
from gpufleet.core.errors import GpufleetError, HostResult
from gpufleet.remote import head as relay
from gpufleet.remote.commands import marked_command

if TYPE_CHECKING:
    from gpufleet.core.state import ClusterRecord

MARK = "__GPUFLEET_TREE__ "
STARTED = "__GPUFLEET_TREE_STARTED__"  # the head is about to start the command on any node
MARKER = "GPUFLEET_TREE_ID"  # in the environment of a tree run's processes (stop_command)
# From this many nodes, exec (with no warm holder, unless --no-tree, --timeout or --image), the
# lease and the hard expiry go through the head; 0: never by default. The direct path holds at
# 1,000 sandbox nodes and wins on wall time at every N measured, and the tree's results differ
# (stderr in stdout, an unreachable worker as exit 255): opt-in, docs/benchmarks.md#tree-crossover.
TREE_FROM = 0


def tree_from() -> int:
    """TREE_FROM, or GPUFLEET_TREE_FROM (0: never by default)."""
    raw = os.environ.get("GPUFLEET_TREE_FROM", "")
    return int(raw) if raw.isdigit() else TREE_FROM


def by_default(count: int) -> bool:
    """Whether `count` nodes are reached through the head unless told otherwise: past the
    threshold, and with OpenSSH here (the head is reached with it)."""
    n = tree_from()
    return 0 < n <= count and shutil.which("ssh") is not None


# Every node's sed writes into the one stdout: a buffered one writes 4 KB blocks that end
# mid-line, and another node's block lands inside that line. Unbuffered (GNU sed -u), each line
# is one write, whole; a sed without -u (busybox) keeps the old behaviour.
LINE_SED = [
    "SEDU=sed",
    "if echo | sed -u p >/dev/null 2>&1; then SEDU='sed -u'; fi",
    "export SEDU",
]


class TreeFailed(GpufleetError):
    """The head's fan-out gave no node's exit status; `started`: it may have started the
    command somewhere (it said it was about to), so running it another way could run it twice."""

    def __init__(self, head: str, why: str, started: bool):
        super().__init__(
            f"tree exec on {head} failed: {why}",
            hint="retry with --no-tree: this machine then reaches every node itself",
        )
        self.head, self.why, self.started = head, why, started


def tree_script(
    info: ClusterRecord,
    command: str,
    nodes: list[str],
    parallel: int | None = None,
    in_workdir: bool = True,
    exec_id: str = "0",
) -> str:
    """sh for the head's workdir: `command` on itself and on each worker, lines prefixed
    `[node-K] `, each node's last line `MARK<exit code>`. in_workdir=False: workers run it
    where they log in (the lease's write needs no workdir, which may not exist yet).
    parallel: workers at once, every one by default: a command that waits for the others (a
    job's rendezvous) would never end on the first N while the rest queued behind them.

    Every process of it but the head's OpenSSH clients (whose kept connections outlive it) has
    MARKER=exec_id in its environment, for stop_command after a Ctrl-C: the sessions run over
    kept connections, so a session's end kills nothing on the head or the workers."""
    rows = [r for r in relay.worker_rows(info) if r.split()[0] in nodes]
    remote = '"cd $4 && $GF_RCMD"' if in_workdir else '"$GF_RCMD"'
    one = (
        f'unset {MARKER}; {{ $RSH -p "$3" -o HostKeyAlgorithms="$5" -o ControlMaster=auto "$2" '
        f"{remote} </dev/null; "
        f'printf "\\n{MARK}%s\\n" $?; }} 2>&1 | $SEDU "s/^/[$1] /"'
    )
    local = (
        f'{{ sh -c "$GF_CMD" </dev/null; printf "\\n{MARK}%s\\n" $?; }} 2>&1 '
        f'| $SEDU "s/^/[{info.nodes[0].name}] /" &'
    )
    marked = f"exec env {MARKER}={exec_id} /bin/sh -c {shlex.quote(command)}"
    lines = [
        *relay.HEAD_ENV,
        *LINE_SED,
        f"GF_CMD={shlex.quote(command)}",
        f"GF_RCMD={shlex.quote(marked)}",
        f"{MARKER}={exec_id}",
        f"export GF_CMD GF_RCMD {MARKER}",
        f"echo {STARTED}",
    ]
    if info.nodes[0].name in nodes:
        lines.append(local)
    if rows:
        lines += [
            f"xargs -P {parallel or len(rows)} -L 1 sh -c {shlex.quote(one)} sh <<'EOF'",
            *rows,
            "EOF",
        ]
    lines += ["wait", ""]
    return "\n".join(lines)


def stop_command(exec_id: str) -> str:
    """sh: TERM this node's processes of tree run `exec_id`, KILL those left 2 s later."""
    return (
        marked_command(f"{MARKER}={exec_id}")
        + 'l=$(scan); [ -n "$l" ] || exit 0; kill -TERM $l 2>/dev/null; sleep 2; '
        + 'l=$(scan); [ -n "$l" ] && kill -KILL $l 2>/dev/null; exit 0'
    )


class _Collector:
    """Turns the head's prefixed lines into per-node output, exit codes and a stream.

    The mark follows a newline of its own, so one empty line before it is that newline:
    empty lines are held back until the next line shows whether they were output.
    """

    def __init__(self, stream: Any):
        self.stream = stream
        self.out: dict[str, list[str]] = {}
        self.held: dict[str, int] = {}
        self.codes: dict[str, tuple[int, float]] = {}
        self.started = time.time()

    def _emit(self, node: str, text: str) -> None:
        self.out.setdefault(node, []).append(text)
        if self.stream is not None:
            self.stream(node, text, False)

    def feed(self, line: str) -> None:
        if not line.startswith("[") or "] " not in line:
            return
        node, _, text = line[1:].partition("] ")
        held = self.held.pop(node, 0)
        if text.startswith(MARK):
            for _ in range(held - 1):
                self._emit(node, "")
            code = text[len(MARK) :].strip()
            self.codes[node] = (int(code) if code.isdigit() else 1, time.time())
        elif text == "":
            self.held[node] = held + 1
        else:
            for _ in range(held):
                self._emit(node, "")
            self._emit(node, text)

    def results(self, nodes: list[str]) -> dict[str, HostResult]:
        res = {}
        for n in nodes:
            text = "".join(f"{x}\n" for x in self.out.get(n, []))
            code, at = self.codes.get(n, (None, time.time()))
            error = None if code is not None else "no exit status from the head"
            res[n] = HostResult(n, code, text, "", error, self.started, at)
        return res


def run_tree(
    info: ClusterRecord,
    command: str,
    nodes: list[str] | None = None,
    stream: Any = None,
    *,
    in_workdir: bool = True,
    timeout: float | None = None,
    stop: bool = True,
) -> dict[str, HostResult]:
    """Run `command` on `nodes` (default all) through the head: node -> HostResult.

    timeout: the head command is ended after this long; nodes with no exit status by then
    get error "timed out". TreeFailed when the head gave no node's exit status. stop: an
    interrupt (Ctrl-C) also stops what was started on every node (stop_command).
    """
    import contextlib
    import secrets
    import threading

    from gpufleet.core import state
    from gpufleet.core.signals import shielded

    names = nodes or [n.name for n in info.nodes]
    known = {n.name for n in info.nodes}
    if unknown := [n for n in names if n not in known]:
        raise GpufleetError(
            f"no node {unknown[0]!r} in cluster {info.name!r}",
            hint="nodes are " + ", ".join(sorted(known)),
            exit_code=ExitCode.USAGE,  # bad input
        )
    control = relay.control_path(state.cluster_dir(info.name))
    # One round trip: the head gets its keys on stdin, then runs the fan-out.
    script = relay.prepare_script(info, warm=False, require_rsync=False)
    exec_id = secrets.token_hex(8)
    script += tree_script(info, command, names, in_workdir=in_workdir, exec_id=exec_id)
    proc = relay.start_prepare(info, control, script)
    fired = threading.Event()

    def expire() -> None:
        fired.set()
        proc.kill()

    timer = threading.Timer(timeout or 0, expire)
    if timeout is not None:
        timer.daemon = True
        timer.start()
    collect = _Collector(stream)
    started = False
    try:
        # The stream carries stdout only: a line may have been split on a chunk edge otherwise.
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            if line == STARTED:
                started = True
            else:
                collect.feed(line)
        err = relay.stderr_text(proc)
    except BaseException:
        proc.kill()
        if stop:
            with shielded(), contextlib.suppress(Exception):  # best effort: re-raised below
                cmd = stop_command(exec_id)
                run_tree(info, cmd, names, in_workdir=False, timeout=20, stop=False)
        raise
    finally:
        timer.cancel()
    if proc.wait() != 0 and not collect.codes and (not fired.is_set() or not started):
        why = err.strip()[-500:] or "the connection to the head closed"
        raise TreeFailed(info.nodes[0].name, why, started)
    results = collect.results(names)
    if fired.is_set():
        for r in results.values():
            if r.exit_code is None:
                r.error = f"timed out after {timeout:g}s"
    return results


def why_failed(result: HostResult) -> str | None:
    """A tree result as the lease's on_every_node says it: None, or why (with the node's last
    line of output, where OpenSSH says why it could not reach the worker)."""
    if result.ok:
        return None
    if result.exit_code is None:
        return result.error or "no exit status"
    last = result.stdout.strip().splitlines()[-1:] or [""]
    return f"exit {result.exit_code}" + (f": {last[0][-200:]}" if last[0] else "")


def on_every_node(info: ClusterRecord, nodes: list[str], cmd: str, timeout: float) -> dict:
    """remote/lease.on_every_node through the head: `cmd` on every node; node -> None, or why.
    TreeFailed when the head could not run the fan-out (the caller then goes direct)."""
    results = run_tree(info, cmd, nodes, in_workdir=False, timeout=timeout)
    return {n: why_failed(results[n]) for n in nodes}
