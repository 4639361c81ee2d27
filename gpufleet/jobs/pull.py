"""A run's image on every node: one pull per node, all at once, progress, the same digest."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.components import containerimage
from gpufleet.components.containerimage import ImageRef
from gpufleet.components.exitcodes import ExitCode
from gpufleet.core import providers
from gpufleet.core.errors import GpufleetError, HostResult, SpecError
from gpufleet.jobs import imagecopy

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ContainerSpec
    from gpufleet.components.containerflags import NodeFacts
    from gpufleet.core.state import ClusterRecord
    from gpufleet.remote import Group

Progress = Callable[[str], None]
SCRIPT_PATH = ".gpufleet/pull.sh"  # in each node's workdir
STATE_ROOT = ".gpufleet/pull"  # + /<image hash>/status.json: this CLI's own pulls
POLL_S = 2.0  # how often every node's status.json is read
SHOW_EVERY_S = 5.0  # at most one progress line per node this often
# Registry kind -> what this process's environment hands the node pull script, on its stdin
# only: never in argv, the node's environment or a file (interface 1 of issue 21).
SECRETS = {"ngc": ("NGC_API_KEY",)}


def node_script() -> Any:
    """The node pull script's module, components/containerpull.py (tests use a stand-in)."""
    return importlib.import_module("gpufleet.components.containerpull")


@dataclass
class PullReport:
    """What getting the image onto every node took, per node."""

    image: str
    digests: dict[str, str]  # node -> sha256:... (the same on every node)
    seconds: dict[str, float]  # node -> its pull (or wait for its boot pull), load included
    bytes: dict[str, int]  # node -> bytes its pull received
    archive_bytes: int | None = None  # an archive's size (None for a registry image)
    uploaded: int = 0  # bytes this machine sent (an archive: once, to the head)
    attached: list[str] = field(default_factory=list)  # nodes whose boot pull was used
    parallel: bool = True

    @property
    def digest(self) -> str:
        return next(iter(self.digests.values()), "")


class PullFailed(GpufleetError):
    """The image could not be pulled (or loaded) on some nodes; node -> the script's error."""

    exit_code = ExitCode.NODE_FAILED

    def __init__(self, image: str, errors: dict[str, str]):
        parts = "; ".join(f"{n}: {e}" for n, e in sorted(errors.items()))
        super().__init__(
            f"the image {image} is not on {len(errors)} node(s): {parts}",
            hint="check the node can reach the registry and has the disk for the image "
            "(`gpufleet exec NAME -- df -h`); private registries: the node's identity needs "
            "pull access (nvcr.io: NGC_API_KEY in this environment); a slow link: raise "
            "container.pull_stall_s",
        )
        self.image, self.errors = image, errors


class DigestMismatch(PullFailed):
    """The nodes ended up with different images under one name (a tag moved mid-pull)."""

    def __init__(self, image: str, digests: dict[str, str]):
        by: dict[str, list[str]] = {}
        for n, d in sorted(digests.items()):
            by.setdefault(d, []).append(n)
        parts = "; ".join(f"{d or '(none)'} on {', '.join(ns)}" for d, ns in by.items())
        GpufleetError.__init__(
            self,
            f"the nodes have different images for {image}: {parts}",
            hint="the tag moved while the nodes pulled it: pin the image by digest "
            "(IMAGE@sha256:...) and run again",
        )
        self.image, self.digests, self.errors = image, digests, {}


def check_archive(ref: ImageRef | str, field: str = "--image") -> tuple[Path, int]:
    """An archive image's file on this machine and its size; SpecError naming `field` if
    it is not a readable file. Call before anything is created."""
    if isinstance(ref, str):
        ref = containerimage.parse(ref, field)
    p = Path(ref.path).expanduser()
    if not p.is_file():
        why = "is a folder" if p.is_dir() else "does not exist"
        raise SpecError(
            field,
            f"{ref}: {p} {why} on this machine",
            f"give the path of an archive file, e.g. from `podman save --format oci-archive "
            f"-o image.tar IMAGE` ({ref.transport}:image.tar)",
        )
    if not os.access(p, os.R_OK):
        raise SpecError(field, f"{ref}: {p} is not readable", f"chmod u+r {p}")
    return p.resolve(), p.stat().st_size


def secrets_stdin(ref: ImageRef, environ: dict[str, str] | None = None) -> bytes | None:
    """`NAME=value` lines for the script's stdin: only the names this registry uses."""
    env = os.environ if environ is None else environ
    lines = [f"{k}={env[k]}\n" for k in SECRETS.get(ref.registry_kind, ()) if env.get(k)]
    return "".join(lines).encode() if lines else None


