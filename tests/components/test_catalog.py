"""The instance catalog: coverage of the three clouds, NIC layouts, validation."""

from __future__ import annotations

import pytest

from components import catalog
from components.errors import CatalogEntryError, CatalogError
from components.fabric import FABRICS


def test_at_least_25_priced_types_across_three_clouds():
    priced = [t for t in catalog.load() if t.price_per_hour]
    assert len(priced) >= 25
    assert {t.cloud for t in priced} == {"aws", "gcp", "azure"}
    for t in priced:
        assert t.price_region and t.price_date and t.price_source, t.name


def test_every_entry_has_a_valid_fabric():
    assert all(t.fabric in FABRICS for t in catalog.load())


@pytest.mark.parametrize(
    ("cloud", "name", "fabric", "efa", "extra"),
    [
        ("aws", "p4d.24xlarge", "efa", 4, 0),
        ("aws", "p5.48xlarge", "efa", 32, 0),
        ("aws", "p5en.48xlarge", "efa", 16, 0),
        ("aws", "g5.2xlarge", "none", 0, 0),
        ("gcp", "a3-highgpu-8g", "tcpx", 0, 4),
        ("gcp", "a3-megagpu-8g", "tcpxo", 0, 8),
        ("gcp", "a2-highgpu-8g", "none", 0, 0),
        ("azure", "Standard_ND96asr_v4", "infiniband", 0, 0),
        ("azure", "Standard_ND96isr_H100_v5", "infiniband", 0, 0),
    ],
)
def test_nic_layouts_from_the_facts(cloud, name, fabric, efa, extra):
    t = catalog.lookup(cloud, name)
    assert (t.fabric, t.efa_interfaces, t.extra_nics) == (fabric, efa, extra)


def test_nvswitch_types_need_fabric_manager():
    for name in ("p4d.24xlarge", "p5.48xlarge"):
        assert catalog.lookup("aws", name).needs_fabric_manager
    assert not catalog.lookup("aws", "g5.48xlarge").needs_fabric_manager


def test_n1_shapes_name_their_machine_type_and_accelerator():
    t = catalog.lookup("gcp", "n1-standard-8+t4")
    assert (t.machine_type, t.accelerator, t.gpus) == ("n1-standard-8", "nvidia-tesla-t4", 1)


def test_filters():
    h100 = catalog.types(gpu="h100")
    assert h100 and all("H100" in t.gpu_model for t in h100)
    assert {t.cloud for t in catalog.types("gcp")} == {"gcp"}


def test_unknown_type_names_the_choices():
    with pytest.raises(CatalogError) as e:
        catalog.lookup("aws", "p9.huge")
    assert "p4d.24xlarge" in e.value.hint


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"fabric": "nvlink"}, "fabric 'nvlink'"),
        ({"fabric": "efa", "efa_interfaces": 0}, "efa_interfaces"),
        ({"gpus": 0}, "gpus must be"),
        ({"price_per_hour": 1.0, "price_region": None}, "price_region"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_malformed_entries_are_rejected_by_name(entry, problem):
    base = {"gpus": 1, "gpu_model": "T4", "gpu_memory_gib": 16, "vcpus": 4, "ram_gib": 16}
    with pytest.raises(CatalogEntryError) as e:
        catalog.parse({"clouds": {"aws": {"x.large": {**base, **entry}}}})
    assert "aws/x.large" in str(e.value) and problem in str(e.value)
