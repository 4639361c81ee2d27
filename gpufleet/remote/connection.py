"""One authenticated SSH transport to a node, refusing any host key but the pinned one."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

import paramiko

from gpufleet.errors import HostKeyMismatch
from gpufleet.remote.knownhosts import host_entry

if TYPE_CHECKING:
    from components.spec import NodeInfo


def fingerprint(ktype: str, b64: str) -> str:
    import base64
    import hashlib

    digest = hashlib.sha256(base64.b64decode(b64)).digest()
    return f"{ktype} SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def open_transport(
    node: NodeInfo,
    *,
    user: str,
    pkey: paramiko.PKey,
    pinned: dict[str, dict[str, str]],
    timeout: float,
) -> paramiko.Transport:
    """Connect, check the host key against known_hosts, authenticate with the cluster key."""
    sock = socket.create_connection((node.public_ip, node.ssh_port), timeout=timeout)
    # Without TCP_NODELAY, Nagle + delayed ACK stall each handshake by ~40 ms.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    transport = paramiko.Transport(sock)
    try:
        entry = host_entry(node.public_ip, node.ssh_port)
        want = pinned.get(entry, {})
        opts: Any = transport.get_security_options()
        if want:  # ask for exactly the key types we pinned, so the server shows that one
            opts.key_types = [k for k in opts.key_types if k in want] or opts.key_types
        transport.start_client(timeout=timeout)
        key = transport.get_remote_server_key()
        expected = want.get(key.get_name())
        if expected != key.get_base64():
            exp = fingerprint(key.get_name(), expected) if expected else None
            raise HostKeyMismatch(
                node.name, entry, exp, fingerprint(key.get_name(), key.get_base64())
            )
        transport.auth_publickey(user, pkey)
        transport.set_keepalive(30)
        return transport
    except BaseException:
        transport.close()
        raise
