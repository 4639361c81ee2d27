"""NCCL/libfabric environment per cluster fabric: one table, used by launch and the node image."""

from __future__ import annotations

from typing import Literal

Fabric = Literal["efa", "infiniband", "tcpx", "tcpxo", "none"]
FABRICS: tuple[str, ...] = ("efa", "infiniband", "tcpx", "tcpxo", "none")

# Sources: reference/cloud-gpu-facts.md §1.5 (EFA), §3.5 (Azure IB), §2.5 (GCP TCPX/TCPXO).
_NCCL_ENV: dict[str, dict[str, str]] = {
    "efa": {
        "FI_PROVIDER": "efa",
        "FI_EFA_FORK_SAFE": "1",
        # Huge-page buffers can exhaust the huge page pool and break fork() in data loader
        # workers (fi_efa(7)); FORK_SAFE=1 implies it, but a job may drop FORK_SAFE.
        "FI_EFA_USE_HUGE_PAGE": "0",
        "NCCL_SOCKET_IFNAME": "^docker,lo,veth",
        "NCCL_DEBUG": "WARN",
    },
    "infiniband": {
        "NCCL_IB_PCI_RELAXED_ORDERING": "1",
        "NCCL_IGNORE_CPU_AFFINITY": "1",
        "NCCL_SOCKET_IFNAME": "eth0",
        # No UCX_TLS=tcp / UCX_NET_DEVICES=eth0 for every rank: azurehpc's scripts set them for
        # one test's bootstrap, but exported to every rank MPI (UCX) would run over TCP on eth0
        # instead of InfiniBand.
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "OMPI_MCA_coll_hcoll_enable": "0",
        "NCCL_DEBUG": "WARN",
    },
    "tcpx": {
        "NCCL_NET": "GPUDirectTCPX_v7",
        "NCCL_GPUDIRECTTCPX_CTRL_DEV": "enp0s12",
        "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": "enp6s0,enp12s0,enp134s0,enp140s0",
        "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX": "/run/tcpx",
        # Each GPU NIC's TX/RX threads on cores of its NUMA node; without the bindings and the
        # flow-steering wait the plugin runs far below line rate (Cluster Toolkit
        # examples/machine-learning/a3-highgpu-8g/nccl-tests/run-nccl-tests.sh at 1047080).
        "NCCL_GPUDIRECTTCPX_TX_BINDINGS": (
            "enp6s0:8-21,112-125;enp12s0:8-21,112-125;enp134s0:60-73,164-177;enp140s0:60-73,164-177"
        ),
        "NCCL_GPUDIRECTTCPX_RX_BINDINGS": (
            "enp6s0:22-35,126-139;enp12s0:22-35,126-139;"
            "enp134s0:74-87,178-191;enp140s0:74-87,178-191"
        ),
        "NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS": "500000",
        "NCCL_SOCKET_IFNAME": "enp0s12",
        "NCCL_CROSS_NIC": "0",
        "NCCL_ALGO": "Ring",
        "NCCL_PROTO": "Simple",
        "NCCL_NSOCKS_PERTHREAD": "4",
        "NCCL_SOCKET_NTHREADS": "1",
        "NCCL_P2P_PXN_LEVEL": "0",
        "NCCL_DEBUG": "WARN",
    },
    "tcpxo": {
        "NCCL_FASTRAK_CTRL_DEV": "enp0s12",
        "NCCL_FASTRAK_IFNAME": (
            "enp6s0,enp7s0,enp13s0,enp14s0,enp134s0,enp135s0,enp141s0,enp142s0"
        ),
        "NCCL_SOCKET_IFNAME": "enp0s12",
        "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY": "/dev/aperture_devices",
        "NCCL_DEBUG": "WARN",
    },
    "none": {},
}


# Directories to put in front of LD_LIBRARY_PATH (the NCCL net plugins live there).
_LIBRARY_PATHS: dict[str, tuple[str, ...]] = {
    # aws-ofi-nccl's directory varies with the EFA installer's package, the OS and the CPU
    # (images/steps/50-nccl-env.sh finds the one on the node); every candidate is listed, a
    # missing directory on the path costs nothing.
    "efa": (
        "/opt/amazon/efa/lib",
        "/opt/amazon/openmpi/lib",
        "/opt/amazon/ofi-nccl/lib64",
        "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu",
        "/opt/amazon/ofi-nccl/lib/aarch64-linux-gnu",
        "/opt/amazon/ofi-nccl/lib",
        "/opt/aws-ofi-nccl/lib",
    ),
    "infiniband": ("/usr/local/nccl-rdma-sharp-plugins/lib",),
    "tcpx": ("/var/lib/tcpx/lib64",),
    "tcpxo": ("/var/lib/tcpxo/lib64",),
    "none": (),
}


def library_paths(fabric: str) -> list[str]:
    """Directories with the fabric's NCCL plugin, to prepend to LD_LIBRARY_PATH."""
    nccl_env(fabric)  # validates the name
    return list(_LIBRARY_PATHS[fabric])


# Variables that make NCCL load a network plugin that only works between nodes: on one node
# NCCL_NET=GPUDirectTCPX_v7 makes init fail instead of using NVLink (Cluster Toolkit sets it
# only for multi-node jobs).
_MULTI_NODE_ONLY = ("NCCL_NET",)


def nccl_env(fabric: str, nodes: int | None = None, *, efa_rdma: bool = False) -> dict[str, str]:
    """The NCCL/libfabric variables a rank needs on this fabric (a fresh copy; none for `none`).

    `nodes`: the cluster's node count, when known; a one-node cluster gets no net plugin.
    `efa_rdma`: the instance type's EFA does RDMA read (catalog field `efa_rdma`). Only then is
    FI_EFA_USE_DEVICE_RDMA=1 set: libfabric aborts when it is asked for on a device without it.
    """
    if fabric not in _NCCL_ENV:
        raise ValueError(f"unknown fabric {fabric!r}; expected one of {', '.join(FABRICS)}")
    env = dict(_NCCL_ENV[fabric])
    if nodes == 1:
        for k in _MULTI_NODE_ONLY:
            env.pop(k, None)
    if fabric == "efa" and efa_rdma:
        env["FI_EFA_USE_DEVICE_RDMA"] = "1"
    return env
