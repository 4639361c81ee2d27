"""Helpers the CLI modules share: progress, prefixed node output, durations, JSON."""

from __future__ import annotations

import contextlib
import json
import math
import re
import sys
import threading
import time
from typing import Any

from gpufleet.components.errors import SpecError

_lock = threading.Lock()
_COLORS = ("36", "33", "35", "32", "34", "31")


def progress(message: str) -> None:
    """A progress line on stderr (dim when it is a terminal), so stdout stays the job's."""
    if sys.stderr.isatty():
        message = f"\033[2m{message}\033[0m"
    # after SIGHUP the terminal is gone: a failed write must not stop the teardown
    with _lock, contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"gpufleet: {message}\n")
        sys.stderr.flush()


def node_index(node: str) -> int:
    """K of `node-K` (0 for a name without one): the order nodes are shown in."""
    return int(node.rsplit("-", 1)[-1]) if node[-1:].isdigit() else 0


def node_printer(color: bool | None = None, to_stderr: bool = False):
    """A stream callback printing `[node-K] line`, stdout lines to stdout, stderr to stderr
    (to_stderr: everything to stderr, when stdout carries a JSON document)."""
    tty = (sys.stderr if to_stderr else sys.stdout).isatty() if color is None else color

    def emit(node: str, line: str, is_err: bool) -> None:
        prefix = f"[{node}]"
        if tty:
            prefix = f"\033[{_COLORS[node_index(node) % len(_COLORS)]}m{prefix}\033[0m"
        out = sys.stderr if is_err or to_stderr else sys.stdout
        with _lock, contextlib.suppress(OSError, ValueError):
            out.write(f"{prefix} {line}\n")
            out.flush()

    return emit


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_TTL_MINUTES = 366 * 1440  # a year: beyond it a timestamp means nothing (and overflows)


def parse_duration(text: str, field: str, example: str = "30m, 4h or 1h30m") -> float:
    """'90s', '45m', '1h30m', '2d' or plain minutes -> seconds, at most 366 days.

    Only ASCII digits count ('²' is a digit to str.isdigit but no duration).
    """
    t = text.strip().lower()
    bad = SpecError(field, f"{text!r} is not a duration", f"write it like {example}")
    if not t.isascii() or len(t) > 40:
        raise bad
    if t.isdigit():
        seconds = int(t) * 60.0
    else:
        parts = re.findall(r"(\d+)([smhd])", t)
        if not parts or "".join(n + u for n, u in parts) != t:
            raise bad
        seconds = float(sum(int(n) * _UNITS[u] for n, u in parts))
    if seconds > MAX_TTL_MINUTES * 60:
        raise SpecError(field, f"{text!r} is over the maximum of 366d", "use at most 366d")
    return seconds


def parse_ttl(text: str) -> int:
    """'4h', '90m', '1h30m', '2d' or plain minutes -> minutes (0 disables the TTL).

    A non-zero duration under a minute rounds up to one.
    """
    seconds = parse_duration(text, "ttl")
    return 0 if seconds == 0 else max(1, math.ceil(seconds / 60))


def parse_pairs(items: list[str], field: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SpecError(field, f"{item!r} is not KEY=VALUE", f"write it like --{field} team=ml")
        out[key] = value
    return out


def ask(question: str) -> bool:
    """Ask `question [Y/n]` on stderr and read the answer; Enter means yes."""
    sys.stderr.write(f"{question} [Y/n] ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("", "y", "yes")


def when(epoch: float | None, seconds: bool = False) -> str:
    """Local time with its zone, as `sky status` shows it; '-' for none."""
    fmt = "%Y-%m-%d %H:%M:%S %Z" if seconds else "%Y-%m-%d %H:%M %Z"
    return time.strftime(fmt, time.localtime(epoch)) if epoch else "-"


def new_table(columns: tuple[str, ...], title: str | None = None) -> Any:
    """A rich table in the CLI's one style: upper-case headers, a rule under them."""
    from rich import box
    from rich.table import Table

    t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for col in columns:
        t.add_column(col.upper(), no_wrap=True)
    return t


def print_resources(title: str, resources: list[dict]) -> Any:
    """A plan's resources (type, name, key inputs) as a table on the console; the console."""
    from rich.table import Table

    table = Table(title=title)
    for col in ("type", "name", "key inputs"):
        table.add_column(col, overflow="fold")
    for r in resources:
        table.add_row(r["type"], r["name"], r["summary"])
    out = console()
    out.print(table)
    return out


def print_json(data: Any) -> None:
    """One JSON document on stdout (keys in the order built: the documented schema's)."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def console() -> Any:
    """A rich console; when output is piped, wide enough that tables are not cut."""
    from rich.console import Console

    c = Console()
    return c if c.is_terminal else Console(width=200)
