"""The rank container's command line per runtime and fabric (goldens), the node probe, the EFA
check inside the container, and the cloud facts they rest on."""

from __future__ import annotations

import os
import shlex
import subprocess
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from gpufleet.components import containerflags as cf
from gpufleet.components.errors import GpufleetError

GIB = 1024**3
EFA4 = tuple(f"/dev/infiniband/uverbs{i}" for i in range(4))
ND_TOPO = "/opt/microsoft/ndv4/topo.xml"

# One node per fabric, as parse_probe would give them (docker as root, a CDI spec).
BASE = cf.NodeFacts(runtime="docker", runtime_version="Docker version 28.3.0", cdi=True, gpus=8)
NODES = {
    "none": replace(BASE, mem_bytes=64 * GIB),
    # p4d: 4 EFA devices, 1152 GiB, GDRCopy loaded (as on AWS's DLAMIs)
    "efa": replace(
        BASE, mem_bytes=1152 * GIB, uverbs=EFA4, efa_uverbs=EFA4, paths=("/dev/gdrdrv",)
    ),
    # ND96asr_v4: 8 IB HCAs, the ubuntu-hpc topology file and its /etc/nccl.conf
    "infiniband": replace(
        BASE, mem_bytes=900 * GIB, paths=("/dev/infiniband", ND_TOPO, "/etc/nccl.conf")
    ),
    "tcpx": replace(
        BASE, mem_bytes=1872 * GIB, rxdm=True, paths=("/run/tcpx", "/var/lib/tcpx/lib64")
    ),
    "tcpxo": replace(
        BASE,
        mem_bytes=1872 * GIB,
        rxdm=True,
        paths=("/dev/aperture_devices", "/var/lib/tcpxo/lib64", "/var/lib/fastrak/lib64"),
    ),
}
ENV = {"NCCL_DEBUG": "WARN"}


def render(facts: cf.NodeFacts, fabric: str, **kw: object) -> str:
    argv = cf.run_argv(
        facts,
        "nvcr.io/nvidia/pytorch:25.08-py3",
        name="gpufleet-run-abc123",
        workdir="/home/ubuntu/work",
        fabric=fabric,
        mounts=("/data:/data:ro",),
        env=ENV,
        labels={"gpufleet.run": "abc123"},
        topo_file=ND_TOPO if fabric == "infiniband" else None,
        **kw,  # type: ignore[arg-type]
    )
    return shlex.join(argv) + "\n"


@pytest.mark.parametrize("runtime", cf.RUNTIMES)
@pytest.mark.parametrize("fabric", sorted(NODES))
def test_run_command_per_fabric_and_runtime(golden, fabric, runtime):
    facts = replace(NODES[fabric], runtime=runtime)
    golden(f"container/{runtime}-{fabric}.sh", render(facts, fabric))


def test_gpus_all_without_a_cdi_spec_on_docker(golden):
    golden("container/docker-none-gpus-all.sh", render(replace(NODES["none"], cdi=False), "none"))


def test_rootless_podman_gets_a_big_shm_instead_of_host_ipc(golden):
    facts = replace(NODES["none"], runtime="podman", rootless=True)
    text = render(facts, "none")
    golden("container/podman-none-rootless-shm.sh", text)
    assert "--ipc" not in text and f"--shm-size {64 * GIB // 3}" in text


def test_shm_is_a_third_of_memory_capped_at_200_gb():
    assert cf.shm_bytes(replace(BASE, mem_bytes=96 * GIB)) == 32 * GIB
    assert cf.shm_bytes(replace(BASE, mem_bytes=2048 * GIB)) == 200 * GIB
    forced = render(NODES["efa"], "efa", ipc_host=False)
    assert f"--shm-size {200 * GIB}" in forced and "--ipc host" not in forced


def test_sudo_prefix(golden):
    golden("container/sudo-docker-none.sh", render(replace(NODES["none"], sudo=True), "none"))


