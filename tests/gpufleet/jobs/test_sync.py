"""What a sync copies: git's view of the directory, --include/--exclude, and the rsync rules."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

from gpufleet.jobs import sync


def _tree(root):
    (root / "train.py").write_text("print(1)")
    (root / "data").mkdir()
    (root / "data" / "x.csv").write_text("1")
    (root / "out.log").write_text("ignored")
    (root / ".gitignore").write_text("*.log\nbuild/\n")
    (root / "build").mkdir()
    (root / "build" / "a.o").write_text("o")
    (root / "build" / "keep.so").write_text("so")
    (root / ".venv").mkdir()
    (root / ".venv" / "lib.py").write_text("x")


def test_plain_directory_uses_gitignore(tmp_path):
    _tree(tmp_path)
    assert sync.job_files(tmp_path) == [".gitignore", "data/x.csv", "train.py"]


def test_plain_directory_reads_gitignore_as_git_does(tmp_path):
    """Without git the walk matches like .gitignore: `dir/` only folders, `/x` and `a/b` from
    the root only, a bare name at any depth."""
    (tmp_path / ".gitignore").write_text("cache/\n/top.txt\nsrc/gen\n")
    for rel in ("cache", "sub/cache/x", "top.txt", "sub/top.txt", "src/gen/g.py", "lib/src/gen"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    assert sync.job_files(tmp_path) == [".gitignore", "cache", "lib/src/gen", "sub/top.txt"]


def test_git_directory_uses_git(tmp_path):
    _tree(tmp_path)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "new.py").write_text("untracked but not ignored")
    assert sync.job_files(tmp_path) == [".gitignore", "data/x.csv", "new.py", "train.py"]


def test_skipped_lists_each_left_out_folder_once(tmp_path):
    _tree(tmp_path)
    sel = sync.select(tmp_path)
    assert sel.files == [".gitignore", "data/x.csv", "train.py"]
    assert sel.skipped == [".venv/", "build/", "out.log"]


def test_include_overrides_gitignore_and_exclude_wins(tmp_path):
    _tree(tmp_path)
    sel = sync.select(tmp_path, include=["*.so", "out.log"], exclude=["data/"])
    assert sel.files == [".gitignore", "build/keep.so", "out.log", "train.py"]
    assert sel.skipped == [".venv/", "build/a.o", "data/"]


def test_patterns_anchor_like_gitignore():
    assert sync.matches("*.log", "a/b/c.log") and sync.matches("*.log", "c.log")
    assert sync.matches("build/", "build/x.o") and not sync.matches("build/", "build")
    assert sync.matches("/data", "data/x") and not sync.matches("/data", "sub/data/x")
    assert sync.matches("a/b", "a/b/c") and not sync.matches("a/b", "x/a/b/c")


def test_rsync_filter_protects_runs_and_escapes_wildcards(tmp_path):
    sel = sync.Selection(["a.py"], ["build/", "odd[1]*.txt"])
    assert sync.rsync_filter(sel) == "P /.gpufleet/\n- /build/\n- /odd\\[1]\\*.txt\n"


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
    filt.write_text(sync.rsync_filter(sync.select(src)))
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
    assert sync.parse_stats(text) == (1234, True)
    assert sync.parse_stats(text.replace("transferred: 1", "transferred: 0")) == (1234, False)


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
    script = sync.fanout_script(_info(), changed=False)
    subprocess.run(["sh", "-n", "-c", script], check=True)
    assert "node-1 ubuntu@10.0.0.2 22 gpufleet ssh-ed25519\n" in script
    assert "node-2 ubuntu@10.0.0.3 22 gpufleet ssh-ed25519\n" in script
    assert "if [ 0 = 0 ]" in script and "node-0" not in script


def test_parse_fast_takes_the_common_forms_only(tmp_path):
    args = ["sync", "c", "--workdir", str(tmp_path), "--include", "*.so", "--exclude", "d/"]
    assert sync.parse_fast([*args, "--json"]) == {
        "name": "c",
        "workdir": str(tmp_path),
        "include": ["*.so"],
        "exclude": ["d/"],
        "method": "auto",
        "json": True,
    }
    assert sync.parse_fast(["sync", "c", "--workdir=x"]) is None  # typer's job
    assert sync.parse_fast(["sync", "c", "--workdir", str(tmp_path / "missing")]) is None
    assert sync.parse_fast(["sync", "--help"]) is None
