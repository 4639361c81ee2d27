"""Cloud clusters through Pulumi's Automation API: one stack per cluster, outputs -> ClusterInfo."""

from __future__ import annotations

import os
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.components.clusterinfo import ClusterInfo
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.contract import cluster_info_from_outputs
from gpufleet.components.errors import SpecError
from gpufleet.components.exitcodes import ExitCode
from gpufleet.core import state
from gpufleet.core.errors import GpufleetError, MissingTool
from gpufleet.provision import Progress, hostkeypin, traits
from gpufleet.provision.secrets import SecretsChoice, passphrase_file
from gpufleet.provision.secrets import choose as choose_secrets

PROJECT = "gpufleet"
PULUMI_INSTALL = (
    "run `gpufleet setup pulumi` (installs the pinned CLI under $GPUFLEET_HOME), or by hand: "
    "curl -fsSL https://get.pulumi.com | sh"
)
# Where the caller's public address is asked for when --ssh-cidr is not given.
WHOAMI_URL = "https://checkip.amazonaws.com"


def find_pulumi() -> str:
    """The pulumi CLI: `gpufleet setup pulumi`'s, on PATH, or its installer's; else MissingTool."""
    from gpufleet.provision import pulumicli

    ours = pulumicli.installed()
    if ours:  # first on PATH, so the Automation API runs the pinned CLI
        bindir = str(Path(ours).parent)
        if os.environ.get("PATH", "").split(os.pathsep)[0] != bindir:
            os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
        return ours
    found = shutil.which("pulumi") or next(
        (str(p) for p in [Path.home() / ".pulumi" / "bin" / "pulumi"] if p.is_file()), None
    )
    if not found:
        raise MissingTool("pulumi", PULUMI_INSTALL)
    return found


def backend_url(explicit: str | None = None, *, mkdir: bool = True) -> str:
    """--backend, else $PULUMI_BACKEND_URL, else a file backend under $GPUFLEET_HOME
    (created unless mkdir=False)."""
    url = explicit or os.environ.get("PULUMI_BACKEND_URL")
    if url:
        return url
    path = state.home() / "pulumi"
    if mkdir:
        path.mkdir(parents=True, exist_ok=True)
    return f"file://{path}"


def passphrase() -> str | None:
    """$PULUMI_CONFIG_PASSPHRASE; None with $PULUMI_CONFIG_PASSPHRASE_FILE (Pulumi reads that
    file itself); else one generated once and kept 0600 under $GPUFLEET_HOME."""
    if "PULUMI_CONFIG_PASSPHRASE" in os.environ:
        return os.environ["PULUMI_CONFIG_PASSPHRASE"]
    if passphrase_file():
        return None
    path = state.home() / "pulumi-passphrase"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
    return path.read_text().strip()


def own_cidr(timeout: float = 3.0) -> str | None:
    """The caller's public address as a /32, or None when it cannot be learned."""
    import ipaddress
    import urllib.request

    try:
        with urllib.request.urlopen(WHOAMI_URL, timeout=timeout) as r:  # noqa: S310
            addr = ipaddress.ip_address(r.read().decode().strip())
    except (OSError, ValueError):
        return None
    return f"{addr}/{addr.max_prefixlen}"


def with_ssh_cidrs(spec: ClusterSpec, learn=own_cidr) -> ClusterSpec:
    """The spec with SSH limited to the caller when it names no CIDR; never silently open."""
    if spec.ssh_cidrs:
        return spec
    cidr = learn()
    if cidr is None:
        raise SpecError(
            "ssh_cidrs",
            "none given and your public address could not be learned",
            "pass --ssh-cidr YOUR.PUBLIC.IP/32, or your network's CIDR (gpufleet's policy pack "
            "refuses SSH from 0.0.0.0/0)",
        )
    return spec.with_(ssh_cidrs=[cidr])


def workspace_env(url: str, with_passphrase: bool = True) -> dict[str, str]:
    """Environment of the Pulumi CLI and the plugins it starts.

    The Python dynamic provider (the bake's BuilderReady) runs in a process the CLI starts as
    `${PULUMI_PYTHON_CMD:-python3} -m pulumi.dynamic`, from the workspace folder: it must be
    this interpreter (pulumi, paramiko) and find this `gpufleet`; a stack made before
    `components` moved under `gpufleet` pickled its providers as `components.*`, which
    gpufleet/_pickled still answers to.
    """
    import sys

    import gpufleet

    package = Path(gpufleet.__file__).resolve().parent
    parts = (str(package / "_pickled"), str(package.parent), os.environ.get("PYTHONPATH", ""))
    path = os.pathsep.join(p for p in parts if p)
    phrase = passphrase() if with_passphrase else None
    env = {"PULUMI_CONFIG_PASSPHRASE": phrase} if phrase is not None else {}
    return {
        **env,
        "PULUMI_BACKEND_URL": url,
        "PULUMI_PYTHON_CMD": os.environ.get("PULUMI_PYTHON_CMD") or sys.executable,
        "PYTHONPATH": path,
    }


