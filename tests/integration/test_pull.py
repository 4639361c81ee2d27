"""Image pulls on a real sandbox (sshd nodes on loopback): per-node pulls at once or one by one,
archives copied once to the head and relayed, digests checked, boot pulls attached to.

Real: gpufleet.jobs.pull, the node pull script (components/containerpull.py's SCRIPT, i.e.
scripts/container_pull.sh: its login, stall watch, retries, du-measured bytes, lock and
status.json), the SSH connections, the script upload, the status polling, the head relay
(OpenSSH), the files on the nodes. Faked: the container runtime (tests/fakes/runtime.py as
`docker`/`podman` first on the nodes' PATH: records its calls and the login's stdin, grows the
runtime's download folder (docker: <DockerRootDir>/tmp), copies a loaded archive there, reports
digests; pulls nothing), and
containerpull.BOOT_STATE_DIR (a folder in each node's workdir instead of /var/lib).
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

from gpufleet.components import containerpull
from gpufleet.components.clusterspec import ContainerSpec
from gpufleet.components.containerflags import NodeFacts
from gpufleet.components.errors import SpecError
from gpufleet.jobs import imagecopy, pull
from gpufleet.provision import localsshd
from gpufleet.remote import Group
from tests.fakes import runtime as fakert
from tests.integration.conftest import requires_sshd

pytestmark = requires_sshd
NGC = "nvcr.io/nvidia/pytorch:25.01-py3"
KEY = "nvapi-TESTSECRET-0123456789"
BOOT = "bootpull"  # relative: each sandbox node's own folder (they share this machine's disk)
DIGEST = fakert.DIGEST
SLACK = 65536  # du also counts what else changed in the measured folders (logs, directories)


@pytest.fixture
def fake(monkeypatch, tmp_path) -> Path:
    """The fake runtime first on the nodes' PATH (its state folder returned); the real
    script, its boot folder in each node's workdir."""
    state = tmp_path / "fakert"
    folder = fakert.install(tmp_path / "fakebin", state)
    orig = localsshd.node_path
    monkeypatch.setattr(localsshd, "node_path", lambda: f"{folder}:{orig()}")
    monkeypatch.setattr(containerpull, "BOOT_STATE_DIR", BOOT)
    monkeypatch.setattr(pull, "POLL_S", 0.3)
    monkeypatch.setattr(pull, "SHOW_EVERY_S", 0.5)
    assert pull.node_script() is containerpull  # the real module, not a stand-in
    return state


def _facts(info, runtime="docker"):
    return {n.name: NodeFacts(runtime=runtime) for n in info.nodes}


def _events(fake: Path) -> list[str]:
    return fakert.events(fake)


def _about(got: int, want: int) -> bool:
    return want <= got < want + SLACK


def test_parallel_pull_same_digest_progress_and_the_key_only_on_stdin(
    make_sandbox, fake, monkeypatch, gpufleet_home
):
    fakert.configure(fake, chunks=8, chunk=1_000_000, delay=0.4)
    monkeypatch.setenv("NGC_API_KEY", KEY)
    info = make_sandbox("t", 3)
    lines: list[str] = []
    with Group(info) as g:
        rep = pull.ensure_image(info, g, ContainerSpec(image=NGC), _facts(info), lines.append)
    print("\n".join(lines))
    names = [n.name for n in info.nodes]
    assert rep.digests == dict.fromkeys(names, DIGEST)
    # the script's figure: what reached each node's download folder (du), 8 x 1 MB
    assert all(_about(rep.bytes[n], 8_000_000) for n in names), rep.bytes
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
    logins = {x["node"]: (x["user"], x["host"], x["secret"]) for x in fakert.logins(fake)}
    assert logins == dict.fromkeys(names, ("$oauthtoken", "nvcr.io", KEY))
    assert KEY not in (fake / "calls.log").read_text()
    login_argvs = [c["argv"] for c in fakert.calls(fake) if c["op"] == "login"]
    assert len(login_argvs) == 3
    assert all(a[-4:] == ["--username", "$oauthtoken", "--password-stdin", "nvcr.io"]
               for a in login_argvs), login_argvs  # fmt: skip
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
    assert fakert.logins(fake) == [] and not any(c["op"] == "login" for c in fakert.calls(fake))


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
        loaded = {x["node"]: (x["path"], x["sha256"]) for x in fakert.loaded(fake)}
        for n in info.nodes:
            at = f"{n.workdir}/.gpufleet/images/{sha}.tar"
            # every node loaded its own complete copy, from its own workdir
            assert loaded[n.name] == (at, sha)
        assert len(fakert.loaded(fake)) == 3
        # an archive's digest is the image id (config digest) the runtime reports
        assert set(rep.digests.values()) == {f"sha256:{fakert.IMAGE_ID}"}
        assert all(_about(rep.bytes[n.name], 3_000_000) for n in info.nodes), rep.bytes
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
    assert sorted(x["node"] for x in fakert.loaded(fake)) == [n.name for n in info.nodes]


