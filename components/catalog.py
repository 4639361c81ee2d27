"""GPU instance types of every cloud (from catalog.yaml): hardware, fabric, NIC layout, price."""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from gpufleet.components.errors import CatalogEntryError, CatalogError, GpufleetError
from gpufleet.components.fabric import FABRICS, nccl_env

DATA = Path(__file__).with_name("catalog.yaml")
CLOUDS: tuple[str, ...] = ("aws", "gcp", "azure")

_DATE_RE = re.compile(r"^\d{4}(-\d{2}){0,2}$")
_DAY_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# How a region's spot figure is made from the source's prices. zone-*: of the per-zone prices
# (spot_price_zones); "host+gpus zone-median": each zone's price is the VM's host spot plus its
# GPUs' spot (GCP prices an A2/G2 VM's host and its GPUs as separate SKUs), then the median;
# "region": the source has one price for the region and no zones (Azure), spot_price_zones empty.
SPOT_BASES = ("zone-max", "zone-median", "zone-min", "host+gpus zone-median", "region")
# A spot price older than this is shown as old: AWS and GCP move spot prices daily to monthly,
# and a quarter is long enough that a figure from it is more a guess than an estimate.
SPOT_STALE_DAYS = 90
_REQUIRED = (
    "gpus",
    "gpu_model",
    "gpu_memory_gib",
    "vcpus",
    "ram_gib",
    "fabric",
    "price_per_hour",
    "price_region",
    "price_date",
    "price_source",
)


@dataclass(frozen=True)
class InstanceType:
    """One instance type. GPU memory is nominal (as sold); prices are on-demand Linux."""

    cloud: str
    name: str
    gpus: int
    gpu_model: str
    gpu_memory_gib: float
    vcpus: int
    ram_gib: float
    fabric: str = "none"
    efa_interfaces: int = 0
    efa_rdma: bool = False  # EFA with RDMA read (GPUDirect RDMA): p4d, p4de, p5, p5e, p5en
    extra_nics: int = 0
    local_ssds: int = 0  # bundled 375 GB local NVMe SSDs the cloud attaches (GCP A2 Ultra, A3)
    nccl_topo_file: str | None = None  # the image's NCCL topology file for this size (Azure ND)
    nvswitch: bool = False
    price_per_hour: float | None = None
    price_region: str | None = None
    price_date: str | None = None
    price_source: str | None = None
    # Spot/preemptible $/h in price_region (it moves daily): where a dated source gives one.
    spot_price_per_hour: float | None = None
    spot_price_date: str | None = None
    spot_price_source: str | None = None
    spot_price_basis: str | None = None  # one of SPOT_BASES: how the zones make the figure
    spot_price_zones: dict[str, float] = field(default_factory=dict)  # the source's, per zone
    allreduce_busbw_gbps: float | None = None
    machine_type: str | None = None  # the VM's machine type when it differs from `name` (GCP N1)
    accelerator: str | None = None  # GPU attached to that machine type (GCP N1)
    notes: list[str] = field(default_factory=list)

    @property
    def needs_fabric_manager(self) -> bool:
        return self.nvswitch

    @property
    def cloud_machine_type(self) -> str:
        """What to pass to the cloud as the machine type / VM size."""
        return self.machine_type or self.name

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_FIELDS = {f.name for f in dataclasses.fields(InstanceType)} - {"cloud", "name"}


