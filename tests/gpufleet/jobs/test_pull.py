"""Pull orchestration without SSH: secrets, errors, the archive check, the relay script, and the
boot-pull stall rule against a fake group (its commands answered in Python; nothing runs)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpufleet.components.clusterspec import ContainerSpec
from gpufleet.components.containerflags import NodeFacts
from gpufleet.components.containerimage import parse
from gpufleet.components.errors import SpecError
from gpufleet.core.errors import HostResult
from gpufleet.jobs import imagecopy, pull

MARK = "gpufleet-pull:"
D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64


def test_the_ngc_key_goes_to_nvcr_io_images_only():
    env = {"NGC_API_KEY": "k-1", "OTHER": "x"}
    ngc = parse("nvcr.io/nvidia/pytorch:25.01-py3")
    assert pull.secrets_stdin(ngc, env) == b"NGC_API_KEY=k-1\n"
    assert pull.secrets_stdin(parse("ghcr.io/org/app:1"), env) is None
    assert pull.secrets_stdin(parse("nvcr.io/nvidia/pytorch:25.01-py3"), {}) is None
    assert pull.secrets_stdin(parse("oci-archive:/x.tar"), env) is None


def test_errors_mask_the_secret():
    assert pull._scrub("login failed for k-123 at nvcr.io", b"NGC_API_KEY=k-123\n") == (
        "login failed for *** at nvcr.io"
    )


def test_digest_mismatch_groups_nodes_by_digest():
    e = pull.DigestMismatch("img", {"node-2": D1, "node-0": D1, "node-1": D2})
    want = f"the nodes have different images for img: {D1} on node-0, node-2; {D2} on node-1"
    assert str(e) == want
    assert isinstance(e, pull.PullFailed) and e.hint and "@sha256" in e.hint
    assert e.exit_code == pull.ExitCode.NODE_FAILED


def test_pull_failed_names_every_failed_node():
    e = pull.PullFailed("img", {"node-1": "denied", "node-0": "no space left"})
    assert "node-0: no space left; node-1: denied" in str(e) and e.hint


def test_check_archive(tmp_path: Path):
    f = tmp_path / "a.tar"
    f.write_bytes(b"x" * 10)
    assert pull.check_archive(f"docker-archive:{f}") == (f.resolve(), 10)
    with pytest.raises(SpecError, match="does not exist") as e:
        pull.check_archive(parse(f"oci-archive:{tmp_path / 'b.tar'}"))
    assert e.value.field == "--image" and "podman save" in e.value.fix
    with pytest.raises(SpecError, match="is a folder"):
        pull.check_archive(f"oci-archive:{tmp_path}")


def test_parse_mark_takes_the_last_line():
    out = f'noise\n{MARK}{{"state": "pulling"}}\n{MARK}{{"state": "done"}}\n'
    assert pull.parse_mark(out, MARK) == {"state": "done"}
    assert pull.parse_mark("nothing", MARK) is None


def test_size_text():
    assert pull.size_text(1_234_000_000) == "1.2 GB"
    assert pull.size_text(85_000_000) == "85.0 MB"


def test_fanout_script_sends_only_to_the_workers_that_lack_it():
    nodes = [
        SimpleNamespace(name=f"node-{i}", private_ip=f"10.0.0.{i}", ssh_port=22,
                        workdir=f"/w{i}", host_key="ssh-ed25519 AAAA")
        for i in range(3)
    ]  # fmt: skip
    info = SimpleNamespace(nodes=nodes, ssh_user="u")
    s = imagecopy.fanout_script(info, ".gpufleet/images/ab.tar", ["node-2"], parallel=1)
    assert "node-2 u@10.0.0.2 22 /w2 ssh-ed25519" in s and "node-1 u@" not in s
    assert "xargs -P 1 " in s and "F=.gpufleet/images/ab.tar" in s
    assert "mv -f" in s  # a copy gets its name only when complete


# A fake group: the boot status reads and the pull commands answered in Python.
@dataclass
class _Node:
    name: str
    workdir: str = "/w"


class FakeGroup:
    def __init__(self, names, answer):
        self.nodes = [_Node(n) for n in names]
        self.answer = answer  # (node, command, stdin) -> HostResult
        self.calls: list[tuple[str, str, bytes | None]] = []
        self.info = None

    def __enter__(self):
        return self

    def __exit__(self, *_):
        pass

    def subset(self, names):
        g = FakeGroup(names, self.answer)
        g.calls = self.calls
        return g

    def put(self, files):
        self.calls.append(("*", f"put {sorted(files)}", None))

    def cancel(self, grace_s=5.0):
        pass

    def run(self, command, *, stdin=None, check=True, timeout=None, what=None, **_):
        cmds = command if isinstance(command, dict) else {n.name: command for n in self.nodes}
        out = {}
        for n, c in cmds.items():
            self.calls.append((n, c, stdin))
            out[n] = self.answer(n, c, stdin)
        return out


def _standin(boot="/boot"):
    def command(ref, *, runtime, sudo, state_dir, stall_s, attempts, script_path):
        return f"bash {script_path} --image {ref.reference} --runtime {runtime} --state {state_dir}"

    return SimpleNamespace(SCRIPT="#!stand-in", BOOT_STATE_DIR=boot, MARK=MARK, command=command)


def _done(digest, nbytes=5):
    doc = {"state": "done", "bytes": nbytes, "attempt": 1, "digest": digest, "error": "",
           "updated": 0.0, "image": "nvcr.io/nvidia/pytorch:25.01-py3"}  # fmt: skip
    return MARK + json.dumps(doc)


def test_a_stalled_boot_pull_is_taken_over(monkeypatch):
    """node-1's boot pull never gets past 100 bytes: after pull_stall_s it is pulled again."""
    monkeypatch.setattr(pull, "node_script", _standin)
    monkeypatch.setattr(pull, "POLL_S", 0.05)
    image = "nvcr.io/nvidia/pytorch:25.01-py3"
    stuck = {"state": "pulling", "bytes": 100, "attempt": 1, "digest": "", "error": "",
             "updated": 0.0, "image": image}  # fmt: skip

    def answer(node, cmd, stdin):
        if cmd.startswith("cat '/boot/status.json'") or cmd.startswith("cat /boot/status.json"):
            return HostResult(node, 0, json.dumps(stuck) if node == "node-1" else "")
        if cmd.startswith("cat "):
            return HostResult(node, 0, "")
        return HostResult(node, 0, _done(D1, 42) + "\n")

    g = FakeGroup(["node-0", "node-1"], answer)
    spec = ContainerSpec.model_construct(image=image, pull_stall_s=0.3, pull_attempts=3)
    facts = {n: NodeFacts(runtime="podman") for n in ("node-0", "node-1")}
    lines: list[str] = []
    monkeypatch.setenv("NGC_API_KEY", "k-9")
    rep = pull.ensure_image(None, g, spec, facts, lines.append)
    assert rep.attached == ["node-1"] and rep.digests == {"node-0": D1, "node-1": D1}
    assert any("the boot pull got no new bytes for 0.3s; pulling it again" in ln for ln in lines)
    pulls = [(n, s) for n, c, s in g.calls if c.startswith("bash ")]
    # each node pulled once by this CLI, the key on stdin only, never in the command
    assert sorted(n for n, _ in pulls) == ["node-0", "node-1"]
    assert all(s == b"NGC_API_KEY=k-9\n" for _, s in pulls)
    assert not any("k-9" in c for _, c, _ in g.calls)