def test_efa_passes_only_the_efa_uverbs_devices():
    """A B200-like host: 8 EFA uverbs and 2 mlx5 ones; only the EFA ones go in."""
    mixed = (*EFA4, "/dev/infiniband/uverbs8", "/dev/infiniband/uverbs9")
    argv = cf.run_argv(
        replace(NODES["efa"], uverbs=mixed), "img", name="n", workdir="/w", fabric="efa"
    )
    devices = [argv[i + 1] for i, a in enumerate(argv) if a == "--device"]
    assert devices == ["nvidia.com/gpu=all", "/dev/gdrdrv", *EFA4]  # GDRCopy: not a verbs device
    assert "/dev/infiniband" not in devices


@pytest.mark.parametrize(
    ("fabric", "facts", "why"),
    [
        ("efa", replace(NODES["efa"], efa_uverbs=(), uverbs=()), "no EFA uverbs device"),
        ("infiniband", replace(NODES["infiniband"], paths=()), "no /dev/infiniband"),
        ("tcpx", replace(NODES["tcpx"], rxdm=False), "gpufleet-rxdm) is not running"),
        ("tcpxo", replace(NODES["tcpxo"], paths=()), "no /dev/aperture_devices"),
    ],
)
def test_run_argv_refuses_a_node_without_the_fabric(fabric, facts, why):
    with pytest.raises(cf.ContainerFabricError) as e:
        cf.run_argv(facts, "img", name="n", workdir="/w", fabric=fabric, topo_file=ND_TOPO)
    assert why in str(e.value) and isinstance(e.value, GpufleetError)
    assert "NCCL falls back to TCP sockets" in (e.value.hint or "")
    assert e.value.exit_code == 5


def test_infiniband_topology_file_must_be_on_the_node():
    facts = replace(NODES["infiniband"], paths=("/dev/infiniband",))
    assert cf.fabric_problems(facts, "infiniband", topo_file=ND_TOPO) == [
        f"the NCCL topology file {ND_TOPO} is not on the node"
    ]


def test_podman_without_cdi_is_refused_rather_than_given_no_gpus():
    with pytest.raises(cf.ContainerFabricError, match="podman reaches NVIDIA GPUs only through"):
        cf.run_argv(
            replace(NODES["none"], runtime="podman", cdi=False), "i", name="n", workdir="/w"
        )


def test_callers_positional_and_keyword_signature_still_works():
    """The signature main had: (facts, image, *, name, workdir, fabric, mounts, env, labels,
    command); none of the new keywords is required."""
    argv = cf.run_argv(NODES["none"], "img", name="n", workdir="/w", command=("true",))
    assert argv[:2] == ["docker", "run"] and argv[-2:] == ["img", "true"]
    assert cf.run_command(NODES["none"], "img", name="n", workdir="/w").endswith(
        "img sleep infinity"
    )


@pytest.mark.parametrize("fabric", ["tcpx", "tcpxo"])
def test_rxdm_command(golden, fabric):
    golden(
        f"container/rxdm-{fabric}.sh",
        shlex.join(cf.rxdm_argv(NODES[fabric], fabric, f"rxdm-image-{fabric}")) + "\n",
    )


def test_efa_check_command_golden(golden):
    golden("container/efa-check-32.sh", cf.efa_check_command(32))


# --- the probe and the EFA check, run by a real sh with fake tools on PATH ---------------------


def _fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(0o755)


def _sh(script: str, bin_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    return subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True)


