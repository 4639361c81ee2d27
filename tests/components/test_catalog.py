"""The instance-type catalog: coverage, the facts it must carry, and the rules it enforces."""

from __future__ import annotations

import copy

import pytest

from gpufleet.components import catalog
from gpufleet.components.catalog import InstanceType
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.errors import CatalogEntryError, CatalogError, GpufleetError
from gpufleet.components.fabric import FABRICS

# Every AWS type of facts §1.1 that has an on-demand price (p5e.48xlarge has none: left out).
AWS_FACTS_TYPES = [
    "p3.2xlarge",
    "p3.8xlarge",
    "p3.16xlarge",
    "p3dn.24xlarge",
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.48xlarge",
    "p5.4xlarge",
    "p5en.48xlarge",
    *(f"g4dn.{s}" for s in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge")),
    "g4dn.metal",
    *(f"g5.{s}" for s in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge")),
    "g5.24xlarge",
    "g5.48xlarge",
    "g6.2xlarge",
    "g6.24xlarge",
    "g6.48xlarge",
    "g6e.48xlarge",
]
GCP_TYPES = [
    *(f"a2-highgpu-{n}g" for n in (1, 2, 4, 8)),
    "a2-megagpu-16g",
    *(f"a2-ultragpu-{n}g" for n in (1, 2, 4, 8)),
    "a3-highgpu-8g",
    "a3-megagpu-8g",
    *(f"g2-standard-{n}" for n in (4, 8, 12, 16, 24, 32, 48, 96)),
    "n1-standard-8+t4",
    "n1-standard-8+v100x8",
]
AZURE_TYPES = [
    "Standard_ND96asr_v4",
    "Standard_ND96amsr_A100_v4",
    "Standard_ND96isr_H100_v5",
    "Standard_NC24ads_A100_v4",
    "Standard_NC48ads_A100_v4",
    "Standard_NC96ads_A100_v4",
    "Standard_NC4as_T4_v3",
    "Standard_NC8as_T4_v3",
    "Standard_NC16as_T4_v3",
    "Standard_NC64as_T4_v3",
    "Standard_NV6ads_A10_v5",
    "Standard_NV36ads_A10_v5",
]


def test_at_least_25_types_across_three_clouds_each_with_price_and_fabric():
    entries = catalog.load()
    assert len(entries) >= 28
    assert {t.cloud for t in entries} == {"aws", "gcp", "azure"}
    for cloud in ("aws", "gcp", "azure"):
        assert len(catalog.types(cloud)) >= 8, cloud
    for t in entries:
        assert t.price_per_hour is not None and t.price_per_hour > 0, t.name
        assert t.price_region and t.price_date and t.price_source, t.name
        assert t.fabric in FABRICS, t.name
        assert t.gpus > 0 and t.gpu_memory_gib > 0 and t.vcpus > 0 and t.ram_gib > 0, t.name


@pytest.mark.parametrize(
    ("cloud", "names"), [("aws", AWS_FACTS_TYPES), ("gcp", GCP_TYPES), ("azure", AZURE_TYPES)]
)
def test_the_types_the_issue_names_are_there(cloud, names):
    have = {t.name for t in catalog.types(cloud)}
    assert set(names) <= have, sorted(set(names) - have)


@pytest.mark.parametrize(
    ("name", "efa"),
    [("p4d.24xlarge", 4), ("p4de.24xlarge", 4), ("p5.48xlarge", 32), ("p5en.48xlarge", 16)],
)
def test_efa_interfaces_per_facts(name, efa):
    t = catalog.lookup("aws", name)
    assert (t.fabric, t.efa_interfaces, t.nvswitch) == ("efa", efa, True)


def test_efa_interfaces_present_exactly_on_efa_types():
    for t in catalog.load():
        assert (t.efa_interfaces > 0) == (t.fabric == "efa"), t.name
    assert not any(t.fabric == "efa" for t in catalog.types("gcp") + catalog.types("azure"))


def test_a3_extra_nics_and_fabrics():
    high = catalog.lookup("gcp", "a3-highgpu-8g")
    mega = catalog.lookup("gcp", "a3-megagpu-8g")
    assert (high.fabric, high.extra_nics) == ("tcpx", 4)
    assert (mega.fabric, mega.extra_nics) == ("tcpxo", 8)
    assert all(t.extra_nics == 0 for t in catalog.load() if not t.name.startswith("a3-"))


def test_azure_nd_sizes_are_infiniband_with_nvswitch_and_the_rest_none():
    for t in catalog.types("azure"):
        nd = t.name.startswith("Standard_ND")
        assert t.fabric == ("infiniband" if nd else "none"), t.name
        assert t.nvswitch == nd, t.name


def test_nvswitch_marks_fabric_manager_need():
    assert catalog.lookup("aws", "p5.48xlarge").needs_fabric_manager
    assert not catalog.lookup("aws", "g5.48xlarge").needs_fabric_manager
    assert not catalog.lookup("aws", "p3.16xlarge").needs_fabric_manager


def test_baselines_are_published_two_node_figures_only():
    assert catalog.lookup("aws", "p5.48xlarge").allreduce_busbw_gbps == 444
    assert catalog.lookup("aws", "p4de.24xlarge").allreduce_busbw_gbps == 78
    # Azure NHC's thresholds are single-VM figures: kept in notes, not as a fabric baseline.
    h100 = catalog.lookup("azure", "Standard_ND96isr_H100_v5")
    assert h100.allreduce_busbw_gbps is None and any("460" in n for n in h100.notes)
    assert catalog.lookup("gcp", "a3-highgpu-8g").allreduce_busbw_gbps is None
    assert {t.name for t in catalog.load() if t.allreduce_busbw_gbps} == {
        "p5.48xlarge",
        "p4de.24xlarge",
    }


def test_gcp_n1_shapes_name_their_machine_type_and_accelerator():
    t = catalog.lookup("gcp", "n1-standard-8+t4x2")
    assert (t.cloud_machine_type, t.accelerator, t.gpus) == ("n1-standard-8", "nvidia-tesla-t4", 2)
    v = catalog.lookup("gcp", "n1-standard-8+v100x8")
    assert (v.accelerator, v.gpus) == ("nvidia-tesla-v100", 8)
    for t in catalog.types("gcp"):
        n1 = t.name.startswith("n1-")
        assert bool(t.accelerator) == n1, t.name
        assert t.cloud_machine_type == (t.name.split("+")[0] if n1 else t.name)
        if n1:
            gpu = t.name.split("+")[1]
            assert int(gpu.split("x")[1]) == t.gpus if "x" in gpu else t.gpus == 1
    assert catalog.lookup("aws", "p4d.24xlarge").cloud_machine_type == "p4d.24xlarge"


def test_filters_by_cloud_and_gpu_substring_case_insensitively():
    h100 = catalog.types(gpu="h100")
    assert h100 and all("H100" in t.gpu_model for t in h100)
    assert {t.cloud for t in h100} == {"aws", "gcp", "azure"}
    assert {t.name for t in catalog.types("azure", "H100")} == {"Standard_ND96isr_H100_v5"}
    assert catalog.types(gpu="no-such-gpu") == []


def test_lookup_and_price():
    assert catalog.lookup("aws", "p4d.24xlarge").price_per_hour == pytest.approx(21.958)
    assert catalog.hourly_price("aws", "p5.48xlarge", nodes=2) == pytest.approx(110.08)
    with pytest.raises(CatalogError) as e:
        catalog.lookup("gcp", "a9-nonexistent")
    assert "a2-highgpu-1g" in e.value.hint
    assert e.value.exit_code == 2


@pytest.mark.parametrize(
    ("cloud", "name", "gpus", "fabric"),
    [
        ("gcp", "a3-megagpu-8g", 8, "tcpxo"),
        ("azure", "Standard_ND96amsr_A100_v4", 8, "infiniband"),
        ("aws", "g6e.48xlarge", 8, "efa"),
    ],
)
def test_spec_derives_gpus_and_fabric_from_the_catalog(cloud, name, gpus, fabric):
    image = {"image": "img"} if fabric == "tcpxo" else {}  # A3 needs a TCPXO-ready image
    spec = ClusterSpec(name="t", cloud=cloud, instance_type=name, **image)
    assert (spec.gpus, spec.fabric) == (gpus, fabric)


def test_as_dict_has_every_field():
    d = catalog.lookup("aws", "p5.48xlarge").as_dict()
    assert d["efa_interfaces"] == 32 and d["name"] == "p5.48xlarge"
    assert set(d) == {f for f in InstanceType.__dataclass_fields__}


# ---- validation: each broken entry fails with a CatalogEntryError naming entry and field ----

GOOD = {
    "gpus": 8,
    "gpu_model": "A100-SXM4-40GB",
    "gpu_memory_gib": 40,
    "vcpus": 96,
    "ram_gib": 1152,
    "fabric": "efa",
    "efa_interfaces": 4,
    "nvswitch": True,
    "price_per_hour": 21.96,
    "price_region": "us-east-1",
    "price_date": "2026-11-09",
    "price_source": "a test",
}


def _data(cloud: str = "aws", name: str = "x.big", **changes):
    entry = copy.deepcopy(GOOD)
    for k, v in changes.items():
        if v is None:
            entry.pop(k, None)
        else:
            entry[k] = v
    return {"clouds": {cloud: {name: entry}}}


def test_good_entry_parses():
    (t,) = catalog.parse(_data())
    assert (t.cloud, t.name, t.efa_interfaces) == ("aws", "x.big", 4)


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"fabric": "roce"}, "fabric", "not one of"),
        ({"gpus": 0}, "gpus", "greater than 0"),
        ({"gpus": 2.5}, "gpus", "must be an integer"),
        ({"price_per_hour": 0}, "price_per_hour", "greater than 0"),
        ({"price_per_hour": None}, "price_per_hour", "required"),
        ({"price_region": None}, "price_region", "required"),
        ({"price_date": "Nov 2026"}, "price_date", "YYYY"),
        ({"fabric": "none"}, "efa_interfaces", "iff efa"),
        ({"efa_interfaces": 0}, "efa_interfaces", "iff efa"),
        ({"efa_interfaces": None}, "efa_interfaces", "iff efa"),
        ({"fabric": "tcpx", "efa_interfaces": 0}, "extra_nics", "must be > 0"),
        ({"extra_nics": -1}, "extra_nics", "at least 0"),
        ({"nvswitch": "yes"}, "nvswitch", "true or false"),
        ({"gpu_count": 8}, "gpu_count", "not a catalog field"),
        ({"price_source": None}, "price_source", "required"),
        ({"allreduce_busbw_gbps": 0}, "allreduce_busbw_gbps", "greater than 0"),
        ({"accelerator": "nvidia-tesla-t4"}, "accelerator", "go together"),
        (
            {"accelerator": "nvidia-tesla-t4", "machine_type": "n1-standard-8"},
            "accelerator",
            "only meaningful on gcp",
        ),
        ({"notes": "one string"}, "notes", "list of strings"),
    ],
)
def test_broken_entry_names_entry_and_field(changes, field, words):
    with pytest.raises(CatalogEntryError) as e:
        catalog.parse(_data(**changes))
    err = e.value
    assert (err.cloud, err.name, err.field) == ("aws", "x.big", field)
    assert "aws/x.big" in str(err) and field in str(err) and words in str(err)
    assert isinstance(err, CatalogError) and err.instance_type == "x.big"
    assert f"clouds.aws.x.big.{field}" in err.hint


def test_unknown_cloud_and_missing_root_are_refused():
    with pytest.raises(GpufleetError, match="unknown cloud 'oracle'"):
        catalog.parse(_data(cloud="oracle"))
    with pytest.raises(GpufleetError, match="clouds"):
        catalog.parse({"aws": {}})


def test_duplicate_keys_in_yaml_are_refused():
    text = "clouds:\n  gcp:\n    a: {gpus: 1}\n    a: {gpus: 2}\n"
    with pytest.raises(GpufleetError, match="duplicate key 'a'"):
        catalog.parse_text(text)


def test_the_shipped_file_round_trips_through_the_validator():
    assert catalog.parse_text(catalog.DATA.read_text()) == catalog.load()
