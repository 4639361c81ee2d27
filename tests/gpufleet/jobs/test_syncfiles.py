"""What a sync copies: git's view of the directory, --include/--exclude, the manifest."""

from __future__ import annotations

import subprocess

from gpufleet.jobs import syncfiles


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
    assert syncfiles.job_files(tmp_path) == [".gitignore", "data/x.csv", "train.py"]


def test_plain_directory_reads_gitignore_as_git_does(tmp_path):
    """Without git the walk matches like .gitignore: `dir/` only folders, `/x` and `a/b` from
    the root only, a bare name at any depth."""
    (tmp_path / ".gitignore").write_text("cache/\n/top.txt\nsrc/gen\n")
    for rel in ("cache", "sub/cache/x", "top.txt", "sub/top.txt", "src/gen/g.py", "lib/src/gen"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    assert syncfiles.job_files(tmp_path) == [".gitignore", "cache", "lib/src/gen", "sub/top.txt"]


def test_git_directory_uses_git(tmp_path):
    _tree(tmp_path)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "new.py").write_text("untracked but not ignored")
    assert syncfiles.job_files(tmp_path) == [".gitignore", "data/x.csv", "new.py", "train.py"]


def test_skipped_lists_each_left_out_folder_once(tmp_path):
    _tree(tmp_path)
    sel = syncfiles.select(tmp_path)
    assert sel.files == [".gitignore", "data/x.csv", "train.py"]
    assert sel.skipped == [".venv/", "build/", "out.log"]


def test_include_overrides_gitignore_and_exclude_wins(tmp_path):
    _tree(tmp_path)
    sel = syncfiles.select(tmp_path, include=["*.so", "out.log"], exclude=["data/"])
    assert sel.files == [".gitignore", "build/keep.so", "out.log", "train.py"]
    assert sel.skipped == [".venv/", "build/a.o", "data/"]


def test_patterns_anchor_like_gitignore():
    assert syncfiles.matches("*.log", "a/b/c.log") and syncfiles.matches("*.log", "c.log")
    assert syncfiles.matches("build/", "build/x.o") and not syncfiles.matches("build/", "build")
    assert syncfiles.matches("/data", "data/x") and not syncfiles.matches("/data", "sub/data/x")
    assert syncfiles.matches("a/b", "a/b/c") and not syncfiles.matches("a/b", "x/a/b/c")


def test_manifest_lists_each_sent_file_on_its_own_line():
    sel = syncfiles.Selection(["a.py", "d/b c.txt"], ["build/"])
    assert syncfiles.manifest(sel) == b"a.py\nd/b c.txt\n"
