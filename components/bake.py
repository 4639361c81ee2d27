"""What every cloud's ImageBake shares: a builder VM runs the recipe, its disk becomes an image.

No cloud API says when cloud-init and the recipe are done, so `BuilderReady` asks the builder
itself: it connects over SSH (the host key pinned, as everywhere), waits for the readiness
marker (failing at once, with the log, when a step failed), seals the builder (per-node state,
host keys and logins removed, disk synced) and powers it off, then waits until the builder no
longer answers. Every capture depends on it. The capture reads a snapshot or the stopping
instance, never a disk still being written, and is kept when the bake stack is destroyed
(retain_on_delete), so `gpufleet image bake` removes the builder and its network right after.
The image carries no expiry tag: it is meant to outlive the bake.

The builder has a node's backstop, in case the CLI dies mid-bake: an expiry fixed at the first
apply (components/expiry.py, BAKE_HOURS), armed in its user data through the same
gpufleet-expire timer, and each cloud's own (AWS: terminate on an instance-initiated shutdown;
GCP: terminationTime with DELETE, until the seal stops it; Azure: the VM deletes itself through
its identity). The seal removes the timer and its state, so no node made from the image inherits
them.
"""

from __future__ import annotations

import shlex
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi.dynamic

from gpufleet.components.errors import GpufleetError
from gpufleet.components.fleet import fleet_tags, node_user_data
from gpufleet.components.keys import cluster_keys

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ClusterSpec

READY_TIMEOUT_S = 90 * 60  # a driver install with a reboot, on a slow mirror
DOWN_TIMEOUT_S = 10 * 60
# The builder's expiry, counted from the first apply: READY_TIMEOUT_S, the capture and the
# removal take far less; a builder whose CLI died goes at this time at the latest.
BAKE_HOURS = 3
MARKER = "/var/lib/gpufleet/ready.json"
STEPS_LOG = "/var/log/gpufleet/steps.log"  # run-steps.sh: "<step> ok|failed|... <seconds>"
RECIPE_LOG = "/var/log/gpufleet/recipe.log"

# Leave the image clean: the next boot is a new node with its own cloud-init, env, host key and
# login (cloud-init only appends to authorized_keys, so the builder's key is removed here).
SEAL_STEPS: tuple[str, ...] = (
    "cloud-init clean --logs --machine-id",
    "rm -f /etc/gpufleet/env /etc/gpufleet/nccl.env /var/lib/gpufleet/ready.json"
    " /etc/ssh/ssh_host_* /root/.ssh/authorized_keys /home/*/.ssh/authorized_keys",
    "sync",
)
# The builder's own expiry (its timer, and any lease or extend file) must not reach the image:
# a node made from it writes its own from its cloud-init, and a stale lease would remove it.
SEAL_EXPIRY: tuple[str, ...] = (
    "systemctl disable gpufleet-ttl.timer 2>/dev/null || true",
    "rm -f /etc/systemd/system/gpufleet-ttl.service /etc/systemd/system/gpufleet-ttl.timer"
    " /usr/local/sbin/gpufleet-expire /var/lib/gpufleet/lease /var/lib/gpufleet/expires_at",
)
# A builder the seal leaves running (AWS: the capture stops it) keeps a backstop the image does
# not get: a transient timer, which lives in /run only.
SEALED_BACKSTOP_S = 30 * 60
SEALED_BACKSTOP = (
    f"systemd-run --unit=gpufleet-sealed-expire --on-active={SEALED_BACKSTOP_S} systemctl poweroff"
)


def seal_command(before: tuple[str, ...] = (), poweroff: bool = True) -> str:
    """One root shell that seals the builder (cloud steps `before` first) and powers it off,
    or (poweroff=False) leaves it running with a transient backstop for the capture to stop."""
    last = ("systemctl poweroff",) if poweroff else (SEALED_BACKSTOP,)
    script = "; ".join(("set -e", *before, *SEAL_EXPIRY, *SEAL_STEPS, *last))
    return "sudo -n sh -c " + shlex.quote(script)


def probe_command(marker: str = MARKER, steps_log: str = STEPS_LOG, log: str = RECIPE_LOG) -> str:
    """Prints `ready` + the marker, `failed` + the step log and recipe log tail, or `waiting`."""
    m, s, r = (shlex.quote(p) for p in (marker, steps_log, log))
    return (
        f"if [ -s {m} ]; then echo ready; cat {m}; "
        f"elif grep -q ' failed ' {s} 2>/dev/null; then echo failed; cat {s}; "
        f"sudo -n tail -n 30 {r} 2>/dev/null || tail -n 30 {r} 2>/dev/null || true; "
        "else echo waiting; fi"
    )


def parse_probe(text: str) -> tuple[str, str]:
    """(state, detail) from the probe's output; anything unexpected counts as waiting."""
    first, _, rest = text.partition("\n")
    state = first.strip()
    return (state, rest) if state in ("ready", "failed") else ("waiting", text.strip())


