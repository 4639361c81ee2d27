"""up / exec / ssh-config / down / list against a real 3-node sandbox, through the CLI."""

from __future__ import annotations

import json
import subprocess

from tests.integration.conftest import gpufleet, leftovers, requires_sshd, sshd_of

pytestmark = requires_sshd


def test_up_exec_sshconfig_down(gpufleet_home, tmp_path):
    r = gpufleet(gpufleet_home, "up", "--cloud", "local", "--nodes", "3", "--name", "t")
    try:
        assert r.returncode == 0, r.stderr
        r = gpufleet(gpufleet_home, "exec", "t", "--", "echo", "hello from $GPUFLEET_NODE")
        assert r.returncode == 0, r.stderr
        lines = sorted(r.stdout.splitlines())
        assert lines == [f"[node-{i}] hello from node-{i}" for i in range(3)]

        cfg = tmp_path / "ssh_config"
        cfg.write_text(gpufleet(gpufleet_home, "ssh-config", "t").stdout)
        out = subprocess.run(
            [
                "ssh",
                "-F",
                str(cfg),
                "-o",
                "StrictHostKeyChecking=yes",
                "t-node-2",  # the cluster-qualified alias
                "echo $GPUFLEET_NODE",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "node-2"

        listed = json.loads(gpufleet(gpufleet_home, "list", "--json").stdout)["clusters"]
        assert [c["name"] for c in listed] == ["t"] and len(listed[0]["nodes"]) == 3
    finally:
        down = gpufleet(gpufleet_home, "down", "t")
    assert down.returncode == 0, down.stderr
    assert json.loads(gpufleet(gpufleet_home, "list", "--json").stdout)["clusters"] == []
    assert not sshd_of(gpufleet_home, "t")
    assert not leftovers("t")


def test_exec_exit_code_names_failing_node(make_sandbox, gpufleet_home):
    """A node's own code is in the message and --json; gpufleet exits 1 (JOB_FAILED): a node
    exiting 4 must not read as gpufleet's "a node did not answer SSH"."""
    make_sandbox("t", 3)
    r = gpufleet(gpufleet_home, "exec", "t", "--", '[ "$GPUFLEET_NODE" = node-1 ] && exit 4; true')
    assert r.returncode == 1
    assert "node-1: exit 4" in r.stderr
    r = gpufleet(gpufleet_home, "exec", "t", "--json", "--", "exit 4")
    assert r.returncode == 1
    assert {n["exit_code"] for n in json.loads(r.stdout)["nodes"]} == {4}


def test_hostfile_resolves_through_ssh_config(make_sandbox, gpufleet_home, tmp_path):
    info = make_sandbox("t", 2)
    hosts = gpufleet(gpufleet_home, "hostfile", "t", "--format", "plain", "--aliases").stdout
    hosts = hosts.split()
    assert hosts == [f"t-{n.name}" for n in info.nodes]
    cfg = tmp_path / "cfg"
    cfg.write_text(gpufleet(gpufleet_home, "ssh-config", "t").stdout)
    for host, node in zip(hosts, info.nodes, strict=True):
        out = subprocess.run(
            ["ssh", "-F", str(cfg), host, "echo $GPUFLEET_NODE"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.stdout.strip() == node.name, out.stderr


def test_unknown_cluster_is_a_clear_error(gpufleet_home):
    r = gpufleet(gpufleet_home, "exec", "nope", "--", "true")
    assert r.returncode == 2
    assert "no cluster named 'nope'" in r.stderr and "Traceback" not in r.stderr


def test_bad_spec_creates_nothing(gpufleet_home):
    r = gpufleet(gpufleet_home, "up", "--name", "Bad_Name")
    assert r.returncode == 2
    assert "name:" in r.stderr and "fix:" in r.stderr and "Traceback" not in r.stderr
    assert not (gpufleet_home / "clusters").exists()
