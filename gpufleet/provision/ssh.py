"""`--cloud ssh`: machines you already own, from an inventory; nothing is created or removed.

Host keys are pinned before any login: taken from the inventory (`host_key`), or, only with
an explicit `--accept-host-keys`, read once from each host and printed as fingerprints for
the user to compare. `down` forgets the cluster and touches nothing on the hosts.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo, node_names
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.errors import SpecError
from gpufleet.components.exitcodes import ExitCode
from gpufleet.core import state
from gpufleet.core.errors import GpufleetError
from gpufleet.provision import Progress

HOST_KEY_TYPE = "ssh-ed25519"  # the one type gpufleet pins and its ssh config accepts
INVENTORY_FIELDS = ("address", "port", "gpus", "host_key", "private_ip", "workdir")


@dataclass(frozen=True)
class Host:
    """One machine of the inventory."""

    address: str
    port: int = 22
    gpus: int = 0
    host_key: str | None = None  # "ssh-ed25519 AAAA..."
    private_ip: str | None = None  # what the other hosts reach it at (default: address)
    workdir: str = "gpufleet"


@dataclass(frozen=True)
class Inventory:
    hosts: list[Host]
    user: str | None = None
    key: str | None = None  # private key file; default ~/.ssh/id_ed25519
    python: str = "python3"
    env: dict[str, str] = field(default_factory=dict)

    def spec_hosts(self) -> list[str]:
        return [f"{h.address}:{h.port}" for h in self.hosts]


def parse_host(text: str) -> tuple[str | None, Host]:
    """'[user@]address[:port]' (IPv6 as [addr]:port) -> (user, Host)."""
    user, _, rest = text.strip().rpartition("@")
    if rest.startswith("["):
        addr, _, port = rest[1:].partition("]")
        port = port.lstrip(":")
    elif rest.count(":") == 1:
        addr, _, port = rest.partition(":")
    else:
        addr, port = rest, ""
    if not addr:
        raise SpecError("hosts", f"{text!r} names no host", "write it like ubuntu@10.0.0.5:22")
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise SpecError("hosts", f"{text!r} has port {port!r}", "use a port from 1 to 65535")
    return user or None, Host(address=addr, port=int(port or 22))


def inventory_from_flag(text: str, user: str | None, key: str | None) -> Inventory:
    """`--hosts a,b:2222,ubuntu@c` -> Inventory (one user for all)."""
    parsed = [parse_host(t) for t in text.split(",") if t.strip()]
    users = {u for u, _ in parsed if u} | ({user} if user else set())
    if len(users) > 1:
        raise SpecError("hosts", f"several users {sorted(users)}", "use one user for every host")
    return Inventory(hosts=[h for _, h in parsed], user=next(iter(users), None), key=key)


def load_inventory(path: Path, user: str | None = None, key: str | None = None) -> Inventory:
    """An inventory YAML file: `user`, `key`, `python`, `env`, and `hosts:` (strings like
    --hosts, or mappings with address, port, gpus, host_key, private_ip, workdir)."""
    import yaml

    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise SpecError("inventory", f"cannot read {path}: {e}", "pass a YAML file") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("hosts"), list) or not doc["hosts"]:
        raise SpecError("inventory", f"{path} has no `hosts:` list", "list one entry per host")
    hosts = []
    for i, entry in enumerate(doc["hosts"]):
        if isinstance(entry, str):
            u, h = parse_host(entry)
            if u and u != (user or doc.get("user")):
                raise SpecError(f"inventory.hosts[{i}]", f"user {u!r}", "set `user:` once")
            hosts.append(h)
            continue
        unknown = sorted(set(entry) - set(INVENTORY_FIELDS)) if isinstance(entry, dict) else []
        if not isinstance(entry, dict) or "address" not in entry or unknown:
            raise SpecError(
                f"inventory.hosts[{i}]",
                f"unknown keys {unknown}" if unknown else "needs an address",
                "known keys: " + ", ".join(INVENTORY_FIELDS),
            )
        try:
            hosts.append(Host(**{**entry, "port": int(entry.get("port", 22))}))
        except (TypeError, ValueError) as e:
            raise SpecError(f"inventory.hosts[{i}]", str(e), "fix the entry") from None
    return Inventory(
        hosts=hosts,
        user=user or doc.get("user"),
        key=key or doc.get("key"),
        python=str(doc.get("python", "python3")),
        env={str(k): str(v) for k, v in (doc.get("env") or {}).items()},
    )


def fingerprint(host_key: str) -> str:
    from gpufleet.remote.connection import fingerprint as fp

    ktype, b64 = host_key.split()[:2]
    return fp(ktype, b64)


def fetch_host_key(host: Host, timeout: float = 10.0) -> str:
    """The host's ed25519 key as it presents it now (trust on this one explicit use)."""
    import paramiko

    try:
        sock = socket.create_connection((host.address, host.port), timeout=timeout)
    except OSError as e:
        raise GpufleetError(
            f"{host.address}:{host.port} is not reachable: {e}",
            hint="check the address and port, and that sshd runs there",
            exit_code=ExitCode.UNREACHABLE,
        ) from None
    transport = paramiko.Transport(sock)
    try:
        opts: Any = transport.get_security_options()
        opts.key_types = [HOST_KEY_TYPE]
        try:
            transport.start_client(timeout=timeout)
        except paramiko.SSHException as e:
            raise GpufleetError(
                f"{host.address}:{host.port} offers no {HOST_KEY_TYPE} host key ({e})",
                hint="generate one there: `sudo ssh-keygen -A`",
                exit_code=ExitCode.USAGE,
            ) from None
        key = transport.get_remote_server_key()
        return f"{key.get_name()} {key.get_base64()}"
    finally:
        transport.close()


