"""The rsync path: filter rules that send the selection, rsync's stats, the head's fan-out."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

from gpufleet.jobs import rsync, syncfiles
from tests.gpufleet.jobs.test_syncfiles import _tree


def test_rsync_filter_protects_runs_and_escapes_wildcards(tmp_path):
    sel = syncfiles.Selection(["a.py"], ["build/", "odd[1]*.txt"])
    assert rsync.rsync_filter(sel) == "P /.gpufleet/\n- /build/\n- /odd\\[1]\\*.txt\n"


def test_rsync_filter_really_selects_with_rsync(tmp_path):
    """rsync itself, on local folders: the rules send the selection, delete the rest,
    and leave the run folders alone."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    _tree(src)
    (dst / ".gpufleet" / "runs").mkdir(parents=True)
    (dst / ".gpufleet" / "runs" / "r.rc").write_text("0")
    (dst / "stale.py").write_text("gone from the workdir")
    filt = tmp_path / "filter"
    filt.write_text(rsync.rsync_filter(syncfiles.select(src)))
    subprocess.run(
        ["rsync", "-a", "--delete", "--delete-excluded", f"--filter=merge {filt}", f"{src}/", dst],
        check=True,
    )
    got = sorted(str(p.relative_to(dst)) for p in dst.rglob("*") if p.is_file())
    assert got == [".gitignore", ".gpufleet/runs/r.rc", "data/x.csv", "train.py"]


def test_parse_stats_reads_bytes_and_changes():
    text = (
        "Number of files: 3 (reg: 2, dir: 1)\nNumber of created files: 0\n"
        "Number of deleted files: 0\nNumber of regular files transferred: 1\n"
        "Total bytes sent: 1,234\n"
    )
    assert rsync.parse_stats(text) == (1234, True)
    assert rsync.parse_stats(text.replace("transferred: 1", "transferred: 0")) == (1234, False)


def _info():
    node = lambda i, ip: SimpleNamespace(  # noqa: E731
        name=f"node-{i}",
        private_ip=ip,
        public_ip=ip,
        ssh_port=22,
        workdir="gpufleet",
        host_key="ssh-ed25519 AAAAkey" + str(i),
    )
    return SimpleNamespace(
        name="c",
        ssh_user="ubuntu",
        nodes=[node(0, "10.0.0.1"), node(1, "10.0.0.2"), node(2, "10.0.0.3")],
        ssh_key_path="/k",
        known_hosts_path="/kh",
    )


def test_fanout_script_is_valid_sh_and_lists_every_worker():
    script = rsync.fanout_script(_info(), changed=False)
    subprocess.run(["sh", "-n", "-c", script], check=True)
    assert "node-1 ubuntu@10.0.0.2 22 gpufleet ssh-ed25519\n" in script
    assert "node-2 ubuntu@10.0.0.3 22 gpufleet ssh-ed25519\n" in script
    assert "if [ 0 = 0 ]" in script and "node-0" not in script


def test_fanout_copies_again_to_a_worker_replaced_at_the_same_address(tmp_path):
    """The head skips the copy when nothing changed and its last pass reached the same
    workers; a worker replaced at the same address and port (a recovery's new VM: same
    private IP, new host key) is not the same worker and gets the workdir again. Before,
    the 2-VM recovery run's new node-1 got nothing ('nothing changed') and its rank failed
    with FileNotFoundError for the script. Faked: rsync (prints its stats, copies nothing)."""
    import os

    (tmp_path / ".gpufleet/ssh").mkdir(parents=True)
    fake = tmp_path / "bin/rsync"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'Total bytes sent: 10'\n")
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{fake.parent}:{os.environ['PATH']}")

    def unchanged(info) -> bool:
        script = rsync.fanout_script(info, changed=False)
        r = subprocess.run(["sh", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                           text=True, check=True)  # fmt: skip
        return f"{rsync.FANOUT_MARK}-unchanged" in r.stdout

    info = _info()
    assert not unchanged(info)  # the first pass copies
    assert unchanged(info)  # the same workers: nothing to do
    info.nodes[1].host_key = "ssh-ed25519 AAAAnewnode1"
    assert not unchanged(info)
    assert unchanged(info)


def test_a_relative_checkpoint_folder_survives_the_restarts_sync(tmp_path):
    """Real rsync (this machine -> a local "head", then "head" -> a local "worker" with the
    fan-out's flags) and the real prune command: the checkpoint folder a run names relative
    to its workdir is neither deleted nor overwritten (issue 22: it was, before the copy)."""
    from gpufleet.jobs import sync

    src, head, worker = tmp_path / "src", tmp_path / "head", tmp_path / "worker"
    src.mkdir()
    (src / "train.py").write_text("x")
    (src / "ckpt").mkdir()
    (src / "ckpt" / "ckpt.pt").write_text("this machine's stale copy")
    for d in (head, worker):
        (d / "ckpt").mkdir(parents=True)
        (d / "ckpt" / "ckpt.pt").write_text(f"{d.name}'s step 40")
    sel = syncfiles.Selection(["train.py"], [])
    filt = tmp_path / "filter"
    filt.write_text(rsync.rsync_filter(sel, ["ckpt"]))
    subprocess.run(
        ["rsync", "-a", "--delete", "--delete-excluded", f"--filter=merge {filt}", f"{src}/", head],
        check=True,
    )
    assert (head / "ckpt" / "ckpt.pt").read_text() == "head's step 40"
    assert (head / "train.py").exists()
    script = rsync.fanout_script(
        SimpleNamespace(nodes=[], name="c"),
        protect=["ckpt"],  # type: ignore[arg-type]
    )
    assert "- /ckpt/" in script  # the fan-out's own rsync line carries the same rule
    subprocess.run(
        [
            "rsync",
            "-a",
            "--delete",
            "--filter=- /.gpufleet/",
            "--filter=- /ckpt/",
            f"{head}/",
            worker,
        ],
        check=True,
    )
    assert (worker / "ckpt" / "ckpt.pt").read_text() == "worker's step 40"
    # the paramiko path: a tar of the selection, then everything the manifest lacks removed
    (worker / "stale.py").write_text("gone")
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(src / "train.py", arcname="train.py")
        data = syncfiles.manifest(sel)
        ti = tarfile.TarInfo(".gpufleet/manifest")
        ti.size = len(data)
        tar.addfile(ti, io.BytesIO(data))
    subprocess.run(
        ["bash", "-c", sync.prune_command(["ckpt"])], cwd=worker, input=buf.getvalue(), check=True
    )
    assert not (worker / "stale.py").exists()
    assert (worker / "ckpt" / "ckpt.pt").read_text() == "worker's step 40"
    subprocess.run(
        ["bash", "-c", sync.prune_command()], cwd=worker, input=buf.getvalue(), check=True
    )
    assert not (worker / "ckpt").exists()  # unprotected, as before the fix


def test_only_a_relative_checkpoint_folder_outside_the_run_folders_is_protected():
    from gpufleet.jobs.launch import LaunchOptions
    from gpufleet.jobs.run import synced_around

    def around(ckpt):
        return synced_around(
            LaunchOptions(launcher="none", command=["x"], run_id="r1", checkpoint_dir=ckpt)
        )

    assert around("ckpt/") == ["ckpt"] and around("./out/ck") == ["out/ck"]
    assert around(None) == [] and around("/shared/ck") == [] and around("s3://b/k") == []
    assert around("../up") == []
