"""Checks of a job and its options that run before anything is created (a typo costs no boot)."""

from __future__ import annotations

import re
from pathlib import Path

from gpufleet.components.errors import SpecError

PORT_RANGE = (1024, 65535)  # below 1024 needs root on the nodes
# The flags that describe a cluster to create; with --cluster they cannot apply.
CREATE_FLAGS = (
    "name", "cloud", "nodes", "instance_type", "region", "zone", "spot", "public_workers", "ttl",
)  # fmt: skip
FLAG_NAMES = {"instance_type": "--instance-type/-t", "ssh_cidr": "--ssh-cidr"}
_SIZE = re.compile(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", re.IGNORECASE)


def flag(param: str) -> str:
    return FLAG_NAMES.get(param, "--" + param.replace("_", "-"))


def cloud_name(cloud: str) -> str:
    """Cloud names are matched in any case, like GPU models are."""
    return cloud.strip().lower()


def port(value: int | None, field: str = "master_port") -> None:
    if value is None:
        return
    lo, hi = PORT_RANGE
    if not lo <= value <= hi:
        raise SpecError(field, f"{value} is not a usable port", f"use a port from {lo} to {hi}")


def nproc(value: int | None) -> None:
    if value is not None and value < 1:
        raise SpecError(
            "nproc_per_node",
            f"must be at least 1, got {value}",
            "drop --nproc-per-node (default: the node's GPUs, or 1) or pass 1 or more",
        )


def node_count(nodes: int | None, hosts: int | None, default: int = 2) -> int:
    """--nodes, or the number of BYO hosts, or the default; 0 is refused, never read as
    "not given" (it once silently meant the default of 2)."""
    if nodes is not None and nodes < 1:
        raise SpecError("nodes", f"must be at least 1, got {nodes}", "pass --nodes 1 or more")
    if nodes is not None and hosts is not None and nodes != hosts:
        raise SpecError("nodes", f"{nodes} nodes for {hosts} hosts", "drop --nodes")
    if hosts is not None:
        return hosts
    return default if nodes is None else nodes


def not_with_cluster(cluster: str, given: list[str]) -> None:
    """Refuse cluster-creating flags next to --cluster instead of silently ignoring them."""
    if given:
        flags = ", ".join(flag(p) for p in given)
        raise SpecError(
            "cluster",
            f"{flags} cannot apply to the existing cluster {cluster!r}",
            f"drop {flags}, or drop --cluster to create a new cluster",
        )


def job(launcher: str, command: list[str], workdir: Path, setup: str | None = None) -> None:
    """The script (or `-m module`) a launcher runs exists in the workdir that is copied
    (a module may also be installed: here, or by --setup on the nodes)."""
    if launcher == "none":
        return  # a shell command line: the nodes' PATH decides
    if command[0] in ("-m", "--module"):
        if len(command) < 2 or command[1].startswith("-"):
            raise SpecError("command", "-m needs a module name", "write it like -- -m mypkg.train")
        _module(command[1], workdir, setup)
        return
    if command[0].startswith("-"):
        raise SpecError(
            "command",
            f"{command[0]!r} is not a script",
            "put gpufleet's options before --, and the script (or -m module) right after it",
        )
    script = Path(command[0])
    if script.is_absolute():
        return  # a path on the nodes, not in the workdir
    if not (workdir / script).is_file():
        raise SpecError(
            "command",
            f"{command[0]} is not a file in the workdir {workdir}",
            "give the script's path relative to --workdir (the folder copied to every node)",
        )


def _module(name: str, workdir: Path, setup: str | None) -> None:
    import importlib.util

    parts = name.split(".")
    if not all(p.isidentifier() for p in parts):
        raise SpecError("command", f"{name!r} is not a module name", "write it like mypkg.train")
    if not (workdir / parts[0]).exists() and not (workdir / f"{parts[0]}.py").is_file():
        if setup or importlib.util.find_spec(parts[0]) is not None:
            return  # installed here, or --setup may install it on the nodes
        raise SpecError(
            "command",
            f"module {name} is neither in the workdir {workdir} nor installed",
            "put its package in --workdir, or install it on the nodes with --setup 'pip install'",
        )
    base = workdir.joinpath(*parts)
    if not (base.with_suffix(".py").is_file() or (base / "__main__.py").is_file()):
        raise SpecError(
            "command",
            f"module {name} is not in the workdir {workdir}",
            f"check the name: {parts[0]} is there, {name} is not",
        )


def parse_size(text: str) -> int:
    """'65536', '64K', '1M', '256MiB' -> bytes, as the all-reduce probe reads them."""
    m = _SIZE.fullmatch(text)
    if not m:
        raise ValueError(text)
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


def sizes(text: str | None) -> str | None:
    """--sizes: comma-separated message sizes; normalised to bytes."""
    if text is None:
        return None
    try:
        values = [parse_size(p) for p in text.split(",") if p.strip()]
    except ValueError as e:
        raise SpecError(
            "sizes",
            f"{e.args[0].strip()!r} is not a message size",
            "write sizes like --sizes 65536,1M,256MiB",
        ) from None
    if not values or min(values) < 1:
        raise SpecError("sizes", f"{text!r} names no message size", "write like --sizes 1M,64M")
    return ",".join(str(v) for v in values)