def size_text(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


@dataclass
class _Node:
    name: str
    status_path: str  # the status.json followed (this CLI's pull, or the boot pull's)
    boot: bool = False
    started: float | None = None  # monotonic; None: not begun (one-by-one)
    state: str = ""
    bytes: int = 0
    attempt: int = 0
    changed_at: float = 0.0  # last change of (state, bytes, attempt)
    shown: tuple[float, int] = (0.0, 0)  # (when, bytes) of the last progress line
    final: dict[str, Any] | None = None
    error: str | None = None
    seconds: float = 0.0

    @property
    def over(self) -> bool:
        return self.final is not None or self.error is not None

    def update(self, st: dict[str, Any], now: float) -> None:
        seen = (st.get("state", ""), int(st.get("bytes") or 0), int(st.get("attempt") or 0))
        if seen != (self.state, self.bytes, self.attempt):
            self.changed_at = now
        self.state, self.bytes, self.attempt = seen


def parse_mark(text: str, mark: str) -> dict[str, Any] | None:
    """The script's last `MARK{json}` line, or None."""
    for line in reversed(text.splitlines()):
        if line.startswith(mark):
            try:
                doc = json.loads(line[len(mark) :])
            except ValueError:
                return None
            return doc if isinstance(doc, dict) else None
    return None


def read_statuses(group: Group, paths: dict[str, str]) -> dict[str, dict[str, Any]]:
    """node -> its status.json at `paths[node]` (absent, or unreadable: not in the result).

    One short command per node over the open connections, all at once."""
    import shlex

    if not paths:
        return {}
    cmds = {n: f"cat {shlex.quote(p)} 2>/dev/null; true" for n, p in paths.items()}
    out: dict[str, dict[str, Any]] = {}
    for n, r in group.run(cmds, check=False, timeout=15, what="pull status").items():
        try:
            doc = json.loads(r.stdout.strip() or "null")
        except ValueError:
            continue  # caught between writes is impossible (atomic rename); garbage: skip
        if isinstance(doc, dict):
            out[n] = doc
    return out


class _Runner:
    """The pull commands, in background threads: all nodes in one group command, or one by one."""

    def __init__(self, group: Group, cmds: dict[str, str], stdin: bytes | None, parallel: bool):
        self.group, self.cmds, self.stdin, self.parallel = group, cmds, stdin, parallel
        self.results: dict[str, HostResult] = {}
        self.begun: dict[str, float] = {}
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.subsets: list[Group] = []
        self.threads: list[threading.Thread] = []

    def start(self, names: list[str]) -> None:
        if names:
            t = threading.Thread(target=self._run, args=(names,), daemon=True)
            self.threads.append(t)
            t.start()

    def _run(self, names: list[str]) -> None:
        for batch in [names] if self.parallel else [[n] for n in names]:
            with self.group.subset(batch) as g:
                with self.lock:
                    self.subsets.append(g)
                    now = time.monotonic()
                    self.begun.update(dict.fromkeys(batch, now))
                try:
                    res = g.run(
                        {n: self.cmds[n] for n in batch},
                        stdin=self.stdin,
                        check=False,
                        what="image pull",
                    )
                except Exception as e:  # reported as this batch's failure, never lost
                    msg = f"{type(e).__name__}: {e}"
                    res = {n: HostResult(n, None, error=msg) for n in batch}
            with self.lock:
                self.results.update(res)
            self.wake.set()

    def cancel(self) -> None:
        with self.lock:
            subsets = list(self.subsets)
        for g in subsets:
            g.cancel(grace_s=2.0)


def _result(r: HostResult, mark: str) -> tuple[dict[str, Any] | None, str | None]:
    """(final status, None) for a pull that ended done; (None, why) otherwise."""
    doc = parse_mark(r.stdout, mark)
    if r.ok and doc and doc.get("state") == "done":
        return doc, None
    if doc and doc.get("error"):
        return None, str(doc["error"])
    if r.error:
        return None, r.error
    tail = (r.stderr or r.stdout).strip().splitlines()[-1:]
    return None, f"exit {r.exit_code}" + (f": {tail[0][:300]}" if tail else "")


def ensure_image(
    info: ClusterRecord,
    group: Group,
    spec: ContainerSpec,
    facts: dict[str, NodeFacts],
    progress: Progress,
    *,
    parallel: bool = True,
) -> PullReport:
    """Make `spec.image` present on every node of `group`, with one digest; its PullReport.

    Registry image: each node runs the pull script (components/containerpull.py), all at
    once (parallel=False: one node after another); a node whose boot pull (cloud-init) is
    for this image is waited for instead, and pulled again only if that pull failed or got
    no new bytes for spec.pull_stall_s. Archive (oci-archive:/docker-archive:): copied once
    to the head and from there to the workers (imagecopy), then loaded by the script.
    Raises PullFailed naming each failed node and its error, DigestMismatch when the nodes'
    digests differ.
    """
    mod = node_script()
    ref = containerimage.parse(spec.image, "--image")
    image = str(ref)
    started = time.monotonic()
    report = PullReport(image, {}, {}, {}, parallel=parallel)
    names = [n.name for n in group.nodes]
    no_runtime = {n: "no container runtime on it" for n in names if not _runtime(facts, n)}
    if no_runtime:
        raise PullFailed(image, no_runtime)
    node_ref = {n: ref for n in names}
    key = image  # what this CLI's state folder on the nodes is named by
    if ref.is_archive:
        path, size = check_archive(ref)
        report.archive_bytes = size
        progress(f"image archive {path.name}: {size_text(size)}; hashing it")
        copy = imagecopy.distribute(
            info, group, path, imagecopy.sha256_file(path), progress, parallel=parallel
        )
        report.uploaded = copy.uploaded
        key = copy.dest  # an archive's content, not its path here
        for n in group.nodes:
            # The script runs in the workdir: a relative workdir (a VM's `gpufleet`, from $HOME)
            # must not be named twice.
            at = f"{n.workdir.rstrip('/')}/{copy.dest}" if n.workdir.startswith("/") else copy.dest
            node_ref[n.name] = ImageRef(ref.transport, path=at)
    group.put({SCRIPT_PATH: mod.SCRIPT})
    own = f"{STATE_ROOT}/{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    cmds = {
        n: mod.command(
            node_ref[n],
            runtime=facts[n].runtime,
            sudo=facts[n].sudo,
            state_dir=own,
            stall_s=spec.pull_stall_s,
            attempts=spec.pull_attempts,
            script_path=SCRIPT_PATH,
        )
        for n in names
    }
    nodes = {n: _Node(n, f"{own}/status.json") for n in names}
    now = time.monotonic()
    if not ref.is_archive:
        boot_path = f"{mod.BOOT_STATE_DIR}/status.json"
        for n, st in read_statuses(group, dict.fromkeys(names, boot_path)).items():
            if st.get("image") != image or st.get("state") == "failed":
                continue
            node = nodes[n]
            node.boot, node.status_path, node.started = True, boot_path, now
            node.update(st, now)
            report.attached.append(n)
            if st.get("state") == "done" and st.get("digest"):
                node.final = st
        if report.attached:
            done = [n for n in report.attached if nodes[n].final]
            going = [n for n in report.attached if n not in done]
            progress(
                f"boot pull of {image}: done on {', '.join(done) or 'none'}; "
                f"waiting for it on {', '.join(going) or 'none'}"
            )
    secrets = secrets_stdin(ref)
    runner = _Runner(group, cmds, secrets, parallel)
    todo = [n for n in names if not nodes[n].boot]
    if todo:
        how = "" if len(todo) == 1 else " in parallel" if parallel else " one by one"
        verb = "loading" if ref.is_archive else "pulling"
        progress(f"{verb} {image} on {len(todo)} node(s){how}")
    runner.start(todo)
    with group.subset(names) as poller:
        try:
            _follow(nodes, runner, poller, spec, mod.MARK, progress, own)
            # The boot pull ran as root; this run may use another store (rootless podman):
            # a node whose store lacks the image pulls it now, with this run's runtime.
            booted = [n for n, nd in nodes.items() if nd.boot and nd.final and not nd.error]
            missing = _not_in_store(poller, ref.reference, facts, booted)
            if missing:
                progress(
                    f"the boot pull's {image} is not in this run's image store on "
                    f"{', '.join(missing)}: pulling it there"
                )
                for n in missing:
                    _restart(nodes[n], own)
                report.attached = [n for n in report.attached if n not in missing]
                runner.start(missing)
                _follow(nodes, runner, poller, spec, mod.MARK, progress, own)
        except BaseException:
            runner.cancel()
            raise
    failed = {n: _scrub(nd.error or "", secrets) for n, nd in nodes.items() if nd.error}
    if failed:
        raise PullFailed(image, failed)
    for n, nd in nodes.items():
        assert nd.final is not None
        report.digests[n] = str(nd.final.get("digest") or "")
        report.bytes[n] = int(nd.final.get("bytes") or 0)
        report.seconds[n] = round(nd.seconds, 3)
    if len(set(report.digests.values())) != 1 or not report.digest:
        raise DigestMismatch(image, report.digests)
    if ref.is_archive and info is not None and not providers.may_write(info.cloud):
        # hosts gpufleet did not create (--cloud ssh): the image is in the runtime's store
        # now; the archive would only take their disk. Created nodes keep it: a later run
        # skips the copy.
        imagecopy.remove(group, key)
        progress(f"removed the image archive from the nodes' workdirs ({key})")
    progress(
        f"{image}: {report.digest} on all {len(names)} node(s) in {time.monotonic() - started:.1f}s"
    )
    return report


