"""What a run copies to the nodes: git's view of the directory, never .git or .venv."""

from __future__ import annotations

import io
import subprocess
import tarfile

from gpufleet import sync


def _tree(root):
    (root / "train.py").write_text("print(1)")
    (root / "data").mkdir()
    (root / "data" / "x.csv").write_text("1")
    (root / "out.log").write_text("ignored")
    (root / ".gitignore").write_text("*.log\nbuild/\n")
    (root / "build").mkdir()
    (root / "build" / "a.o").write_text("o")
    (root / ".venv").mkdir()
    (root / ".venv" / "lib.py").write_text("x")


def test_plain_directory_uses_gitignore(tmp_path):
    _tree(tmp_path)
    assert sync.job_files(tmp_path) == [".gitignore", "data/x.csv", "train.py"]


def test_git_directory_uses_git(tmp_path):
    _tree(tmp_path)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "new.py").write_text("untracked but not ignored")
    assert sync.job_files(tmp_path) == [".gitignore", "data/x.csv", "new.py", "train.py"]


def test_pack_roundtrip(tmp_path):
    _tree(tmp_path)
    data, count = sync.pack(tmp_path)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        names = sorted(tar.getnames())
        assert tar.extractfile("train.py").read() == b"print(1)"
    assert count == 3 and names == [".gitignore", "data/x.csv", "train.py"]
