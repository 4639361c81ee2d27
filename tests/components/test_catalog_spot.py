"""Catalog spot prices against the source rows they were read from, and their checks.

The table below was written by hand from skypilot-catalog catalogs/v8/aws/vms.csv at commit
00148f2af3672e2229b4f7bf8157d5a3f36e3c35
(https://github.com/skypilot-org/skypilot-catalog/blob/00148f2af3672e2229b4f7bf8157d5a3f36e3c35/catalogs/v8/aws/vms.csv),
column SpotPrice, rows Region=us-east-1, read 2026-11-25; the values are not imported from the
catalog. The GCP and Azure tables further down name their own sources. Nothing is faked: the real
catalog.yaml is loaded."""

from __future__ import annotations

import statistics
from datetime import date

import pytest

from gpufleet.components import catalog
from gpufleet.components.errors import CatalogEntryError

# SpotPrice of each type's us-east-1 rows, in this zone order (AvailabilityZone column).
ZONES = ("use1-az1", "use1-az2", "use1-az4", "use1-az5", "use1-az6")


def _zones(*prices: float) -> dict[str, float]:
    return dict(zip(ZONES, prices, strict=True))


SOURCE = {
    "g4dn.xlarge": _zones(0.2158, 0.2, 0.2039, 0.202, 0.2043),
    "g4dn.2xlarge": _zones(0.3157, 0.3142, 0.3145, 0.3112, 0.3269),
    "g4dn.4xlarge": _zones(0.4062, 0.4498, 0.454, 0.4524, 0.4483),
    "g4dn.8xlarge": _zones(0.6706, 0.6946, 0.6947, 0.8046, 0.7419),
    "g4dn.12xlarge": _zones(1.4134, 1.3211, 1.326, 1.2875, 1.3061),
    "g4dn.16xlarge": _zones(0.9668, 1.1043, 0.942, 0.9122, 1.0098),
    "g4dn.metal": _zones(3.7292, 3.0125, 2.9633, 2.9583, 2.9236),
    "g5.xlarge": _zones(0.4507, 0.4246, 0.436, 0.4259, 0.4364),
    "g5.2xlarge": _zones(0.5218, 0.5933, 0.5036, 0.4738, 0.4985),
    "g5.4xlarge": _zones(0.6603, 0.6438, 0.7068, 0.642, 0.7007),
    "g5.8xlarge": _zones(0.9401, 0.9643, 0.8391, 0.9641, 0.9228),
    "g5.12xlarge": _zones(2.7804, 2.0796, 2.0813, 2.1824, 2.2387),
    "g5.16xlarge": _zones(1.2446, 1.2294, 1.141, 1.2918, 1.3117),
    "g5.24xlarge": _zones(3.3455, 3.1697, 3.1811, 3.0047, 2.7817),
    "g5.48xlarge": _zones(4.5408, 7.0077, 6.8918, 5.8671, 5.6899),
    # p types: only the zones with a SpotPrice (p3 has empty ones in use1-az3/az4; p5.4xlarge
    # has none in any us-east-1 zone and no catalog spot price); Local Zone use1-atl2-az1 left out.
    "p3.2xlarge": {"use1-az1": 0.3707, "use1-az2": 0.4281, "use1-az5": 0.4041, "use1-az6": 0.3841},
    "p3.8xlarge": {"use1-az1": 1.4427, "use1-az2": 1.5132, "use1-az5": 1.4129, "use1-az6": 1.4762},
    "p3.16xlarge": {
        "use1-az1": 3.3915, "use1-az2": 2.8502, "use1-az5": 2.6694, "use1-az6": 2.7188,
    },
    "p3dn.24xlarge": {"use1-az1": 8.2921, "use1-az6": 6.2567},
    "p4d.24xlarge": {
        "use1-az1": 2.4655, "use1-az2": 8.1915, "use1-az4": 8.1203, "use1-az6": 7.8799,
    },
    "p4de.24xlarge": {"use1-az4": 9.9734, "use1-az6": 8.6505},
    "p5.48xlarge": {
        "use1-az1": 55.04, "use1-az2": 19.2531, "use1-az3": 21.1543, "use1-az4": 55.04,
        "use1-az5": 25.7522, "use1-az6": 17.6289,
    },
    "p5en.48xlarge": {"use1-az2": 18.2492, "use1-az6": 16.5551},
    # g6: us-east-1 rows in use1-az1, az2, az4, az6 only.
    "g6.2xlarge": {"use1-az1": 0.5772, "use1-az2": 0.4462, "use1-az4": 0.5067, "use1-az6": 0.4416},
    "g6.24xlarge": {
        "use1-az1": 2.5043, "use1-az2": 2.6955, "use1-az4": 3.1365, "use1-az6": 3.2462,
    },
    "g6.48xlarge": {"use1-az1": 3.7289, "use1-az2": 6.2789, "use1-az4": 5.947, "use1-az6": 5.0768},
    "g6e.48xlarge": {
        "use1-az1": 8.0189, "use1-az2": 20.64, "use1-az4": 10.2818, "use1-az6": 10.4635,
    },
}  # fmt: skip
COMMIT = "00148f2af3672e2229b4f7bf8157d5a3f36e3c35"