def test_no_runtime_on_a_node_fails_before_any_pull(monkeypatch):
    monkeypatch.setattr(pull, "node_script", _standin)
    g = FakeGroup(["node-0", "node-1"], lambda *a: pytest.fail("nothing may run"))
    facts = {"node-0": NodeFacts(runtime="docker"), "node-1": NodeFacts()}
    with pytest.raises(pull.PullFailed, match="node-1: no container runtime"):
        pull.ensure_image(None, g, ContainerSpec(image="ghcr.io/a/b:1"), facts, print)


def test_an_archive_is_loaded_from_the_workdir_the_script_runs_in(monkeypatch, tmp_path: Path):
    """The pull script runs in the node's workdir: a relative workdir (a VM's `gpufleet`, from
    $HOME) must not be named again in the archive's path (the 2-VM run failed with `no archive
    at gpufleet/.gpufleet/images/...`); an absolute one may be. Faked: the group and the copy;
    real: ensure_image and components/containerpull.command."""
    from gpufleet.jobs import imagecopy

    archive = tmp_path / "img.tar"
    archive.write_bytes(b"x" * 10)
    dest = ".gpufleet/images/abc.tar"
    monkeypatch.setattr(
        imagecopy, "distribute", lambda *a, **k: SimpleNamespace(dest=dest, uploaded=10)
    )
    monkeypatch.setattr(pull, "POLL_S", 0.05)

    def answer(node, cmd, stdin):
        return HostResult(node, 0, _done(D1) + "\n" if cmd.startswith("bash ") else "")

    g = FakeGroup(["node-0", "node-1"], answer)
    g.nodes = [_Node("node-0", "gpufleet"), _Node("node-1", "/abs/wd")]
    spec = ContainerSpec.model_construct(
        image=f"oci-archive:{archive}", pull_stall_s=30, pull_attempts=1
    )
    facts = {n: NodeFacts(runtime="podman", sudo=True) for n in ("node-0", "node-1")}
    pull.ensure_image(None, g, spec, facts, lambda _m: None)
    loads = {n: c for n, c, _ in g.calls if c.startswith("bash ")}
    assert f"--archive {dest} " in loads["node-0"] + " ", loads["node-0"]
    assert "gpufleet/.gpufleet" not in loads["node-0"]
    assert f"--archive /abs/wd/{dest} " in loads["node-1"] + " ", loads["node-1"]


