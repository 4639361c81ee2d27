"""images/versions.yaml and its loader: every pin sourced, Fabric Manager = driver, per fabric."""

from __future__ import annotations

import copy

import pytest
import yaml

from gpufleet.components import catalog, imageversions
from gpufleet.components.clouds import CLOUDS
from gpufleet.components.errors import SpecError
from gpufleet.components.imageversions import CORE, FABRIC_PINS, VersionSetError, for_node, parse

DOC = yaml.safe_load(imageversions.VERSIONS.read_text())


def pin(version: str) -> dict[str, str]:
    return {"version": version, "source": "test"}


def gpu_set(**over) -> dict:
    raw = {k: pin(v) for k, v in {
        "driver_branch": "580", "driver_version": "580.1.2", "fabric_manager": "580.1.2",
        "cuda": "13.0", "nccl": "2.30.4-1", "container_toolkit": "1.20.1", "dcgm": "4.5.2",
    }.items()}  # fmt: skip
    raw.update(over)
    return {"defaults": {"aws": "s"}, "sets": {"s": raw}}


def test_the_shipped_sets_load_and_cover_every_cloud():
    defaults, sets = imageversions.load()
    assert set(CLOUDS) <= set(defaults)
    for name, by_fabric in sets.items():
        base = by_fabric["none"]
        if base.pins:
            assert list(base.pins) == list(CORE), name
            assert base.version("fabric_manager") == base.version("driver_version")
        for fabric, vs in by_fabric.items():
            assert set(vs.pins) == set(base.pins) | set(FABRIC_PINS[fabric])
            assert all(p.source.strip() for p in vs.pins.values())


def test_every_catalog_type_gets_a_version_set_for_its_fabric():
    for it in catalog.load():
        vs = for_node(it.cloud, it.fabric)
        assert vs.fabric == it.fabric and vs.version("driver_version"), it.name


def test_cpu_only_clouds_pin_nothing():
    assert for_node("local").pins == {} and for_node("ssh", "none").env() == {}


def test_env_names_are_the_step_variables():
    env = for_node("aws", "efa").env()
    assert env["GPUFLEET_FABRIC_MANAGER"] == env["GPUFLEET_DRIVER_VERSION"]
    assert "GPUFLEET_EFA_INSTALLER" in env and "GPUFLEET_AWS_OFI_NCCL" in env


def test_fabric_manager_must_equal_the_driver():
    with pytest.raises(VersionSetError) as e:
        parse(gpu_set(fabric_manager=pin("580.9.9")))
    assert isinstance(e.value, SpecError)
    assert e.value.field.endswith("sets.s.fabric_manager") and "error 802" in e.value.problem
    assert e.value.fix == "set fabric_manager to 580.1.2"


def test_driver_must_be_on_its_branch():
    with pytest.raises(VersionSetError, match="not on driver_branch 570"):
        parse(gpu_set(driver_branch=pin("570")))


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"cuda": {"version": "13.0", "source": ""}}, "has no source"),
        ({"cuda": {"version": "13.0"}}, "exactly `version` and `source`"),
        ({"cuda": "13.0"}, "exactly `version` and `source`"),
        ({"cdua": pin("13.0")}, "unknown keys cdua"),
        ({"fabrics": {"efa": {"efa_installer": pin("1.50.0")}}}, "efa needs"),
        ({"fabrics": {"roce": {}}}, "is not a fabric"),
    ],
)
def test_malformed_sets_are_refused(bad, message):
    with pytest.raises(VersionSetError, match=message):
        parse(gpu_set(**bad))


def test_missing_core_pin_is_refused():
    doc = gpu_set()
    del doc["sets"]["s"]["dcgm"]
    with pytest.raises(VersionSetError, match="misses dcgm"):
        parse(doc)


def test_defaults_must_name_a_set():
    doc = copy.deepcopy(DOC)
    doc["defaults"]["aws"] = "aws-1999-01"
    with pytest.raises(VersionSetError, match="names 'aws-1999-01'"):
        parse(doc)


def test_a_gpu_set_without_the_nodes_fabric_is_an_error(monkeypatch):
    doc = copy.deepcopy(DOC)
    del doc["sets"]["gcp-2026-11"]["fabrics"]["tcpxo"]
    monkeypatch.setattr(imageversions, "load", lambda: (doc["defaults"], parse(doc)))
    with pytest.raises(VersionSetError, match="no 'tcpxo' entry"):
        for_node("gcp", "tcpxo")
    assert for_node("gcp", "tcpx").version("tcpx_rxdm")
