"""Fake AWS/GCP/Azure metadata services on 127.0.0.1 that can be told to preempt a node.

What is faked: only the endpoints scripts/preempt_watch.sh reads, with the header checks the
real services make (read 2026-11-25):
  AWS IMDSv2: PUT /latest/api/token needs X-aws-ec2-metadata-token-ttl-seconds (1..21600,
    else 400); with http_tokens=required a GET without a valid X-aws-ec2-metadata-token gets
    401. spot/instance-action and events/recommendations/rebalance are 404 until set.
    https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-instance-metadata-service.html
  GCP: every request needs Metadata-Flavor: Google (else 403); wait_for_change=true hangs
    until the value differs from last_etag (at once when it already does) or timeout_sec.
    https://cloud.google.com/compute/docs/metadata/querying-metadata
  Azure IMDS: every request needs Metadata: true and an api-version (else 400).
    https://learn.microsoft.com/en-us/azure/virtual-machines/linux/scheduled-events
A path may start with /<node>/ (the sandbox's "aws=http://127.0.0.1:PORT/{node}"): each node
has its own state.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

ROOTS = ("latest", "computeMetadata", "metadata")


@dataclass
class NodeState:
    preempted_at: float | None = None  # epoch of the notice
    rebalance_at: float | None = None
    other_events: list[dict] = field(default_factory=list)  # Azure: events not for this VM
    incarnation: int = 1
    scheduled_events_enabled: bool = False  # Azure: the first call enables the service


class FakeMetadata:
    """One server for all three clouds (the path tells them apart)."""

    def __init__(self, vm_names: dict[str, str] | None = None) -> None:
        self.nodes: dict[str, NodeState] = {}
        self.vm_names = vm_names or {}
        self.cond = threading.Condition()
        self.tokens: set[str] = set()
        self.log: list[tuple[str, str, int]] = []  # (method, path, status)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                fake._serve(self, "GET")

            def do_PUT(self):
                fake._serve(self, "PUT")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # -- control -------------------------------------------------------------------------
    def start(self) -> FakeMetadata:
        self.thread.start()
        return self

    def stop(self) -> None:
        with self.cond:
            self.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FakeMetadata:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def url(self, node: str = "") -> str:
        return f"http://127.0.0.1:{self.port}" + (f"/{node}" if node else "")

    def state(self, node: str = "") -> NodeState:
        return self.nodes.setdefault(node, NodeState())

    def preempt(self, node: str = "") -> float:
        """Preempt `node` now; returns the notice's epoch."""
        with self.cond:
            st = self.state(node)
            st.preempted_at = time.time()
            st.incarnation += 1
            self.cond.notify_all()
            return st.preempted_at

    def rebalance(self, node: str = "") -> float:
        with self.cond:
            st = self.state(node)
            st.rebalance_at = time.time()
            return st.rebalance_at

    def add_other_event(self, node: str, event: dict) -> None:
        with self.cond:
            st = self.state(node)
            st.other_events.append(event)
            st.incarnation += 1

    def statuses(self, path_part: str) -> list[int]:
        return [s for _, p, s in self.log if path_part in p]

    # -- serving -------------------------------------------------------------------------
    def _serve(self, h: BaseHTTPRequestHandler, method: str) -> None:
        u = urlsplit(h.path)
        parts = u.path.strip("/").split("/")
        node = ""
        if parts and parts[0] not in ROOTS:
            node, parts = parts[0], parts[1:]
        path = "/".join(parts)
        q = {k: v[-1] for k, v in parse_qs(u.query).items()}
        if path.startswith("latest/"):
            status, body, headers = self._aws(h, method, node, path)
        elif path.startswith("computeMetadata/"):
            status, body, headers = self._gcp(h, node, path, q)
        elif path.startswith("metadata/"):
            status, body, headers = self._azure(h, node, path, q)
        else:
            status, body, headers = 404, "not found", {}
        self.log.append((method, h.path, status))
        data = body.encode()
        try:
            h.send_response(status)
            for k, v in headers.items():
                h.send_header(k, v)
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        except OSError:
            pass  # the client gave up (a timed-out hanging GET)

    def _aws(self, h, method: str, node: str, path: str):
        if path == "latest/api/token":
            if method != "PUT":
                return 405, "", {}
            ttl = h.headers.get("X-aws-ec2-metadata-token-ttl-seconds", "")
            if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                return 400, "", {}
            token = hashlib.sha256(f"{time.time()}{len(self.tokens)}".encode()).hexdigest()
            self.tokens.add(token)
            return 200, token, {"X-aws-ec2-metadata-token-ttl-seconds": ttl}
        if h.headers.get("X-aws-ec2-metadata-token") not in self.tokens:
            return 401, "", {}
        st = self.state(node)
        if path == "latest/meta-data/spot/instance-action" and st.preempted_at:
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(st.preempted_at + 120))
            return 200, json.dumps({"action": "terminate", "time": when}), {}
        if path == "latest/meta-data/events/recommendations/rebalance" and st.rebalance_at:
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(st.rebalance_at))
            return 200, json.dumps({"noticeTime": when}), {}
        return 404, "", {}

    def _gcp(self, h, node: str, path: str, q: dict[str, str]):
        if h.headers.get("Metadata-Flavor") != "Google":
            return 403, "Missing Metadata-Flavor:Google header.", {}
        if path != "computeMetadata/v1/instance/preempted":
            return 404, "", {}

        def value() -> str:
            return "TRUE" if self.state(node).preempted_at else "FALSE"

        def etag(v: str) -> str:
            return hashlib.sha1(v.encode()).hexdigest()[:16]

        if q.get("wait_for_change") == "true":
            last = q.get("last_etag")
            deadline = time.monotonic() + float(q.get("timeout_sec", "300"))
            with self.cond:
                start = value()
                while True:
                    v = value()
                    if (last and etag(v) != last) or (not last and v != start):
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self.cond.wait(min(left, 1.0))
        v = value()
        return 200, v, {"ETag": etag(v), "Content-Type": "application/text"}

    def _azure(self, h, node: str, path: str, q: dict[str, str]):
        if h.headers.get("Metadata") != "true":
            return (
                400,
                json.dumps({"error": "Bad request. Required metadata header not specified"}),
                {},
            )
        if "api-version" not in q:
            return 400, json.dumps({"error": "Bad request. api-version was not specified"}), {}
        name = self.vm_names.get(node, node or "vm0")
        if path == "metadata/instance/compute/name" and q.get("format") == "text":
            return 200, name, {}
        if path != "metadata/scheduledevents":
            return 404, "", {}
        st = self.state(node)
        first = not st.scheduled_events_enabled
        st.scheduled_events_enabled = True
        events = [] if first else list(st.other_events)
        if st.preempted_at and not first:
            events.append(
                {
                    "EventId": f"preempt-{node or 'vm0'}",
                    "EventStatus": "Scheduled",
                    "EventType": "Preempt",
                    "ResourceType": "VirtualMachine",
                    "Resources": [name],
                    "NotBefore": formatdate(st.preempted_at + 30, usegmt=True),
                    "Description": "Spot eviction",
                    "EventSource": "Platform",
                    "DurationInSeconds": -1,
                }
            )
        doc = {"DocumentIncarnation": st.incarnation, "Events": events}
        return 200, json.dumps(doc), {"Content-Type": "application/json"}