def test_probe_reads_rootless_and_cdi_from_a_fake_podman(tmp_path):
    """Faked: `podman` (a script answering `info`); real: sh running probe_command, parse_probe.
    This host's /dev, /sys and /etc/cdi are read as they are (no GPUs, no EFA here)."""
    _fake(
        tmp_path,
        "podman",
        """\
        case "$*" in
          *Rootless*) echo true ;;
          info) exit 0 ;;
          --version) echo "podman version 5.4.2" ;;
          *) exit 1 ;;
        esac
        """,
    )
    out = _sh(cf.probe_command("podman"), tmp_path)
    facts = cf.parse_probe(out.stdout)
    assert (facts.runtime, facts.runtime_version, facts.rootless) == (
        "podman",
        "podman version 5.4.2",
        True,
    )
    assert not facts.ipc_host and facts.mem_bytes > 0 and not facts.rxdm


def test_probe_sees_a_running_rxdm_and_docker_without_cdi(tmp_path):
    """Faked: `docker` answering info (CDISpecDirs null: CDI off) and inspect of gpufleet-rxdm."""
    _fake(
        tmp_path,
        "docker",
        """\
        case "$*" in
          *CDISpecDirs*) echo null ;;
          *SecurityOptions*) echo '["name=seccomp,profile=builtin"]' ;;
          "inspect -f {{.State.Running}} gpufleet-rxdm") echo true ;;
          info) exit 0 ;;
          --version) echo "Docker version 24.0.7" ;;
          *) exit 1 ;;
        esac
        """,
    )
    facts = cf.parse_probe(_sh(cf.probe_command(), tmp_path).stdout)
    assert facts.runtime == "docker" and facts.rxdm and not facts.cdi and not facts.rootless


def test_parse_probe_fabric_fields():
    line = (
        'gpufleet-container-probe:{"runtime":"docker","version":"v","sudo":false,"cdi":true,'
        '"gpus":8,"mem":100,"uverbs":" /dev/infiniband/uverbs0 /dev/infiniband/uverbs1",'
        '"why":"","efa":" /dev/infiniband/uverbs0","rootless":false,'
        '"paths":" /dev/infiniband /opt/microsoft/ndv5/topo.xml","rxdm":false}'
    )
    facts = cf.parse_probe(line)
    assert facts.efa_uverbs == ("/dev/infiniband/uverbs0",)
    assert facts.paths == ("/dev/infiniband", "/opt/microsoft/ndv5/topo.xml")


FI_INFO_4 = """\
    for i in 0 1 2 3; do
      for t in efa efa-direct; do
        printf 'provider: %s\\n    fabric: efa\\n    domain: rdmap%ss0-rdm\\n' "$t" "$i"
      done
    done
"""


@pytest.mark.parametrize(
    ("fi_info", "want", "rc", "said"),
    [
        (FI_INFO_4, 4, 0, "ok: 4 EFA interfaces (need 4)"),
        (FI_INFO_4, 32, 1, "fi_info -p efa sees 4 EFA interfaces in the container"),
        # a container given no uverbs device: libfabric says -61 (aws-ofi-nccl#1020)
        ("echo 'fi_getinfo: -61 (No data available)' >&2; exit 207\n", 4, 1, "sees 0 EFA"),
        (None, 4, 1, "fi_info is not in the image"),
    ],
)
def test_efa_check_in_the_container(tmp_path, fi_info, want, rc, said):
    """Faked: fi_info (printing what libfabric prints: one entry per provider per device) and
    ldconfig (aws-ofi-nccl on the loader path); real: sh running efa_check_command."""
    if fi_info is not None:
        _fake(tmp_path, "fi_info", fi_info)
    _fake(tmp_path, "ldconfig", "echo '  libnccl-net-ofi.so (libc6,x86-64) => /x/libnccl-net.so'\n")
    out = _sh(cf.efa_check_command(want), tmp_path)
    assert out.returncode == rc, out.stdout + out.stderr
    assert out.stdout.startswith(cf.EFA_CHECK_MARK) and said in out.stdout


def test_efa_check_needs_aws_ofi_nccl(tmp_path):
    _fake(tmp_path, "fi_info", FI_INFO_4)
    _fake(tmp_path, "ldconfig", "echo '  libc.so.6 (libc6,x86-64) => /lib/libc.so.6'\n")
    out = _sh(cf.efa_check_command(4), tmp_path)
    assert out.returncode == 1
    assert "aws-ofi-nccl (libnccl-net*.so) is not in the image" in out.stdout