def _workspace_options(backend: str | None, secrets: SecretsChoice | None = None) -> dict[str, Any]:
    """Options of the gpufleet project's workspace; `secrets` (secrets.choose) sets the
    provider a new stack is made with (`pulumi stack init --secrets-provider`)."""
    from pulumi import automation as auto

    url = backend_url(backend)
    chosen = secrets or choose_secrets(url, strict=False)
    return {
        "project_settings": auto.ProjectSettings(
            name=PROJECT, runtime="python", backend=auto.ProjectBackend(url=url)
        ),
        "env_vars": workspace_env(url, chosen.passphrase),
        "pulumi_home": os.environ.get("PULUMI_HOME"),
        "secrets_provider": chosen.provider,
    }


def _workspace(backend: str | None) -> Any:
    """The gpufleet project's workspace in a backend (lists its stacks and their outputs)."""
    from pulumi import automation as auto

    return auto.LocalWorkspace(**_workspace_options(backend))


def _stack(
    spec_or_name: ClusterSpec | str,
    backend: str | None,
    program: Any = None,
    secrets: SecretsChoice | None = None,
) -> Any:
    from pulumi import automation as auto

    name = spec_or_name if isinstance(spec_or_name, str) else spec_or_name.name
    opts = auto.LocalWorkspaceOptions(**_workspace_options(backend, secrets))
    return auto.create_or_select_stack(
        stack_name=name, project_name=PROJECT, program=program or (lambda: None), opts=opts
    )


def _existing_stack(name: str, backend: str | None, program: Any = None) -> Any:
    """Stack `name` of the gpufleet project, never made here (replace, status): a missing one
    raises the Automation API's StackNotFoundError."""
    from pulumi import automation as auto

    opts = auto.LocalWorkspaceOptions(**_workspace_options(backend))
    return auto.select_stack(
        stack_name=name, project_name=PROJECT, program=program or (lambda: None), opts=opts
    )


def set_provider_config(stack: Any, spec: ClusterSpec) -> None:
    """The provider's region and project on the stack; a gcp:project the stack already has
    (`pulumi config set gcp:project`) wins over the environment."""
    from gpufleet.components.registry import provider_config

    own = {k: str(v.value) for k, v in stack.get_all_config().items() if v.value}
    for key, value in provider_config(spec, stack_config=own).items():
        stack.set_config(key, _config_value(value))


def _import_sdk(cloud: str | None = None) -> None:
    """The SDKs a stack of `cloud` needs (None: only Pulumi's), or MissingExtra naming the
    extra that installs them."""
    import importlib

    from gpufleet.components.errors import SDK_EXTRAS, cloud_sdk

    modules = ["pulumi", "pulumi.automation"]
    if cloud is not None:
        modules += ["pulumi_tls"] + [m for m, extra in SDK_EXTRAS.items() if extra == cloud]
    with cloud_sdk(cloud):
        for m in modules:
            importlib.import_module(m)


