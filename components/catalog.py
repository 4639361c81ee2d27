"""GPU instance types of every cloud (from catalog.yaml): hardware, fabric, NIC layout, price."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

from components.errors import CatalogError

DATA = Path(__file__).with_name("catalog.yaml")


@dataclass(frozen=True)
class InstanceType:
    cloud: str
    name: str
    gpus: int
    gpu_model: str
    gpu_memory_gib: float
    vcpus: int
    ram_gib: float
    fabric: str = "none"
    efa_interfaces: int = 0
    extra_nics: int = 0
    nvswitch: bool = False
    price_per_hour: float | None = None
    price_region: str | None = None
    price_date: str | None = None
    allreduce_busbw_gbps: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def needs_fabric_manager(self) -> bool:
        return self.nvswitch


@functools.cache
def load() -> tuple[InstanceType, ...]:
    """Every catalog entry, in file order."""
    import yaml

    raw = yaml.safe_load(DATA.read_text())
    out = []
    for cloud, entries in raw["clouds"].items():
        for name, e in entries.items():
            out.append(InstanceType(cloud=cloud, name=name, **e))
    return tuple(out)


def types(cloud: str | None = None, gpu: str | None = None) -> list[InstanceType]:
    """Entries filtered by cloud and GPU model substring (case-insensitive)."""
    return [
        t
        for t in load()
        if (cloud is None or t.cloud == cloud)
        and (gpu is None or gpu.lower() in t.gpu_model.lower())
    ]


def lookup(cloud: str, name: str) -> InstanceType:
    """The entry for one instance type; a CatalogError naming the choices otherwise."""
    for t in load():
        if t.cloud == cloud and t.name == name:
            return t
    raise CatalogError(name, cloud, [t.name for t in types(cloud)])