# --- cloud facts ---------------------------------------------------------------------------------
# Written from the sources, read 2026-11-25; the strings are the sources' own, not the module's.
#   aws-do-eks#63  https://github.com/aws-samples/aws-do-eks/pull/63 (and libfabric#12708,
#                  https://github.com/ofiwg/libfabric/issues/12708): only the EFA uverbs devices,
#                  never all of /dev/infiniband.
#   efa-ctr        https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-installer-containers.html
#   dstack         https://github.com/dstackai/dstack @511c318
#                  src/dstack/_internal/server/services/backends/provisioning.py,
#                  src/dstack/_internal/core/backends/gcp/features/tcpx.py
#   ctk-a3mega     https://github.com/GoogleCloudPlatform/cluster-toolkit
#                  examples/machine-learning/a3-megagpu-8g/nccl-tests/run-nccl-tests.sh
#   ngc            reference/cloud-gpu-facts.md (second reviews): --ipc=host, --ulimit memlock=-1,
#                  --ulimit stack=67108864
#   ctk-cdi        https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/cdi-support.html
#   azure-nccl     reference/cloud-gpu-facts.md: NCCL_TOPO_FILE=/opt/microsoft/ndv4/topo.xml
FACTS = [
    # (fabric, what must be in the rank container's command line, source)
    ("efa", "--device /dev/infiniband/uverbs0", "aws-do-eks#63"),
    ("infiniband", "--device /dev/infiniband", "azure: IB HCAs in the container"),
    ("infiniband", "NCCL_TOPO_FILE=/opt/microsoft/ndv4/topo.xml", "azure-nccl"),
    ("tcpx", "/run/tcpx:/run/tcpx", "dstack provisioning.py (a3-highgpu-8g)"),
    ("tcpx", "/var/lib/tcpx/lib64", "dstack provisioning.py (a3-highgpu-8g)"),
    ("tcpxo", "/dev/aperture_devices:/dev/aperture_devices", "dstack provisioning.py (a3-mega)"),
    ("tcpxo", "/var/lib/tcpxo/lib64", "ctk-a3mega run-nccl-tests.sh"),
    ("tcpxo", "/var/lib/fastrak/lib64", "dstack provisioning.py (a3-mega)"),
    ("none", "--ipc host", "ngc"),
    ("none", "--ulimit memlock=-1", "ngc"),
    ("none", "stack=67108864", "ngc"),
    ("none", "--device nvidia.com/gpu=all", "ctk-cdi"),
]


@pytest.mark.parametrize(("fabric", "needle", "source"), FACTS)
def test_cloud_facts_in_the_command_line(fabric, needle, source):
    assert needle in render(NODES[fabric], fabric), source


def test_cloud_fact_efa_never_all_of_dev_infiniband():
    """aws-do-eks#63 / libfabric#12708: `/dev/infiniband` itself must not be passed on EFA."""
    argv = cf.run_argv(NODES["efa"], "i", name="n", workdir="/w", fabric="efa")
    assert "/dev/infiniband" not in argv and not any(a.startswith("/dev/infiniband:") for a in argv)


def test_cloud_fact_efa_installer_container_flags():
    """efa-ctr: in a container the installer runs with --skip-kmod --skip-limit-conf --no-verify."""
    assert "--skip-kmod --skip-limit-conf --no-verify" in cf.efa_check_command(1)


@pytest.mark.parametrize(
    ("fabric", "needles"),
    [
        # dstack gcp/features/tcpx.py, receive-datapath-manager
        ("tcpx", ["--privileged", "--gpu_nic_preset a3vm", "--gpu_shmem_type fd", "/run/tcpx"]),
        ("tcpxo", ["--privileged", "--num_hops=2", "--num_nics=8"]),
    ],
)
def test_cloud_fact_rxdm(fabric, needles):
    line = shlex.join(cf.rxdm_argv(NODES[fabric], fabric, "img"))
    assert all(n in line for n in needles), line


