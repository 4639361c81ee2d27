"""What every cloud's fleet component shares: type token, tags, keys, cloud-init, outputs."""

# No `from __future__ import annotations`: Pulumi's schema analyzer reads the output
# annotations below at run time (pulumi.provider.experimental.analyzer).

import functools
from typing import Any, ClassVar, TypedDict

import pulumi

from gpufleet.components.bootstrap import (
    HOST_KEY_CHANNEL,
    BootstrapContext,
    boot_lease_s,
    render_cloud_init,
)
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.contract import (
    OUTPUT_NAMES,
    head_address,
    hostfile_text,
    known_hosts_lines,
    ssh_config_text,
)
from gpufleet.components.errors import SpecError
from gpufleet.components.keys import cluster_keys


def fleet_tags(spec: ClusterSpec, expires_at: int | pulumi.Output[int]) -> dict[str, Any]:
    """Tags/labels for every taggable resource: valid as AWS tags, GCP labels and Azure tags.

    The expiry is a plain string when known now, an Output when the stack's state holds it.
    """
    expires: Any = (
        str(int(expires_at))
        if isinstance(expires_at, (int, float))
        else pulumi.Output.from_input(expires_at).apply(lambda v: str(int(v)))
    )
    tags: dict[str, Any] = {k: v for k, v in spec.tags.items()}
    tags.update(
        {
            "gpufleet-cluster": spec.name,
            "gpufleet-expires": expires,  # epoch seconds: a sweeper compares numbers
            "managed-by": "gpufleet",
        }
    )
    return tags


def node_user_data(
    spec: ClusterSpec,
    ssh_user: str,
    keys: Any,
    index: int,
    node_count: int,
    expires_at: pulumi.Input[int] | None,
    extra: dict[str, pulumi.Input[str]] | None = None,
) -> pulumi.Output[str]:
    """One node's cloud-init, once its keys, expiry (and deploy-time `extra` env) are known.

    Without a bootstrap host key (keys.hosts empty) the node makes its own."""
    host = keys.hosts[index] if keys.hosts else None
    extra = extra or {}
    names = list(extra)
    return pulumi.Output.all(
        keys.user.public_key_openssh,
        host.private_key_openssh if host else "",
        host.public_key_openssh if host else "",
        expires_at,
        *[extra[k] for k in names],
    ).apply(
        lambda v: render_cloud_init(
            BootstrapContext(
                cluster=spec.name,
                cloud=spec.cloud,
                instance_type=spec.instance_type or "",
                node_index=index,
                node_count=node_count,
                ssh_user=ssh_user,
                user_public_key=v[0],
                host_private_key=v[1],
                host_public_key=v[2],
                fabric=spec.fabric,
                expires_at=v[3],
                extra=dict(zip(names, v[4:], strict=True)),
                boot_lease_s=boot_lease_s(spec),
                container=spec.container,
            )
        )
    )


# The package's type tokens live in its `index` module, one class name per cloud
# (`gpufleet:index:AwsGpuFleet`); stacks made before the package know the old token.
PACKAGE = "gpufleet"


def type_token(class_name: str) -> str:
    return f"{PACKAGE}:index:{class_name}"


def legacy_type_token(cloud: str) -> str:
    return f"{PACKAGE}:{cloud}:GpuFleet"


class FleetNode(TypedDict, total=False):
    """One node of a fleet, as its `nodes` output lists it (head first)."""

    name: str
    """node-0 (the head), node-1, ..."""
    private_ip: str
    """Its address inside the fleet's network."""
    public_ip: str
    """Its public address; absent on a node reached through the head (workers by default)."""
    gpus: int
    """GPUs on the node."""
    host_key: str
    """The host public key it was booted with (`ssh-ed25519 AAAA...`); empty where the node made
    its own and publishes it (see the next field)."""
    instance_id: str
    """The cloud's id of the instance."""
    host_key_at: str
    """Where the node publishes the host key it made (instance ARN, self link or ARM id)."""


