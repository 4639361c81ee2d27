"""Adopt a fleet made with plain `pulumi up`: its stack's outputs become a cluster record here.

An adopted cluster is the stack's, not gpufleet's: `down` forgets the record and leaves the
stack (its owner runs `pulumi destroy`), and gpufleet changes nothing on the nodes that the
stack's outputs describe: the host keys they pin stay the nodes' keys (no first-contact
rotation), so `ssh -F` with the stack's own `ssh_config` keeps working beside gpufleet.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from gpufleet.components.clusterinfo import ClusterInfo
from gpufleet.components.clusterspec import NAME_RE
from gpufleet.components.contract import CLUSTER_OUTPUTS, cluster_info_from_outputs
from gpufleet.components.errors import SpecError
from gpufleet.components.exitcodes import ExitCode
from gpufleet.core import state
from gpufleet.core.errors import ClusterExists, GpufleetError, MissingTool, StateDamaged
from gpufleet.provision import Progress, hostkeypin, traits

ADOPTED = "adopted"  # key in ClusterInfo.provider: made by someone's own `pulumi up`
SHOW_SECRETS = "pulumi stack output --json --show-secrets"
MASKED = "[secret]"  # what `pulumi stack output --json` prints for a secret without the flag


class NotFleetOutputs(GpufleetError):
    """The outputs are not a GpuFleet's (another program, a masked secret, a bad file)."""

    exit_code = ExitCode.USAGE


class ExtendAdopted(GpufleetError):
    """`extend` of an adopted cluster: its expiry is its stack's ttl_minutes, not gpufleet's."""

    exit_code = ExitCode.USAGE

    def __init__(self, info: ClusterInfo):
        super().__init__(
            f"cannot extend {info.name!r}: it was attached from a stack gpufleet did not create, "
            "and gpufleet changes nothing on its nodes",
            hint="its expiry is the stack's: its owner raises ttl_minutes and runs `pulumi up` "
            '(on a live cluster that makes new nodes: docs/pulumi.md, "Across the expiry"), '
            f"then `gpufleet attach {info.name} ...` again",
        )
        self.name = info.name


def is_adopted(info: Any) -> bool:
    return bool(getattr(info, "provider", {}).get(ADOPTED))


def destroy_hint(info: ClusterInfo) -> str:
    """How the stack's owner removes the nodes of an adopted cluster."""
    stack = info.provider.get("stack")
    where = f" --stack {stack}" if stack else ""
    folder = info.provider.get("cwd")
    return f"`pulumi destroy{where}`" + (f" in {folder}" if folder else " in the stack's project")


def read_outputs_file(path: str, stdin: TextIO | None = None) -> dict[str, Any]:
    """The JSON of `pulumi stack output --json --show-secrets`, from a file or `-` (stdin)."""
    try:
        text = (stdin or sys.stdin).read() if path == "-" else Path(path).read_text()
    except OSError as e:
        raise NotFleetOutputs(
            f"cannot read {path}: {e.strerror or e}",
            hint=f"write it with `{SHOW_SECRETS} > {path}`",
        ) from e
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise NotFleetOutputs(
            f"{'stdin' if path == '-' else path} is not JSON: {e}",
            hint=f"give the JSON `{SHOW_SECRETS}` prints",
        ) from e
    if not isinstance(data, dict):
        raise NotFleetOutputs(
            f"{path}: a JSON object of outputs expected", hint=f"give `{SHOW_SECRETS}`'s JSON"
        )
    return data


def read_stack_outputs(stack: str, cwd: str | None = None) -> dict[str, Any]:
    """A stack's outputs with secrets shown, through the Automation API (the Pulumi CLI runs
    in `cwd`, the stack's project folder, with the caller's backend login and passphrase)."""
    from gpufleet.components.errors import cloud_sdk
    from gpufleet.provision.pulumi import find_pulumi

    try:
        find_pulumi()
    except MissingTool as e:
        raise MissingTool(
            "pulumi",
            f"{e.install}; or, where Pulumi runs, `{SHOW_SECRETS} > outputs.json` and "
            "`gpufleet attach NAME --outputs outputs.json`",
        ) from e
    with cloud_sdk(None):
        from pulumi import automation as auto
    ws = auto.LocalWorkspace(work_dir=cwd or os.getcwd())
    try:
        outputs = ws.stack_outputs(stack)
    except auto.errors.CommandError as e:
        raise GpufleetError(
            f"pulumi stack output --stack {stack} failed: {str(e).strip()[-600:]}",
            hint="run it in the stack's project folder (or --cwd DIR), logged in to its backend "
            "(`pulumi login`, PULUMI_BACKEND_URL) with its passphrase or secrets provider; or "
            f"pass --outputs FILE written by `{SHOW_SECRETS}`",
        ) from e
    return {k: v.value for k, v in outputs.items()}


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def contract_names(outputs: dict[str, Any]) -> dict[str, Any]:
    """The outputs under the contract's snake_case names: a YAML, TypeScript, Go or C# program
    exports the package schema's camelCase ones (sshPrivateKey, knownHosts, expiresAt; nodes'
    privateIp, publicIp, hostKey, hostKeyAt, instanceId). A snake_case name wins where a
    program exported both."""
    out = {_snake(k): v for k, v in outputs.items() if _snake(k) not in outputs}
    out.update(outputs)
    nodes = out.get("nodes")
    if isinstance(nodes, list):
        out["nodes"] = [
            {**{_snake(k): v for k, v in n.items()}, **n} if isinstance(n, dict) else n
            for n in nodes
        ]
    return out