@pytest.mark.parametrize("name", sorted(SOURCE))
def test_spot_price_is_the_median_zone_of_the_source_rows(name):
    it = catalog.lookup("aws", name)
    assert it.price_region == "us-east-1"
    assert it.spot_price_zones == SOURCE[name]
    assert it.spot_price_basis == "zone-median"
    assert it.spot_price_per_hour == pytest.approx(statistics.median(SOURCE[name].values()))
    assert it.spot_price_per_hour < it.price_per_hour  # spot is below on demand in every row
    assert COMMIT in (it.spot_price_source or "") and "vms.csv" in (it.spot_price_source or "")
    assert it.spot_price_date == "2026-11-09"


# GCP: skypilot-catalog catalogs/v8/gcp/vms.csv at commit 8427bbff988abdd050a9f51addd314ef31cb4e85
# (https://github.com/skypilot-org/skypilot-catalog/blob/8427bbff988abdd050a9f51addd314ef31cb4e85/catalogs/v8/gcp/vms.csv),
# read 2026-11-25 (the stored copy does not show the commit's date). A2/G2 VMs are two rows there:
# the host (InstanceType row, SpotPrice) and the GPUs (AcceleratorName/AcceleratorCount row,
# SpotPrice for that count). Written by hand, per type: (host SpotPrice, GPU-row SpotPrice, the
# host row's on-demand Price, the GPU row's on-demand Price), the same in each us-central1 zone.
GCP_COMMIT = "8427bbff988abdd050a9f51addd314ef31cb4e85"
A2_ZONES = ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f")
G2_ZONES = ("us-central1-a", "us-central1-b", "us-central1-c")  # no L4 row in us-central1-f
GCP_SOURCE = {
    "a2-highgpu-1g": (0.36975, 1.4341, 0.73948, 2.93391, A2_ZONES),  # A100,1
    "a2-highgpu-2g": (0.7395, 2.8682, 1.47895, 5.86782, A2_ZONES),  # A100,2
    "a2-highgpu-4g": (1.479, 5.7364, 2.95791, 11.73563, A2_ZONES),  # A100,4
    "a2-highgpu-8g": (2.958, 11.4728, 5.91582, 23.47126, A2_ZONES),  # A100,8
    "a2-megagpu-16g": (4.39824, 22.9456, 8.79698, 46.94253, A2_ZONES),  # A100,16
    "g2-standard-4": (0.05874, 0.2231, 0.14679, 0.56004, G2_ZONES),  # L4,1
    "g2-standard-8": (0.11747, 0.2231, 0.29358, 0.56004, G2_ZONES),  # L4,1
    "g2-standard-12": (0.17621, 0.2231, 0.44038, 0.56004, G2_ZONES),  # L4,1
    "g2-standard-16": (0.23494, 0.2231, 0.58717, 0.56004, G2_ZONES),  # L4,1
    "g2-standard-24": (0.35242, 0.4462, 0.88075, 1.12008, G2_ZONES),  # L4,2
    "g2-standard-32": (0.46989, 0.2231, 1.17434, 0.56004, G2_ZONES),  # L4,1
    "g2-standard-48": (0.70483, 0.8924, 1.7615, 2.24016, G2_ZONES),  # L4,4
    "g2-standard-96": (1.40966, 1.7848, 3.52301, 4.48032, G2_ZONES),  # L4,8
}