def test_missing_archive_is_a_spec_error_naming_image(tmp_path):
    with pytest.raises(SpecError) as e:
        pull.check_archive(f"oci-archive:{tmp_path / 'nope.tar'}")
    assert e.value.field == "--image" and "does not exist" in str(e.value)


def test_digest_mismatch_names_the_nodes(make_sandbox, fake):
    other = "sha256:" + "cd" * 32
    (fakert.node_dir(fake, "node-1") / "digest").write_text(other + "\n")
    info = make_sandbox("t", 3)
    with Group(info) as g, pytest.raises(pull.DigestMismatch) as e:
        pull.ensure_image(info, g, ContainerSpec(image=NGC), _facts(info), lambda _m: None)
    assert e.value.digests == {
        "node-0": DIGEST, "node-1": other, "node-2": DIGEST
    }  # fmt: skip
    assert f"{DIGEST} on node-0, node-2; {other} on node-1" in str(e.value)
    assert e.value.hint and "pin" in e.value.hint


def test_a_failed_node_names_its_error_after_its_attempts(make_sandbox, fake):
    (fakert.node_dir(fake, "node-1") / "fail").write_text("manifest unknown: no tag 25.01-py3\n")
    info = make_sandbox("t", 2)
    spec = ContainerSpec(image=NGC, pull_attempts=2)
    with Group(info) as g, pytest.raises(pull.PullFailed) as e:
        pull.ensure_image(info, g, spec, _facts(info), lambda _m: None)
    # the script's error: the last lines of the runtime's output (joined with spaces)
    assert {n: v.strip() for n, v in e.value.errors.items()} == {
        "node-1": "manifest unknown: no tag 25.01-py3"
    }
    assert "node-1: manifest unknown" in str(e.value)
    pulls = [c for c in fakert.calls(fake) if c["op"] == "pull"]
    assert [(c["node"], c["prog"]) for c in pulls if c["node"] == "node-1"] == [
        ("node-1", "docker")
    ] * 2  # spec.pull_attempts


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

    write("node-0", "done", 7_000_000, DIGEST)
    fakert.add_image(fake, NGC, "node-0")  # where the boot pull put it: the run's own store
    write("node-1", "pulling", 1_000_000)
    write("node-2", "failed", 0)

    def finish_boot() -> None:
        for i in range(2, 6):
            time.sleep(0.4)
            write("node-1", "pulling", i * 1_000_000)
        fakert.add_image(fake, NGC, "node-1")
        write("node-1", "done", 6_000_000, DIGEST)

    t = threading.Thread(target=finish_boot)
    lines: list[str] = []
    with Group(info) as g:
        g.wait_ready(30)
        t.start()
        rep = pull.ensure_image(info, g, ContainerSpec(image=NGC), _facts(info), lines.append)
    t.join()
    print("\n".join(lines))
    assert rep.attached == ["node-0", "node-1"]
    assert {n: rep.bytes[n] for n in ("node-0", "node-1")} == {
        "node-0": 7_000_000, "node-1": 6_000_000
    }  # fmt: skip
    assert _about(rep.bytes["node-2"], 3_000_000), rep.bytes  # its own pull, 3 x 1 MB
    pulls = [c["node"] for c in fakert.calls(fake) if c["op"] == "pull"]
    assert pulls == ["node-2"]
    assert any(ln.startswith("pull node-1 (boot pull): ") and "/s" in ln for ln in lines), lines