class SSHProvisioner:
    """Machines the user already has: `up` records and checks them, `down` forgets them."""

    def __init__(
        self,
        inventory: Inventory | None = None,
        accept_host_keys: bool = False,
        say: Progress | None = None,
    ):
        self.inventory = inventory
        self.accept_host_keys = accept_host_keys
        self.say = say

    def up(self, spec: ClusterSpec, progress: Progress) -> ClusterInfo:
        inv = self.inventory or inventory_from_flag(",".join(spec.hosts), spec.ssh_user, None)
        if len(inv.hosts) != spec.nodes:
            raise SpecError("hosts", f"{len(inv.hosts)} hosts for {spec.nodes} nodes", "match them")
        key = Path(os.path.expanduser(inv.key or "~/.ssh/id_ed25519")).resolve()
        if not key.is_file():
            raise SpecError("key", f"no private key at {key}", "pass --ssh-key PATH")
        user = spec.ssh_user or inv.user or _local_user()
        unpinned = [h for h in inv.hosts if not h.host_key]
        if unpinned and not self.accept_host_keys:
            listed = ", ".join(f"{h.address}:{h.port}" for h in unpinned)
            raise SpecError(
                "host_key",
                f"no pinned host key for {listed}",
                "add `host_key: ssh-ed25519 AAAA...` per host to the inventory "
                "(`ssh-keyscan -t ed25519 -p PORT HOST`), or pass --accept-host-keys "
                "to take the keys the hosts present now and compare the printed fingerprints",
            )
        say = self.say or progress
        nodes = []
        for name, h in zip(node_names(len(inv.hosts)), inv.hosts, strict=True):
            host_key = h.host_key
            if not host_key:
                host_key = fetch_host_key(h)
                say(f"accepted {name} {h.address}:{h.port} host key {fingerprint(host_key)}")
            nodes.append(
                NodeInfo(
                    name=name,
                    private_ip=h.private_ip or h.address,
                    public_ip=h.address,
                    ssh_port=h.port,
                    gpus=h.gpus,
                    workdir=h.workdir,
                    host_key=" ".join(host_key.split()[:2]),
                )
            )
        cdir = state.cluster_dir(spec.name)
        cdir.mkdir(parents=True, exist_ok=True)
        known_hosts = cdir / "known_hosts"
        info = ClusterInfo(
            name=spec.name,
            cloud="ssh",
            instance_type="ssh",
            nodes=nodes,
            ssh_user=user,
            ssh_key_path=str(key),
            known_hosts_path=str(known_hosts),
            fabric="none",
            python=inv.python,
            env=inv.env,
            expires_at=None,  # nothing of ours runs there to expire; `down` only forgets
            provider={"hosts": [f"{h.address}:{h.port}" for h in inv.hosts]},
        )
        from gpufleet.remote import knownhosts

        # Pinned at both addresses: gpufleet connects to the public one, the launchers on the
        # head (the run's internal ssh config) to the private one.
        knownhosts.write(known_hosts, knownhosts.render(info.nodes))
        progress(f"recorded {len(nodes)} hosts (nothing is created on them)")
        return info

    def down(self, info: ClusterInfo, progress: Progress) -> None:
        # gpufleet writes only in each host's workdir there (provision.PROVIDERS: may_write none);
        # of that, the relay keys a sync handed the head (a copy of the user's key) go now.
        from gpufleet.remote.head import remove_relay

        why = remove_relay(info)
        if why:
            progress(
                f"{info.nodes[0].name}: gpufleet's relay keys not removed from its workdir ({why})"
            )
        progress(
            f"forgetting {len(info.nodes)} hosts of {info.name}; "
            "nothing on them was changed outside their workdirs"
        )

    def extend(self, info: ClusterInfo, expires_at: float) -> None:
        """Refused: nothing of gpufleet expires on hosts the user owns (may_write is empty)."""
        from gpufleet.core.errors import HostsNotOurs

        raise HostsNotOurs(info.name, info.cloud, "expiry")

    def replace(self, info: ClusterInfo, nodes: list[str], progress: Progress) -> ClusterInfo:
        """Never: the hosts are the user's (Provider.replaces is False)."""
        from gpufleet.core.errors import CannotReplace

        raise CannotReplace(info.name, info.cloud, nodes)

    def status(self, info: ClusterInfo) -> dict[str, str]:
        out = {}
        for n in info.nodes:
            try:
                socket.create_connection((n.public_ip, n.ssh_port), timeout=3).close()
                out[n.name] = "reachable"
            except OSError:
                out[n.name] = "unreachable"
        return out


