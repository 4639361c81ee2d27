"""Packs a job's working directory for upload: git-tracked and untracked-not-ignored files."""

from __future__ import annotations

import fnmatch
import io
import os
import subprocess
import tarfile
from pathlib import Path

ALWAYS_SKIP = {
    ".git",
    ".venv",
    "venv",
    "__pycache__",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
}


def _git_files(root: Path) -> list[str] | None:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            check=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return None
    return [p for p in out.decode().split("\0") if p]


def _gitignore_patterns(root: Path) -> list[str]:
    f = root / ".gitignore"
    if not f.exists():
        return []
    lines = (ln.strip() for ln in f.read_text().splitlines())
    return [ln.rstrip("/") for ln in lines if ln and not ln.startswith(("#", "!"))]


def _walk(root: Path) -> list[str]:
    patterns = _gitignore_patterns(root)

    def ignored(rel: str, name: str) -> bool:
        return name in ALWAYS_SKIP or any(
            fnmatch.fnmatch(name, p) or fnmatch.fnmatch(rel, p.lstrip("/")) for p in patterns
        )

    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = "" if rel_dir == "." else rel_dir
        dirnames[:] = [d for d in dirnames if not ignored(os.path.join(rel_dir, d), d)]
        files += [
            os.path.join(rel_dir, f) for f in filenames if not ignored(os.path.join(rel_dir, f), f)
        ]
    return sorted(files)


def job_files(root: Path) -> list[str]:
    """Relative paths to copy: what git would keep (skipping .git and .venv), else a walk."""
    files = _git_files(root)
    if files is None:
        return _walk(root)
    skip = ALWAYS_SKIP
    return sorted(p for p in files if not (set(Path(p).parts) & skip) and (root / p).is_file())


def pack(root: Path) -> tuple[bytes, int]:
    """A .tar.gz of the job directory and the number of files in it."""
    files = job_files(root)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=3) as tar:
        for rel in files:
            tar.add(root / rel, arcname=rel, recursive=False)
    return buf.getvalue(), len(files)
