"""Parameters several commands share: one declaration, one help text, one completion."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli import completers

ClusterName = Annotated[
    str, typer.Argument(help="cluster name", autocompletion=completers.clusters)
]
Cloud = Annotated[
    str,
    typer.Option(
        help=" | ".join(completers.CLOUDS) + " (any case)",
        autocompletion=completers.choices(completers.CLOUDS),
    ),
]
Nodes = Annotated[
    int | None, typer.Option(help="number of nodes, head included (default 2; ssh: the hosts)")
]
InstanceType = Annotated[
    str | None,
    typer.Option(
        "--instance-type",
        "-t",
        help="GPU instance type (see `gpufleet catalog`)",
        autocompletion=completers.instance_types,
    ),
]
Region = Annotated[
    str | None, typer.Option(help="cloud region (default: the cloud's; not on local)")
]
Zone = Annotated[str | None, typer.Option(help="zone within the region (default: the cloud picks)")]
Spot = Annotated[bool, typer.Option(help="spot/preemptible capacity (clouds only)")]
PublicWorkers = Annotated[
    bool, typer.Option(help="a public address on every node, not only the head")
]
Hosts = Annotated[str | None, typer.Option(help="cloud=ssh: your hosts, [user@]addr[:port],...")]
Inventory = Annotated[
    Path | None, typer.Option(help="cloud=ssh: inventory YAML (hosts, ports, GPUs, keys)")
]
SshUser = Annotated[str | None, typer.Option(help="cloud=ssh: login user")]
SshKey = Annotated[
    str | None, typer.Option(help="cloud=ssh: private key (default ~/.ssh/id_ed25519)")
]
AcceptHostKeys = Annotated[
    bool, typer.Option(help="cloud=ssh: pin the host keys the hosts present now (prints them)")
]
Image = Annotated[
    str | None,
    typer.Option(
        "--image",
        help="run every rank (and --setup) in this container image: [registry/]repo[:tag], "
        "or oci-archive:PATH / docker-archive:PATH (a file here, copied to every node)",
    ),
]
Runtime = Annotated[
    str | None,
    typer.Option(
        help="the nodes' container runtime: auto (docker, else podman) | docker | podman",
        autocompletion=completers.choices(completers.RUNTIMES),
    ),
]
RegistryId = Annotated[
    str | None,
    typer.Option(
        "--registry-id",
        help="azure: the ACR registry's resource id, for the nodes' AcrPull grant",
    ),
]
Mounts = Annotated[
    list[str],
    typer.Option(
        "--mount",
        metavar="SRC:DST[:ro]",
        help="also mount this node path in the container (repeat)",
    ),
]
Recover = Annotated[
    int | None,
    typer.Option(
        "--recover",
        metavar="N",
        help="when a node is lost or preempted, recover and start the job again, at most N "
        "times; the job resumes from $GPUFLEET_CHECKPOINT_DIR (docs/recovery.md)",
    ),
]
RecoverMode = Annotated[
    str | None,
    typer.Option(
        "--recover-mode",
        help="replace (only the lost nodes, the default) | relaunch (every node) | restart "
        "(the same nodes) | none",
        autocompletion=completers.choices(completers.RECOVER_MODES),
    ),
]
RecoverOnExit = Annotated[
    list[int],
    typer.Option(
        "--recover-on-exit",
        metavar="CODE",
        help="a rank exiting with this code also starts a recovery (repeat; with --recover)",
    ),
]
CheckpointDir = Annotated[
    str | None,
    typer.Option(
        "--checkpoint-dir",
        metavar="PATH|URL",
        help="$GPUFLEET_CHECKPOINT_DIR: a path on the nodes or a bucket URL the job writes "
        "itself (default: .gpufleet/checkpoints/RUN in the workdir, the head's copied to "
        "every node before a restart)",
    ),
]
Elastic = Annotated[
    str | None,
    typer.Option(
        "--elastic",
        metavar="MIN:MAX",
        help="torchrun's elastic mode: --nnodes MIN:MAX, for jobs written for it",
    ),
]
MaxRestarts = Annotated[
    int | None,
    typer.Option("--max-restarts", metavar="N", help="torchrun's own restarts of the workers"),
]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="create cloud nodes without asking (CI)")]
NoPolicy = Annotated[
    bool,
    typer.Option(
        "--no-policy",
        help="clouds: create the cluster without gpufleet's policy pack (pulumi-policy, "
        "prepared once with pip); default: the pack runs",
    ),
]


def policy_option(cloud: str, no_policy: bool) -> dict[str, object]:
    """--no-policy as a provisioner option; refused where no Pulumi stack runs the pack."""
    if not no_policy:
        return {}
    from gpufleet.components.errors import SpecError
    from gpufleet.provision import traits

    if not traits(cloud).pulumi:
        raise SpecError("no_policy", f"--cloud {cloud} runs no policy pack", "drop --no-policy")
    return {"policy": False}