# Azure: coopslarhette/skypilot-catalog (a fork of skypilot-catalog; the only stored copy of the
# v8 Azure file) catalogs/v8/azure/vms.csv at commit 20291d7eda23e6f420cd9586558cf0bc4051851c
# (https://github.com/coopslarhette/skypilot-catalog/blob/20291d7eda23e6f420cd9586558cf0bc4051851c/catalogs/v8/azure/vms.csv),
# read 2026-11-25. One row per region (no zones): (Price, SpotPrice) of the Region=eastus row.
AZURE_COMMIT = "20291d7eda23e6f420cd9586558cf0bc4051851c"
AZURE_SOURCE = {
    "Standard_ND96asr_v4": (27.197, 2.99167),
    "Standard_ND96amsr_A100_v4": (32.77, 3.6047),
    "Standard_NC24ads_A100_v4": (3.673, 0.444433),
    "Standard_NC48ads_A100_v4": (7.346, 0.888866),
    "Standard_NC96ads_A100_v4": (14.692, 1.777732),
    "Standard_NC4as_T4_v3": (0.526, 0.062699),
    "Standard_NC8as_T4_v3": (0.752, 0.089638),
    "Standard_NC16as_T4_v3": (1.204, 0.143517),
    "Standard_NC64as_T4_v3": (4.352, 0.518758),
    "Standard_NV36ads_A10_v5": (3.2, 0.8),
}


@pytest.mark.parametrize("name", sorted(GCP_SOURCE))
def test_gcp_spot_price_is_host_plus_gpus_in_each_zone(name):
    host, gpus, host_od, gpus_od, zones = GCP_SOURCE[name]
    it = catalog.lookup("gcp", name)
    assert it.price_region == "us-central1"
    # the rows are the right ones: the same source's host + GPU on-demand is the catalog's price
    assert host_od + gpus_od == pytest.approx(it.price_per_hour, abs=0.001)
    assert it.spot_price_zones == pytest.approx(dict.fromkeys(zones, host + gpus))
    assert it.spot_price_basis == "host+gpus zone-median"
    assert it.spot_price_per_hour == pytest.approx(host + gpus)
    assert it.spot_price_per_hour < it.price_per_hour / 2
    assert GCP_COMMIT in (it.spot_price_source or "") and "gcp/vms.csv" in it.spot_price_source
    assert it.spot_price_date == "2026-11-25"


@pytest.mark.parametrize("name", sorted(AZURE_SOURCE))
def test_azure_spot_price_is_the_region_row(name):
    on_demand, spot = AZURE_SOURCE[name]
    it = catalog.lookup("azure", name)
    assert it.price_region == "eastus" and it.price_per_hour == pytest.approx(on_demand)
    assert it.spot_price_per_hour == pytest.approx(spot)
    assert it.spot_price_basis == "region" and it.spot_price_zones == {}
    assert AZURE_COMMIT in (it.spot_price_source or "") and "fork" in it.spot_price_source
    assert it.spot_price_date == "2026-11-25"


@pytest.mark.parametrize(
    ("cloud", "name"),
    [
        # GPU rows not trustworthy: A100-80GB us-central1 on-demand 1.8462/GPU (the VM is ~3.97 a
        # GPU) and SpotPrice 1.964 above it; H100 us-central1 on-demand 4.20076/GPU where Google
        # lists ~11, and its SpotPrice (2.85) half another dated source's (5.86, 2026-09-26)
        ("gcp", "a2-ultragpu-1g"),
        ("gcp", "a2-ultragpu-8g"),
        ("gcp", "a3-highgpu-8g"),
        ("gcp", "a3-megagpu-8g"),
        # SpotPrice equals on-demand (98.32) and AcceleratorCount reads 12: a filled-in row
        ("azure", "Standard_ND96isr_H100_v5"),
        # no row for this size in the source
        ("azure", "Standard_NV6ads_A10_v5"),
    ],
)
def test_entries_whose_source_rows_are_not_trustworthy_have_no_spot_price(cloud, name):
    assert catalog.lookup(cloud, name).spot_price_per_hour is None


