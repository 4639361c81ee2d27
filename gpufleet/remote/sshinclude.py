"""The `Include` of every cluster's ssh config, kept at the top of ~/.ssh/config."""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from pathlib import Path

from gpufleet.components.errors import GpufleetError
from gpufleet.components.exitcodes import ExitCode

MARK = "# added by `gpufleet ssh-config --install` (`--uninstall` removes it): gpufleet's clusters"
# Where a config line's keyword ends: OpenSSH takes `Keyword value` and `Keyword=value`.
_KEYWORD = re.compile(r"\s*([A-Za-z]+)\s*(?:=\s*|\s+|$)(.*)")


class SshConfigError(GpufleetError):
    """~/.ssh/config could not be read or written; nothing was changed."""

    exit_code = ExitCode.USAGE

    def __init__(self, path: Path, why: str):
        super().__init__(
            f"cannot update {path}: {why}",
            hint="fix its permissions, or put the line `gpufleet ssh-config --include` prints"
            " first in that file",
        )


def user_config() -> Path:
    """~/.ssh/config of $HOME (so a test, or a user, can point HOME elsewhere)."""
    return Path(os.path.expanduser("~")) / ".ssh" / "config"


def _keyword(line: str) -> tuple[str, str] | None:
    """(keyword in lower case, rest) of a config line; None for a blank or comment line."""
    if not line.strip() or line.lstrip().startswith("#"):
        return None
    m = _KEYWORD.match(line)
    return (m.group(1).lower(), m.group(2).strip()) if m else ("", line.strip())


def _is(line: str, include: str) -> bool:
    """Whether `line` is this include line, however it is spaced or cased."""
    return _keyword(line) == _keyword(include)


def placed(text: str, include: str) -> bool:
    """Whether the include is among the file's first lines that are all `Include`s.

    Anywhere below a `Host` or `Match` line, OpenSSH reads the included hosts only when that
    block matches the host asked for (so `ssh t-node-1` never sees them); below a global
    option, that option's value wins over the cluster's (the first value obtained is used).
    """
    for line in text.splitlines():
        kw = _keyword(line)
        if kw is None:
            continue
        if _is(line, include):
            return True
        if kw[0] != "include":
            return False
    return False


def with_include(text: str, include: str) -> str:
    """The config with the include on top: its other copies removed, the rest as it was."""
    if placed(text, include):
        return text
    rest = _without(text, include)
    head = f"{MARK}\n{include}\n"
    return head + "\n" + rest if rest else head


def without_include(text: str, include: str) -> str:
    """The config without the include (and the mark and blank line `with_include` added)."""
    return _without(text, include)


def _without(text: str, include: str) -> str:
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip("\r\n") == MARK and i + 1 < len(lines) and _is(lines[i + 1], include):
            i += 1  # the mark goes with its line
            continue
        if _is(line, include):
            i += 1
            if out == [] and i < len(lines) and not lines[i].strip():
                i += 1  # the blank line install put between it and the user's first line
            continue
        out.append(line)
        i += 1
    return "".join(out)


def install(include: str, path: Path | None = None) -> str:
    """Put the include at the top of ~/.ssh/config; what was done, as a sentence."""
    path = path or user_config()
    text, existed = _read(path)
    new = with_include(text, include)
    if new == text:
        return f"{path} already starts with `{include}`: nothing to do"
    _write(path, new, existed)
    if not existed:
        return f"created {path} with `{include}`"
    if any(_is(line, include) for line in text.splitlines()):
        return f"moved `{include}` to the top of {path} (below a Host block it does not work)"
    return f"added `{include}` at the top of {path}"


def uninstall(include: str, path: Path | None = None) -> str:
    """Remove the include from ~/.ssh/config; what was done, as a sentence."""
    path = path or user_config()
    text, existed = _read(path)
    new = without_include(text, include)
    if not existed or new == text:
        return f"{path} has no `{include}`: nothing to do"
    _write(path, new, existed)
    return f"removed `{include}` from {path}"


def _read(path: Path) -> tuple[str, bool]:
    try:
        return path.read_text(), True
    except FileNotFoundError:
        return "", False
    except (OSError, UnicodeDecodeError) as e:
        raise SshConfigError(path, getattr(e, "strerror", None) or str(e)) from None


def _write(path: Path, text: str, existed: bool) -> None:
    """Atomically, keeping an existing file's mode (and owner, where allowed); a new file is
    0600 in a ~/.ssh made 0700 (OpenSSH refuses a config others can write)."""
    try:
        if not path.parent.exists():
            path.parent.mkdir(mode=0o700, parents=True)
            os.chmod(path.parent, 0o700)  # whatever the umask
        # a config linked from a dotfiles repository stays a link: write the file it names
        target = Path(os.path.realpath(path)) if existed else path
        st = target.stat() if existed else None
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as e:
        raise SshConfigError(path, e.strerror or str(e)) from None
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), stat.S_IMODE(st.st_mode) if st else 0o600)
            if st and (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
                with contextlib.suppress(OSError):
                    os.fchown(f.fileno(), st.st_uid, st.st_gid)
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise SshConfigError(path, e.strerror or str(e)) from None
        raise
