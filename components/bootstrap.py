"""Renders a node's cloud-init from the images/ templates: a pure function, context -> text."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpufleet.components.imageversions import IMAGES, for_node

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ClusterSpec, ContainerSpec


@dataclass(frozen=True)
class BootstrapContext:
    """Everything one node's cloud-init depends on (plain values, no Pulumi outputs)."""

    cluster: str
    cloud: str
    instance_type: str
    node_index: int
    node_count: int  # only one node vs several shows (NCCL_NET): growing 2 -> N changes nothing
    ssh_user: str
    user_public_key: str
    # A bootstrap host key from the stack (user data carries it, replaced on first contact);
    # "" where the node makes its own and publishes the public key (HOST_KEY_CHANNEL).
    host_private_key: str = ""
    host_public_key: str = ""
    fabric: str = "none"
    expires_at: float | None = None
    extra: dict[str, str] = field(default_factory=dict)  # more node env (e.g. Azure identity)
    boot_lease_s: int | None = None  # a lease armed at first boot from the node's clock (`run`)
    container: ContainerSpec | None = None  # a registry image is pulled at boot (boot_pull)


@functools.cache
def _template():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(IMAGES / "templates"),
        undefined=jinja2.StrictUndefined,  # a missing value is an error, never an empty string
        keep_trailing_newline=True,
        autoescape=False,  # YAML, not HTML
    )
    # A YAML double-quoted scalar (JSON's string syntax is valid YAML; no HTML escaping).
    env.filters["yamlstr"] = lambda v: json.dumps(str(v), ensure_ascii=False)
    return env.get_template("cloud-init.yaml.j2")


def node_copy(script: str) -> str:
    """A step as the node gets it: without comment-only lines (shebangs stay).

    The commented source lives in images/steps; dropping the comments keeps the gzipped user
    data well inside EC2's 16 KB limit as the recipe grows.
    """
    lines = script.splitlines(keepends=True)
    return "".join(
        line for line in lines if line.startswith("#!") or not line.lstrip().startswith("#")
    )


def step_files() -> list[tuple[str, str]]:
    """(file name, text) of the recipe: the shared lib, the runner and every step, in order."""
    return list(_shipped_steps(IMAGES / "steps"))


# Shipped files, read once per process: a plan renders 512 nodes' cloud-init.
@functools.cache
def _shipped_steps(steps: Path) -> tuple[tuple[str, str], ...]:
    return tuple((p.name, node_copy(p.read_text())) for p in sorted(steps.glob("*.sh")))


@functools.cache
def _shipped_text(path: Path) -> str:
    return path.read_text()


def node_env(ctx: BootstrapContext) -> dict[str, str]:
    """/etc/gpufleet/env: who the node is, what it has, and the pinned versions for the steps."""
    from gpufleet.components.catalog import lookup
    from gpufleet.components.errors import CatalogError
    from gpufleet.components.fabric import library_paths

    try:
        it = lookup(ctx.cloud, ctx.instance_type)
        gpus, nvswitch = it.gpus, it.nvswitch
    except CatalogError:  # local/ssh nodes, or a type the catalog does not know: no GPU steps
        gpus, nvswitch = 0, False
    versions = for_node(ctx.cloud, ctx.fabric)
    env = {
        "GPUFLEET_CLUSTER": ctx.cluster,
        "GPUFLEET_CLOUD": ctx.cloud,
        "GPUFLEET_NODE": f"node-{ctx.node_index}",
        "GPUFLEET_NODE_INDEX": str(ctx.node_index),
        "GPUFLEET_INSTANCE_TYPE": ctx.instance_type,
        "GPUFLEET_GPUS": str(gpus),
        "GPUFLEET_NVSWITCH": "1" if nvswitch else "0",
        "GPUFLEET_FABRIC": ctx.fabric,
        "GPUFLEET_NCCL_LIBRARY_PATH": ":".join(library_paths(ctx.fabric)),
        "GPUFLEET_EXPIRES_AT": str(int(ctx.expires_at)) if ctx.expires_at else "",
        "GPUFLEET_TTL_ACTION": TTL_ACTION.get(ctx.cloud, "poweroff"),
        "GPUFLEET_VERSION_SET": versions.name,
        "GPUFLEET_PINS": ",".join(versions.pins),
    }
    if expiry_tag(ctx):
        env["GPUFLEET_EXPIRY_TAG"] = expiry_tag(ctx)
    env.update(versions.env())
    env.update(ctx.extra)
    return env