class PulumiProvisioner:
    """up = `pulumi up` of a stack named after the cluster; down = destroy + remove the stack."""

    _secrets: SecretsChoice  # chosen by up() before anything else
    _pack: Path | None = None  # the prepared policy pack (policypack.prepare); None: --no-policy
    _created = True  # up(): whether this call made the stack (else it was there, empty)

    def __init__(
        self,
        backend: str | None = None,
        secrets_provider: str | None = None,
        policy: bool = True,
        capacity_waits_s: tuple[float, ...] = (30.0, 60.0),
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.backend = backend
        self.secrets_provider = secrets_provider  # --secrets-provider (else the env's)
        self.policy = policy  # False: --no-policy
        # replace(): the waits before each retry of a replacement refused for capacity
        self.capacity_waits_s = capacity_waits_s
        self.sleep = sleep

    def up(self, spec: ClusterSpec, progress: Progress) -> ClusterInfo:
        # Everything that can fail without touching a cloud fails first, so nothing is made.
        self._secrets = choose_secrets(
            backend_url(self.backend, mkdir=False), self.secrets_provider
        )
        find_pulumi()
        _import_sdk(spec.cloud)
        self._pack = prepare_policy_pack(progress) if self.policy else None
        bootstrap_keys = hostkeypin.bootstrap_asked()
        if not bootstrap_keys:
            hostkeypin.require_channel(spec.cloud)
        spec = with_ssh_cidrs(spec)
        # never someone else's stack: one with resources is refused before anything changes;
        # an empty one (made with `pulumi stack init`, its config set) is used and kept
        held = stack_resources(spec.name, self.backend)
        if held:
            raise StackTaken(spec.name, backend_url(self.backend, mkdir=False), held)
        self._created = held is None
        zones: list[str | None] = [*spec.zone_choices] or [None]
        tried: list[str] = []
        for i, zone in enumerate(zones):
            attempt = spec if zone is None else spec.with_(zone=zone, zones=[zone])
            try:
                info = self._up_in_zone(attempt, progress, bootstrap_keys)
            except NoCapacity as e:
                if zone is None and e.fallback:
                    # No zone named: the component took the first that offers the type; the
                    # others that offer it are tried next, as if the spec had listed them.
                    zone = e.fallback[0]
                    zones[i + 1 : i + 1] = list(e.fallback[1:])
                tried += [zone] if zone else []
                if i + 1 == len(zones):
                    raise CapacityError(spec, tried, e.code) from e
                progress(f"{zone}: no capacity ({e.code}); trying {zones[i + 1]}")
                continue
            try:  # before any connection: never trust a host key on first use
                hostkeypin.pin_published(
                    info,
                    info.provider.get("host_keys_at") or {},
                    progress,
                    traits(spec.cloud).ssh_wait_s,
                )
            except BaseException:
                from gpufleet.core.signals import shielded

                with shielded():  # a Ctrl-C here must not leave the stack: ops.create has no info
                    progress("host keys not pinned: destroying what was created")
                    self.down(info, progress)
                raise
            return info
        raise AssertionError("unreachable")

    def _up_in_zone(
        self, spec: ClusterSpec, progress: Progress, bootstrap_keys: bool = False
    ) -> ClusterInfo:
        from gpufleet.components.stackconfig import build, exports

        # The inline program runs in this process: a spec the component refuses before
        # registering anything (e.g. a region that does not offer the type) is kept here and
        # raised as itself rather than as the engine's wrapped text.
        refused: list[SpecError] = []
        built: list[Any] = []

        def program() -> None:
            import pulumi

            try:
                fleet = build(spec)
            except SpecError as e:
                refused.append(e)
                raise
            built.append(fleet)
            for key, value in exports(fleet).items():
                pulumi.export(key, value)

        # the chosen secrets provider only where it differs from the local passphrase
        shared = {"secrets": self._secrets} if self._secrets.provider else {}
        stack = _stack(spec, self.backend, program, **shared)
        set_provider_config(stack, spec)
        # a bootstrap host key in each node's user data (GpufleetComponent reads it)
        stack.set_config(
            "gpufleet:bootstrapHostKeys", _config_value("true" if bootstrap_keys else "false")
        )
        secrets_word = secrets_in_use(stack, self._secrets, self._created)
        packs = policy_pack_args(spec, self._pack)  # a config file: removed by _up_with_packs
        progress(
            f"pulumi up: stack {spec.name} ({backend_url(self.backend)}; secrets: "
            f"{secrets_word}; "
            + (
                f"policy pack {POLICY_PACK_NAME})"
                if packs
                else f"policy pack NOT run: {NO_POLICY_FLAG} given)"
            )
        )
        try:
            # refresh first: over a stack whose nodes removed themselves at expiry, the
            # program then sees them gone and refuses to create them again (nothing to
            # refresh in a new stack)
            result = _up_with_packs(stack, progress, packs)
        except BaseException as e:
            expired = next((f._refusal for f in built if getattr(f, "_refusal", None)), None)
            if expired is not None:
                # the stack predates this `up`: left as it is, and said how to remove it
                raise SpecError(
                    expired.field,
                    f"{expired.problem} (stack {spec.name} in {backend_url(self.backend)}, "
                    "left from an earlier `up`)",
                    "remove that stack with `gpufleet sweep` (it destroys stacks past their "
                    "expiry), or pass another --ttl (after expiry a new TTL counts from now)",
                ) from e
            progress(
                "refused before anything was created: removing the empty stack"
                if refused
                else "pulumi up failed: destroying what it created"
            )
            # what this call made, and the stack only when this call made it
            self._destroy(stack, progress, remove=self._created)
            if refused:
                raise refused[0] from e
            code = capacity_code(str(e)) if isinstance(e, Exception) else None
            if code:
                # the zones the component would fall back to (AWS, when no zone was named)
                raise NoCapacity(
                    code, getattr(built[0], "zone_fallback", ()) if built else ()
                ) from e
            if isinstance(e, Exception):
                from gpufleet.components.registry import explain_failure

                known = explain_failure(spec.cloud, str(e))
                if known:
                    raise GpufleetError(
                        f"pulumi up failed for {spec.name}: {known[0]}", hint=known[1]
                    ) from e
                raise GpufleetError(
                    f"pulumi up failed for {spec.name}: {str(e).strip()[-2000:]}",
                    hint="fix the cause above and run again; nothing was left behind",
                ) from e
            raise
        outputs = {k: v.value for k, v in result.outputs.items()}
        info = self._info(spec.name, outputs)
        # what the program was given beyond the saved spec: replace() gives it the same
        info.provider.update(zone=spec.zone, ssh_cidrs=list(spec.ssh_cidrs))
        return info

    def _info(self, name: str, outputs: dict[str, Any]) -> ClusterInfo:
        d = state.cluster_dir(name)
        d.mkdir(parents=True, exist_ok=True)
        key, kh = d / "id_ed25519", d / "known_hosts"
        for path, text in ((key, outputs["ssh_private_key"]), (kh, outputs["known_hosts"])):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)
        return cluster_info_from_outputs(
            outputs,
            ssh_key_path=str(key),
            known_hosts_path=str(kh),
            provider={
                "backend": backend_url(self.backend),
                "stack": name,
                # the expiry the stack was created with (GCE's terminationTime on GCP): `extend`
                # moves info.expires_at, never this
                "created_expires_at": outputs.get("expires_at"),
                # where each node without a bootstrap key publishes its own (hostkeypin.py)
                "host_keys_at": {
                    n["name"]: n["host_key_at"] for n in outputs["nodes"] if n.get("host_key_at")
                },
            },
        )

    def _destroy(self, stack: Any, progress: Progress, remove: bool = True) -> None:
        # refresh first: nodes that removed themselves at expiry drop out of the state
        # instead of being deleted again
        stack.destroy(on_output=_progress_lines(progress), color="never", refresh=True)
        if remove:
            stack.workspace.remove_stack(stack.name)

    def down(self, info: ClusterInfo, progress: Progress) -> None:
        find_pulumi()
        _import_sdk()
        backend = info.provider.get("backend") or self.backend
        stack = _stack(info.provider.get("stack") or info.name, backend)
        progress(f"pulumi destroy: stack {stack.name}")
        try:
            self._destroy(stack, progress)
        except Exception as e:
            from gpufleet.components.registry import explain_failure

            known = explain_failure(info.cloud, str(e))
            if not known:
                raise
            raise GpufleetError(
                f"pulumi destroy failed for {info.name}: {known[0]}", hint=known[1]
            ) from e

    def extend(self, info: ClusterInfo, expires_at: float) -> None:
        """Move the cluster's hard expiry on its nodes, over SSH, then record it in the stack's
        config (`gpufleet:extendedTo`), where the program's refusal of an expired cluster reads
        it: a later `pulumi up` / `preview` between the old and the new expiry keeps the live
        nodes instead of calling them expired.

        The nodes' user data, tags and labels keep the creation-time expiry: changing them
        would make the clouds replace or refuse the VMs (docs/decisions.md, "Expiry is fixed
        once per cluster"). Refused before anything changes where the cloud itself would remove
        the VMs earlier (GCP's terminationTime). Nodes first: a stack that says "extended" over
        nodes that were not would let a refresh's `up` create them again past their expiry.
        """
        from gpufleet.components.expiry import EXTENDED_KEY
        from gpufleet.components.registry import refuse_extension
        from gpufleet.core.errors import ExtendRefused
        from gpufleet.provision.nodeexpiry import write_node_expiry

        created = info.provider.get("created_expires_at") or info.expires_at
        if created:
            refusal = refuse_extension(info.cloud, float(created), expires_at)
            if refusal:
                raise ExtendRefused(info.name, float(created), *refusal)
        find_pulumi()
        _import_sdk()
        write_node_expiry(info, expires_at)
        stack = _stack(info.provider.get("stack") or info.name, info.provider.get("backend"))
        try:
            stack.set_config(f"{PROJECT}:{EXTENDED_KEY}", _config_value(str(int(expires_at))))
        except Exception as e:
            raise GpufleetError(
                f"the nodes of {info.name!r} took the new expiry, but its stack {stack.name} "
                f"did not record it: {str(e).strip()[-600:]}",
                hint=f"run `gpufleet extend {info.name} ...` again (the record keeps the old "
                "expiry until then)",
            ) from e

    def replace(self, info: ClusterInfo, nodes: list[str], progress: Progress) -> ClusterInfo:
        """`pulumi refresh --target`, then `pulumi up --replace URN... --target URN...` of only
        `nodes`' own resources (components/nodeurns.py): each instance (deleted first:
        delete_before_replace; created where the cloud already deleted it) with its launch
        template, host key, schedules and role assignments (its own ENI / NIC and the public
        IP on it are kept: same addresses), retried on a capacity error, in
        the same network, placement group / compact policy / availability set and zone; the
        survivors and everything shared keep their state. The record keeps the survivors'
        pinned host keys and takes the new nodes' addresses and keys from the stack outputs."""
        from gpufleet.components.nodeurns import node_urns, replaced_urns

        refuse_unknown_nodes(info, nodes)
        if info.provider.get("adopted"):
            raise GpufleetError(
                f"cluster {info.name!r} is another stack's (gpufleet attach): gpufleet replaces "
                "none of its nodes",
                hint="its owner replaces the node with `pulumi up --target-replace URN`, or use "
                "--recover-mode restart",
                exit_code=ExitCode.USAGE,
            )
        spec = replace_spec(info)
        find_pulumi()
        _import_sdk(spec.cloud)
        pack = prepare_policy_pack(progress) if self.policy else None
        built: list[Any] = []
        refused: list[SpecError] = []

        def program() -> None:
            import pulumi

            from gpufleet.components.stackconfig import build, exports

            try:
                fleet = build(spec)
            except SpecError as e:  # raised as itself, not as the engine's wrapped text
                refused.append(e)
                raise
            built.append(fleet)
            for key, value in exports(fleet).items():
                pulumi.export(key, value)

        backend = info.provider.get("backend") or self.backend
        try:
            stack = _existing_stack(info.provider.get("stack") or info.name, backend, program)
        except Exception as e:
            raise GpufleetError(
                f"the stack of {info.name!r} cannot be read from {backend_url(backend)}: "
                f"{str(e).strip()[-600:]}",
                hint="check --backend / $PULUMI_BACKEND_URL and the passphrase or secrets "
                "provider it was made with",
            ) from e
        resources = (stack.export_stack().deployment or {}).get("resources") or []
        urns: list[str] = []
        for name in nodes:
            own = node_urns(resources, info.name, info.nodes.index(info.node(name)))
            if not own:
                raise GpufleetError(
                    f"stack {stack.name} holds no resources of {info.name}/{name}",
                    hint="`gpufleet down` the cluster and create it again (its stack is not "
                    "the one gpufleet made)",
                )
            urns += own
        urns = sorted(set(urns))
        # The config `up` and `extend` set lives in the workspace of the run that set it: set
        # again, as the program read it then (its host keys: the stack holds a bootstrap key
        # per node only where it made them), so it declares the same resources.
        from gpufleet.components.expiry import EXTENDED_KEY
        from gpufleet.components.nodeurns import urn_name

        set_provider_config(stack, spec)
        keys = any(urn_name(str(r.get("urn", ""))).endswith("-host-key") for r in resources)
        if not keys:  # the new nodes' keys are read from the cloud: refused now if they can't be
            hostkeypin.require_channel(spec.cloud)
        stack.set_config("gpufleet:bootstrapHostKeys", _config_value("true" if keys else "false"))
        created = info.provider.get("created_expires_at")
        if info.expires_at and created and info.expires_at > float(created):
            stack.set_config(f"{PROJECT}:{EXTENDED_KEY}", _config_value(str(int(info.expires_at))))
        packs = policy_pack_args(spec, pack)
        progress(
            f"pulumi up: replacing {', '.join(nodes)} of stack {stack.name} "
            f"({len(urns)} resources; the other nodes and shared resources untouched)"
        )
        again = replaced_urns(urns)
        tries = len(self.capacity_waits_s) + 1
        try:
            for attempt in range(tries):
                try:
                    result = self._refresh_and_up(stack, urns, again, progress, packs)
                    break
                except Exception as e:
                    code = capacity_code(str(e))
                    if not code or refused or attempt + 1 == tries:
                        raise
                    wait = self.capacity_waits_s[attempt]
                    progress(
                        f"no capacity to replace {', '.join(nodes)} ({code}); trying again "
                        f"in {wait:g} s ({attempt + 2} of {tries})"
                    )
                    self.sleep(wait)
        except Exception as e:
            expired = next((f._refusal for f in built if getattr(f, "_refusal", None)), None)
            if expired is not None:  # past its expiry: the program refuses to make nodes
                raise expired from e
            if refused:
                raise refused[0] from e
            code = capacity_code(str(e))
            if code:
                raise CapacityError(
                    spec, [spec.zone] if spec.zone else [], code, nodes, tries=tries
                ) from e
            from gpufleet.components.registry import explain_failure

            known = explain_failure(spec.cloud, str(e))
            why, fix = known or (str(e).strip()[-2000:], "fix the cause above and run it again")
            raise GpufleetError(
                f"replacing {', '.join(nodes)} of {info.name} failed: {why}",
                hint=f"{fix}; the other nodes were not touched (`gpufleet down {info.name}` "
                "removes everything)",
            ) from e
        finally:
            for path in packs.get("policy_pack_configs", []):
                Path(path).unlink(missing_ok=True)
        outputs = {k: v.value for k, v in result.outputs.items()}
        new = merged_record(info, outputs, nodes)
        state.save(new)
        hostkeypin.pin_published(
            new, new.provider.get("host_keys_at") or {}, progress, traits(info.cloud).ssh_wait_s
        )
        from gpufleet.remote import knownhosts, sshconfig

        knownhosts.write(new.known_hosts_path, knownhosts.render(new.nodes))
        state.save(new)
        sshconfig.write(new)
        wait_for_ssh(new, nodes, progress)
        return state.load(new.name)  # first contact may have rotated bootstrap keys

    @staticmethod
    def _refresh_and_up(
        stack: Any, urns: list[str], again: list[str], progress: Progress, packs: dict[str, Any]
    ) -> Any:
        """`pulumi refresh --target` of the nodes' resources, then `pulumi up --target` of
        them all with `--replace` of those of `again` still in the state. Not `up --refresh`:
        the engine refreshes first, drops what the provider no longer finds (an instance the
        cloud deleted: GCE Spot DELETE, Azure eviction Delete, EC2 one-time spot terminate),
        then refuses a --replace of a URN no longer in the state ("one or more targets could
        not be found in the stack", pkg/resource/deploy/deployment_executor.go checkTargets).
        A targeted URN not in the state is created."""
        stack.refresh(target=urns, on_output=_progress_lines(progress), color="never")
        after = (stack.export_stack().deployment or {}).get("resources") or []
        present = {str(r.get("urn")) for r in after if r.get("urn") and not r.get("delete")}
        from gpufleet.components.preview import fewer_collections

        with fewer_collections():  # the program runs in this process (the Automation API)
            return stack.up(
                on_output=_progress_lines(progress),
                color="never",
                replace=[u for u in again if u in present],
                target=urns,
                **packs,
            )

    def status(self, info: ClusterInfo) -> dict[str, str]:
        """Each node's instance as its cloud provider reads it now (`pulumi refresh
        --preview-only --target` of the instances: the provider plugins' view, no cloud SDK
        here; the state is not written): "gone" where the provider finds none (EC2
        terminated, a GCE VM deleted at preemption, an evicted Azure VM), else the
        instance's own state word where the provider reads one (EC2 instanceState, GCE
        currentStatus, lowercased), else "in stack". Where the stack cannot be read
        (no CLI, no credentials): "in stack" for every node, never "gone"."""
        from gpufleet.components.nodeurns import urn_name

        words = {n.name: "in stack" for n in info.nodes}
        if info.provider.get("adopted"):  # another's stack: gpufleet reads it, asks nothing
            return words
        try:
            find_pulumi()
            _import_sdk()
            backend = info.provider.get("backend") or self.backend
            stack = _existing_stack(info.provider.get("stack") or info.name, backend)
            resources = (stack.export_stack().deployment or {}).get("resources") or []
            instance = {
                str(r["urn"]): n.name
                for i, n in enumerate(info.nodes)
                for r in resources
                if urn_name(str(r.get("urn", ""))) == f"{info.name}-node-{i}"
                and r.get("custom", True)
                and not r.get("delete")
            }
            if not instance:
                return words
            events: list[Any] = []
            stack.preview_refresh(target=sorted(instance), on_event=events.append, color="never")
        except Exception:  # noqa: BLE001 -- no view is not a loss
            return words
        for urn, word in refreshed_states(events).items():
            if urn in instance:
                words[instance[urn]] = word
        return words


