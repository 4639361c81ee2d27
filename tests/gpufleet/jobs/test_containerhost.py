"""--image on the sandbox: this machine's runtime checked for real, and through fakes."""

from __future__ import annotations

import os
import shutil
import subprocess
import types

import pytest

from gpufleet.components.containerflags import PROBE_MARK
from gpufleet.jobs import containerhost
from gpufleet.jobs.containerhost import HostCannotRunContainers, check_host

V1 = "cgroup /sys/fs/cgroup/cpu cgroup rw 0 0\ncgroup /sys/fs/cgroup/memory cgroup rw 0 0\n"
HYBRID = V1 + "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n"
V2 = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n"


def _probe_out(runtime: str, why: str = "") -> str:
    return (
        f'{PROBE_MARK}{{"runtime":"{runtime}","version":"5.0","sudo":false,"cdi":false,'
        f'"gpus":0,"mem":1073741824,"uverbs":"","why":"{why}"}}\n'
    )


def _fake_run(probe: str, start_rc: int = 0, start_err: str = ""):
    """subprocess.run for check_host: the probe's output, then the start test's result."""
    calls: list[list[str]] = []

    def run(argv, **kw):
        calls.append(argv)
        if argv[:2] == ["sh", "-c"]:
            return types.SimpleNamespace(returncode=0, stdout=probe, stderr="")
        return types.SimpleNamespace(returncode=start_rc, stdout="", stderr=start_err)

    return run, calls


def test_a_working_podman_passes_after_a_real_start_without_an_image():
    run, calls = _fake_run(_probe_out("podman"))
    check_host("auto", run=run)
    assert calls[1] == ["podman", "run", "--rm", "--network", "none", "--rootfs", "/", "true"]


def test_a_working_docker_daemon_passes():
    run, calls = _fake_run(_probe_out("docker"))
    check_host("docker", run=run)
    assert len(calls) == 1  # docker needs an image to start anything: its daemon answering is it


def test_podman_that_cannot_start_names_the_error_and_the_known_causes(monkeypatch):
    err = "Error: crun: setrlimit `RLIMIT_NPROC`: Operation not permitted: OCI permission denied"
    run, _ = _fake_run(_probe_out("podman"), 126, err)
    monkeypatch.setattr(shutil, "which", lambda c: f"/usr/bin/{c}" if c == "podman" else None)
    real = containerhost.known_causes
    monkeypatch.setattr(
        containerhost, "known_causes", lambda rt: real(rt, mounts=HYBRID, which=lambda c: None)
    )
    with pytest.raises(HostCannotRunContainers) as e:
        check_host("podman", run=run)
    msg = str(e.value)
    assert "exited 126: " + err in msg
    assert "cgroups are hybrid here" in msg and "no OCI runtime (crun or runc)" in msg
    assert "--cloud vm" in e.value.hint


@pytest.mark.parametrize(("mounts", "layout"), [(V1, "v1"), (HYBRID, "hybrid"), (V2, "v2")])
def test_cgroup_layout_from_the_mount_table(mounts, layout, monkeypatch):
    monkeypatch.setattr(containerhost.Path, "is_dir", lambda self: False)
    assert containerhost.cgroup_layout(mounts) == layout


def test_known_causes_of_docker_without_a_daemon(monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    why = containerhost.known_causes("docker", exists=lambda p: False)
    assert why == ["no docker daemon (/var/run/docker.sock is absent, DOCKER_HOST unset)"]
    assert containerhost.known_causes("docker", exists=lambda p: True) == []
    ok = containerhost.known_causes("podman", mounts=V2, which=lambda c: "/usr/bin/crun")
    assert ok == []


def _can_start_here() -> bool:
    """Whether this machine really starts a container (docker's daemon, or podman's start)."""
    for rt in ("docker", "podman"):
        if shutil.which(rt) is None:
            continue
        argv = [rt, "info"] if rt == "docker" else [rt, "run", "--rm", "--rootfs", "/", "true"]
        try:
            if subprocess.run(argv, capture_output=True, timeout=120).returncode == 0:
                return True
        except (OSError, subprocess.TimeoutExpired):
            continue
    return False


def test_this_machine_as_it_is():
    """No fakes: on a machine whose runtime works this passes; on one like the project's
    (a docker CLI without a daemon, podman missing or failing on cgroups) it names each."""
    if _can_start_here():
        check_host("auto")
        return
    with pytest.raises(HostCannotRunContainers) as e:
        check_host("auto")
    msg = str(e.value)
    for rt in ("docker", "podman"):
        if shutil.which(rt) is None:
            assert f"{rt}: not installed" in msg
        elif rt == "docker" and not (
            os.environ.get("DOCKER_HOST") or os.path.exists("/var/run/docker.sock")
        ):
            assert "docker: no docker daemon" in msg
        else:
            assert rt in msg
    assert "--cloud vm" in e.value.hint


def test_check_where_refuses_a_provider_without_containers_naming_the_flag(monkeypatch):
    """The one check (run, exec and up call it): a provider whose containers trait is ""."""
    from gpufleet.components.clusterspec import ContainerSpec
    from gpufleet.components.errors import SpecError

    monkeypatch.setattr(
        "gpufleet.core.providers.traits", lambda cloud: types.SimpleNamespace(containers="")
    )
    with pytest.raises(SpecError) as e:
        containerhost.check_where("none", ContainerSpec(image="img:1"), "--container-image")
    print(e.value)
    assert e.value.field == "--container-image" and "runs no containers" in str(e.value)
    containerhost.check_where("none", None)  # no image: nothing to check


def test_the_sandbox_starts_a_container_once_per_command(monkeypatch):
    """Faked: subprocess.run (the probe and podman's start). Real: check_where, check_host.
    The CLI checks before the plan and run_job again for its Python callers: one start."""
    from gpufleet.components.clusterspec import ContainerSpec

    run, calls = _fake_run(_probe_out("podman"))
    monkeypatch.setattr(containerhost.subprocess, "run", run)
    monkeypatch.setattr(containerhost, "_WORKS", set())
    spec = ContainerSpec(image="img:1", runtime="podman")
    containerhost.check_where("local", spec)
    containerhost.check_where("local", spec)
    starts = [c for c in calls if c[:2] == ["podman", "run"]]
    assert len(starts) == 1, calls