def render_cloud_init(ctx: BootstrapContext) -> str:
    """The #cloud-config text node `ctx.node_index` boots with."""
    import shlex

    from gpufleet.components.catalog import instance_nccl_env

    env = node_env(ctx)
    nccl = instance_nccl_env(ctx.cloud, ctx.instance_type, ctx.fabric, ctx.node_count)
    return _template().render(
        cluster=ctx.cluster,
        cloud=ctx.cloud,
        instance_type=ctx.instance_type,
        node_name=f"node-{ctx.node_index}",
        fabric=ctx.fabric,
        ssh_user=ctx.ssh_user,
        user_public_key=ctx.user_public_key.strip(),
        host_private_key=ctx.host_private_key.strip(),
        host_public_key=ctx.host_public_key.strip(),
        env_text="".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items()).rstrip("\n"),
        nccl_text="".join(f"{k}={v}\n" for k, v in nccl.items()).rstrip("\n"),
        steps=step_files(),
        sshd_dropin=sshd_dropin(),
        sshd_dropin_path=SSHD_DROPIN_PATH,
        expire_script=node_copy(_shipped_text(IMAGES / "ttl" / "gpufleet-expire")).rstrip("\n")
        if ctx.expires_at or expiry_tag(ctx)
        else "",
        boot_lease_s=int(ctx.boot_lease_s)
        if ctx.boot_lease_s and (ctx.expires_at or expiry_tag(ctx))
        else 0,
        **boot_pull(ctx),
        **preempt_watch(ctx),
        guest_files=(CLOUD_GUEST_FILES if ctx.host_private_key else OWN_KEY_GUEST_FILES).get(
            ctx.cloud, ()
        ),
    )


SSHD_DROPIN_PATH = "/etc/ssh/sshd_config.d/10-gpufleet.conf"


def sshd_dropin() -> str:
    """gpufleet's sshd settings on the nodes it creates (images/ssh/10-gpufleet.conf): the
    limits a cluster's fan-out reaches, raised where OpenSSH's defaults are too low."""
    return node_copy(_shipped_text(IMAGES / "ssh" / "10-gpufleet.conf")).rstrip("\n")


def boot_pull(ctx: BootstrapContext) -> dict[str, str]:
    """The template's values for the boot pull of ctx.container (pull_boot "" for none)."""
    from gpufleet.components import containerpull
    from gpufleet.components.containerimage import parse

    c = ctx.container
    boot = c and containerpull.boot_pull(
        parse(c.image), runtime=c.runtime, stall_s=c.pull_stall_s, attempts=c.pull_attempts
    )
    return {
        "pull_boot": boot or "",
        "pull_script": node_copy(containerpull.boot_script(parse(c.image))).rstrip("\n")
        if c and boot
        else "",
        "pull_script_path": containerpull.BOOT_SCRIPT_PATH,
        "pull_state_dir": containerpull.BOOT_STATE_DIR,
    }


def preempt_watch(ctx: BootstrapContext) -> dict[str, str]:
    """The template's values for the preemption watcher (preempt_exec "" for none): on the
    clouds with a notice (components/preempt.py), never on an image bake's builder (its unit
    would be baked into every node), `--cloud vm`, local or BYO hosts (no metadata service)."""
    from gpufleet.components import preempt

    on = ctx.cloud in preempt.CLOUDS and ctx.extra.get("GPUFLEET_BAKE") != "1"
    return {
        "preempt_exec": preempt.unit_exec(ctx.cloud) if on else "",
        "preempt_script": preempt.node_script(ctx.cloud).rstrip("\n") if on else "",
        "preempt_script_path": preempt.SCRIPT_PATH,
    }


# What the node's own timer does at its expiry or lease (images/ttl/gpufleet-expire); the rest
# power off (AWS: terminate, the launch template's shutdown behaviour). GCP: delete itself
# through the Compute API, never a poweroff, which would clear GCE's termination timestamp and
# leave a stopped VM billed (limit-vm-runtime docs); GCE's terminationTime stays the hard
# expiry. Azure: delete itself through ARM (a stopped VM is billed).
TTL_ACTION: dict[str, str] = {"gcp": "gce-delete", "azure": "arm-delete"}

