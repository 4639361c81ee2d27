"""The provider table: each cloud's provisioner and what gpufleet may write on its machines."""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.components.exitcodes import ExitCode

# What gpufleet can write on a machine outside a run's workdir. The node state files can remove
# the machine (its own expiry reads them: images/ttl/gpufleet-expire, the sandbox watchdog);
# the host key is sshd's own: a bootstrap key is replaced on first contact (remote/hostkeys.py).
LEASE = "lease"  # a live `run` renews it; the node removes itself when it lapses
EXPIRY = "expires_at"  # `extend`'s new hard expiry
HOST_KEY = "host_key"  # a bootstrap host key (sandbox, vm, bootstrap mode), replaced there
NODE_STATE = frozenset({LEASE, EXPIRY, HOST_KEY})


@dataclass(frozen=True)
class Provider:
    """A provider's entry: where its provisioner lives, what gpufleet may write on its machines
    outside a run's workdir, and the traits that make the rest of gpufleet treat it apart.

    The rule: gpufleet never leaves on a machine it did not create anything that can remove,
    stop or change it, so a provider of machines the user already has (`ssh`) declares
    `may_write` empty. Without a lease there, a dead CLI's commands stop with their SSH
    session instead (remote/commands.py, wrap_command).
    """

    module: str
    cls: str
    may_write: frozenset[str]
    takes_options: bool = True
    description: str = ""  # one line, next to the name in shell completion
    ssh_wait_s: float = 600.0  # how long `up` waits for a new cluster's nodes to answer SSH
    bills: bool = False  # its nodes cost money: plan summary and Y/n first, --max-cost applies
    pulumi: bool = False  # made by a Pulumi stack: needs the Pulumi CLI; a stack to destroy
    catalog: bool = False  # instance types in components/catalog (GPUs, fabric, price)
    own_hosts: bool = False  # machines the user already has: their price is not gpufleet's to know
    # Where `--image` containers run: "node", each node's own docker/podman (probed over SSH
    # before the job); "host", this machine's, since the nodes are its processes (checked here
    # before anything is created: gpufleet/jobs/containerhost.py); "", never.
    containers: str = "node"
    # `run --recover`'s default mode: Provisioner.replace makes a new node of the same name
    # and index in the lost one's place (placement, address plan); False: the machines are the
    # user's (`ssh`), gpufleet cannot make another, and a lost node ends the run (or, with
    # --recover-mode restart, the job starts again on the same hosts once they answer).
    replaces: bool = True
    # A node-side watcher polls the cloud's preemption notice (components/preempt.py) and
    # SIGTERMs the ranks; "" where no cloud gives one (the sandbox's comes from a fake
    # metadata server in tests only: GPUFLEET_SANDBOX_METADATA).
    notices: str = ""

    @property
    def can_extend(self) -> bool:
        """`extend` can move its nodes' hard expiry: only where gpufleet may write it."""
        return EXPIRY in self.may_write


def _cloud(description: str, notices: str) -> Provider:
    return Provider(
        "gpufleet.provision.pulumi",
        "PulumiProvisioner",
        NODE_STATE,
        description=description,
        bills=True,
        pulumi=True,
        catalog=True,
        notices=notices,
    )


# Module paths as strings: this table sits below remote/ (Group reads may_write), the
# provisioners above it (provision.for_cloud imports them).
PROVIDERS: dict[str, Provider] = {
    "local": Provider(
        "gpufleet.provision.local",
        "LocalProvisioner",
        NODE_STATE,
        False,
        description="sandbox: every node a process on this machine",
        ssh_wait_s=30,
        containers="host",
    ),
    "vm": Provider(
        "gpufleet.provision.vm",
        "VmProvisioner",
        NODE_STATE,
        description="QEMU virtual machines on this machine",
    ),
    "ssh": Provider(
        "gpufleet.provision.ssh",
        "SSHProvisioner",
        frozenset(),
        description="your own hosts (--hosts or --inventory)",
        ssh_wait_s=60,
        own_hosts=True,
        replaces=False,
    ),
    "aws": _cloud("Amazon EC2, through Pulumi", "aws"),
    "gcp": _cloud("Google Compute Engine, through Pulumi", "gcp"),
    "azure": _cloud("Azure VMs, through Pulumi", "azure"),
}
DEFAULT_CLOUD = "local"  # `up` and `run` without --cloud


def traits(cloud: str) -> Provider:
    """A cloud's entry in PROVIDERS; an unknown cloud is a usage error."""
    p = PROVIDERS.get(cloud)
    if p is None:
        from gpufleet.core.errors import GpufleetError

        raise GpufleetError(
            f"cloud {cloud!r} has no provisioner yet",
            hint="use --cloud local",
            exit_code=ExitCode.USAGE,
        )
    return p


def may_write(cloud: str) -> frozenset[str]:
    """What gpufleet may write on this cloud's machines outside a workdir; none if unknown."""
    p = PROVIDERS.get(cloud)
    return p.may_write if p else frozenset()
