"""The pinned version sets of the node image recipe (images/versions.yaml), checked on load."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.components.errors import SpecError
from gpufleet.components.fabric import FABRICS
from gpufleet.components.resources import data_dir

IMAGES = data_dir("images")
VERSIONS = IMAGES / "versions.yaml"

# Base pins every GPU set has, in the order the node env lists them.
CORE = (
    "driver_branch",
    "driver_version",
    "fabric_manager",
    "cuda",
    "nccl",
    "container_toolkit",
    "dcgm",
)
# What each fabric's steps need (images/steps/40-fabric.sh); a set may pin nothing more.
FABRIC_PINS: dict[str, tuple[str, ...]] = {
    "efa": ("efa_installer", "aws_ofi_nccl"),
    "infiniband": (),
    "tcpx": ("tcpx_plugin", "tcpx_rxdm"),
    "tcpxo": ("tcpxo_plugin", "tcpxo_rxdm"),
    "none": (),
}


@dataclass(frozen=True)
class Pin:
    """One pinned version and where the choice comes from."""

    version: str
    source: str


@dataclass(frozen=True)
class VersionSet:
    """A named set for one node: the base pins plus its fabric's (empty for CPU-only nodes)."""

    name: str
    pins: dict[str, Pin] = field(default_factory=dict)
    fabric: str = "none"

    @property
    def values(self) -> dict[str, str]:
        return {k: p.version for k, p in self.pins.items()}

    def version(self, key: str) -> str | None:
        pin = self.pins.get(key)
        return pin.version if pin else None

    def env(self) -> dict[str, str]:
        """As GPUFLEET_<KEY> variables for the steps (/etc/gpufleet/env)."""
        return {f"GPUFLEET_{k.upper()}": p.version for k, p in self.pins.items()}


class VersionSetError(SpecError):
    """images/versions.yaml holds a set the recipe cannot use."""

    def __init__(self, where: str, problem: str, fix: str = "fix images/versions.yaml"):
        super().__init__(f"images/versions.yaml {where}", problem, fix)


def _pin(where: str, raw: Any) -> Pin:
    if not isinstance(raw, dict) or set(raw) != {"version", "source"}:
        raise VersionSetError(where, "must be a mapping with exactly `version` and `source`")
    version, source = str(raw["version"]).strip(), str(raw["source"] or "").strip()
    if not version:
        raise VersionSetError(where, "has an empty version")
    if not source:
        raise VersionSetError(where, "has no source", "say where the version comes from")
    return Pin(version, source)


def _check_core(name: str, pins: dict[str, Pin]) -> None:
    missing = [k for k in CORE if k not in pins]
    if missing:
        raise VersionSetError(f"sets.{name}", f"misses {', '.join(missing)}")
    driver, fm = pins["driver_version"].version, pins["fabric_manager"].version
    if fm != driver:
        raise VersionSetError(
            f"sets.{name}.fabric_manager",
            f"{fm} differs from driver_version {driver} (CUDA then fails with error 802)",
            f"set fabric_manager to {driver}",
        )
    branch = pins["driver_branch"].version
    if not driver.startswith(branch + "."):
        raise VersionSetError(
            f"sets.{name}.driver_version",
            f"{driver} is not on driver_branch {branch}",
            "pin a driver of that branch, or change the branch",
        )


def parse_set(name: str, raw: dict[str, Any] | None) -> dict[str, VersionSet]:
    """One `sets.<name>` entry -> its VersionSet per fabric it supports (always `none`)."""
    raw = dict(raw or {})
    fabrics_raw = raw.pop("fabrics", None) or {}
    unknown = [k for k in raw if k not in CORE]
    if unknown:
        raise VersionSetError(
            f"sets.{name}", f"unknown keys {', '.join(unknown)}", f"use {', '.join(CORE)}"
        )
    base = {k: _pin(f"sets.{name}.{k}", raw[k]) for k in CORE if k in raw}
    if base:
        _check_core(name, base)
    out = {"none": VersionSet(name, dict(base), "none")}
    for fabric, extra in fabrics_raw.items():
        where = f"sets.{name}.fabrics.{fabric}"
        if fabric not in FABRICS:
            raise VersionSetError(where, "is not a fabric", f"use one of {', '.join(FABRICS)}")
        if not base:
            raise VersionSetError(where, "needs the base pins of a GPU set")
        extra = dict(extra or {})
        need = FABRIC_PINS[fabric]
        if sorted(extra) != sorted(need):
            raise VersionSetError(where, f"pins {sorted(extra)}; {fabric} needs {list(need)}")
        pins = dict(base)
        pins.update({k: _pin(f"{where}.{k}", extra[k]) for k in need})
        out[fabric] = VersionSet(name, pins, fabric)
    return out


def parse(doc: dict[str, Any]) -> dict[str, dict[str, VersionSet]]:
    """Every set of a versions document, checked: name -> fabric -> VersionSet."""
    sets = {name: parse_set(name, raw) for name, raw in (doc.get("sets") or {}).items()}
    for cloud, name in (doc.get("defaults") or {}).items():
        if name not in sets:
            raise VersionSetError(f"defaults.{cloud}", f"names {name!r}, which is not a set")
    return sets


@functools.cache
def load(path: Path = VERSIONS) -> tuple[dict[str, str], dict[str, dict[str, VersionSet]]]:
    """(defaults: cloud -> set name, sets) from the versions file."""
    import yaml

    doc = yaml.safe_load(path.read_text()) or {}
    return dict(doc.get("defaults") or {}), parse(doc)


def for_node(cloud: str, fabric: str = "none") -> VersionSet:
    """The versions a node on `cloud` with `fabric` is built with."""
    defaults, sets = load()
    if cloud not in defaults:
        raise VersionSetError(
            "defaults", f"names no set for cloud {cloud!r}", f"add `{cloud}: <set>` there"
        )
    by_fabric = sets[defaults[cloud]]
    if fabric not in by_fabric:
        if not by_fabric["none"].pins:
            return by_fabric["none"]  # a CPU-only set: no fabric pieces to pin
        raise VersionSetError(
            f"sets.{defaults[cloud]}.fabrics",
            f"has no {fabric!r} entry for {cloud} nodes",
            f"add `{fabric}:` with {', '.join(FABRIC_PINS[fabric]) or 'nothing'}",
        )
    return by_fabric[fabric]


def for_cloud(cloud: str) -> VersionSet:
    """A cloud's set without fabric pieces."""
    return for_node(cloud, "none")
