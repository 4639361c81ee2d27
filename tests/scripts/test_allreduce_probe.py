"""scripts/allreduce_probe.py: bandwidth arithmetic, transport verdicts, and a real gloo run."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "allreduce_probe.py"
spec = importlib.util.spec_from_file_location("allreduce_probe", SCRIPT)
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)


def test_busbw_follows_nccl_tests():
    algbw, busbw = probe.bus_bandwidth(1_000_000_000, 0.1, 8)
    assert algbw == pytest.approx(10.0) and busbw == pytest.approx(17.5)
    assert probe.bus_bandwidth(10**9, 1.0, 1)[1] == 0.0


@pytest.mark.parametrize(
    ("log", "want"),
    [
        (
            "NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\nNCCL INFO Using network Socket",
            "Socket",
        ),
        (
            "NCCL INFO NET/OFI Selected provider is efa\nNCCL INFO Using network AWS Libfabric",
            "AWS Libfabric",
        ),
        ("NCCL INFO NET/IB : Using [0]mlx5_ib0:1/IB\nNCCL INFO Using network IB", "IB"),
        ("nothing here", None),
    ],
)
def test_nccl_network_from_its_log(log, want):
    assert probe.nccl_network(log) == want


def test_verdicts():
    assert probe.verdict("efa", "nccl", "Socket") == (
        False, "NCCL fell back to sockets instead of efa: check the plugin and env"
    )  # fmt: skip
    assert probe.verdict("efa", "nccl", "AWS Libfabric")[0]
    assert probe.verdict("infiniband", "nccl", "IB")[0]
    assert not probe.verdict("tcpx", "nccl", "IB")[0]
    assert not probe.verdict("efa", "nccl", None)[0]
    assert probe.verdict("none", "gloo", None)[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_real_gloo_run_reports_bus_bandwidth():
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
         "--master-addr=127.0.0.1", f"--master-port={free_port()}", str(SCRIPT),
         "--sizes", "65536,1048576", "--iters", "3"],
        capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith(probe.MARK)]
    rep = json.loads(line[len(probe.MARK) :])
    assert rep["backend"] == "gloo" and rep["world_size"] == 2 and rep["ok"]
    assert [x["bytes"] for x in rep["results"]] == [65536, 1048576]
    assert all(x["busbw_gbps"] > 0 for x in rep["results"])