def check_outputs(outputs: dict[str, Any], source: str, now: float | None = None) -> None:
    """Refuse outputs gpufleet cannot reach nodes with, before anything is written
    (contract_names first: the outputs under the contract's names)."""
    missing = [k for k in CLUSTER_OUTPUTS if k not in outputs]
    if missing:
        raise NotFleetOutputs(
            f"{source} has no GpuFleet outputs: it lacks {', '.join(missing)}",
            hint="export every output of the fleet in your program (`for k in OUTPUT_NAMES: "
            "pulumi.export(k, getattr(fleet, k))`, OUTPUT_NAMES from "
            "gpufleet.components.contract), run `pulumi up`, then attach",
        )
    if outputs["ssh_private_key"] == MASKED:
        raise NotFleetOutputs(
            f"{source}: ssh_private_key is masked ({MASKED})",
            hint=f"write the outputs with --show-secrets: `{SHOW_SECRETS}`",
        )
    if not traits(str(outputs["cloud"])).pulumi:
        raise NotFleetOutputs(
            f"{source}: cloud {outputs['cloud']!r} is not made by a Pulumi stack",
            hint="attach the outputs of a stack of AwsGpuFleet, GcpGpuFleet or AzureGpuFleet",
        )
    expires = float(outputs["expires_at"])
    if expires <= (time.time() if now is None else now):
        raise NotFleetOutputs(
            f"{source}: its nodes expired at "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(expires))} and removed themselves",
            hint="`pulumi destroy` the stack, or `pulumi up` it with a new ttl_minutes, and attach"
            " again",
        )


def attach(
    name: str,
    outputs: dict[str, Any],
    progress: Progress,
    *,
    source: dict[str, str],
    which: Callable[[str], str | None] = shutil.which,
    **pin: Any,
) -> ClusterInfo:
    """Record the stack's fleet as cluster `name`: key (0600), known_hosts, ClusterInfo, ssh
    config; host keys the nodes published themselves are read and pinned as `up` pins them.

    source: where the outputs came from (stack, cwd / outputs file), kept in the record.
    Re-attaching an adopted cluster replaces its record (after `pulumi up` changed nodes);
    a cluster gpufleet created is never replaced. `pin`: hostkeypin.read_keys' seams.
    """
    if not NAME_RE.fullmatch(name):
        raise SpecError(
            "name", f"{name!r} is not a valid cluster name", "use 1-32 of a-z, 0-9 and '-'"
        )
    what = f"stack {source['stack']}" if source.get("stack") else source.get("outputs", "outputs")
    outputs = contract_names(outputs)
    check_outputs(outputs, what)
    cloud = str(outputs["cloud"])
    at = {n["name"]: n.get("host_key_at", "") for n in outputs["nodes"] if not n.get("host_key")}
    if at:  # refused before anything is written when the channel cannot be read from here
        hostkeypin.require_channel(cloud, which)
    with state.lock(name):
        if state.known(name):
            _replace_adopted(name, progress)
        try:
            info = _record(name, outputs, source, at, progress, pin)
        except BaseException:
            state.forget(name)
            raise
    return info


def _replace_adopted(name: str, progress: Progress) -> None:
    from gpufleet.remote import head, holder

    try:
        old = state.load(name)
    except StateDamaged as e:
        raise ClusterExists(name) from e
    if not is_adopted(old):
        raise ClusterExists(name)  # gpufleet made it: `down` it first
    progress(f"cluster {name}: replacing its record with the stack's outputs")
    holder.stop(name)
    head.stop_mux(old)
    state.forget(name)


def _record(
    name: str,
    outputs: dict[str, Any],
    source: dict[str, str],
    at: dict[str, str],
    progress: Progress,
    pin: dict[str, Any],
) -> ClusterInfo:
    from gpufleet.remote import sshconfig

    d = state.cluster_dir(name)
    key, kh = d / "id_ed25519", d / "known_hosts"
    text = str(outputs["ssh_private_key"])
    state.write_private(key, text if text.endswith("\n") else text + "\n")  # OpenSSH wants it
    state.write_private(kh, str(outputs["known_hosts"]))
    info = cluster_info_from_outputs(
        outputs,
        ssh_key_path=str(key),
        known_hosts_path=str(kh),
        provider={
            ADOPTED: True,
            **source,
            "cluster_name": outputs["cluster_name"],
            "created_expires_at": outputs["expires_at"],
            "host_keys_at": {k: v for k, v in at.items() if v},
        },
    )
    # the stack's outputs pin these keys for its other users: never rotated from here
    info = info.model_copy(update={"name": name, "host_key_rotation": None})
    hostkeypin.pin_published(info, at, progress, traits(info.cloud).ssh_wait_s, **pin)
    state.save(info)
    sshconfig.write(info)
    progress(
        f"attached {len(info.nodes)} {info.cloud} nodes as cluster {name} "
        f"(head {info.head.public_ip or info.head.private_ip})"
    )
    return info


def release(info: ClusterInfo, progress: Progress) -> None:
    """`down` of an adopted cluster: stop gpufleet's own connections and forget the record;
    the stack and its nodes stay, its owner's to destroy."""
    from gpufleet.remote import head, holder

    holder.stop(info.name)
    head.stop_mux(info)
    state.forget(info.name, removed=True)
    progress(
        f"cluster {info.name}: forgotten here; its stack was not made by gpufleet and still "
        f"runs: remove its nodes with {destroy_hint(info)}"
    )
