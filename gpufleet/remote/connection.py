"""One authenticated SSH transport to a node, refusing any host key but the pinned one."""

from __future__ import annotations

import logging
import socket
from typing import TYPE_CHECKING, Any

import paramiko

from gpufleet.components.exitcodes import ExitCode
from gpufleet.core.errors import GpufleetError, HostKeyMismatch
from gpufleet.remote.knownhosts import host_entry, private_port

if TYPE_CHECKING:
    from gpufleet.components.clusterinfo import NodeInfo

# paramiko logs failures (e.g. a tunnel refused while a node's sshd reloads its new host key)
# that gpufleet retries or reports itself, per node; without a handler Python prints them raw.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


def fingerprint(ktype: str, b64: str) -> str:
    import base64
    import hashlib

    digest = hashlib.sha256(base64.b64decode(b64)).digest()
    return f"{ktype} SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def open_socket(node: NodeInfo, via: paramiko.Transport | None, timeout: float) -> tuple[Any, str]:
    """A byte stream to the node's sshd and the known_hosts entry it is pinned under.

    Directly to its public address; or, for a node without one, a `direct-tcpip` channel
    through `via` (the head's transport) to its private address, as `ssh -J head` does: the
    head's sshd makes the TCP connection, and the SSH session inside is end-to-end.
    """
    if via is None:
        if not node.public_ip:
            raise GpufleetError(
                f"{node.name} has no public address and no head to reach it through",
                hint="check the cluster's record: `gpufleet status NAME`",
                exit_code=ExitCode.UNREACHABLE,
            )
        sock = socket.create_connection((node.public_ip, node.ssh_port), timeout=timeout)
        # Without TCP_NODELAY, Nagle + delayed ACK stall each handshake by ~40 ms.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock, host_entry(node.public_ip, node.ssh_port)
    chan = via.open_channel(
        "direct-tcpip", (node.private_ip, private_port(node)), ("127.0.0.1", 0), timeout=timeout
    )
    return chan, host_entry(node.private_ip, private_port(node))


def open_transport(
    node: NodeInfo,
    *,
    user: str,
    pkey: paramiko.PKey,
    pinned: dict[str, dict[str, set[str]]],
    timeout: float,
    via: paramiko.Transport | None = None,
) -> paramiko.Transport:
    """Connect (through `via` when given), check the host key against known_hosts,
    authenticate with the cluster key."""
    sock, entry = open_socket(node, via, timeout)
    transport = paramiko.Transport(sock)
    try:
        want = pinned.get(entry, {})
        opts: Any = transport.get_security_options()
        if want:  # ask for exactly the key types we pinned, so the server shows that one
            opts.key_types = [k for k in opts.key_types if k in want] or opts.key_types
        transport.start_client(timeout=timeout)
        key = transport.get_remote_server_key()
        expected = want.get(key.get_name(), set())
        if key.get_base64() not in expected:
            exp = fingerprint(key.get_name(), sorted(expected)[0]) if expected else None
            raise HostKeyMismatch(
                node.name, entry, exp, fingerprint(key.get_name(), key.get_base64())
            )
        transport.auth_publickey(user, pkey)
        transport.set_keepalive(30)
        return transport
    except BaseException:
        transport.close()
        raise