def _not_in_store(
    group: Group, reference: str, facts: dict[str, NodeFacts], names: list[str]
) -> list[str]:
    """Of `names`, the nodes where `<facts.prefix> image inspect reference` fails."""
    import shlex

    if not names:
        return []
    cmds = {
        n: shlex.join([*facts[n].prefix, "image", "inspect", reference]) + " >/dev/null 2>&1"
        for n in names
    }
    results = group.run(cmds, check=False, timeout=60, what="image check")
    return [n for n in names if not results[n].ok]


def _restart(nd: _Node, own: str) -> None:
    """Follow this CLI's own pull of the node from now on, not the boot pull."""
    nd.boot, nd.status_path, nd.started = False, f"{own}/status.json", None
    nd.state, nd.bytes, nd.attempt, nd.final, nd.error = "", 0, 0, None, None


def _runtime(facts: dict[str, NodeFacts], node: str) -> str:
    f = facts.get(node)
    return f.runtime if f is not None else ""


def _scrub(text: str, secrets: bytes | None) -> str:
    """`text` with any secret value handed to the script masked."""
    for line in (secrets or b"").decode().splitlines():
        value = line.partition("=")[2]
        if value:
            text = text.replace(value, "***")
    return text


def _follow(
    nodes: dict[str, _Node],
    runner: _Runner,
    poller: Group,
    spec: ContainerSpec,
    mark: str,
    progress: Progress,
    own: str,
) -> None:
    """Until every node is done or failed: results in, statuses read, progress out."""
    while not all(nd.over for nd in nodes.values()):
        runner.wake.wait(POLL_S)
        runner.wake.clear()
        now = time.monotonic()
        with runner.lock:
            results, begun = dict(runner.results), dict(runner.begun)
        for n, nd in nodes.items():
            if nd.boot or nd.over:
                continue
            if nd.started is None and n in begun:
                nd.started, nd.changed_at = begun[n], begun[n]
            r = results.get(n)
            if r is not None:
                nd.final, nd.error = _result(r, mark)
                nd.seconds = r.finished - r.started
        active = {n: nd.status_path for n, nd in nodes.items() if nd.started and not nd.over}
        for n, st in read_statuses(poller, active).items():
            nd = nodes[n]
            nd.update(st, now)
            if not nd.boot or nd.over:
                continue
            stalled = now - nd.changed_at >= spec.pull_stall_s
            if st.get("state") == "done" and st.get("digest"):
                nd.final, nd.seconds = st, now - (nd.started or now)
            elif st.get("state") == "failed" or stalled:
                why = "failed" if not stalled else f"got no new bytes for {spec.pull_stall_s}s"
                progress(f"pull {n}: the boot pull {why}; pulling it again")
                _restart(nd, own)
                runner.start([n])
        for n, nd in nodes.items():
            if nd.over or nd.started is None or nd.state not in ("pulling", "loading"):
                continue
            last_at, last_bytes = nd.shown
            if now - last_at < SHOW_EVERY_S:
                continue
            since = nd.started if last_at == 0.0 else last_at
            rate = max(nd.bytes - last_bytes, 0) / max(now - since, 1e-3)
            nd.shown = (now, nd.bytes)
            verb = "load" if nd.state == "loading" else "pull"
            who = f"{n} (boot pull)" if nd.boot else n
            progress(
                f"{verb} {who}: {size_text(nd.bytes)} at {size_text(rate)}/s "
                f"(attempt {nd.attempt or 1})"
            )
