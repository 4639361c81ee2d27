"""`gpufleet attach` adopts a fleet made without gpufleet (plain `pulumi up`), from its stack's
outputs; then `exec` runs on its nodes. The nodes are real sshd processes on loopback
addresses, each on port 22 as a cloud node is (the outputs carry no port), so the outputs
file is exactly what a GpuFleet stack exports: the contract's OUTPUT_NAMES, host keys pinned
(the bootstrap-key form: no cloud channel is read). They are stopped even when the test fails.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.components.contract import (
    OUTPUT_NAMES,
    head_address,
    hostfile_text,
    known_hosts_lines,
    ssh_config_text,
)
from gpufleet.core import state
from gpufleet.provision.localprocs import sandbox_processes, terminate
from gpufleet.provision.localsshd import find_sshd, sshd_config, start_sshd
from gpufleet.remote.sshkeys import generate_ed25519
from tests.integration.conftest import gpufleet, requires_sshd

pytestmark = requires_sshd

NAME = "pp5"  # the stack's cluster: made by `pulumi up`, never by gpufleet
NODES = 3
# The keys a GpuFleet's `finish()` writes per node in the bootstrap-key form.
NODE_KEYS = {"name", "private_ip", "public_ip", "gpus", "host_key", "instance_id"}


def _port_22_free(addr: str) -> bool:
    with contextlib.suppress(OSError), socket.socket() as s:
        s.bind((addr, 22))
        return True
    return False


def _addresses(count: int) -> list[str]:
    """`count` loopback addresses with port 22 free (127.0.0.0/8 all routes to lo on Linux)."""
    rng = random.Random(os.getpid())
    for _ in range(50):
        base = f"127.{rng.randint(100, 250)}.{rng.randint(0, 250)}"
        addrs = [f"{base}.{i + 1}" for i in range(count)]
        if all(_port_22_free(a) for a in addrs):
            return addrs
    pytest.skip("no loopback addresses with port 22 bindable here (needs root or the capability)")


@pytest.fixture
def stack_nodes(tmp_path: Path) -> Iterator[tuple[dict, list[subprocess.Popen]]]:
    """Sandbox sshd nodes as a plain `pulumi up` of a GpuFleet would leave them, and the stack
    outputs it would export; every sshd (and any session left) is stopped afterwards."""
    sshd = find_sshd()
    if not _port_22_free("127.0.0.1") and os.geteuid() != 0:
        pytest.skip("binding port 22 needs root")
    addrs = _addresses(NODES)
    user = getpass.getuser()
    fleet = tmp_path / "fleet"  # the "cloud": outside GPUFLEET_HOME, gpufleet knows nothing of it
    user_key = generate_ed25519(f"{NAME}-user")
    (fleet / "authorized_keys").parent.mkdir(parents=True)
    (fleet / "authorized_keys").write_text(user_key.public_openssh + "\n")
    procs: list[subprocess.Popen] = []
    nodes = []
    try:
        for i, addr in enumerate(addrs):
            name = f"node-{i}"
            ndir = fleet / name
            (ndir / "tmp").mkdir(parents=True)
            host = generate_ed25519(f"{NAME}-{name}")
            key_path = ndir / "ssh_host_ed25519_key"
            key_path.write_text(host.private_openssh)
            key_path.chmod(0o600)
            conf = ndir / "sshd_config"
            conf.write_text(
                sshd_config(
                    addr=addr,
                    port=22,
                    node_dir=ndir,
                    cluster_dir=fleet,
                    user=user,
                    cluster=NAME,
                    node=name,
                )
            )
            procs.append(start_sshd(sshd, conf, ndir / "sshd.log"))
            nodes.append(
                {
                    "name": name,
                    "private_ip": addr,
                    "public_ip": addr if i == 0 else None,  # workers: through the head
                    "gpus": 8,
                    "host_key": " ".join(host.public_openssh.split()[:2]),
                    "instance_id": f"i-0{i:016x}",
                }
            )
        _wait_listening(addrs, procs, fleet)
        outputs = {
            "cluster_name": NAME,
            "cloud": "aws",
            "instance_type": "p5.48xlarge",
            "fabric": "efa",
            "ssh_user": user,
            "ssh_private_key": user_key.private_openssh,
            "nodes": nodes,
            "known_hosts": known_hosts_lines(nodes),
            "expires_at": int(time.time()) + 3600,
            "ssh_config": ssh_config_text(NAME, "aws", user, nodes),
            "hostfile": hostfile_text(nodes),
            "head_address": head_address(nodes),
        }
        yield outputs, procs
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                p.terminate()
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        terminate(sandbox_processes(NAME))  # sessions a failed test left behind


def _wait_listening(addrs: list[str], procs: list[subprocess.Popen], fleet: Path) -> None:
    deadline = time.monotonic() + 10
    waiting = set(range(len(addrs)))
    while waiting:
        for i in list(waiting):
            if procs[i].poll() is not None:
                log = (fleet / f"node-{i}" / "sshd.log").read_text(errors="replace")
                pytest.fail(f"sshd node-{i} exited: {log[-400:]}")
            with contextlib.suppress(OSError), socket.create_connection((addrs[i], 22), 0.2):
                waiting.discard(i)
        if waiting and time.monotonic() > deadline:
            pytest.fail(f"sshd not listening: {sorted(waiting)}")
        time.sleep(0.02)


def test_attach_a_plain_pulumi_fleet_then_exec_on_every_node(
    stack_nodes, gpufleet_home, tmp_path, monkeypatch
):
    outputs, procs = stack_nodes
    # exactly the shape a GpuFleet stack exports
    assert tuple(outputs) == OUTPUT_NAMES
    assert all(set(n) == NODE_KEYS for n in outputs["nodes"])
    out_file = tmp_path / "outputs.json"
    out_file.write_text(
        json.dumps(outputs, indent=2)
    )  # `pulumi stack output --json --show-secrets`
    monkeypatch.setenv("GPUFLEET_HOLDER", "0")  # each command connects itself: nothing lingers

    # without gpufleet: the stack's own ssh_config output, with the key and host keys saved
    # where its header says (~/.ssh here moved under tmp_path), reaches a worker via the head
    if shutil.which("ssh"):
        saved = tmp_path / "dot-ssh"
        saved.mkdir()
        (saved / f"gpufleet-{NAME}").write_text(outputs["ssh_private_key"])
        (saved / f"gpufleet-{NAME}").chmod(0o600)
        (saved / f"gpufleet-{NAME}.known_hosts").write_text(outputs["known_hosts"])
        conf = tmp_path / "ssh_config"
        conf.write_text(outputs["ssh_config"].replace("~/.ssh", str(saved)))
        worker = f"{NAME}-node-{NODES - 1}"
        plain = subprocess.run(
            ["ssh", "-F", str(conf), "-o", "BatchMode=yes", worker, "echo $GPUFLEET_NODE"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert plain.stdout.strip() == f"node-{NODES - 1}", plain.stderr

    r = gpufleet(gpufleet_home, "status", NAME)
    assert r.returncode != 0 and "no cluster named" in r.stderr  # unknown before attach

    attached = gpufleet(gpufleet_home, "attach", NAME, "--outputs", str(out_file))
    print(f"$ gpufleet attach {NAME} --outputs outputs.json\n{attached.stdout}{attached.stderr}")
    assert attached.returncode == 0, attached.stderr
    info = state.load(NAME)
    assert info.provider["adopted"] is True and info.host_key_rotation is None
    key = Path(info.ssh_key_path)
    assert key.stat().st_mode & 0o777 == 0o600
    assert key.read_text().strip() == outputs["ssh_private_key"].strip()
    assert Path(info.known_hosts_path).read_text() == outputs["known_hosts"]

    done = gpufleet(gpufleet_home, "exec", NAME, "--", "hostname")
    print(f"$ gpufleet exec {NAME} -- hostname\n{done.stdout}{done.stderr}")
    assert done.returncode == 0, done.stderr
    host = socket.gethostname()
    answered = sorted(ln.split("]", 1)[0] + "]" for ln in done.stdout.splitlines())
    assert answered == [f"[node-{i}]" for i in range(NODES)]
    assert all(ln.endswith(host) for ln in done.stdout.splitlines())

    # each answer came from its own node's sshd (the workers through the head)
    who = gpufleet(gpufleet_home, "exec", NAME, "--json", "--", "echo $GPUFLEET_NODE")
    assert who.returncode == 0, who.stderr
    rows = json.loads(who.stdout)["nodes"]
    assert [(r["name"], r["stdout"].strip()) for r in rows] == [
        (f"node-{i}", f"node-{i}") for i in range(NODES)
    ]

    # `down` forgets it and leaves the stack's nodes running: they are the stack's
    gone = gpufleet(gpufleet_home, "down", NAME)
    print(f"$ gpufleet down {NAME}\n{gone.stdout}{gone.stderr}")
    assert gone.returncode == 0, gone.stderr
    assert "pulumi destroy" in gone.stderr and f"cluster {NAME} forgotten" in gone.stderr
    assert not state.known(NAME)
    assert all(p.poll() is None for p in procs), "down of an attached cluster stopped its nodes"