# --- review fixes: limits, GDRCopy, /etc/nccl.conf, the NGC hint --------------------------------
# Sources, read 2026-11-25:
#   docker/docs#23730  https://github.com/docker/docs/pull/23730, closing moby/moby#51485:
#                      after containerd 2.1.5 (Engine 29) `docker run ubuntu bash -c 'ulimit -n'`
#                      printed 1024 where it printed 1048576; ask for 1048576.
#   efa-ngc            https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-installer-containers.html
#                      "For NGC containers, with EFA installer 1.49.0 or later, you can use the
#                      --enable-ngc flag instead of the three flags above".
NOFILE_FACT = "--ulimit nofile=1048576:1048576"


def test_every_rank_container_asks_for_a_million_open_files():
    """docker/docs#23730: the engine's default is no longer enough for TCPX sockets."""
    for fabric in NODES:
        assert NOFILE_FACT in render(NODES[fabric], fabric), fabric


def test_gdrdrv_and_nccl_conf_go_in_only_when_the_node_has_them():
    bare = render(NODES["none"], "none")
    assert "/dev/gdrdrv" not in bare and "/etc/nccl.conf" not in bare
    has = replace(NODES["none"], paths=("/dev/gdrdrv", "/etc/nccl.conf"))
    argv = shlex.split(render(has, "none"))
    assert argv[argv.index("/dev/gdrdrv") - 1] == "--device"
    assert argv[argv.index("/etc/nccl.conf:/etc/nccl.conf:ro") - 1] == "-v"


def test_rootless_podman_refused_unless_hard_memlock_is_unlimited():
    rootless = replace(NODES["none"], runtime="podman", rootless=True, memlock_hard="8192")
    with pytest.raises(cf.ContainerLimitError) as e:
        cf.run_argv(rootless, "i", name="n", workdir="/w")
    assert "hard memlock limit is 8192 KiB" in str(e.value)
    assert "sudo" in (e.value.hint or "") and "hard memlock unlimited" in (e.value.hint or "")
    ok = replace(rootless, memlock_hard="unlimited", nofile_hard="524288")
    assert "--ulimit nofile=524288:524288" in shlex.join(
        cf.run_argv(ok, "i", name="n", workdir="/w")
    )  # a rootless engine cannot go above the user's hard limit
    assert cf.limit_problems(replace(rootless, rootless=False)) == []  # root: raises it itself


def test_probe_reports_the_hard_limits_and_the_new_paths(tmp_path):
    """Faked: `podman` (info answers); real: sh's own `ulimit -H -l` / `-n` on this host."""
    _fake(tmp_path, "podman", 'case "$*" in info) exit 0 ;; --version) echo p ;; esac\n')
    facts = cf.parse_probe(_sh(cf.probe_command("podman"), tmp_path).stdout)
    want = _sh("ulimit -H -l; ulimit -H -n", tmp_path).stdout.split()
    assert [facts.memlock_hard, facts.nofile_hard] == want
    assert "/etc/nccl.conf" in cf.probe_command() and "/dev/gdrdrv" in cf.probe_command()


@pytest.mark.parametrize("missing", ["fi_info", "plugin"])
def test_efa_check_fail_names_the_ngc_installer_flag(tmp_path, missing):
    """efa-ngc: the FAIL hint for an image without libfabric/aws-ofi-nccl."""
    if missing == "plugin":
        _fake(tmp_path, "fi_info", FI_INFO_4)
    _fake(tmp_path, "ldconfig", "true\n")
    out = _sh(cf.efa_check_command(4), tmp_path)
    assert out.returncode == 1 and "--enable-ngc" in out.stdout and "1.49" in out.stdout