class BuilderFailed(GpufleetError):
    """The recipe failed on the builder, or it never became ready or never went down."""


@dataclass(frozen=True)
class Builder:
    """How to reach a builder: address, login, pinned host key, and what to ask it."""

    host: str
    user: str
    private_key: str  # OpenSSH PEM
    host_key: str  # "type base64 [comment]"
    port: int = 22
    probe: str = ""
    seal: str = ""

    def connect(self, timeout: float) -> Any:
        """An SSH client to the builder that accepts its pinned host key and no other."""
        import base64
        import io

        import paramiko

        ktype, b64 = self.host_key.split()[:2]
        client = paramiko.SSHClient()
        entry = self.host if self.port == 22 else f"[{self.host}]:{self.port}"
        client.get_host_keys().add(
            entry, ktype, paramiko.PKey.from_type_string(ktype, base64.b64decode(b64))
        )
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(
                self.host,
                port=self.port,
                username=self.user,
                pkey=paramiko.Ed25519Key.from_private_key(io.StringIO(self.private_key)),
                timeout=timeout,
                banner_timeout=timeout,
                auth_timeout=timeout,
                allow_agent=False,
                look_for_keys=False,
            )
        except BaseException:
            client.close()
            raise
        return client


def _run(client: Any, command: str, timeout: float) -> tuple[int, str]:
    """Exit status (-1 when the connection dropped first) and output of one command."""
    chan = client.get_transport().open_session(timeout=timeout)
    chan.settimeout(timeout)
    chan.set_combine_stderr(True)
    chan.exec_command(command)
    out = b""
    try:
        while chunk := chan.recv(65536):
            out += chunk
    except OSError:  # timed out: the builder went away mid-command (a reboot, or power-off)
        chan.close()
    chan.status_event.wait(30)  # set by the exit status, or when the channel closes
    status = chan.exit_status if chan.exit_status_ready() else -1
    return status, out.decode(errors="replace")