def test_every_spot_price_in_the_catalog_is_in_the_source_table():
    """No spot price without its source rows here: an entry gaining one gains a table row."""
    priced = {(t.cloud, t.name) for t in catalog.load() if t.spot_price_per_hour}
    want = {("aws", n) for n in SOURCE} | {("gcp", n) for n in GCP_SOURCE}
    assert priced == want | {("azure", n) for n in AZURE_SOURCE}


def test_p5_4xlarge_has_no_spot_price_since_the_source_has_none_in_us_east_1():
    assert catalog.lookup("aws", "p5.4xlarge").spot_price_per_hour is None


def _entry(**spot):
    base = {
        "gpus": 1,
        "gpu_model": "T4-16GB",
        "gpu_memory_gib": 16,
        "vcpus": 4,
        "ram_gib": 16,
        "fabric": "none",
        "price_per_hour": 0.526,
        "price_region": "us-east-1",
        "price_date": "2026-09-24",
        "price_source": "s",
    }
    return {"clouds": {"aws": {"g4dn.xlarge": {**base, **spot}}}}


GOOD = {
    "spot_price_per_hour": 0.3,
    "spot_price_date": "2026-11-09",
    "spot_price_source": "s",
    "spot_price_basis": "zone-max",
    "spot_price_zones": {"a": 0.1, "b": 0.3, "c": 0.2},
}


def test_a_well_formed_spot_entry_loads():
    (it,) = catalog.parse(_entry(**GOOD))
    assert it.spot_price_per_hour == 0.3 and it.spot_price_zones == {"a": 0.1, "b": 0.3, "c": 0.2}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"spot_price_per_hour": 0.2}, "spot_price_per_hour"),  # not the zones' max
        ({"spot_price_basis": "zone-median"}, "spot_price_per_hour"),  # median is 0.2
        ({"spot_price_basis": "average"}, "spot_price_basis"),
        ({"spot_price_basis": None}, "spot_price_basis"),
        ({"spot_price_date": "2026-11"}, "spot_price_date"),  # its age needs the day
        ({"spot_price_zones": {}}, "spot_price_zones"),
        ({"spot_price_zones": {"a": 0.3, "b": -1}}, "spot_price_zones"),
        ({"spot_price_per_hour": None}, "spot_price_per_hour"),  # zones without a figure
        ({"spot_price_basis": "region"}, "spot_price_zones"),  # region: one price, no zones
        ({"spot_price_basis": "host+gpus zone-median"}, "spot_price_per_hour"),  # median 0.2
    ],
)
def test_a_bad_spot_entry_names_its_field(change, field):
    with pytest.raises(CatalogEntryError) as e:
        catalog.parse(_entry(**{**GOOD, **change}))
    assert e.value.field == field


def test_a_region_spot_price_loads_without_zones():
    (it,) = catalog.parse(_entry(**{**GOOD, "spot_price_basis": "region", "spot_price_zones": {}}))
    assert it.spot_price_per_hour == 0.3 and it.spot_price_zones == {}


def test_median_and_min_bases():
    zones = [0.4, 0.1, 0.3, 0.2]
    assert catalog.spot_figure("zone-median", zones) == statistics.median(zones) == 0.25
    assert catalog.spot_figure("zone-min", zones) == 0.1
    assert catalog.spot_figure("zone-max", zones) == 0.4
    assert catalog.spot_figure("host+gpus zone-median", zones) == 0.25


def test_spot_age_counts_days_from_the_price_date():
    it = catalog.lookup("aws", "g5.12xlarge")
    assert catalog.spot_age_days(it, date(2026, 11, 25)) == 16
    assert catalog.spot_age_days(catalog.lookup("aws", "p5.4xlarge")) is None
