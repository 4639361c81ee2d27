"""GPU instance types of every cloud (from catalog.yaml): hardware, fabric, NIC layout, price."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

from components.errors import CatalogEntryError, CatalogError

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
    price_source: str | None = None
    allreduce_busbw_gbps: float | None = None
    machine_type: str | None = None  # the VM's machine type when it differs from `name` (GCP N1)
    accelerator: str | None = None  # GPU attached to that machine type (GCP N1)
    notes: list[str] = field(default_factory=list)

    @property
    def needs_fabric_manager(self) -> bool:
        return self.nvswitch


@functools.cache
def load() -> tuple[InstanceType, ...]:
    """Every catalog entry, in file order."""
    import yaml

    return parse(yaml.safe_load(DATA.read_text()))


def parse(raw: dict) -> tuple[InstanceType, ...]:
    """Entries of a catalog document, each checked; a CatalogEntryError names the bad one."""
    out = []
    for cloud, entries in raw["clouds"].items():
        for name, e in entries.items():
            try:
                it = InstanceType(cloud=cloud, name=name, **e)
            except TypeError as err:
                raise CatalogEntryError(cloud, name, str(err)) from None
            check(it)
            out.append(it)
    return tuple(out)


def check(it: InstanceType) -> None:
    """Reject an entry that would render a wrong fleet."""
    from components.fabric import FABRICS

    problems = []
    if it.fabric not in FABRICS:
        problems.append(f"fabric {it.fabric!r} is not one of {', '.join(FABRICS)}")
    if it.gpus < 1:
        problems.append("gpus must be at least 1")
    if (it.fabric == "efa") != (it.efa_interfaces > 0):
        problems.append("efa_interfaces > 0 exactly when fabric is efa")
    if it.price_per_hour is not None and (it.price_per_hour <= 0 or not it.price_region):
        problems.append("a price needs a positive value and its price_region")
    if problems:
        raise CatalogEntryError(it.cloud, it.name, "; ".join(problems))


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
