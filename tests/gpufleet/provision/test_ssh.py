"""The `ssh` provider's inputs: host strings, inventory files, flags that only it takes."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.components.errors import SpecError
from gpufleet.provision.ssh import Host, from_flags, load_inventory, parse_host


@pytest.mark.parametrize(
    ("text", "user", "host"),
    [
        ("10.0.0.5", None, Host("10.0.0.5", 22)),
        ("ubuntu@10.0.0.5:2222", "ubuntu", Host("10.0.0.5", 2222)),
        ("gpu-a.lab", None, Host("gpu-a.lab", 22)),
        ("root@[fd00::5]:2200", "root", Host("fd00::5", 2200)),
        ("fd00::5", None, Host("fd00::5", 22)),
    ],
)
def test_host_strings(text, user, host):
    assert parse_host(text) == (user, host)


@pytest.mark.parametrize("bad", ["h:0", "h:99999", "h:ssh", "u@"])
def test_bad_host_strings_name_the_field(bad):
    with pytest.raises(SpecError, match="hosts"):
        parse_host(bad)


def test_inventory_file(tmp_path: Path):
    inv = tmp_path / "hosts.yaml"
    inv.write_text(
        "user: ml\nkey: /k/id\npython: /opt/py/bin/python\nhosts:\n"
        "  - 10.0.0.5\n"
        "  - {address: 10.0.0.6, port: 2222, gpus: 8, private_ip: 192.168.0.6,"
        " host_key: ssh-ed25519 AAAA}\n"
    )
    got = load_inventory(inv)
    assert (got.user, got.key, got.python) == ("ml", "/k/id", "/opt/py/bin/python")
    assert got.hosts == [
        Host("10.0.0.5"),
        Host("10.0.0.6", 2222, 8, "ssh-ed25519 AAAA", "192.168.0.6"),
    ]
    assert got.spec_hosts() == ["10.0.0.5:22", "10.0.0.6:2222"]


def test_inventory_with_an_unknown_key_is_refused(tmp_path: Path):
    inv = tmp_path / "hosts.yaml"
    inv.write_text("hosts:\n  - {address: 10.0.0.5, prot: 22}\n")
    with pytest.raises(SpecError, match=r"inventory.hosts\[0\].*prot"):
        load_inventory(inv)


def test_byo_flags_are_refused_on_other_clouds():
    with pytest.raises(SpecError, match="only applies to --cloud ssh"):
        from_flags("local", "h1,h2", None, None, None, False)
    with pytest.raises(SpecError, match="only applies to --cloud ssh"):
        from_flags("aws", None, None, None, None, True)
    assert from_flags("local", None, None, None, None, False) == ({}, {})


def test_ssh_needs_exactly_one_source_of_hosts(tmp_path: Path):
    with pytest.raises(SpecError, match="needs the hosts"):
        from_flags("ssh", None, None, None, None, False)
    fields, options = from_flags("ssh", "a@h1,h2:2200", None, None, "/k", True)
    assert fields == {"hosts": ["h1:22", "h2:2200"], "nodes": 2, "ssh_user": "a"}
    assert options["accept_host_keys"] and options["inventory"].key == "/k"