def _answers(host: str, port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:  # refused (sshd stopped) or no route/timeout (the VM is off)
        return False


def _visit(b: Builder) -> tuple[str | None, str]:
    """One look at the builder: (the marker once it is ready and sealed, else None; what we saw)."""
    import paramiko

    try:
        client = b.connect(timeout=20)
    except (OSError, paramiko.SSHException) as e:
        # Not up yet, rebooting after the driver install, or (BadHostKeyException) not the
        # builder: nothing is sent then, and the timeout's message says what was last seen.
        return None, f"{type(e).__name__}: {e}"
    try:
        status, out = _run(client, b.probe, timeout=60)
        state, detail = parse_probe(out) if status == 0 else ("waiting", out)
        if state == "failed":
            raise BuilderFailed(
                f"the recipe failed on the builder {b.host}:\n{detail.strip()}",
                hint="fix the step (images/steps), then bake again",
            )
        if state == "waiting":
            return None, f"recipe still running ({detail.strip()[-200:] or 'no marker yet'})"
        status, out = _run(client, b.seal, timeout=300)
        if status not in (0, -1):  # -1: the power-off closed the session before the status
            raise BuilderFailed(f"sealing the builder {b.host} failed ({status}):\n{out.strip()}")
        return detail, "sealed"
    except (OSError, paramiko.SSHException) as e:
        return None, f"{type(e).__name__}: {e}"
    finally:
        client.close()


def wait_ready_and_seal(
    b: Builder,
    *,
    ready_timeout_s: float = READY_TIMEOUT_S,
    down_timeout_s: float = DOWN_TIMEOUT_S,
    first_delay_s: float = 5.0,
    max_delay_s: float = 60.0,
    wait_down: bool = True,
) -> str:
    """Wait for the marker, seal and power off the builder, wait until it is gone (unless the
    seal leaves it running: wait_down=False); the marker."""
    deadline = time.monotonic() + ready_timeout_s
    delay = first_delay_s
    # A remote condition with no event to subscribe to: poll it, with backoff and a deadline.
    while True:
        marker, seen = _visit(b)
        if marker is not None:
            break
        if time.monotonic() + delay > deadline:
            raise BuilderFailed(
                f"the builder {b.host} was not ready within {ready_timeout_s / 60:.0f} min; "
                f"last: {seen}",
                hint=f"look at {RECIPE_LOG} on the builder",
            )
        time.sleep(delay)
        delay = min(delay * 1.5, max_delay_s)
    if not wait_down:
        return marker
    gone = time.monotonic() + down_timeout_s
    delay = min(first_delay_s, 5.0)
    while _answers(b.host, b.port, timeout=5):
        if time.monotonic() + delay > gone:
            raise BuilderFailed(f"the builder {b.host} still answers after its power-off")
        time.sleep(delay)
    return marker


class _BuilderReadyProvider(pulumi.dynamic.ResourceProvider):
    """create(): wait for the builder's readiness marker over SSH, seal it, power it off."""

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        builder = Builder(
            host=props["host"],
            port=int(props.get("port") or 22),
            user=props["user"],
            private_key=props["private_key"],
            host_key=props["host_key"],
            probe=props["probe"],
            seal=props["seal"],
        )
        marker = wait_ready_and_seal(
            builder,
            ready_timeout_s=float(props.get("ready_timeout_s") or READY_TIMEOUT_S),
            down_timeout_s=float(props.get("down_timeout_s") or DOWN_TIMEOUT_S),
            wait_down=bool(props.get("wait_down", True)),
        )
        return pulumi.dynamic.CreateResult(
            id_=f"sealed-{props['builder']}", outs={**props, "ready": marker}
        )


class BuilderReady(pulumi.dynamic.Resource):
    """Done when the builder finished the recipe, was sealed and powered off, and is gone."""

    builder: pulumi.Output[str]
    ready: pulumi.Output[str]  # the readiness marker: the versions the image carries

    def __init__(self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions):
        super().__init__(_BuilderReadyProvider(), name, {**props, "ready": None}, opts)


class ImageBakeComponent(pulumi.ComponentResource):
    """Base of `gpufleet:<cloud>:ImageBake`: keys, tags, the builder's cloud-init and the wait."""

    cloud: str = ""
    seal_before: tuple[str, ...] = ()  # cloud-specific sealing, run first
    seal_powers_off = True  # False: the capture stops the builder (AWS)
    backstop = ""  # what removes a builder at its expiry, in words (`image bake --plan`)
    default_builder = ""  # the builder's type when the stack names none

    def __init__(self, name: str, spec: ClusterSpec, opts: pulumi.ResourceOptions | None = None):
        from gpufleet.components.expiry import Expiry

        super().__init__(f"gpufleet:{self.cloud}:ImageBake", name, None, opts)
        self.spec = spec
        self.builder_type = spec.instance_type or self.default_builder
        # As a node's: fixed at the first apply and kept in the stack's state, never this
        # program run's clock (a re-apply would change the builder's user data).
        expiry = Expiry(f"{name}-expiry", BAKE_HOURS * 60, self.child())
        self.expires_at: pulumi.Output[int] = expiry.expires_at
        self.tags = fleet_tags(spec, self.expires_at)
        # The image outlives the bake: no expiry for a sweeper to act on.
        self.image_tags = {
            **{k: v for k, v in self.tags.items() if k != "gpufleet-expires"},
            "gpufleet-role": "node-image",
        }
        self.ssh_user = spec.effective_ssh_user or "gpufleet"
        self.keys = cluster_keys(name, 1, self)

    def child(self, **kw: Any) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, **kw)

    def user_data(self, extra: dict[str, pulumi.Input[str]] | None = None) -> pulumi.Output[str]:
        """The recipe for the builder, with its expiry timer (the seal removes it again)."""
        env: dict[str, pulumi.Input[str]] = {"GPUFLEET_BAKE": "1", **(extra or {})}
        return node_user_data(self.spec, self.ssh_user, self.keys, 0, 1, self.expires_at, env)

    def wait_ready(self, host: pulumi.Input[str], builder: Any) -> BuilderReady:
        """The wait every capture depends on (see the module docstring)."""
        return BuilderReady(
            f"{self._name}-ready",
            {
                "host": host,
                "port": 22,
                "user": self.ssh_user,
                "private_key": pulumi.Output.secret(self.keys.user.private_key_openssh),
                "host_key": self.keys.hosts[0].public_key_openssh,
                "builder": builder.id,
                "probe": probe_command(),
                "seal": seal_command(self.seal_before, poweroff=self.seal_powers_off),
                "wait_down": self.seal_powers_off,
            },
            self.child(depends_on=[builder]),
        )

    def finish(self, image_id: pulumi.Input[str]) -> None:
        self.image_id = pulumi.Output.from_input(image_id)
        self.register_outputs({"image_id": self.image_id, "expires_at": self.expires_at})


def declare_bake(spec: ClusterSpec) -> ImageBakeComponent:
    """Declare the spec's cloud's ImageBake (its stack is `<spec.name>-image`)."""
    from gpufleet.components.registry import bake_class

    # One public builder: no workers, so no NAT for them (components/<cloud>/network.py).
    spec = spec.with_(nodes=1)
    bake: ImageBakeComponent = bake_class(spec.cloud)(f"{spec.name}-image", spec)
    return bake


def bake_exports(bake: ImageBakeComponent) -> dict[str, Any]:
    """The image id a stack can name, expires_at as a cluster stack has it, and the marker
    `sweep` knows a bake's stack by (provision/pulumi.py list_stacks reads both): a cluster's
    stack never exports gpufleet_kind."""
    return {"image_id": bake.image_id, "expires_at": bake.expires_at, "gpufleet_kind": "bake"}


def bake_program(spec: ClusterSpec) -> dict[str, Any]:
    """Declare the spec's cloud's ImageBake; its exports."""
    return bake_exports(declare_bake(spec))