class _Entry:
    """The checks of one raw entry; each failure is a CatalogEntryError naming the field."""

    def __init__(self, cloud: str, name: str, raw: dict[str, Any]):
        self.cloud, self.name, self.raw = cloud, name, raw

    def fail(self, key: str, problem: str) -> CatalogEntryError:
        return CatalogEntryError(self.cloud, self.name, f"{key} {problem}", field=key)

    def number(self, key: str, kind: type, minimum: float = 0, strict: bool = True) -> Any:
        v = self.raw.get(key, 0)
        ok_type = (int, float) if kind is float else int
        if isinstance(v, bool) or not isinstance(v, ok_type):
            what = "an integer" if kind is int else "a number"
            raise self.fail(key, f"must be {what}, got {v!r}")
        if v < minimum or (strict and v == minimum):
            rel = "greater than" if strict else "at least"
            raise self.fail(key, f"must be {rel} {minimum}, got {v!r}")
        return v

    def spot(self) -> None:
        """The spot figure is what its basis makes of its zones, dated to the day."""
        e = self.raw
        if not _DAY_RE.match(str(e["spot_price_date"])):
            raise self.fail(
                "spot_price_date", f"{e['spot_price_date']!r} is not YYYY-MM-DD (its age is shown)"
            )
        basis = e["spot_price_basis"]
        if basis not in SPOT_BASES:
            raise self.fail("spot_price_basis", f"{basis!r} is not one of {', '.join(SPOT_BASES)}")
        zones = e.get("spot_price_zones")
        if basis == "region":
            if zones:
                raise self.fail("spot_price_zones", "must be empty for basis region (no zones)")
            return
        if not isinstance(zones, dict) or not zones:
            raise self.fail("spot_price_zones", f"must map each zone to its price for {basis}")
        for zone, price in zones.items():
            if isinstance(price, bool) or not isinstance(price, int | float) or price <= 0:
                raise self.fail("spot_price_zones", f"{zone}: {price!r} is not a price > 0")
        want = spot_figure(basis, list(zones.values()))
        if abs(want - e["spot_price_per_hour"]) > 1e-9:
            raise self.fail(
                "spot_price_per_hour",
                f"is {e['spot_price_per_hour']}, but the {basis} of spot_price_zones is {want}",
            )

    def check(self) -> InstanceType:
        e = self.raw
        unknown = sorted(set(e) - _FIELDS)
        if unknown:
            raise self.fail(unknown[0], "is not a catalog field")
        for key in _REQUIRED:
            if e.get(key) in (None, ""):
                raise self.fail(key, "is required (an unpriced type stays out of the catalog)")
        self.number("gpus", int)
        self.number("vcpus", int)
        for key in ("gpu_memory_gib", "ram_gib", "price_per_hour"):
            self.number(key, float)
        fabric = e["fabric"]
        if fabric not in FABRICS:
            raise self.fail("fabric", f"{fabric!r} is not one of {', '.join(FABRICS)}")
        efa = self.number("efa_interfaces", int, strict=False)
        if (fabric == "efa") != (efa > 0):
            raise self.fail("efa_interfaces", f"is {efa} with fabric {fabric!r}: > 0 iff efa")
        nics = self.number("extra_nics", int, strict=False)
        if fabric in ("tcpx", "tcpxo") and nics == 0:
            raise self.fail("extra_nics", f"must be > 0 for fabric {fabric} (the GPU NICs)")
        if not isinstance(e.get("efa_rdma", False), bool):
            raise self.fail("efa_rdma", "must be true or false")
        if e.get("efa_rdma") and fabric != "efa":
            raise self.fail(
                "efa_rdma", f"is true with fabric {fabric!r}: RDMA read is an EFA trait"
            )
        self.number("local_ssds", int, strict=False)
        if not isinstance(e.get("nvswitch", False), bool):
            raise self.fail("nvswitch", "must be true or false")
        if not _DATE_RE.match(str(e["price_date"])):
            raise self.fail("price_date", f"{e['price_date']!r} is not YYYY, YYYY-MM or YYYY-MM-DD")
        if e.get("spot_price_per_hour") is not None:
            self.number("spot_price_per_hour", float)
            for key in ("spot_price_date", "spot_price_source", "spot_price_basis"):
                if not e.get(key):
                    raise self.fail(key, "is required with spot_price_per_hour (spot moves daily)")
            self.spot()
        elif any(e.get(k) for k in ("spot_price_date", "spot_price_basis", "spot_price_zones")):
            raise self.fail("spot_price_per_hour", "is required with the other spot_price_ fields")
        if e.get("allreduce_busbw_gbps") is not None:
            self.number("allreduce_busbw_gbps", float)
        if bool(e.get("machine_type")) != bool(e.get("accelerator")):
            raise self.fail("accelerator", "and machine_type go together (an N1 host + its GPUs)")
        if e.get("accelerator") and self.cloud != "gcp":
            raise self.fail("accelerator", "is only meaningful on gcp")
        notes = e.get("notes", [])
        if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
            raise self.fail("notes", "must be a list of strings")
        values = dict(e, price_date=str(e["price_date"]), notes=list(notes))
        if e.get("spot_price_date") is not None:
            values["spot_price_date"] = str(e["spot_price_date"])
        if e.get("spot_price_zones"):
            values["spot_price_zones"] = {
                str(z): float(p) for z, p in e["spot_price_zones"].items()
            }
        return InstanceType(cloud=self.cloud, name=self.name, **values)