# The instance's own state word in its provider's outputs (EC2 instanceState, GCE currentStatus).
_STATE_OUTPUTS = ("instanceState", "currentStatus")


def refreshed_states(events: list[Any]) -> dict[str, str]:
    """URN -> "gone" or the instance's state word, from a refresh preview's engine events:
    a refresh step whose new state is empty (or a delete) is an instance the provider no
    longer finds."""
    words: dict[str, str] = {}
    for ev in events:
        step = getattr(ev, "res_outputs_event", None) or getattr(ev, "resource_pre_event", None)
        meta = getattr(step, "metadata", None)
        if meta is None:
            continue
        op = str(getattr(meta.op, "value", meta.op))
        new = getattr(meta, "new", None)
        if op in ("delete", "discard") or (op == "refresh" and new is None):
            words[meta.urn] = "gone"
            continue
        outputs = getattr(new, "outputs", None) or {}
        state_word = next((outputs[k] for k in _STATE_OUTPUTS if outputs.get(k)), None)
        if state_word and words.get(meta.urn) != "gone":
            words[meta.urn] = str(state_word).lower()
    return words


class UnknownNodes(GpufleetError):
    """replace() of a name the cluster has no node of: refused before anything runs."""

    exit_code = ExitCode.USAGE

    def __init__(self, name: str, unknown: list[str], known: list[str]):
        super().__init__(
            f"cluster {name!r} has no node {', '.join(unknown)}: nothing was replaced",
            hint=f"name nodes of the cluster: {', '.join(known)}",
        )
        self.unknown = unknown


