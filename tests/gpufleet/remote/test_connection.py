"""A channel's EOF never follows its CLOSE, and a worker's tunnel closes quietly and in order."""

from __future__ import annotations

import threading
import time

import paramiko
import pytest
from paramiko.common import cMSG_CHANNEL_CLOSE, cMSG_CHANNEL_EOF

from gpufleet.remote.connection import Tunnel, send_eof


class RecordingTransport:
    """What a channel sends, in the order it reaches the wire; the EOF's trip is slow, as a
    thread preempted between building it and sending it is on a busy machine."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.clear_to_send = threading.Event()
        self.clear_to_send.set()
        self.clear_to_send_lock = threading.Lock()
        self.clear_to_send_timeout = 30.0
        self.active = True
        self.eof_built = threading.Event()

    def get_log_channel(self) -> str:
        return "test"

    def _sanitize_packet_size(self, size: int) -> int:
        return size

    def _unlink_channel(self, _chanid: int) -> None:
        pass

    def _send_user_message(self, m: paramiko.Message) -> None:
        """paramiko's way: the channel's lock released, then the clear-to-send lock taken."""
        self._slow_eof(m)
        with self.clear_to_send_lock:
            self._record(m)

    def _send_message(self, m: paramiko.Message) -> None:
        """send_eof's way: under both locks."""
        self._slow_eof(m)
        self._record(m)

    def _slow_eof(self, m: paramiko.Message) -> None:
        if m.asbytes()[:1] == cMSG_CHANNEL_EOF:
            self.eof_built.set()
            time.sleep(0.3)

    def _record(self, m: paramiko.Message) -> None:
        kind = m.asbytes()[:1]
        self.sent.append({cMSG_CHANNEL_EOF: "EOF", cMSG_CHANNEL_CLOSE: "CLOSE"}[kind])


def _channel(t: RecordingTransport) -> paramiko.Channel:
    chan = paramiko.Channel(0)
    chan._set_transport(t)
    chan._set_remote_channel(0, 1 << 20, 32768)
    return chan


def _race(shutdown) -> list[str]:
    """Our EOF against the transport thread's answer to the server's CLOSE (a command such as
    `true` ends as soon as it starts)."""
    t = RecordingTransport()
    chan = _channel(t)
    writer = threading.Thread(target=shutdown, args=(chan,))
    writer.start()
    assert t.eof_built.wait(5)
    chan._handle_close(paramiko.Message())  # the server's CLOSE, on the transport thread
    writer.join(5)
    return t.sent


def test_send_eof_reaches_the_wire_before_the_close_it_races():
    assert _race(send_eof) == ["EOF", "CLOSE"]


def test_paramikos_own_shutdown_write_loses_that_race():
    """The harness shows the bug send_eof works around (paramiko#1115, #1705): OpenSSH then
    drops the whole connection. When paramiko fixes it, send_eof can go."""
    order = _race(lambda c: c.shutdown_write())
    if order == ["EOF", "CLOSE"]:
        pytest.xfail("paramiko now orders a channel's EOF before its CLOSE")
    assert order == ["CLOSE", "EOF"]


def test_send_eof_after_the_close_sends_nothing():
    t = RecordingTransport()
    chan = _channel(t)
    chan._handle_close(paramiko.Message())  # answered with EOF and CLOSE of its own
    send_eof(chan)
    assert t.sent == ["EOF", "CLOSE"]


def test_send_eof_waits_for_a_key_exchange_under_way_then_sends():
    """During a key exchange nothing but its own messages may go out; the EOF waits for its end
    without holding the channel's lock, which the transport thread may need to finish it."""
    t = RecordingTransport()
    chan = _channel(t)
    t.clear_to_send.clear()  # a key exchange under way
    writer = threading.Thread(target=send_eof, args=(chan,))
    writer.start()
    time.sleep(0.3)
    assert t.sent == [] and chan.lock.acquire(timeout=1)  # the lock is free meanwhile
    chan.lock.release()
    t.clear_to_send.set()  # the exchange ends
    writer.join(5)
    assert t.sent == ["EOF"]


class FakeChannel:
    def __init__(self) -> None:
        self.closed = False
        self.sent: list[bytes] = []
        self.sending = threading.Event()

    def send(self, data: bytes) -> int:
        if self.closed:
            raise OSError("Socket is closed")
        self.sending.set()
        time.sleep(0.2)  # a send on its way when the close comes
        self.sent.append(data)
        return len(data)

    def close(self) -> None:
        self.closed = True
        raise EOFError  # the head's connection is gone: paramiko's Channel.close raises this

    def recv(self, n: int) -> bytes:
        return b"x" * n


def test_a_tunnel_orders_a_send_before_its_close_and_never_raises_on_close():
    chan = FakeChannel()
    tunnel = Tunnel(chan)  # type: ignore[arg-type]
    sender = threading.Thread(target=tunnel.send, args=(b"data",))
    sender.start()
    assert chan.sending.wait(5)
    tunnel.close()  # waits for the send; the EOFError stays inside
    sender.join(5)
    assert chan.sent == [b"data"] and chan.closed
    with pytest.raises(OSError):
        tunnel.send(b"more")
    assert tunnel.recv(2) == b"xx"  # the rest is the channel's
