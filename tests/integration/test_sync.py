"""Workdir sync on a real 3-node sandbox: what arrives, what is deleted, what is skipped,
what a re-sync sends, and the paramiko path for nodes without rsync."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from gpufleet.jobs import sync
from gpufleet.remote import Group, head
from tests.integration.conftest import gpufleet, requires_sshd

pytestmark = [
    requires_sshd,
    pytest.mark.skipif(not shutil.which("rsync"), reason="rsync is not installed"),
]


def _workdir(root):
    (root / "sub").mkdir(parents=True)
    (root / "train.py").write_text("print('train')\n")
    (root / "sub" / "cfg.yaml").write_text("lr: 1\n")
    (root / "big.bin").write_bytes(os.urandom(2_000_000))
    (root / "run.log").write_text("ignored\n")
    (root / ".gitignore").write_text("*.log\n")
    return root


def _files(g: Group) -> dict[str, list[str]]:
    res = g.run("find . -type f ! -path './.gpufleet/*' | sed 's|^\\./||' | sort")
    return {n: r.stdout.split() for n, r in res.items()}


def test_mirrors_workdir_through_the_head_and_deletes_what_it_lost(make_sandbox, tmp_path):
    info = make_sandbox("t", 3)
    root = _workdir(tmp_path / "wd")
    with Group(info) as g:
        g.run("mkdir -p .gpufleet/runs && echo 0 > .gpufleet/runs/r.rc && echo x > stale.txt")
        first = sync.sync(info, root, group=g)
        assert first.method == "rsync via head"
        assert first.skipped == ["run.log"]
        want = [".gitignore", "big.bin", "sub/cfg.yaml", "train.py"]
        assert _files(g) == {n.name: want for n in info.nodes}
        # The client uploads once (to the head), not once per node.
        assert 2_000_000 <= first.uploaded < 2 * 2_000_000
        assert set(first.per_node) == {"node-1", "node-2"}
        assert all(b >= 2_000_000 for b in first.per_node.values())
        # The run folders survive a sync: they hold each rank's exit code.
        assert all(r.stdout == "0\n" for r in g.run("cat .gpufleet/runs/r.rc").values())

        (root / "sub" / "cfg.yaml").unlink()
        (root / "train.py").write_text("print('edited')\n")
        edit = sync.sync(info, root, group=g)
        assert _files(g) == {n.name: [".gitignore", "big.bin", "train.py"] for n in info.nodes}
        assert all(r.stdout == "print('edited')\n" for r in g.run("cat train.py").values())
        # Only the edited file travels, from here and from the head.
        assert edit.uploaded < 50_000
        assert all(b < 50_000 for b in edit.per_node.values())

        again = sync.sync(info, root, group=g)
        assert again.uploaded < 50_000 and again.per_node == {}


def test_include_and_exclude_override_gitignore(make_sandbox, tmp_path):
    info = make_sandbox("t", 2)
    root = _workdir(tmp_path / "wd")
    with Group(info) as g:
        rep = sync.sync(info, root, group=g, include=["*.log"], exclude=["big.bin", "sub/"])
        assert rep.skipped == ["big.bin", "sub/"]
        want = [".gitignore", "run.log", "train.py"]
        assert _files(g) == {"node-0": want, "node-1": want}


def test_paramiko_path_copies_and_deletes_without_rsync(make_sandbox, tmp_path):
    info = make_sandbox("t", 2)
    root = _workdir(tmp_path / "wd")
    with Group(info) as g:
        g.run("echo x > stale.txt && mkdir -p old/dir && echo y > old/dir/f")
        rep = sync.sync(info, root, group=g, method="paramiko")
        assert rep.method == "paramiko"
        want = [".gitignore", "big.bin", "sub/cfg.yaml", "train.py"]
        assert _files(g) == {"node-0": want, "node-1": want}
        assert all(r.stdout == "" for r in g.run("ls -d old 2>/dev/null; true").values())


def test_cli_sync_reports_and_lists_skipped(make_sandbox, gpufleet_home, tmp_path):
    make_sandbox("t", 2)
    root = _workdir(tmp_path / "wd")
    p = gpufleet(gpufleet_home, "sync", "t", "--workdir", str(root))
    assert p.returncode == 0, p.stderr
    assert "run.log" in p.stderr and "uploaded" in p.stderr


def test_destroy_closes_the_kept_head_connection(make_sandbox, tmp_path):
    from gpufleet.clusters import ops
    from gpufleet.core import state

    info = make_sandbox("t", 2)
    sync.sync(info, _workdir(tmp_path / "wd"))
    control = head.control_path(state.cluster_dir("t"))
    assert control is not None and os.path.exists(control)
    ops.destroy(info, lambda _m: None)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _masters(control):
        time.sleep(0.1)
    assert not _masters(control)


def _masters(control: str) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    if control.encode() in f.read():
                        out.append(int(p))
            except OSError:
                pass
    return out
