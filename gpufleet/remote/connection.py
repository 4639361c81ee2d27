"""One authenticated SSH transport to a node, refusing any host key but the pinned one."""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

import paramiko

from gpufleet.components.exitcodes import ExitCode
from gpufleet.core.errors import GpufleetError, HostKeyMismatch
from gpufleet.remote.knownhosts import host_entry, private_port

if TYPE_CHECKING:
    from gpufleet.components.clusterinfo import NodeInfo

# Handshakes under way at once in this process. Unbounded, a thousand nodes' handshakes (one
# thread each, one GIL, sshds on the same few cores in the sandbox) all progressed so slowly
# that each ran past its timeout: paramiko's start_client returns at the timeout with the key
# exchange unfinished ("No existing session"), and nearly every node failed at once (`up` of
# 1,000 sandbox nodes). Paced, each handshake takes its own time and the whole no longer:
# the work is the same, and it was CPU-bound.
HANDSHAKES_AT_ONCE = 64
_handshakes = threading.BoundedSemaphore(HANDSHAKES_AT_ONCE)

# paramiko logs failures (e.g. a tunnel refused while a node's sshd reloads its new host key)
# that gpufleet retries or reports itself, per node; without a handler Python prints them raw.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


def fingerprint(ktype: str, b64: str) -> str:
    import base64
    import hashlib

    digest = hashlib.sha256(base64.b64decode(b64)).digest()
    return f"{ktype} SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def send_eof(chan: paramiko.Channel) -> None:
    """`chan.shutdown_write()` without paramiko's race (paramiko#1115, #1705, open since 2017).

    paramiko builds the EOF under the channel's lock but sends it after releasing it; a
    command that ends at once (`true`) lets the transport thread answer the server's CLOSE
    in between, the EOF follows our CLOSE, and OpenSSH drops the whole connection ("ieof
    packet referred to nonexistent channel"): the head's, with every worker tunnelled in it.
    Here the EOF is built and sent under the lock, so the CLOSE waits for it. First, as
    paramiko's _send_user_message does, the transport's clear-to-send lock is taken once no key
    exchange is under way, and held: none can start before the EOF is out, since the transport
    thread may need the channel's lock to finish one (a window adjust) and could not while the
    EOF waited for it. paramiko never takes that lock while holding a channel's.
    """
    t = chan.transport
    if t is None:
        return
    deadline = time.monotonic() + t.clear_to_send_timeout
    while True:
        t.clear_to_send.wait(0.1)
        if not t.active:
            return  # the connection is gone: nothing to send on
        t.clear_to_send_lock.acquire()
        if t.clear_to_send.is_set():
            break
        t.clear_to_send_lock.release()
        if time.monotonic() > deadline:
            raise paramiko.SSHException("Key-exchange timed out waiting for key negotiation")
    try:
        with chan.lock:
            m = chan._send_eof()
            if m is not None:
                t._send_message(m)
    finally:
        t.clear_to_send_lock.release()


class Tunnel:
    """The head's `direct-tcpip` channel to a worker, as the socket of the worker's transport.

    One lock orders every send and the close: a send built before our CLOSE and sent after it
    would also drop the head's connection ("data packet referred to nonexistent channel").
    close() never raises: the worker transport's thread closes it on its way out, when the
    head's connection may be gone already, and a raise there printed a thread's traceback.
    """

    def __init__(self, chan: paramiko.Channel):
        self.chan = chan
        self._lock = threading.Lock()

    def send(self, data: bytes) -> int:
        with self._lock:
            if self.chan.closed:
                raise OSError("tunnel closed")
            return self.chan.send(data)

    def close(self) -> None:
        with self._lock:
            try:
                self.chan.close()
            except Exception:
                logging.getLogger(__name__).debug("closing a tunnel", exc_info=True)

    def __getattr__(self, name: str) -> Any:  # recv, settimeout, _closed, ...: the channel's
        return getattr(self.chan, name)


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
    return Tunnel(chan), host_entry(node.private_ip, private_port(node))


def open_transport(
    node: NodeInfo,
    *,
    user: str,
    pkey: paramiko.PKey,
    pinned: dict[str, dict[str, set[str]]],
    timeout: float,
    via: paramiko.Transport | None = None,
    stop: threading.Event | None = None,
) -> paramiko.Transport:
    """Connect (through `via` when given), check the host key against known_hosts,
    authenticate with the cluster key. The handshake waits for one of HANDSHAKES_AT_ONCE
    turns (not counted in `timeout`; the connection is made first, so a node that does not
    answer holds no turn); `stop` set ends the wait (EOFError)."""
    sock, entry = open_socket(node, via, timeout)
    while not _handshakes.acquire(timeout=0.2):
        if stop is not None and stop.is_set():
            sock.close()
            raise EOFError("group closed")
    try:
        return _handshake(node, sock, entry, user=user, pkey=pkey, pinned=pinned, timeout=timeout)
    finally:
        _handshakes.release()


def _handshake(
    node: NodeInfo,
    sock: Any,
    entry: str,
    *,
    user: str,
    pkey: paramiko.PKey,
    pinned: dict[str, dict[str, set[str]]],
    timeout: float,
) -> paramiko.Transport:
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
