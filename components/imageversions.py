"""The pinned version sets of the node image recipe (images/versions.yaml), checked on load."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

from components.errors import GpufleetError

IMAGES = Path(__file__).resolve().parent.parent / "images"


@dataclass(frozen=True)
class VersionSet:
    name: str
    values: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        """As GPUFLEET_<KEY> variables for the steps."""
        return {f"GPUFLEET_{k.upper()}": str(v) for k, v in self.values.items()}


class VersionSetError(GpufleetError):
    def __init__(self, name: str, problem: str):
        super().__init__(f"version set {name!r}: {problem}", hint="fix images/versions.yaml")
        self.set_name = name


def check(vs: VersionSet) -> VersionSet:
    v = vs.values
    if v and v.get("fabric_manager") != v.get("driver_version"):
        raise VersionSetError(
            vs.name,
            f"fabric_manager {v.get('fabric_manager')} differs from driver_version "
            f"{v.get('driver_version')} (CUDA then fails with error 802)",
        )
    if v and not str(v.get("driver_version", "")).startswith(str(v.get("driver_branch", "")) + "."):
        raise VersionSetError(vs.name, "driver_version is not on driver_branch")
    return vs


def parse(doc: dict) -> dict[str, VersionSet]:
    return {
        name: check(VersionSet(name, dict(values or {}))) for name, values in doc["sets"].items()
    }


@functools.cache
def _doc() -> dict:
    import yaml

    return yaml.safe_load((IMAGES / "versions.yaml").read_text())


def for_cloud(cloud: str) -> VersionSet:
    """The version set a cloud's nodes use by default."""
    doc = _doc()
    sets = parse(doc)
    name = doc["defaults"].get(cloud, "none")
    if name not in sets:
        raise VersionSetError(name, f"named by defaults.{cloud} but not defined")
    return sets[name]