def _local_user() -> str:
    import getpass

    return getpass.getuser()


def from_flags(
    cloud: str,
    hosts: str | None,
    inventory: Path | None,
    ssh_user: str | None,
    ssh_key: str | None,
    accept_host_keys: bool,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The BYO flags -> (ClusterSpec fields, provisioner options); refused off --cloud ssh."""
    given = [f for f, v in (("--hosts", hosts), ("--inventory", inventory)) if v]
    given += ["--ssh-key"] * bool(ssh_key) + ["--accept-host-keys"] * accept_host_keys
    if cloud != "ssh":
        if given:
            raise SpecError(given[0].lstrip("-"), "only applies to --cloud ssh", "drop it")
        return {}, {}
    if bool(hosts) == bool(inventory):
        raise SpecError(
            "hosts",
            "cloud=ssh needs the hosts" if not hosts else "--hosts and --inventory both given",
            "pass --hosts user@h1,h2:2222,... or --inventory hosts.yaml (one of them)",
        )
    inv = (
        load_inventory(inventory, ssh_user, ssh_key)
        if inventory
        else inventory_from_flag(hosts or "", ssh_user, ssh_key)
    )
    fields = {"hosts": inv.spec_hosts(), "nodes": len(inv.hosts), "ssh_user": inv.user}
    return fields, {"inventory": inv, "accept_host_keys": accept_host_keys}