def refuse_unknown_nodes(info: ClusterInfo, nodes: list[str]) -> None:
    known = [n.name for n in info.nodes]
    unknown = [n for n in nodes if n not in known]
    if unknown or not nodes:
        raise UnknownNodes(info.name, unknown or ["(none named)"], known)


def replace_spec(info: ClusterInfo) -> ClusterSpec:
    """The spec the cluster's program ran with: the saved one, in the zone and with the SSH
    sources `up` recorded (an older record: those of the saved spec, else learned now; the
    untargeted network keeps its state either way)."""
    saved = state.load_spec(info.name)
    if saved is None:
        raise GpufleetError(
            f"cluster {info.name!r} has no saved spec (spec.json): its program cannot be run "
            "again to replace a node",
            hint=f"`gpufleet down {info.name}` and create it again",
        )
    zone = info.provider.get("zone")
    spec = saved.with_(zone=zone, zones=[zone]) if zone else saved
    cidrs = info.provider.get("ssh_cidrs")
    return spec.with_(ssh_cidrs=list(cidrs)) if cidrs else with_ssh_cidrs(spec)


def merged_record(info: ClusterInfo, outputs: dict[str, Any], nodes: list[str]) -> ClusterInfo:
    """The record after a replacement: the replaced nodes as the stack outputs now say (new
    addresses, instance ids, host keys or where they publish them), the others as recorded
    (their pinned keys, rotated or not); the rest of the record (key, expiry moved by
    `extend`, env) unchanged."""
    fresh = cluster_info_from_outputs(
        outputs,
        ssh_key_path=info.ssh_key_path,
        known_hosts_path=info.known_hosts_path,
    )
    by_name = {n.name: n for n in fresh.nodes}
    merged = [by_name[n.name] if n.name in nodes else n.model_copy(deep=True) for n in info.nodes]
    at = {n["name"]: n["host_key_at"] for n in outputs["nodes"] if n.get("host_key_at")}
    return info.model_copy(
        update={
            "nodes": merged,
            "provider": {**info.provider, "host_keys_at": at},
            "host_key_rotation": info.host_key_rotation or fresh.host_key_rotation,
        }
    )


