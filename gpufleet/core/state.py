"""The state directory ($GPUFLEET_HOME, default ~/.gpufleet): one folder per cluster."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from gpufleet.core.errors import ClusterBusy, ClusterExpired, ClusterNotFound, StateDamaged

if TYPE_CHECKING:  # pydantic costs ~100 ms of start-up; exec's fast path avoids it
    from typing import TypeAlias

    from gpufleet.components.clusterinfo import ClusterInfo
    from gpufleet.components.clusterspec import ClusterSpec

    # A cluster's record as the commands with a fast path (exec, sync) take it: validated
    # (load) or the pydantic-free view (load_view), read the same way.
    ClusterRecord: TypeAlias = "ClusterInfo | ClusterView"


def home() -> Path:
    return Path(os.environ.get("GPUFLEET_HOME") or Path.home() / ".gpufleet")


def cluster_dir(name: str) -> Path:
    return home() / "clusters" / name


def write_private(path: Path, text: str) -> None:
    """Atomic: a unique temp file in the same folder, flushed to disk, renamed over `path`.

    A reader (or a crash) sees the old file or the new one, never a truncated one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:  # mkstemp: mode 0600
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def lock(name: str) -> Iterator[None]:
    """An exclusive lock on a cluster name, held while it is created (ClusterBusy if taken).

    flock: the kernel drops it when the holder dies, so a killed CLI never leaves it stuck.
    The file is removed on release; a taker checks it locked the file still at that path.
    """
    import fcntl

    path = home() / "locks" / f"{name}.lock"
    while True:
        path.parent.mkdir(parents=True, exist_ok=True)  # a releaser may have removed it
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ClusterBusy(name) from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # released and removed between our open and flock: take the new one
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # only if empty


def locked(name: str) -> bool:
    """Whether a live process holds the name's lock (creating it right now)."""
    import fcntl

    path = home() / "locks" / f"{name}.lock"
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def save_spec(spec: ClusterSpec) -> None:
    write_private(cluster_dir(spec.name) / "spec.json", spec.model_dump_json(indent=2))


def load_spec(name: str) -> ClusterSpec | None:
    from gpufleet.components.clusterspec import ClusterSpec

    p = cluster_dir(name) / "spec.json"
    return ClusterSpec.model_validate_json(p.read_text()) if p.exists() else None


def save(info: ClusterInfo) -> None:
    """Record a cluster (atomically, 0600: it names the private key)."""
    write_private(cluster_dir(info.name) / "cluster.json", info.model_dump_json(indent=2))
    _tombstone(info.name).unlink(missing_ok=True)  # the name is a live cluster again


def _read_json(name: str) -> dict[str, Any]:
    p = cluster_dir(name) / "cluster.json"
    if not p.exists():
        if cluster_dir(name).is_dir() and not locked(name):
            raise StateDamaged(name, str(p), "missing: its creation was interrupted")
        when = expired_at(name)
        if when is not None:
            raise ClusterExpired(name, when)
        raise ClusterNotFound(name)
    try:
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise StateDamaged(name, str(p), f"unreadable: {type(e).__name__}") from None
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise StateDamaged(name, str(p), "not a cluster record")
    return data


def load(name: str) -> ClusterInfo:
    data = _read_json(name)
    from gpufleet.components.clusterinfo import ClusterInfo

    try:
        return ClusterInfo.model_validate(data)
    except Exception as e:  # pydantic's ValidationError, or a GpufleetError from a validator
        first = str(e).splitlines()[0][:200]
        raise StateDamaged(name, str(cluster_dir(name) / "cluster.json"), first) from None


class ClusterView(SimpleNamespace):
    """A recorded cluster as plain attributes, read without validation (written validated)."""

    def node(self, name_or_index: str | int) -> Any:
        from gpufleet.components.nodelookup import find_node

        return find_node(self.name, self.nodes, name_or_index)


def load_view(name: str) -> ClusterView:
    """Like load(), minus pydantic: for the commands where start-up time is the product."""
    data = _read_json(name)
    try:
        data["nodes"] = [SimpleNamespace(**n) for n in data["nodes"]]
        return ClusterView(**data)
    except TypeError as e:
        raise StateDamaged(name, str(cluster_dir(name) / "cluster.json"), str(e)) from None


def exists(name: str) -> bool:
    return (cluster_dir(name) / "cluster.json").exists()


def names() -> list[str]:
    """Every recorded cluster (created or being created)."""
    root = home() / "clusters"
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir())


def known(name: str) -> bool:
    """Anything recorded under this name, even a damaged or half-created record."""
    return cluster_dir(name).is_dir()


def forget(name: str, removed: bool = False, expired: float | None = None) -> None:
    """Remove a cluster's folder; removed=True (its resources were torn down) also notes the
    name, so a later `down` of it says "already gone" rather than "no such cluster";
    expired=EPOCH (its nodes removed themselves at their expiry) leaves a tombstone, so that
    `status` and the others say it expired, and when, rather than "no cluster named"."""
    shutil.rmtree(cluster_dir(name), ignore_errors=True)
    if expired is not None:
        write_private(_tombstone(name), f"{expired:.0f}\n")
    else:
        _tombstone(name).unlink(missing_ok=True)
    if removed:
        write_private(home() / "removed" / name, f"{time.time():.0f}\n")


def was_removed(name: str) -> bool:
    return (home() / "removed" / name).is_file()


def _tombstone(name: str) -> Path:
    return home() / "expired" / name


def expired_at(name: str) -> float | None:
    """When the cluster `name` expired and removed itself (its tombstone); None: it did not."""
    try:
        return float(_tombstone(name).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def start_time(pid: int) -> str | None:
    """A process's start time (clock ticks since boot): tells a PID from a reused one."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def process_alive(pid: int, started: str | None = None) -> bool:
    """Whether process `pid` runs and, when its start time was recorded (`started`), is still
    the process that was recorded rather than a new one given the same PID."""
    now = start_time(pid)
    return now is not None and (started in (None, "-") or now == started)


def set_owner(name: str, pid: int | None = None) -> None:
    """Record the CLI process that owns (and will remove) a cluster, e.g. a one-shot `run`."""
    pid = pid or os.getpid()
    write_private(cluster_dir(name) / "owner", f"{pid} {start_time(pid) or '-'}\n")


def orphaned(name: str) -> bool:
    """A cluster whose owning CLI is dead (kill -9, a lost machine): nobody will remove it."""
    try:
        pid_s, started = (cluster_dir(name) / "owner").read_text().split()[:2]
        pid = int(pid_s)
    except (OSError, ValueError):
        return False  # no owner: kept on purpose (`up`, `run --keep`)
    return not process_alive(pid, started)