# Clouds whose nodes read their hard expiry from their own instance tag (AWS: IMDS
# tags/instance/<key>, components/aws/fleet.py; Azure: IMDS compute/tagsList), not from user
# data: a TTL change re-tags the instance in place, where a user data change makes a new
# launch template version and a new instance (Azure: customData is set only at creation).
EXPIRY_TAG: dict[str, str] = {"aws": "gpufleet-expires", "azure": "gpufleet-expires"}


def expiry_tag(ctx: BootstrapContext) -> str:
    """The instance tag a node reads its hard expiry from; "" for an image bake's builder,
    which gets no expiry timer (it would be baked into every node)."""
    return "" if ctx.extra.get("GPUFLEET_BAKE") == "1" else EXPIRY_TAG.get(ctx.cloud, "")


# Where a cloud's node publishes the host public keys it made itself, a channel that carries no
# secret and that only the cloud's API reads (gpufleet/provision/hostkeychannels.py reads it):
# GCP: google-guest-agent writes guest attributes hostkeys/<type> (what `gcloud compute ssh`
# pins; needs metadata enable-guest-attributes); AWS and Azure: cloud-init's keys_to_console
# prints them on the serial console (EC2 GetConsoleOutput; Azure boot diagnostics' serial log).
HOST_KEY_CHANNEL: dict[str, str] = {
    "gcp": "guest-attributes",
    "aws": "console",
    "azure": "serial-log",
}

# Files a cloud's guest needs before its own agents start (cloud-init's write_files runs in
# cloud-init.service, before network-online.target, which google-guest-agent waits for).
CLOUD_GUEST_FILES: dict[str, tuple[tuple[str, str], ...]] = {
    # With a bootstrap key only: google-guest-agent regenerates /etc/ssh/ssh_host_* on first
    # boot unless told not to, which would replace the pinned host key (guest-agent README,
    # "Instance Setup").
    "gcp": (("/etc/default/instance_configs.cfg", "[InstanceSetup]\nset_host_keys = false\n"),),
}

# The same, for a node that makes its own host key: on GCP the agent's keys are the node's, and
# it publishes them (hostkeys/) only where it makes them; said outright, whatever the image's
# instance_configs.cfg.distro says (instance_configs.cfg overrides it: guest-agent README).
# Either file replaces a custom image's instance_configs.cfg whole (the agent reads no drop-in
# folder, only that file over .distro): settings the image keeps there are lost, those in
# .distro stay.
OWN_KEY_GUEST_FILES: dict[str, tuple[tuple[str, str], ...]] = {
    "gcp": (("/etc/default/instance_configs.cfg", "[InstanceSetup]\nset_host_keys = true\n"),),
}

# Node env a cloud's component adds at deploy time (values known only then), by name.
CLOUD_NODE_ENV: dict[str, tuple[str, ...]] = {
    # not AZURE_CLIENT_ID: azure-identity reads that name, so user code on the node would
    # authenticate as the node's self-delete identity
    "azure": ("GPUFLEET_AZURE_CLIENT_ID", "AZURE_SUBSCRIPTION_ID", "AZURE_RESOURCE_GROUP"),
}


def boot_lease_s(spec: ClusterSpec) -> int | None:
    """The spec's boot lease in seconds, or None (clusters of `up` and stacks have none)."""
    return spec.boot_lease_minutes * 60 if spec.boot_lease_minutes else None


def placeholder_context(
    spec: ClusterSpec, index: int, expires_at: float | None
) -> BootstrapContext:
    """A node's context with every secret and deploy-time value shown as a named placeholder."""
    node, own = f"node-{index}", spec.cloud in HOST_KEY_CHANNEL
    return BootstrapContext(
        cluster=spec.name,
        cloud=spec.cloud,
        instance_type=spec.instance_type or "",
        node_index=index,
        node_count=spec.nodes,
        ssh_user=spec.effective_ssh_user or "gpufleet",
        user_public_key="<cluster user public key, generated by the stack>",
        # none where the node makes its own (HOST_KEY_CHANNEL)
        host_private_key="" if own else f"<{node} host private key, generated by the stack>",
        host_public_key="" if own else f"<{node} host public key, generated by the stack>",
        fabric=spec.fabric,
        expires_at=expires_at,
        extra={k: f"<{k} at deploy time>" for k in CLOUD_NODE_ENV.get(spec.cloud, ())},
        boot_lease_s=boot_lease_s(spec),
        container=spec.container,
    )
