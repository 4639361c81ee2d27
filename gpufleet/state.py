"""The state directory ($GPUFLEET_HOME, default ~/.gpufleet): one folder per cluster."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from gpufleet.errors import ClusterNotFound

if TYPE_CHECKING:  # pydantic costs ~100 ms of start-up; exec's fast path avoids it
    from components.spec import ClusterInfo, ClusterSpec


def home() -> Path:
    return Path(os.environ.get("GPUFLEET_HOME") or Path.home() / ".gpufleet")


def cluster_dir(name: str) -> Path:
    return home() / "clusters" / name


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def save_spec(spec: ClusterSpec) -> None:
    _write_private(cluster_dir(spec.name) / "spec.json", spec.model_dump_json(indent=2))


def load_spec(name: str) -> ClusterSpec | None:
    from components.spec import ClusterSpec

    p = cluster_dir(name) / "spec.json"
    return ClusterSpec.model_validate_json(p.read_text()) if p.exists() else None


def save(info: ClusterInfo) -> None:
    """Record a cluster (atomically, 0600: it names the private key)."""
    _write_private(cluster_dir(info.name) / "cluster.json", info.model_dump_json(indent=2))


def load(name: str) -> ClusterInfo:
    p = cluster_dir(name) / "cluster.json"
    if not p.exists():
        raise ClusterNotFound(name)
    from components.spec import ClusterInfo

    return ClusterInfo.model_validate(json.loads(p.read_text()))


class ClusterView(SimpleNamespace):
    """A recorded cluster as plain attributes, read without validation (written validated)."""

    def node(self, name_or_index: str | int) -> Any:
        from components.nodelookup import find_node

        return find_node(self.name, self.nodes, name_or_index)


def load_view(name: str) -> ClusterView:
    """Like load(), minus pydantic: for the commands where start-up time is the product."""
    p = cluster_dir(name) / "cluster.json"
    if not p.exists():
        raise ClusterNotFound(name)
    data = json.loads(p.read_text())
    data["nodes"] = [SimpleNamespace(**n) for n in data["nodes"]]
    return ClusterView(**data)


def exists(name: str) -> bool:
    return (cluster_dir(name) / "cluster.json").exists()


def names() -> list[str]:
    """Every recorded cluster (created or being created)."""
    root = home() / "clusters"
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir())


def forget(name: str) -> None:
    """Remove a cluster's folder (after its resources are gone)."""
    shutil.rmtree(cluster_dir(name), ignore_errors=True)