def wait_for_ssh(info: ClusterInfo, nodes: list[str], progress: Progress) -> None:
    """Until the new nodes answer SSH (their first contact replaces a bootstrap key)."""
    from gpufleet.remote import Group

    with Group(info, nodes) as g:
        g.wait_ready(traits(info.cloud).ssh_wait_s, progress=progress)


class StackTaken(GpufleetError):
    """`up` of a name whose stack already holds resources and no record here names: another
    user's (a shared backend) or one whose record is lost; gpufleet never takes it over."""

    exit_code = ExitCode.USAGE

    def __init__(self, name: str, backend: str, resources: int):
        super().__init__(
            f"stack {name} already exists in {backend} with {resources} resources, and no "
            f"cluster {name!r} is recorded here: `gpufleet up` does not take over a stack it "
            "did not create, and nothing was changed",
            hint=f"pick another --name; or use that stack as it is with `gpufleet attach NAME "
            f"--stack {name} --cwd ITS_PROJECT_FOLDER` (gpufleet then changes nothing on it); "
            "if it is yours and its record here was lost, remove it with `pulumi destroy` "
            "(`gpufleet sweep` removes such stacks once expired)",
        )
        self.name, self.backend, self.resources = name, backend, resources


# What every stack holds besides what its program made: the stack itself and default providers.
_BOOKKEEPING = ("pulumi:pulumi:Stack", "pulumi:providers:")


