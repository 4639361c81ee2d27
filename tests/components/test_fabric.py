"""The fabric table: what libfabric/NCCL get on each fabric, per instance type where it matters."""

from __future__ import annotations

import pytest
import yaml

from gpufleet.components import catalog
from gpufleet.components.bootstrap import BootstrapContext, render_cloud_init
from gpufleet.components.catalog import instance_nccl_env
from gpufleet.components.fabric import nccl_env

# AWS EFA docs, "Supported instance types": RDMA read on p4d, p4de, p5, p5e, p5en (and trn*).
RDMA_READ = {"p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge"}
EFA_TYPES = [t.name for t in catalog.types("aws") if t.fabric == "efa"]


@pytest.mark.parametrize("name", EFA_TYPES)
def test_device_rdma_is_asked_for_only_where_the_efa_does_rdma_read(name):
    """libfabric's EFA provider aborts the application when FI_EFA_USE_DEVICE_RDMA=1 and the
    device has no RDMA read; unset, it uses RDMA wherever the device has it (ofiwg/libfabric
    man/fi_efa.7.md, FI_EFA_USE_DEVICE_RDMA). g4dn, g5, g6, g6e and p3dn have EFA without RDMA
    read (AWS EC2 user guide, efa.md "Supported instance types"), so the shipped aws-g5 stack
    would abort every NCCL job with the old fabric-wide constant."""
    env = instance_nccl_env("aws", name, "efa")
    assert ("FI_EFA_USE_DEVICE_RDMA" in env) == (name in RDMA_READ)
    if name in RDMA_READ:
        assert env["FI_EFA_USE_DEVICE_RDMA"] == "1"


def node_nccl_file(instance_type: str) -> str:
    ctx = BootstrapContext(
        "t", "aws", instance_type, 0, 2, "u", "ssh-ed25519 AAAA u", "KEY", "ssh-ed25519 BBBB h",
        "efa", 1_900_000_000,
    )  # fmt: skip
    files = {f["path"]: f["content"] for f in yaml.safe_load(render_cloud_init(ctx))["write_files"]}
    return files["/etc/gpufleet/nccl.env"]


def test_node_env_of_a_g5_has_no_device_rdma_and_a_p5_has_it():
    assert "FI_EFA_USE_DEVICE_RDMA" not in node_nccl_file("g5.12xlarge")
    assert "FI_EFA_USE_DEVICE_RDMA=1" in node_nccl_file("p5.48xlarge")


def test_efa_keeps_data_loader_forks_out_of_huge_pages():
    """fi_efa(7), FI_EFA_USE_HUGE_PAGE: huge-page buffers can run the huge page pool dry and
    break fork() in DataLoader workers; fork-safe mode implies 0, set explicitly for jobs that
    override FI_EFA_FORK_SAFE."""
    env = nccl_env("efa")
    assert env["FI_EFA_USE_HUGE_PAGE"] == "0" and env["FI_EFA_FORK_SAFE"] == "1"


def test_rdma_read_is_only_a_catalog_trait_of_efa_types():
    assert {t.name for t in catalog.types("aws") if t.efa_rdma} <= RDMA_READ
    assert all(t.fabric == "efa" for t in catalog.load() if t.efa_rdma)
    with pytest.raises(catalog.CatalogEntryError, match="efa_rdma"):
        catalog.parse_text(
            "clouds: {aws: {x.large: {gpus: 1, gpu_model: A, gpu_memory_gib: 1, vcpus: 1, "
            "ram_gib: 1, fabric: none, efa_rdma: true, price_per_hour: 1, price_region: r, "
            "price_date: '2026', price_source: s}}}"
        )