class GpufleetComponent(pulumi.ComponentResource):
    """Base of each cloud's fleet; subclasses build network and nodes, then finish()."""

    _cloud: ClassVar[str] = ""
    _refusal: SpecError | None = None  # set when the program refuses an expired fleet

    cluster_name: pulumi.Output[str]
    """The cluster's name (in every resource's tags)."""
    cloud: pulumi.Output[str]
    """aws, gcp or azure."""
    instance_type: pulumi.Output[str]
    """The nodes' instance type."""
    fabric: pulumi.Output[str]
    """The GPU network between nodes: efa, infiniband, gpudirect-tcpx(o) or none."""
    ssh_user: pulumi.Output[str]
    """The login user on every node."""
    ssh_private_key: pulumi.Output[str]
    """The cluster's SSH user key, OpenSSH PEM (secret)."""
    nodes: pulumi.Output[list[FleetNode]]
    """The nodes, head first: name, addresses, GPUs and host key of each."""
    known_hosts: pulumi.Output[str]
    """known_hosts lines pinning the bootstrap host keys (empty where nodes publish their own)."""
    expires_at: pulumi.Output[int]
    """Epoch seconds the nodes remove themselves at."""
    ssh_config: pulumi.Output[str]
    """OpenSSH config for `ssh -F FILE <cluster>`: one Host per node (`<cluster>-node-K`, the
    head also `<cluster>`), workers through the head (ProxyJump). It reads the key from
    ~/.ssh/gpufleet-<cluster> (save `ssh_private_key` there, mode 0600) and host keys from
    ~/.ssh/gpufleet-<cluster>.known_hosts (save `known_hosts` there); its header says how."""
    hostfile: pulumi.Output[str]
    """Open MPI / DeepSpeed hostfile, head first: `<private_ip> slots=<GPUs>` per node."""
    head_address: pulumi.Output[str]
    """The head's public address (SSH, and the jump host to every worker)."""

    def __init__(
        self,
        name: str,
        spec: ClusterSpec,
        opts: pulumi.ResourceOptions | None = None,
    ):
        alias = pulumi.ResourceOptions(aliases=[pulumi.Alias(type_=legacy_type_token(self._cloud))])
        super().__init__(
            type_token(type(self).__name__),
            name,
            None,
            pulumi.ResourceOptions.merge(opts, alias),
        )
        self.spec = spec
        self.expires_at = self._expiry(name, spec)
        self.tags = fleet_tags(spec, self.expires_at)
        self.login_user = spec.effective_ssh_user or "gpufleet"
        # The nodes make their own host keys where the cloud publishes them (no private key in
        # user data); config gpufleet:bootstrapHostKeys asks for the bootstrap-key path instead.
        self.own_host_keys = HOST_KEY_CHANNEL.get(spec.cloud) is not None and not pulumi.Config(
            "gpufleet"
        ).get_bool("bootstrapHostKeys")
        self.keys = cluster_keys(name, spec.nodes, self, host_keys=not self.own_host_keys)

    def _expiry(self, name: str, spec: ClusterSpec) -> pulumi.Output[int]:
        """The nodes' expiry; refused once past, since every fleet creates or keeps nodes
        (nodes >= 1): after expiry `pulumi up --refresh` finds the instances gone, and this
        program would otherwise create them again, only for them to remove themselves."""
        from gpufleet.components.expiry import EXTENDED_KEY, Expiry, refuse_expired

        fixed = spec.expires_at
        if fixed is not None:  # plain input: refused before any child is registered
            return pulumi.Output.from_input(refuse_expired(spec.name, None, int(fixed)))
        # Never the clock of this program run: a re-apply would change every node's user
        # data and tags, and EC2/GCE/Azure would replace or refuse them (issue 7 item 2).
        expiry = Expiry(f"{name}-expiry", spec.ttl_minutes, self.child())
        # `gpufleet extend` moved the nodes' own clock to this time and records it here; the
        # refusal waits for it, while tags and user data keep the creation-time expiry (changing
        # them would replace the nodes)
        extended = pulumi.Config("gpufleet").get_int(EXTENDED_KEY) or 0

        def checked(v: list[Any]) -> int:
            # Known from the state on a re-apply (also in preview); unknown on a first
            # create, where this never runs. Every tag and user data waits on it, so a
            # refusal registers no node.
            try:
                refuse_expired(spec.name, v[0], max(int(v[1]), extended))
                return int(v[1])
            except SpecError as e:
                self._refusal = e  # the Automation API's caller raises it as itself
                # a plain `pulumi up` shows this diagnostic; the CLI gets the SpecError
                pulumi.log.error(f"{e}\n  fix: {e.hint}", resource=self)
                raise

        return pulumi.Output.all(expiry.created_at, expiry.expires_at).apply(checked)

    def child(self, **kw: Any) -> pulumi.ResourceOptions:
        """Options for a child resource: parented to this component."""
        return pulumi.ResourceOptions(parent=self, **kw)

    def user_data(
        self, index: int, extra: dict[str, pulumi.Input[str]] | None = None
    ) -> pulumi.Output[str]:
        """Node `index`'s cloud-init text (plain; encode per cloud); `extra` lands in its env."""
        return node_user_data(
            self.spec, self.login_user, self.keys, index, self.spec.nodes, self.expires_at, extra
        )

    def finish(self, nodes: list[dict[str, Any]]) -> None:
        """Register the contract outputs. `nodes`: head first, values may be Outputs;
        a node's public_ip is None when it has none (workers unless spec.public_workers);
        host_key_at: the instance's reference where it publishes its own host keys."""
        spec = self.spec
        gpus = spec.gpus

        def node(i: int, v: list[Any]) -> dict[str, Any]:
            return {
                "name": f"node-{i}",
                "private_ip": v[0],
                "public_ip": v[1] or None,  # None: reached through the head
                "gpus": gpus,
                "host_key": " ".join(v[2].split()[:2]),  # "": the node made its own
                "instance_id": v[3],
                **({"host_key_at": v[4]} if self.own_host_keys else {}),
            }

        node_outputs = [
            pulumi.Output.all(
                n["private_ip"],
                n["public_ip"],
                self.keys.hosts[i].public_key_openssh if self.keys.hosts else "",
                n["id"],
                n.get("host_key_at"),
            ).apply(functools.partial(node, i))
            for i, n in enumerate(nodes)
        ]
        all_nodes = pulumi.Output.all(*node_outputs)
        outputs: dict[str, Any] = {
            "cluster_name": spec.name,
            "cloud": spec.cloud,
            "instance_type": spec.instance_type,
            "fabric": spec.fabric,
            "ssh_user": self.login_user,
            "ssh_private_key": pulumi.Output.secret(self.keys.user.private_key_openssh),
            "nodes": all_nodes,
            "known_hosts": all_nodes.apply(lambda ns: known_hosts_lines(list(ns))),
            "expires_at": self.expires_at,
            "ssh_config": all_nodes.apply(
                lambda ns: ssh_config_text(spec.name, spec.cloud, self.login_user, list(ns))
            ),
            "hostfile": all_nodes.apply(lambda ns: hostfile_text(list(ns))),
            "head_address": all_nodes.apply(lambda ns: head_address(list(ns))),
        }
        assert tuple(outputs) == OUTPUT_NAMES
        for k, v in outputs.items():
            setattr(self, k, v)
        self.register_outputs(outputs)