def stack_resources(name: str, backend: str | None) -> int | None:
    """How many resources stack `name` of the gpufleet project holds in the backend (its stack
    and provider entries not counted); None when there is no such stack. A file backend with no
    stack in it answers without the Pulumi CLI."""
    if not may_hold_stacks(backend):
        return None
    ws = _workspace(backend)
    if name not in {summary.name.rsplit("/", 1)[-1] for summary in ws.list_stacks()}:
        return None
    resources = (ws.export_stack(name).deployment or {}).get("resources") or []
    return sum(1 for r in resources if not str(r.get("type", "")).startswith(_BOOKKEEPING))


@dataclass(frozen=True)
class StackRecord:
    """One gpufleet stack in a backend, as `sweep` judges it."""

    stack: str
    cluster: str  # its cluster_name output; the stack name before its first `up` finished
    expires_at: float | None  # its expires_at output (epoch seconds), if it has one
    kind: str | None = None  # its gpufleet_kind output: "bake" for an image bake's stack


def may_hold_stacks(backend: str | None = None) -> bool:
    """False only for a file backend with no stack in it: no Pulumi CLI is needed to know."""
    url = backend_url(backend, mkdir=False)
    if not url.startswith("file://"):
        return True
    stacks = Path(url.removeprefix("file://")).expanduser() / ".pulumi" / "stacks"
    return stacks.is_dir() and any(p.is_file() for p in stacks.rglob("*"))


def list_stacks(backend: str | None = None) -> list[StackRecord]:
    """Every stack of the gpufleet project in the backend, with its cluster and expiry."""
    find_pulumi()
    _import_sdk()
    from concurrent.futures import ThreadPoolExecutor

    ws = _workspace(backend)
    # cloud backends answer org/project/stack
    names = [summary.name.rsplit("/", 1)[-1] for summary in ws.list_stacks()]

    def record(name: str) -> StackRecord:
        outputs = {k: v.value for k, v in ws.stack_outputs(name).items()}
        expires = outputs.get("expires_at")
        expires_at = float(expires) if expires not in (None, "") else None
        extended = _extended_to(ws, name)
        if expires_at is not None and extended is not None:
            expires_at = max(expires_at, extended)
        return StackRecord(
            stack=name,
            cluster=str(outputs.get("cluster_name") or name),
            expires_at=expires_at,
            kind=str(outputs["gpufleet_kind"]) if outputs.get("gpufleet_kind") else None,
        )

    if not names:
        return []
    # Each stack_outputs runs the Pulumi CLI twice (masked, then --show-secrets): in parallel.
    with ThreadPoolExecutor(max_workers=min(8, len(names))) as pool:
        return list(pool.map(record, names))


def _extended_to(ws: Any, name: str) -> float | None:
    """The expiry `gpufleet extend` recorded in a stack's config (on whichever machine ran
    it), or None: its outputs keep the creation-time expiry, which the nodes outlive."""
    from gpufleet.components.expiry import EXTENDED_KEY

    get = getattr(ws, "get_config", None)
    if get is None:
        return None
    try:
        value = get(name, f"{PROJECT}:{EXTENDED_KEY}").value
        return float(value)
    except Exception:  # noqa: BLE001 -- no such key (CommandError), or not a number
        return None


def is_shared(backend: str | None = None) -> bool:
    """A backend other machines use too (a bucket, Pulumi Cloud): its stacks without a record
    here may be a teammate's live clusters."""
    return not backend_url(backend, mkdir=False).startswith("file://")


def remove_stack(name: str, backend: str | None, progress: Progress) -> None:
    """pulumi destroy of a stack by name, then the stack itself, from the backend."""
    find_pulumi()
    _import_sdk()
    progress(f"pulumi destroy: stack {name}")
    PulumiProvisioner(backend)._destroy(_stack(name, backend), progress)


# What each cloud answers when it has no machines of the type in the zone right now:
# EC2 API error codes (InsufficientInstanceCapacity, InsufficientCapacity,
# InsufficientReservedInstanceCapacity); GCE "Troubleshooting resource availability errors"
# (ZONE_RESOURCE_POOL_EXHAUSTED[_WITH_DETAILS]); Azure "Troubleshoot allocation failures"
# (AllocationFailed, ZonalAllocationFailed, OverconstrainedAllocationRequest, ...).
CAPACITY_CODES = (
    "InsufficientInstanceCapacity",
    "InsufficientReservedInstanceCapacity",
    "InsufficientCapacity",
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    "ZONE_RESOURCE_POOL_EXHAUSTED",
    "ZonalAllocationFailed",
    "OverconstrainedZonalAllocationRequest",
    "OverconstrainedAllocationRequest",
    "AllocationFailed",
)


def capacity_code(text: str) -> str | None:
    """The cloud's out-of-capacity code in a failed deployment's text, if that is the cause."""
    return next((c for c in CAPACITY_CODES if c in text), None)


class NoCapacity(Exception):
    """One zone had no capacity (internal: `up` tries the next zone)."""

    def __init__(self, code: str, fallback: Any = ()):
        super().__init__(code)
        self.code = code
        self.fallback = list(fallback)  # the zone tried first, then the others to try