def spot_figure(basis: str, prices: list[float]) -> float:
    """The region's spot $/h from its zones' prices: their highest, median or lowest (a
    host+gpus zone price is already the sum, so its figure is the median too)."""
    if basis == "zone-max":
        return max(prices)
    if basis == "zone-min":
        return min(prices)
    ordered, mid = sorted(prices), len(prices) // 2
    return ordered[mid] if len(ordered) % 2 else round((ordered[mid - 1] + ordered[mid]) / 2, 6)


def spot_age_days(it: InstanceType, today: date | None = None) -> int | None:
    """How many days old the entry's spot price is (None: no spot price)."""
    if not it.spot_price_date:
        return None
    return ((today or date.today()) - date.fromisoformat(it.spot_price_date)).days


def parse(raw: Any) -> tuple[InstanceType, ...]:
    """Entries of a catalog document, each checked; a CatalogEntryError names the bad one."""
    if not isinstance(raw, dict) or not isinstance(raw.get("clouds"), dict):
        raise GpufleetError(f"{DATA.name}: expected a top-level 'clouds' mapping")
    out: list[InstanceType] = []
    for cloud, entries in raw["clouds"].items():
        if cloud not in CLOUDS:
            raise GpufleetError(f"{DATA.name}: unknown cloud {cloud!r}; expected {CLOUDS}")
        for name, e in (entries or {}).items():
            if not isinstance(e, dict):
                raise CatalogEntryError(cloud, str(name), "entry must be a mapping of fields")
            out.append(_Entry(cloud, str(name), e).check())
    return tuple(out)


def _yaml_loader() -> Any:
    """A safe loader that refuses a key given twice in one mapping (PyYAML keeps the last)."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def mapping(loader: Loader, node: yaml.MappingNode) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *defaults` may be overridden by the entry's own keys
            key = loader.construct_object(key_node)
            if key in seen:
                line = key_node.start_mark.line + 1
                raise GpufleetError(f"{DATA.name} line {line}: duplicate key {key!r}")
            seen.add(key)
        return loader.construct_mapping(node, deep=True)

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return Loader


def parse_text(text: str) -> tuple[InstanceType, ...]:
    """Entries of catalog YAML text, checked."""
    import yaml

    return parse(yaml.load(text, Loader=_yaml_loader()))


@functools.cache
def load() -> tuple[InstanceType, ...]:
    """Every catalog entry, in file order, checked."""
    return parse_text(DATA.read_text())


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


def hourly_price(cloud: str, name: str, nodes: int = 1) -> float:
    """On-demand $/hour of `nodes` instances of one type (every entry has a price)."""
    return float(lookup(cloud, name).price_per_hour or 0.0) * nodes


def instance_nccl_env(
    cloud: str, instance_type: str | None, fabric: str, nodes: int | None = None
) -> dict[str, str]:
    """fabric.nccl_env for a cluster of `instance_type`, with what the catalog says of the type:
    its EFA RDMA support, and the image's NCCL topology file for it (Azure ND sizes)."""
    try:
        it = lookup(cloud, instance_type) if instance_type else None
    except CatalogError:
        it = None
    env = nccl_env(fabric, nodes, efa_rdma=bool(it and it.efa_rdma))
    if it and it.nccl_topo_file:
        env["NCCL_TOPO_FILE"] = it.nccl_topo_file
    return env