def test_a_done_boot_pull_is_checked_in_the_runs_own_store(monkeypatch):
    """The boot pull ran as root; this run's runtime (rootless podman on node-1) has its own
    store: a node whose `image inspect` (with the run's prefix) fails pulls the image itself."""
    monkeypatch.setattr(pull, "node_script", _standin)
    monkeypatch.setattr(pull, "POLL_S", 0.05)
    image = "ghcr.io/org/train:v1"
    boot_done = {"state": "done", "bytes": 7, "attempt": 1, "digest": D1, "error": "",
                 "updated": 0.0, "image": image}  # fmt: skip

    def answer(node, cmd, stdin):
        if cmd.startswith(("cat '/boot/status.json'", "cat /boot/status.json")):
            return HostResult(node, 0, json.dumps(boot_done))
        if cmd.startswith("cat "):
            return HostResult(node, 0, "")
        if " image inspect " in f" {cmd}":
            return HostResult(node, 0 if node == "node-0" else 1, "")
        return HostResult(node, 0, _done(D1, 42) + "\n")

    g = FakeGroup(["node-0", "node-1"], answer)
    spec = ContainerSpec(image=image)
    facts = {
        "node-0": NodeFacts(runtime="docker", sudo=True),
        "node-1": NodeFacts(runtime="podman"),
    }
    lines: list[str] = []
    rep = pull.ensure_image(None, g, spec, facts, lines.append)
    checks = sorted((n, c) for n, c, _ in g.calls if "image inspect" in c)
    assert checks == [
        ("node-0", f"sudo -n docker image inspect {image} >/dev/null 2>&1"),
        ("node-1", f"podman image inspect {image} >/dev/null 2>&1"),
    ]
    pulls = [n for n, c, _ in g.calls if c.startswith("bash ")]
    assert pulls == ["node-1"] and rep.attached == ["node-0"]
    assert rep.digests == {"node-0": D1, "node-1": D1}
    assert any("not in this run's image store on node-1" in ln for ln in lines)


@pytest.mark.parametrize(("cloud", "removed"), [("ssh", True), ("aws", False), ("vm", False)])
def test_the_archive_is_removed_after_loading_only_on_hosts_gpufleet_did_not_create(
    monkeypatch, tmp_path, cloud, removed
):
    """--cloud ssh (may_write empty: the user's own hosts): after every node loaded the image,
    the archive copy leaves their workdirs; created nodes keep it for the next run."""
    monkeypatch.setattr(pull, "node_script", _standin)
    monkeypatch.setattr(pull, "POLL_S", 0.05)
    archive = tmp_path / "img.tar"
    archive.write_bytes(b"x" * 10)
    rel = imagecopy.dest_for("ab" * 32)
    monkeypatch.setattr(imagecopy, "sha256_file", lambda p: "ab" * 32)
    monkeypatch.setattr(imagecopy, "distribute", lambda *a, **k: imagecopy.CopyReport(rel))

    def answer(node, cmd, stdin):
        if cmd.startswith(("cat ", "rm ")):
            return HostResult(node, 0, "")
        return HostResult(node, 0, _done(D1, 10) + "\n")

    g = FakeGroup(["node-0", "node-1"], answer)
    info = SimpleNamespace(cloud=cloud, name="c")
    facts = {n: NodeFacts(runtime="podman") for n in ("node-0", "node-1")}
    rep = pull.ensure_image(info, g, ContainerSpec(image=f"oci-archive:{archive}"), facts, print)
    assert rep.digests == {"node-0": D1, "node-1": D1}
    rms = [(n, c) for n, c, _ in g.calls if c.startswith("rm ")]
    want = f"rm -f {rel} && rmdir .gpufleet/images 2>/dev/null; true"
    assert rms == ([("node-0", want), ("node-1", want)] if removed else [])


def test_the_direct_copy_streams_the_archive_instead_of_reading_it_whole(monkeypatch, tmp_path):
    """No OpenSSH client here: each node gets the file over its own connection, handed to
    the group as a path (Group.run sends it in STDIN_CHUNK pieces), never read into memory."""
    archive = tmp_path / "img.tar"
    archive.write_bytes(b"y" * 3000)
    monkeypatch.setattr(imagecopy.shutil, "which", lambda name: None)
    real = Path.read_bytes

    def read_bytes(self):
        assert self != archive, "the archive was read into memory whole"
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)

    def answer(node, cmd, stdin):
        return HostResult(node, 0, "-1\n" if cmd.startswith("stat ") else "")

    g = FakeGroup(["node-0", "node-1"], answer)
    info = SimpleNamespace(nodes=[SimpleNamespace(name="node-0")], name="c")
    rep = imagecopy.distribute(info, g, archive, "cd" * 32, lambda _: None)
    copies = [(n, s) for n, c, s in g.calls if "cat >" in c]
    assert [n for n, _ in copies] == ["node-0", "node-1"] and rep.method == "paramiko"
    assert all(s == archive for _, s in copies)
    assert rep.uploaded == 2 * 3000
