"""--recover, --recover-mode, --recover-on-exit, --checkpoint-dir, --elastic: checked first."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gpufleet.components.errors import SpecError

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import RecoverySpec

_ELASTIC = re.compile(r"^(\d{1,4}):(\d{1,4})$")
# RecoverySpec's field names -> the flags that set them, so an error names what the user typed
_FLAGS = {
    "recovery.max": "--recover",
    "recovery.mode": "--recover-mode",
    "recovery.on_exit": "--recover-on-exit",
    "recovery.checkpoint_dir": "--checkpoint-dir",
}


def spec(
    recover: int | None,
    mode: str | None,
    on_exit: list[int],
    checkpoint_dir: str | None,
    cloud: str,
) -> RecoverySpec | None:
    """The RecoverySpec the flags ask for (None without --recover); a SpecError naming the
    flag. --recover-mode replace (the default) where the provider cannot make a node is
    refused here, not when a node is lost."""
    from gpufleet.components.clusterspec import RECOVERY_MODES, RecoverySpec
    from gpufleet.provision import traits

    if recover is None:
        extra = "--recover-mode" if mode is not None else "--recover-on-exit" if on_exit else None
        if extra:
            raise SpecError(extra, "applies to --recover only", f"add --recover N, or drop {extra}")
        return None
    if recover < 0:
        raise SpecError("--recover", f"{recover} is not a number of recoveries", "give 0 or more")
    if mode is not None and mode not in RECOVERY_MODES:
        raise SpecError(
            "--recover-mode",
            f"{mode!r} is not one of {', '.join(RECOVERY_MODES)}",
            "use " + ", ".join(RECOVERY_MODES[:-1]) + " or none",
        )
    mode = mode or "replace"
    if mode in ("replace", "relaunch") and recover and not traits(cloud).replaces:
        raise SpecError(
            "--recover-mode",
            f"{mode} needs new machines, and --cloud {cloud} cannot make one: the hosts are "
            "yours" + ("" if mode != "replace" else " (replace is the default)"),
            "use --recover-mode restart (the job again on the same hosts once they answer) "
            "or --recover-mode none",
        )
    try:
        return RecoverySpec(
            max=recover, mode=mode, on_exit=list(on_exit), checkpoint_dir=checkpoint_dir
        )
    except SpecError as e:
        raise SpecError(_FLAGS.get(e.field, "--recover"), e.problem, e.fix) from None
    except ValueError as e:  # pydantic's own bounds (e.g. max <= 100)
        raise SpecError("--recover", f"{recover} is out of range", _bounds(e)) from None


def _bounds(e: ValueError) -> str:
    errors = getattr(e, "errors", None)
    ctx = errors()[0].get("ctx", {}) if callable(errors) else {}
    if "le" in ctx:
        return f"give at most {ctx['le']}"
    return "give a smaller number"


def checkpoint_dir(value: str | None) -> str | None:
    """--checkpoint-dir as the nodes will get it: a bucket URL, an absolute path, or a path
    relative to the job's workdir on each node; one line, no control characters."""
    if value is None:
        return None
    from gpufleet.jobs.launch import is_url

    text = value.strip()
    if not text or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise SpecError(
            "--checkpoint-dir",
            f"{value!r} is no folder",
            "give a path on the nodes (absolute, or relative to the workdir) or a bucket URL "
            "such as s3://bucket/run",
        )
    if not is_url(text) and ".." in text.split("/"):
        raise SpecError(
            "--checkpoint-dir",
            f"{value!r} leaves the folder it names (..)",
            "give an absolute path, or one inside the workdir",
        )
    if "://" in text and not is_url(text):
        raise SpecError(
            "--checkpoint-dir",
            f"{value!r} is not a URL gpufleet can pass on",
            "write the scheme in lower case, e.g. s3://bucket/run or gs://bucket/run",
        )
    return text


def elastic(
    value: str | None, max_restarts: int | None, launcher: str, nodes: int | None
) -> tuple[str | None, int]:
    """--elastic MIN:MAX and --max-restarts N for torchrun (its --nnodes and --max-restarts);
    a SpecError naming the flag for another launcher, a bad range, or a MAX over `nodes`."""
    for flag, given in (("--elastic", value is not None), ("--max-restarts", max_restarts)):
        if given and launcher != "torchrun":
            raise SpecError(
                flag,
                f"is torchrun's, and this run's launcher is {launcher}",
                f"use --launcher torchrun, or drop {flag} (--recover works with every launcher)",
            )
    if max_restarts is not None and max_restarts < 0:
        raise SpecError("--max-restarts", f"{max_restarts} is below 0", "give 0 or more")
    if value is None:
        return None, max_restarts or 0
    m = _ELASTIC.match(value.strip())
    low, high = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    if not m or not 1 <= low <= high:
        raise SpecError(
            "--elastic",
            f"{value!r} is not MIN:MAX nodes",
            "write it like 2:4 (1 <= MIN <= MAX)",
        )
    if nodes is not None and high > nodes:  # jobs/launch.elastic_nodes' rule, said here first
        raise SpecError(
            "--elastic",
            f"{value} asks for more nodes than the cluster's {nodes}",
            f"use --elastic MIN:MAX with 1 <= MIN <= MAX <= {nodes}, or --nodes {high}",
        )
    return f"{low}:{high}", max_restarts or 0


def shown(recovery: RecoverySpec | None, elastic_nodes: str | None) -> dict[str, str]:
    """--dry-run's recovery lines (and dry-run.schema.json's fields)."""
    out: dict[str, str] = {}
    if recovery is not None and recovery.max:
        on = f"; also on exit {', '.join(map(str, recovery.on_exit))}" if recovery.on_exit else ""
        out["recovery"] = f"{recovery.mode}, at most {recovery.max}{on}"
    if elastic_nodes:
        out["elastic"] = f"torchrun --nnodes {elastic_nodes}"
    return out
