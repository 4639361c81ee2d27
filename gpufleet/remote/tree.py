"""Tree-mode exec: this machine reaches the head only; the head runs the fan-out to workers.

For clusters of hundreds of nodes this machine's work no longer grows with N (one SSH
connection, kept between commands); the head opens and keeps one OpenSSH connection per
worker. A node's stderr arrives merged into its stdout, and Ctrl-C or --timeout stop the
fan-out on the head but not commands already started on workers.
"""

from __future__ import annotations

import shlex
import time
from typing import TYPE_CHECKING, Any

from gpufleet.components.exitcodes import ExitCode
from gpufleet.core.errors import GpufleetError, HostResult
from gpufleet.remote import head as relay

if TYPE_CHECKING:
    from gpufleet.core.state import ClusterRecord

MARK = "__GPUFLEET_TREE__ "


def tree_script(info: ClusterRecord, command: str, nodes: list[str], parallel: int = 256) -> str:
    """sh for the head's workdir: `command` on itself and on each worker, lines prefixed
    `[node-K] `, each node's last line `MARK<exit code>`."""
    rows = [r for r in relay.worker_rows(info) if r.split()[0] in nodes]
    one = (
        '{ $RSH -p "$3" -o HostKeyAlgorithms="$5" -o ControlMaster=auto "$2" '
        '"cd $4 && $GF_CMD" </dev/null; '
        f'printf "\\n{MARK}%s\\n" $?; }} 2>&1 | sed "s/^/[$1] /"'
    )
    local = (
        f'{{ sh -c "$GF_CMD" </dev/null; printf "\\n{MARK}%s\\n" $?; }} 2>&1 '
        f'| sed "s/^/[{info.nodes[0].name}] /" &'
    )
    lines = [*relay.HEAD_ENV, f"GF_CMD={shlex.quote(command)}", "export GF_CMD"]
    if info.nodes[0].name in nodes:
        lines.append(local)
    if rows:
        lines += [
            f"xargs -P {parallel} -L 1 sh -c {shlex.quote(one)} sh <<'EOF'",
            *rows,
            "EOF",
        ]
    lines += ["wait", ""]
    return "\n".join(lines)


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
    info: ClusterRecord, command: str, nodes: list[str] | None = None, stream: Any = None
) -> dict[str, HostResult]:
    """Run `command` on `nodes` (default all) through the head: node -> HostResult."""
    from gpufleet.core import state

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
    script += tree_script(info, command, names)
    proc = relay.start_prepare(info, control, script)
    collect = _Collector(stream)
    # The stream carries stdout only: a line may have been split on a chunk edge otherwise.
    for raw in proc.stdout:
        collect.feed(raw.decode(errors="replace").rstrip("\n"))
    err = relay.stderr_text(proc)
    if proc.wait() != 0 and not collect.codes:
        raise GpufleetError(f"tree exec on {info.nodes[0].name} failed: {err.strip()[-500:]}")
    return collect.results(names)
