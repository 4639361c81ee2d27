"""What a sync sends: git's view of the folder, gitignore-style patterns, what is left out."""

from __future__ import annotations

import fnmatch
import os
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
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
# The job's run folders (launch.run_dir) on a node: never sent, never deleted by a sync.
RUNS_DIR = ".gpufleet"


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
    return [ln for ln in lines if ln and not ln.startswith(("#", "!"))]


def _walk(root: Path) -> list[str]:
    """Without git: every file not matching ALWAYS_SKIP or .gitignore (read by matches())."""
    patterns = [*ALWAYS_SKIP, *_gitignore_patterns(root)]
    return sorted(_all_files(root, lambda rel: any(matches(p, rel) for p in patterns)))


def job_files(root: Path) -> list[str]:
    """Relative paths to copy: what git would keep (skipping .git and .venv), else a walk."""
    files = _git_files(root)
    if files is None:
        return _walk(root)
    return sorted(
        p for p in files if not (set(Path(p).parts) & ALWAYS_SKIP) and (root / p).is_file()
    )


def matches(pattern: str, rel: str) -> bool:
    """gitignore-style: `*.log` at any depth, `/build` or `a/b` from the root, `dir/` a folder.

    A path matches when it or one of its parent folders does.
    """
    dir_only = pattern.endswith("/")
    pat = pattern.strip("/")
    if not pat:
        return False
    parts = rel.split("/")
    candidates = parts[:-1] if dir_only else parts
    if "/" in pattern.rstrip("/"):
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(candidates))]
        return any(fnmatch.fnmatchcase(p, pat) for p in prefixes)
    return any(fnmatch.fnmatchcase(p, pat) for p in candidates)


@dataclass(frozen=True)
class Selection:
    """What a sync copies (`files`) and what it leaves out, folders collapsed (`skipped`)."""

    files: list[str]
    skipped: list[str]

    def size(self, root: Path) -> int:
        return sum((root / f).lstat().st_size for f in self.files)


def _all_files(root: Path, ignored: Callable[[str], bool] = lambda rel: False) -> Iterable[str]:
    """Every file and symlink (a symlinked folder too, as git lists it) under `root` but .git,
    minus what `ignored` names; a folder is asked about as `dir/`, and not entered if ignored."""
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        rel = "" if rel == "." else rel + "/"
        links = [d for d in dirnames if d != ".git" and os.path.islink(os.path.join(dirpath, d))]
        dirnames[:] = [d for d in dirnames if d != ".git" and not ignored(f"{rel}{d}/")]
        yield from (rel + f for f in [*filenames, *links] if not ignored(rel + f))


def select(root: Path, include: Iterable[str] = (), exclude: Iterable[str] = ()) -> Selection:
    """git's view of `root` (.gitignore), plus files matching `include`, minus `exclude`."""
    include, exclude = list(include), list(exclude)
    chosen = set(job_files(root))
    if include:
        chosen |= {f for f in _all_files(root) if any(matches(p, f) for p in include)}
    if exclude:
        chosen = {f for f in chosen if not any(matches(p, f) for p in exclude)}
    files = sorted(chosen)
    return Selection(files, _skipped(root, files))


def _skipped(root: Path, files: list[str]) -> list[str]:
    """Every entry not copied, as few as possible: a folder with nothing to copy is one entry."""
    wanted = set(files)
    dirs = {""}
    for f in files:
        parts = f.split("/")[:-1]
        dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    out = []
    for d in sorted(dirs):
        try:
            entries = list(os.scandir(root / d if d else root))
        except OSError:
            continue
        for e in entries:
            rel = f"{d}/{e.name}" if d else e.name
            if e.is_dir(follow_symlinks=False):
                if rel not in dirs:
                    out.append(rel + "/")
            elif rel not in wanted:
                out.append(rel)
    return sorted(out)


def manifest(sel: Selection) -> bytes:
    """Every file sent, one per line: a node deletes what it has beyond them (prune_command)."""
    return "".join(f"{f}\n" for f in sel.files).encode()