class CapacityError(GpufleetError):
    """No zone tried had machines of the type; says what else to try."""

    def __init__(
        self,
        spec: ClusterSpec,
        zones: list[str],
        code: str,
        replacing: list[str] | None = None,
        tries: int = 1,
    ):
        where = ", ".join(zones) if zones else "the zone the cloud picked"
        if replacing:  # replace(): the placement is the cluster's, so no other zone helps
            super().__init__(
                f"no capacity for {len(replacing)} × {spec.instance_type} in {where} ({code}) "
                f"to replace {', '.join(replacing)} of {spec.name} "
                f"({tries} {'try' if tries == 1 else 'tries'}, in the cluster's placement); "
                "the other nodes are kept",
                hint="--recover-mode relaunch makes all nodes anew in a new placement group / "
                "compact policy / proximity group (where the lost node alone did not fit), or "
                "run the recovery again later (capacity comes and goes); --recover-mode "
                "restart if the node comes back; capacity you hold (reservation: ...) avoids "
                "this",
            )
        else:
            super().__init__(
                f"no capacity for {spec.nodes} × {spec.instance_type} in {where} ({code}); "
                "nothing was left behind",
                hint="try other zones (zones: [...], tried in order), spot: true, or capacity "
                "you hold (reservation: an AWS cr-... id or a GCP reservation name, with its "
                "zone)",
            )
        self.replacing = replacing or []
        self.zones = zones
        self.code = code


POLICY_PACK_NAME = "gpufleet"
NO_POLICY_FLAG = "--no-policy"


def prepare_policy_pack(progress: Progress) -> Path:
    """The pack's folder with its own virtualenv (policypack.prepare), made once per version;
    PolicyPackUnavailable, before anything is created, where it cannot be made."""
    from gpufleet.provision.policypack import prepare

    return prepare(progress)


def policy_pack_args(spec: ClusterSpec, pack: Path | None) -> dict[str, Any]:
    """stack.up's policy_packs (Pulumi's `--policy-pack`): the prepared pack (None: not run)
    and, when the cluster's TTL is longer than the pack's default limit, a config
    (`--policy-pack-config`, a temporary file _up_with_packs removes) allowing it."""
    import json
    import tempfile

    if pack is None:
        return {}
    args: dict[str, Any] = {"policy_packs": [str(pack)]}
    hours = spec.ttl_minutes / 60
    if hours > DEFAULT_MAX_EXPIRY_HOURS:
        fd, path = tempfile.mkstemp(prefix="gpufleet-policy-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump({"gpu-instances-expire": {"maxHours": hours + 1}}, f)
        args["policy_pack_configs"] = [path]
    return args


def _up_with_packs(stack: Any, progress: Progress, packs: dict[str, Any]) -> Any:
    """stack.up with the policy pack arguments; their config files are removed after, whatever
    the outcome. refresh first: over a stack whose nodes removed themselves at expiry, the
    program then sees them gone."""
    from gpufleet.components.preview import fewer_collections

    try:
        # The program runs in this process (the Automation API): its Outputs live until the end.
        with fewer_collections():
            return stack.up(
                on_output=_progress_lines(progress), color="never", refresh=True, **packs
            )
    finally:
        for path in packs.get("policy_pack_configs", []):
            Path(path).unlink(missing_ok=True)


def secrets_in_use(stack: Any, chosen: SecretsChoice, created: bool = True) -> str:
    """The progress line's word on secrets: what the stack uses, and, when it was made with
    another provider than the one asked for, that it keeps it (the Automation API passes
    --secrets-provider only to `pulumi stack init`) and how to change it."""
    from gpufleet.provision.secrets import describe, stack_provider

    return describe(chosen, stack_provider(stack), stack.name, created)


# The pack's own default (policy/gpufleet_policy.py DEFAULT_MAX_HOURS): a week.
DEFAULT_MAX_EXPIRY_HOURS = 24 * 7


def _config_value(value: Any) -> Any:
    from pulumi import automation as auto

    return auto.ConfigValue(value=value if isinstance(value, str) else str(value))


def _progress_lines(progress: Progress):
    """Pulumi's engine output, one progress line per resource event worth showing."""

    def on_output(line: str) -> None:
        text = line.strip()
        if text.startswith(("+ ", "- ", "~ ", "created", "deleted")) or " creating" in text:
            progress(text)

    return on_output


def bake(spec: ClusterSpec, progress: Progress, backend: str | None = None) -> str:
    """Bake the node image for the spec's cloud; return its id. The builder is removed after."""
    find_pulumi()
    _import_sdk(spec.cloud)
    spec = with_ssh_cidrs(spec)
    from gpufleet.components.bake import bake_program

    def program() -> None:
        import pulumi

        for key, value in bake_program(spec).items():
            pulumi.export(key, value)

    stack = _stack(f"{spec.name}-image", backend, program)
    set_provider_config(stack, spec)
    progress(f"baking: builder VM for {spec.cloud} (stack {spec.name}-image)")
    try:
        result = stack.up(on_output=_progress_lines(progress), color="never")
        image_id = str(result.outputs["image_id"].value)
    finally:
        # The image is retained on delete; everything else (builder, network) goes.
        progress("removing the builder")
        PulumiProvisioner(backend)._destroy(stack, progress)
    return image_id
