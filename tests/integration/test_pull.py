"""Image pulls on a real sandbox (sshd nodes on loopback): per-node pulls at once or one by one,
archives copied once to the head and relayed, digests checked, boot pulls attached to.

Real: the SSH connections, the script upload, the status polling, the head relay (OpenSSH),
the files on the nodes. Faked: the node pull script is a stand-in following interface 1
(tests/integration/pullstandin.sh) and the container runtime is fakeruntime.sh on the
nodes' PATH (records its calls, prints `Downloaded N` lines and digests; pulls nothing).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from pathlib import Path

import pytest

from gpufleet.components.clusterspec import ContainerSpec
from gpufleet.components.containerflags import NodeFacts
from gpufleet.components.errors import SpecError
from gpufleet.jobs import imagecopy, pull
from gpufleet.provision import localsshd
from gpufleet.remote import Group
from tests.integration import pullstandin
from tests.integration.conftest import requires_sshd

pytestmark = requires_sshd
NGC = "nvcr.io/nvidia/pytorch:25.01-py3"
KEY = "nvapi-TESTSECRET-0123456789"
BOOT = "bootpull"  # relative: each sandbox node's own folder (they share this machine's disk)


@pytest.fixture
def fake(monkeypatch, tmp_path) -> Path:
    """The stand-in script as pull's node script, the fake runtime first on the nodes' PATH.

    The one place to change when the real components/containerpull.py lands."""
    folder = pullstandin.fake_runtime(tmp_path / "fakebin")
    monkeypatch.setattr(pull, "node_script", lambda: pullstandin.module(Path(BOOT)))
    orig = localsshd.node_path
    monkeypatch.setattr(localsshd, "node_path", lambda: f"{folder}:{orig()}")
    monkeypatch.setattr(pull, "POLL_S", 0.3)
    monkeypatch.setattr(pull, "SHOW_EVERY_S", 0.5)
    return folder


def _facts(info, runtime="docker"):
    return {n.name: NodeFacts(runtime=runtime) for n in info.nodes}


def _events(fake: Path) -> list[str]:
    p = fake / "events"
    return p.read_text().split("\n")[:-1] if p.exists() else []


def test_parallel_pull_same_digest_progress_and_the_key_only_on_stdin(
    make_sandbox, fake, monkeypatch, gpufleet_home
):
    (fake / "steps").write_text("8")
    (fake / "delay").write_text("0.4")
    monkeypatch.setenv("NGC_API_KEY", KEY)
    info = make_sandbox("t", 3)
    lines: list[str] = []
    with Group(info) as g:
        rep = pull.ensure_image(info, g, ContainerSpec(image=NGC), _facts(info), lines.append)
    print("\n".join(lines))
    names = [n.name for n in info.nodes]
    assert rep.digests == dict.fromkeys(names, pullstandin.DIGEST)
    assert rep.bytes == dict.fromkeys(names, 8_000_000)
    assert set(rep.seconds) == set(names) and rep.archive_bytes is None
    # All three pulls began before the first one ended: they ran at once.
    ev = _events(fake)
    assert sorted(ev[:3]) == [f"start {n}" for n in names], ev
    # Progress per node with a rate, e.g. "pull node-1: 1.2 GB at 85.0 MB/s (attempt 1)".
    rx = re.compile(r"^pull (node-\d): \d+\.\d (MB|GB) at \d+\.\d (MB|GB)/s \(attempt 1\)$")
    shown = {m.group(1) for ln in lines if (m := rx.match(ln))}
    assert shown == set(names), lines
    assert any(float(ln.split(" at ")[1].split()[0]) > 0 for ln in lines if rx.match(ln))
    # The key reached every node's `login` on stdin, and nowhere else: not in any runtime
    # argv, progress line, or file under the state folder (node workdirs, logs, status).
    for n in names:
        assert (fake / f"login.{n}").read_text() == KEY
    assert KEY not in (fake / "calls.log").read_text()
    assert (
        "login --username $oauthtoken --password-stdin nvcr.io" in (fake / "calls.log").read_text()
    )
    assert not any(KEY in ln for ln in lines)
    leaked = [
        p for p in Path(gpufleet_home).rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()
    ]
    assert leaked == []


def test_one_by_one_pulls_each_node_after_the_last(make_sandbox, fake):
    info = make_sandbox("t", 3)
    with Group(info) as g:
        rep = pull.ensure_image(
            info, g, ContainerSpec(image="ghcr.io/org/app:1"), _facts(info), lambda _m: None,
            parallel=False,
        )  # fmt: skip
    names = [n.name for n in info.nodes]
    assert _events(fake) == [f"{e} {n}" for n in names for e in ("start", "end")]
    assert not rep.parallel and set(rep.digests) == set(names)
    # No key for a registry that is not nvcr.io: no login at all.
    assert " login " not in (fake / "calls.log").read_text()


def test_archive_goes_to_the_head_once_and_is_relayed(make_sandbox, fake, tmp_path):
    archive = tmp_path / "img.tar"
    archive.write_bytes(os.urandom(3_000_000))
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    info = make_sandbox("t", 3)
    spec = ContainerSpec(image=f"oci-archive:{archive}")
    lines: list[str] = []
    with Group(info) as g:
        rep = pull.ensure_image(info, g, spec, _facts(info, "podman"), lines.append)
        # This machine sent the archive once (to the head), not once per node.
        assert rep.uploaded == archive.stat().st_size == rep.archive_bytes
        for n in info.nodes:
            at = f"{n.workdir}/.gpufleet/images/{sha}.tar"
            # every node loaded its own complete copy, from its own workdir
            assert (fake / f"loaded.{n.name}").read_text() == f"{at} {sha}\n"
        assert set(rep.digests.values()) == {pullstandin.DIGEST}
        assert rep.bytes == {n.name: 3_000_000 for n in info.nodes}
        # Again: every node has the file (same name and size): nothing is sent.
        again = pull.ensure_image(info, g, spec, _facts(info, "podman"), lines.append)
        assert again.uploaded == 0 and again.digests == rep.digests
    print("\n".join(lines))
    assert any("already on every node" in ln for ln in lines)


def test_archive_without_openssh_here_goes_to_each_node(make_sandbox, fake, tmp_path, monkeypatch):
    archive = tmp_path / "img.tar"
    archive.write_bytes(os.urandom(500_000))
    info = make_sandbox("t", 2)
    real = imagecopy.shutil.which
    monkeypatch.setattr(imagecopy.shutil, "which", lambda c: None if c == "ssh" else real(c))
    with Group(info) as g:
        rep = pull.ensure_image(
            info, g, ContainerSpec(image=f"docker-archive:{archive}"), _facts(info), print
        )
    assert rep.uploaded == 2 * 500_000
    assert all((fake / f"loaded.{n.name}").exists() for n in info.nodes)


def test_missing_archive_is_a_spec_error_naming_image(tmp_path):
    with pytest.raises(SpecError) as e:
        pull.check_archive(f"oci-archive:{tmp_path / 'nope.tar'}")
    assert e.value.field == "--image" and "does not exist" in str(e.value)


def test_digest_mismatch_names_the_nodes(make_sandbox, fake):
    other = "sha256:" + "cd" * 32
    (fake / "digest.node-1").write_text(other + "\n")
    info = make_sandbox("t", 3)
    with Group(info) as g, pytest.raises(pull.DigestMismatch) as e:
        pull.ensure_image(info, g, ContainerSpec(image=NGC), _facts(info), lambda _m: None)
    assert e.value.digests == {
        "node-0": pullstandin.DIGEST, "node-1": other, "node-2": pullstandin.DIGEST
    }  # fmt: skip
    assert f"{pullstandin.DIGEST} on node-0, node-2; {other} on node-1" in str(e.value)
    assert e.value.hint and "pin" in e.value.hint


def test_a_failed_node_names_its_error_after_its_attempts(make_sandbox, fake):
    (fake / "fail.node-1").write_text("manifest unknown: no tag 25.01-py3\n")
    info = make_sandbox("t", 2)
    spec = ContainerSpec(image=NGC, pull_attempts=2)
    with Group(info) as g, pytest.raises(pull.PullFailed) as e:
        pull.ensure_image(info, g, spec, _facts(info), lambda _m: None)
    assert e.value.errors == {"node-1": "manifest unknown: no tag 25.01-py3"}
    assert "node-1: manifest unknown" in str(e.value)
    calls = (fake / "calls.log").read_text().splitlines()
    assert len([c for c in calls if c.startswith("node-1 docker pull")]) == 2


def test_attaches_to_the_boot_pull(make_sandbox, fake):
    """node-0: boot pull done; node-1: still pulling, done a moment later; node-2: failed,
    so pulled again."""
    info = make_sandbox("t", 3)
    boot = {n.name: Path(n.workdir) / BOOT for n in info.nodes}

    def write(node: str, state: str, nbytes: int, digest: str = "") -> None:
        boot[node].mkdir(parents=True, exist_ok=True)
        doc = {"state": state, "bytes": nbytes, "attempt": 1, "digest": digest, "error": "",
               "updated": time.time(), "image": NGC}  # fmt: skip
        tmp = boot[node] / "status.json.tmp"
        tmp.write_text(json.dumps(doc))
        tmp.rename(boot[node] / "status.json")

    write("node-0", "done", 7_000_000, pullstandin.DIGEST)
    write("node-1", "pulling", 1_000_000)
    write("node-2", "failed", 0)

    def finish_boot() -> None:
        for i in range(2, 6):
            time.sleep(0.4)
            write("node-1", "pulling", i * 1_000_000)
        write("node-1", "done", 6_000_000, pullstandin.DIGEST)

    t = threading.Thread(target=finish_boot)
    lines: list[str] = []
    with Group(info) as g:
        g.wait_ready(30)
        t.start()
        rep = pull.ensure_image(info, g, ContainerSpec(image=NGC), _facts(info), lines.append)
    t.join()
    print("\n".join(lines))
    assert rep.attached == ["node-0", "node-1"]
    assert rep.bytes == {"node-0": 7_000_000, "node-1": 6_000_000, "node-2": 3_000_000}
    pulls = [c.split()[0] for c in (fake / "calls.log").read_text().splitlines() if " pull " in c]
    assert pulls == ["node-2"]
    assert any(ln.startswith("pull node-1 (boot pull): ") and "/s" in ln for ln in lines), lines
