"""scripts/allreduce_probe.py: bandwidth maths, NCCL transport, verdicts, and a real gloo run."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from tests.scripts import ROOT

# Lines in NCCL_DEBUG=INFO's format, as published in NCCL and aws-ofi-nccl users' logs.
SOCKET_LOG = """\
h:880:887 [0] NCCL INFO NET/IB : No device found.
h:880:887 [0] NCCL INFO NET/Socket : Using [0]eth0:172.17.0.2<0>
h:880:887 [0] NCCL INFO Using non-device net plugin version 0
h:880:887 [0] NCCL INFO Using network Socket
"""
EFA_LOG = """\
h:7614:7691 [0] NCCL INFO NET/Plugin: Loaded net plugin AWS Libfabric (v6)
h:7614:7691 [0] NCCL INFO NET/OFI Selected Provider is efa (found 32 nics)
h:7614:7691 [0] NCCL INFO Using network AWS Libfabric
"""
IB_LOG = """\
h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>
h:1:1 [0] NCCL INFO Using network IB
"""
# IB initialised, but NCCL_NET=Socket made NCCL pick sockets: the decision line wins.
IB_BUT_SOCKET_LOG = """\
h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>
h:1:1 [0] NCCL INFO NET/Socket : Using [0]ib0:10.0.0.1<0>
h:1:1 [0] NCCL INFO Using network Socket
"""


def test_sizes(probe):
    assert probe.parse_sizes("65536,1048576") == [65536, 1048576]
    assert probe.parse_sizes("64K, 1M,256MiB,1G") == [64 << 10, 1 << 20, 256 << 20, 1 << 30]
    assert probe.GPU_SIZES[0] == 1 << 20 and probe.GPU_SIZES[-1] == 256 << 20
    assert probe.CPU_SIZES[0] == 64 << 10 and probe.CPU_SIZES[-1] == 16 << 20
    with pytest.raises(ValueError, match="not a message size"):
        probe.parse_sizes("1T")


def test_bandwidth_definitions_match_nccl_tests(probe):
    assert probe.algbw_gbps(2_000_000_000, 2.0) == 1.0
    assert probe.busbw_gbps(10.0, 8) == pytest.approx(17.5)  # 2(n-1)/n = 1.75
    assert probe.busbw_gbps(10.0, 2) == pytest.approx(10.0)
    assert probe.busbw_gbps(10.0, 1) == 0.0
    row = probe.result_row(1 << 20, 0.001, 4)
    assert row == {"bytes": 1048576, "time_us": 1000.0, "algbw_gbps": 1.049, "busbw_gbps": 1.573}


@pytest.mark.parametrize(
    ("log", "transport"),
    [
        (SOCKET_LOG, "socket"),
        (EFA_LOG, "efa"),
        (IB_LOG, "infiniband"),
        (IB_BUT_SOCKET_LOG, "socket"),
        ("h:1:1 [0] NCCL INFO Using network Libfabric\n", "efa"),
        ("h:1:1 [0] NCCL INFO Using network GPUDirectTCPX_v7\n", "tcpx"),
        ("h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0\n", "infiniband"),
        # the SHARP plugin (nccl-rdma-sharp-plugins) names its IB transport IBext: lines from
        # NVIDIA/nccl#1357 and #1029 ("Using network IBext"), #1120 ("via NET/IBext_v6/1")
        ("h:1:1 [1] NCCL INFO Using network IBext\n", "infiniband"),
        ("h:1:1 [0] NCCL INFO Using network IBext_v8\n", "infiniband"),
        (
            "h:1:1 [0] NCCL INFO Channel 01/0 : 6[4f] -> 3[9d] [receive] via NET/IBext_v6/1\n",
            "infiniband",
        ),
        ("h:1:1 [0] NCCL INFO Using network IBfoo\n", None),
        ("h:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n", None),
    ],
)
def test_transport_from_nccl_log(probe, log, transport):
    assert probe.transport_from_nccl_log(log) == transport


def test_verdict_says_nccl_fell_back_to_sockets(probe):
    result = probe.verdict("efa", "socket", nodes=2)
    assert result["ok"] is False
    assert result["message"].startswith("NCCL fell back to sockets (NET/Socket) instead of efa")
    assert "aws-ofi-nccl" in result["message"]
    ib = probe.verdict("infiniband", "socket", nodes=4)
    assert not ib["ok"] and "NCCL_IB_DISABLE" in ib["message"]


@pytest.mark.parametrize(
    ("fabric", "observed", "nodes", "ok", "words"),
    [
        ("efa", "efa", 2, True, "NCCL used efa"),
        ("infiniband", "infiniband", 2, True, "NCCL used infiniband"),
        ("none", "gloo", 3, True, "no fast fabric expected"),
        ("none", "socket", 2, True, "no fast fabric expected"),
        ("efa", "socket", 1, True, "single node"),
        ("efa", None, 2, False, "could not tell"),
        ("efa", "infiniband", 2, False, "NCCL used infiniband, expected efa"),
        ("tcpx", "gloo", 2, False, "gloo over TCP"),
    ],
)
def test_verdicts(probe, fabric, observed, nodes, ok, words):
    result = probe.verdict(fabric, observed, nodes)
    assert result["ok"] is ok and words in result["message"]


def test_summary_takes_the_worst_rank_and_the_baseline(probe):
    rows = [probe.result_row(256 << 20, 0.004, 16), probe.result_row(1 << 20, 0.0002, 16)]
    doc = probe.summary(
        "nccl", 16, 2, rows, "efa", ["efa", "socket"] + ["efa"] * 14, {"FI_PROVIDER": "efa"}, 78.0
    )
    assert doc["transport"]["observed"] == "socket"
    assert doc["transport_ok"] is False and doc["ok"] is False
    assert doc["verdict"].startswith("NCCL fell back to sockets")
    assert doc["peak_busbw_gbps"] == rows[0]["busbw_gbps"]
    assert doc["baseline"]["busbw_gbps"] == 78.0 and doc["baseline"]["ok"] is True
    healthy = probe.summary("nccl", 16, 2, rows, "efa", ["efa"] * 16, {}, 300.0)
    assert healthy["transport_ok"] is True and healthy["verdict"] == "NCCL used efa"
    assert healthy["baseline"]["ok"] is False and healthy["ok"] is False  # 125.8 of 300 GB/s


def test_marker_line_round_trip(probe):
    doc = {"backend": "gloo", "results": []}
    line = probe.format_line(doc)
    assert line.startswith("GPUFLEET_ALLREDUCE {")
    assert probe.parse_line(f"[node-0] noise\n{line}\n") == doc
    with pytest.raises(ValueError):
        probe.parse_line("nothing here")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.torch
def test_real_gloo_run_with_torchrun(probe, tmp_path):
    pytest.importorskip("torch")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        "--nproc-per-node=2",
        "--master-addr=127.0.0.1",
        f"--master-port={free_port()}",
        str(ROOT / "scripts" / "allreduce_probe.py"),
        "--sizes=65536,1048576",
        "--iters=3",
        "--timeout=60",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", GPUFLEET_FABRIC="none", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, so nothing can outlive the test
    )
    try:
        output, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, output
    doc = probe.parse_line(output)
    assert doc["backend"] == "gloo" and doc["world_size"] == 2 and doc["nodes"] == 1
    assert [row["bytes"] for row in doc["results"]] == [65536, 1048576]
    assert all(row["busbw_gbps"] > 0 and row["time_us"] > 0 for row in doc["results"])
    assert doc["transport"]["per_rank"] == ["gloo", "gloo"]
    assert doc["transport_ok"] is True and doc["ok"] is True
    assert doc["verdict"].startswith("no fast fabric expected")
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # no rank or agent left in the job's process group


# NET/Plugin lines as NCCL prints them when libnccl-net.so does not load: NVIDIA/nccl#1504
# (NCCL 2.21.5) and NVIDIA/nccl-tests#188 (NCCL 2.18.1), recorded in those issues.
PLUGIN_2_21 = (
    "h:26023:26023 [0] NCCL INFO NET/Plugin: No plugin found (libnccl-net.so)\n"
    "h:26023:26023 [0] NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot "
    "open shared object file: No such file or directory : when loading libnccl-net.so\n"
    "h:26023:26023 [0] NCCL INFO NET/Plugin: Using internal network plugin.\n"
)
PLUGIN_2_18 = (
    "u:852750:852750 [0] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : "
    "libnccl-net.so: cannot open shared object file: No such file or directory\n"
    "u:852750:852750 [0] NCCL INFO NET/Plugin : No plugin found, using internal implementation\n"
)


@pytest.mark.parametrize("log", [PLUGIN_2_21, PLUGIN_2_18])
def test_plugin_failures_name_why_the_plugin_did_not_load(probe, log):
    (line,) = probe.plugin_failures(log + log)  # every rank prints it: once is enough
    assert line.startswith("Plugin load") and "libnccl-net.so: cannot open shared object" in line


def test_no_plugin_failure_when_the_plugin_loads(probe):
    log = "h:7614:7691 [0] NCCL INFO NET/Plugin: Loaded net plugin AWS Libfabric (v6)\n"
    assert probe.plugin_failures(log) == []


# NCCL logs from inside containers (issue 21). A container without the EFA devices and with
# FI_PROVIDER unset: aws-ofi-nccl runs on libfabric's tcp provider and NCCL still says "Using
# network Libfabric". Lines from aws/aws-ofi-nccl#803 (docker, NCCL 2.23.4, aws-ofi-nccl
# 1.12.1; its container-id hostname) and NVIDIA/nccl#1597 ("Using network Libfabric").
CONTAINER_OFI_TCP_LOG = """\
6f2d8a82d208:1287:1328 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.12.1-aws
6f2d8a82d208:1287:1328 [0] NCCL INFO NET/OFI Using Libfabric version 1.22
6f2d8a82d208:1287:1328 [0] NCCL INFO NET/OFI Selected Provider is tcp (found 1 nics)
6f2d8a82d208:1287:1328 [0] NCCL INFO Using network Libfabric
"""
# With FI_PROVIDER=efa and no uverbs device: the plugin fails (aws/aws-ofi-nccl#1020,
# nvcr.io/nvidia/pytorch:25.08-py3, its log's timestamp prefix) and NCCL takes its sockets
# (the NET/IB and NET/Socket lines of SOCKET_LOG above).
CONTAINER_NO_UVERBS_LOG = (
    "[2025-10-16 22:16:08] ip-172-31-3-90:1929:1937 [0] nccl_net_ofi_rdma_init:7978 NCCL WARN "
    "NET/OFI OFI fi_getinfo() call failed: No data available\n"
    "[2025-10-16 22:16:08] ip-172-31-3-90:1929:1937 [0] NCCL INFO NET/IB : No device found.\n"
    "[2025-10-16 22:16:08] ip-172-31-3-90:1929:1937 [0] NCCL INFO NET/Socket : Using "
    "[0]eth0:172.31.3.90<0>\n"
    "[2025-10-16 22:16:08] ip-172-31-3-90:1929:1937 [0] NCCL INFO Using network Socket\r\n"
)


# aws-ofi-nccl 1.15.0 and later (commit 06e8db33, src/nccl_ofi_net.cpp, read 2026-11-25 in the
# aws/aws-ofi-nccl source): "Selected provider is %s, fabric is %s (found %d nics)".
CONTAINER_OFI_TCP_LOG_115 = """\
6f2d8a82d208:1287:1328 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.15.0
6f2d8a82d208:1287:1328 [0] NCCL INFO NET/OFI Selected provider is tcp, fabric is 172.17.0.0/16 \
(found 1 nics)
6f2d8a82d208:1287:1328 [0] NCCL INFO Using network Libfabric
"""


def test_aws_ofi_nccl_115_wording_on_libfabric_tcp_is_a_socket_fallback(probe):
    """The reviewer's case: the 1.15 wording read as "efa" before."""
    assert probe.transport_from_nccl_log(CONTAINER_OFI_TCP_LOG_115) == "libfabric-tcp"
    efa = CONTAINER_OFI_TCP_LOG_115.replace(
        "is tcp, fabric is 172.17.0.0/16", "is efa, fabric is efa"
    )
    assert probe.transport_from_nccl_log(efa) == "efa"


def test_aws_ofi_nccl_on_libfabric_tcp_is_a_socket_fallback(probe):
    """Before issue 21 this log read as "efa" and the gate passed a TCP run."""
    observed = probe.transport_from_nccl_log(CONTAINER_OFI_TCP_LOG)
    assert observed == "libfabric-tcp"
    result = probe.verdict("efa", observed, nodes=2)
    assert result["ok"] is False
    assert result["message"].startswith(
        "NCCL fell back to sockets (aws-ofi-nccl on libfabric's tcp provider, not efa) "
        "instead of efa"
    )
    doc = probe.summary("nccl", 16, 2, [], "efa", ["efa"] * 15 + [observed], {})
    assert doc["transport"]["observed"] == "libfabric-tcp" and doc["transport_ok"] is False


def test_container_log_without_uverbs_names_the_socket_fallback_and_why(probe):
    assert probe.transport_from_nccl_log(CONTAINER_NO_UVERBS_LOG) == "socket"
    assert probe.plugin_failures(CONTAINER_NO_UVERBS_LOG) == [
        "NET/OFI OFI fi_getinfo() call failed: No data available"
    ]
    assert probe.transport_from_nccl_log(EFA_LOG) == "efa"  # the provider line says efa
