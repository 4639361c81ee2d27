"""The connection holder: past its concurrent requests, one more is turned away unanswered."""

from __future__ import annotations

import socket
import threading

from gpufleet.core import state
from gpufleet.remote import holder


def test_a_request_over_the_holders_sessions_goes_back_to_its_client(monkeypatch, tmp_path):
    """The client gets None (and connects itself) rather than sshd's MaxSessions refusal."""
    monkeypatch.setenv("GPUFLEET_HOME", str(tmp_path))
    state.cluster_dir("c").mkdir(parents=True)
    h = object.__new__(holder.Holder)
    h.lock, h.busy = threading.Lock(), 0
    h.slots = threading.BoundedSemaphore(holder.CONCURRENT)
    served = []
    monkeypatch.setattr(h, "_serve", lambda conn, req: served.append(req["cmd"]), raising=False)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(holder.socket_path("c")))
    server.listen(4)

    def accept_one() -> None:
        conn, _ = server.accept()
        h.handle(conn)

    try:
        for taken in (0, holder.CONCURRENT):
            for _ in range(taken):
                h.slots.acquire()
            t = threading.Thread(target=accept_one)
            t.start()
            assert holder.request("c", f"cmd-{taken}", ["node-0"], None, None) is None
            t.join()
    finally:
        server.close()
    assert served == ["cmd-0"]  # a free slot serves; a full holder does not
