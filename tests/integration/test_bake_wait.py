"""The bake's builder wait against a real sshd: marker, seal, power-off, a failed recipe, a bad key.

A sandbox node plays the builder: its files live under a temporary root, and "power-off" is the
node's sshd listener going away, which is what a builder's shutdown looks like from outside.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from gpufleet.components.bake import (
    Builder,
    BuilderFailed,
    _answers,
    _BuilderReadyProvider,
    probe_command,
    wait_ready_and_seal,
)
from tests.integration.conftest import requires_sshd

pytestmark = requires_sshd

FAST = {"first_delay_s": 0.2, "max_delay_s": 0.5}


@pytest.fixture
def builder(make_sandbox, tmp_path: Path):
    """(Builder, its root folder, the sshd pid) for a one-node sandbox."""
    info = make_sandbox("bake", nodes=1)
    node = info.head
    line = next(
        ln
        for ln in Path(info.known_hosts_path).read_text().splitlines()
        if ln.startswith((node.public_ip, f"[{node.public_ip}]:{node.ssh_port}"))
    )
    root = tmp_path / "root"
    (root / "var/lib/gpufleet").mkdir(parents=True)
    (root / "var/log/gpufleet").mkdir(parents=True)
    probe = probe_command(
        str(root / "var/lib/gpufleet/ready.json"),
        str(root / "var/log/gpufleet/steps.log"),
        str(root / "var/log/gpufleet/recipe.log"),
    )
    pid = info.provider["pids"][node.name]
    b = Builder(
        host=node.public_ip,
        port=node.ssh_port,
        user=info.ssh_user,
        private_key=Path(info.ssh_key_path).read_text(),
        host_key=" ".join(line.split()[1:3]),
        probe=probe,
        # What the real seal ends with, as seen from outside: sshd goes away.
        seal=f"touch {root}/sealed && kill {pid}",
    )
    return b, root, pid


def test_waits_for_the_marker_then_seals_and_waits_until_the_builder_is_gone(builder):
    b, root, _pid = builder
    marker = root / "var/lib/gpufleet/ready.json"
    # The recipe finishes a moment after the wait starts.
    later = threading.Timer(1.0, lambda: marker.write_text('{"driver": "570.1"}\n'))
    later.start()
    try:
        result = _BuilderReadyProvider().create(
            {
                "host": b.host,
                "port": b.port,
                "user": b.user,
                "private_key": b.private_key,
                "host_key": b.host_key,
                "builder": "i-123",
                "probe": b.probe,
                "seal": b.seal,
                "ready_timeout_s": 30,
                "down_timeout_s": 30,
            }
        )
    finally:
        later.cancel()
    assert result.outs["ready"].strip() == '{"driver": "570.1"}'
    assert result.id == "sealed-i-123"
    assert (root / "sealed").exists()
    assert not _answers(b.host, b.port, timeout=2)


def test_a_failed_step_fails_at_once_with_its_log_and_nothing_is_sealed(builder):
    b, root, _pid = builder
    (root / "var/log/gpufleet/steps.log").write_text("00-base ok 1.2\n10-driver failed 3.4\n")
    (root / "var/log/gpufleet/recipe.log").write_text("10-driver: dkms build failed\n")
    with pytest.raises(BuilderFailed) as e:
        wait_ready_and_seal(b, ready_timeout_s=30, **FAST)
    assert "10-driver failed" in str(e.value) and "dkms build failed" in str(e.value)
    assert not (root / "sealed").exists()
    assert _answers(b.host, b.port, timeout=2)


def test_a_seal_that_fails_is_an_error(builder):
    b, root, _pid = builder
    (root / "var/lib/gpufleet/ready.json").write_text("{}\n")
    bad = Builder(**{**b.__dict__, "seal": "echo cloud-init: not found >&2; exit 3"})
    with pytest.raises(BuilderFailed, match=r"(?s)sealing .* failed \(3\).*cloud-init: not found"):
        wait_ready_and_seal(bad, ready_timeout_s=30, **FAST)


def test_a_host_key_other_than_the_pinned_one_is_never_trusted(builder):
    from gpufleet.remote.sshkeys import generate_ed25519

    b, root, _pid = builder
    (root / "var/lib/gpufleet/ready.json").write_text("{}\n")
    other = generate_ed25519("not-the-builder").public_openssh
    wrong = Builder(**{**b.__dict__, "host_key": other})
    with pytest.raises(BuilderFailed, match="not ready within.*BadHostKey"):
        wait_ready_and_seal(wrong, ready_timeout_s=1.5, **FAST)
    assert not (root / "sealed").exists()
