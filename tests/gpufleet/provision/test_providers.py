"""The providers' registry and its rule: gpufleet writes nothing that can remove, stop or change
a machine it did not create (no lease, no expiry) on such machines."""

from __future__ import annotations

import importlib

import pytest

from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo
from gpufleet.core.errors import GpufleetError, HostsNotOurs
from gpufleet.provision import (
    DEFAULT_CLOUD,
    EXPIRY,
    HOST_KEY,
    LEASE,
    NODE_STATE,
    PROVIDERS,
    may_write,
    traits,
)
from gpufleet.remote.group import Group

# What each provider declares it may write outside a run's workdir: the machines it creates
# carry gpufleet's node-side expiry; the hosts an inventory names are the user's own.
DECLARED = {
    "local": {LEASE, EXPIRY, HOST_KEY},
    "vm": {LEASE, EXPIRY, HOST_KEY},
    "aws": {LEASE, EXPIRY, HOST_KEY},
    "gcp": {LEASE, EXPIRY, HOST_KEY},
    "azure": {LEASE, EXPIRY, HOST_KEY},
    "ssh": set(),
}


def test_every_provider_declares_what_it_may_write():
    assert {c: set(p.may_write) for c, p in PROVIDERS.items()} == DECLARED
    for cloud, p in PROVIDERS.items():
        assert p.may_write <= NODE_STATE, cloud
        assert hasattr(importlib.import_module(p.module), p.cls), cloud


def test_the_byo_provider_may_write_no_lease_no_expiry_and_no_host_key():
    assert may_write("ssh").isdisjoint({LEASE, EXPIRY, HOST_KEY})
    assert may_write("no-such-cloud") == frozenset()  # unknown: nothing


def _cluster(cloud: str) -> ClusterInfo:
    return ClusterInfo(
        name="lab",
        cloud=cloud,
        ssh_user="u",
        ssh_key_path="k",
        known_hosts_path="kh",
        nodes=[NodeInfo(name="node-0", private_ip="a", public_ip="a")],
    )


@pytest.mark.parametrize("write", ["lease", "release", "expiry"])
def test_lease_and_expiry_writers_refuse_hosts_gpufleet_did_not_create(monkeypatch, write):
    sent: list[str] = []
    g = Group(_cluster("ssh"))
    monkeypatch.setattr(g, "_on_every_node", lambda cmd, timeout: sent.append(cmd) or {})
    call = {
        "lease": lambda: g.write_lease(1900000000),
        "release": lambda: g.write_lease(None),
        "expiry": lambda: g.write_expiry(1900000000),
    }[write]
    with pytest.raises(HostsNotOurs) as e:
        call()
    assert sent == [] and e.value.exit_code == 2 and "cloud=ssh" in str(e.value)
    assert g.tied  # no lease: its commands end with their SSH session instead


@pytest.mark.parametrize("cloud", ["local", "vm", "aws"])
def test_machines_gpufleet_created_take_the_lease(monkeypatch, cloud):
    sent: list[str] = []
    g = Group(_cluster(cloud))
    monkeypatch.setattr(g, "_on_every_node", lambda cmd, timeout: sent.append(cmd) or {})
    g.write_lease(1900000000)
    g.write_expiry(1900000000)
    assert len(sent) == 2 and '/lease"' in sent[0] and '/expires_at"' in sent[1]
    assert not g.tied


def test_extend_refuses_byo_hosts_before_contacting_them(monkeypatch):
    from gpufleet.clusters import ops
    from gpufleet.core import state

    state.save(_cluster("ssh"))
    monkeypatch.setattr(Group, "_on_every_node", lambda *a: pytest.fail("contacted a host"))
    with pytest.raises(HostsNotOurs, match="no expiry"):
        ops.extend("lab", 60)
    assert state.load("lab").expires_at is None


@pytest.mark.parametrize(("cloud", "rotated"), [("ssh", False), ("local", True)])
def test_a_host_key_is_replaced_only_where_the_provider_allows_it(monkeypatch, cloud, rotated):
    from gpufleet.components.hostkeyrotation import HostKeyRotation
    from gpufleet.remote import hostkeys

    info = _cluster(cloud).model_copy(
        update={
            "host_key_rotation": HostKeyRotation(key_file="k", reload="true", sudo=True),
            "nodes": [
                NodeInfo(name="node-0", private_ip="a", public_ip="a", bootstrap_host_key=True)
            ],  # fmt: skip
        }
    )
    calls: list[str] = []
    g = Group(info)
    monkeypatch.setattr(g, "_connect_all", lambda *a, **k: None)
    monkeypatch.setattr(hostkeys, "replace_bootstrap_keys", lambda grp, save: calls.append(cloud))
    g.wait_ready(1)
    assert calls == ([cloud] if rotated else [])


def test_every_provider_implements_the_whole_provisioner_protocol():
    """The contract is declared once (provision.Provisioner); every provider's class has each of
    its methods with the same parameters, so ops calls them without asking which it has."""
    import inspect

    from gpufleet.provision import Provisioner

    methods = ("up", "down", "extend", "status", "replace")
    assert {m for m in vars(Provisioner) if not m.startswith("_")} == set(methods)
    for cloud, p in PROVIDERS.items():
        cls = getattr(importlib.import_module(p.module), p.cls)
        for m in methods:
            declared = list(inspect.signature(getattr(Provisioner, m)).parameters)
            assert list(inspect.signature(getattr(cls, m)).parameters) == declared, (cloud, m)


def test_the_byo_provisioner_refuses_extend_as_the_cli_does(monkeypatch):
    """Called directly, `ssh`'s extend refuses as `gpufleet extend` does (exit 2, with a fix),
    contacting no host."""
    from gpufleet.provision.ssh import SSHProvisioner

    monkeypatch.setattr(Group, "_on_every_node", lambda *a: pytest.fail("contacted a host"))
    with pytest.raises(HostsNotOurs, match="no expiry") as e:
        SSHProvisioner().extend(_cluster("ssh"), 1900000000)
    assert e.value.exit_code == 2 and "cloud=ssh" in str(e.value) and e.value.hint


def test_the_registry_has_every_cloud_the_spec_accepts_and_the_catalog_lists():
    from gpufleet.components import catalog, clouds

    assert tuple(PROVIDERS) == clouds.CLOUDS
    assert tuple(c for c, p in PROVIDERS.items() if p.catalog) == catalog.CLOUDS
    assert tuple(c for c, p in PROVIDERS.items() if p.bills) == clouds.PULUMI_CLOUDS
    assert DEFAULT_CLOUD in PROVIDERS


def test_traits_say_what_differs_between_providers():
    assert {c: p.ssh_wait_s for c, p in PROVIDERS.items()} == {
        "local": 30,
        "vm": 600,
        "ssh": 60,
        "aws": 600,
        "gcp": 600,
        "azure": 600,
    }
    # only clouds bill, through Pulumi, with a catalog; only ssh's hosts are the user's own
    assert [c for c, p in PROVIDERS.items() if p.pulumi] == ["aws", "gcp", "azure"]
    assert [c for c, p in PROVIDERS.items() if p.own_hosts] == ["ssh"]
    assert all(p.description for p in PROVIDERS.values())


def test_every_provider_but_your_own_hosts_can_extend():
    """`extend` writes the nodes' hard expiry: never on machines gpufleet did not create."""
    assert [c for c, p in PROVIDERS.items() if not p.can_extend] == ["ssh"]


def test_an_unknown_cloud_has_no_traits():
    with pytest.raises(GpufleetError, match="no provisioner") as e:
        traits("nope")
    assert e.value.exit_code == 2 and e.value.hint == "use --cloud local"
