"""mpirun and DeepSpeed's runner on a real 3-node sandbox, through the run's ssh config.

Both start their remote processes with OpenSSH themselves (Open MPI's `ssh <host> orted`,
DeepSpeed's `pdsh -R ssh`), so the sandbox's per-node ports must come from the ssh config
(`<cluster>-node-K` aliases) and not from the hostfile, which has no port syntax.
"""

from __future__ import annotations

import importlib.util
import re
import shutil

import pytest

from tests.integration.conftest import ROOT, gpufleet, requires_sshd, requires_torch

pytestmark = [requires_sshd, pytest.mark.sandbox]

# Every rank reports who it is: the node comes from the sshd session it descends from
# (sandbox sshd sets GPUFLEET_NODE), the rank and size from the launcher's own variables.
REPORT = """\
import os
rank = os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ.get("RANK")
size = os.environ.get("OMPI_COMM_WORLD_SIZE") or os.environ.get("WORLD_SIZE")
print(f"rank {rank}/{size} on {os.environ.get('GPUFLEET_NODE')} "
      f"node_rank={os.environ.get('GPUFLEET_NODE_RANK')} "
      f"cluster={os.environ.get('GPUFLEET_CLUSTER')}", flush=True)
"""


def ranks(stdout: str) -> set[str]:
    """'rank R/N on node-K' of every report line (pdsh adds its own `host: ` prefix)."""
    return set(re.findall(r"rank \d+/\d+ on node-\d+", stdout))


@pytest.mark.skipif(not shutil.which("mpirun"), reason="Open MPI (openmpi-bin) not installed")
def test_mpirun_on_three_nodes(make_sandbox, gpufleet_home, tmp_path):
    make_sandbox("mpi", nodes=3)
    (tmp_path / "report.py").write_text(REPORT)
    r = gpufleet(gpufleet_home, "run", "--cluster", "mpi", "--launcher", "mpirun",
                 "--workdir", str(tmp_path), "--", "report.py", timeout=240)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert ranks(r.stdout) == {"rank 0/3 on node-0", "rank 1/3 on node-1", "rank 2/3 on node-2"}
    assert "cluster=mpi" in r.stdout  # gpufleet's rank env reached the ranks (-x)
    # Each line under the node its rank runs on (the sandbox sshd's GPUFLEET_NODE says which),
    # with that node's own GPUFLEET_NODE_RANK, not all under the head mpirun runs on.
    tagged = set(
        re.findall(r"^\[(node-\d)\] rank \d+/3 on (node-\d) node_rank=(\d)", r.stdout, re.M)
    )
    assert tagged == {
        ("node-0", "node-0", "0"),
        ("node-1", "node-1", "1"),
        ("node-2", "node-2", "2"),
    }
    assert "launching mpirun on 3 nodes from node-0" in r.stderr


# A DistributedDataParallel program to the torch contract alone, as torch's DDP tutorial
# writes one: env:// init, and nothing of gpufleet or of MPI (no GPUFLEET_*, no OMPI_*).
STOCK_DDP = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo", init_method="env://")
model = DDP(torch.nn.Linear(8, 1))
model(torch.randn(4, 8)).sum().backward()
mine = torch.stack([p.grad.sum() for p in model.parameters()])
theirs = mine.clone()
dist.broadcast(theirs, src=0)
assert torch.equal(mine, theirs), "gradients were not all-reduced"
print(
    f"rank {dist.get_rank()} world_size {dist.get_world_size()} RANK={os.environ['RANK']} "
    f"LOCAL_RANK={os.environ['LOCAL_RANK']} LOCAL_WORLD_SIZE={os.environ['LOCAL_WORLD_SIZE']} "
    f"MASTER={os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
    flush=True,
)
dist.barrier()
del model  # not in the tutorial: gloo can abort a rank at exit if DDP outlives its group
dist.destroy_process_group()
"""


@requires_torch
@pytest.mark.skipif(not shutil.which("mpirun"), reason="Open MPI (openmpi-bin) not installed")
def test_mpirun_gives_an_env_init_ddp_script_the_torch_contract(
    make_sandbox, gpufleet_home, tmp_path
):
    """Open MPI sets only OMPI_*: each rank gets RANK, WORLD_SIZE, LOCAL_RANK,
    LOCAL_WORLD_SIZE and MASTER_* from gpufleet's rank wrapper, and shows under its node."""
    info = make_sandbox("ddp", nodes=3)
    (tmp_path / "ddp.py").write_text(STOCK_DDP)
    r = gpufleet(gpufleet_home, "run", "--cluster", "ddp", "--launcher", "mpirun",
                 "--workdir", str(tmp_path), "--", "ddp.py", timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    master = f"MASTER={info.head.private_ip}:"
    lines = re.findall(r"^\[(node-\d)\] rank (\d) world_size (\d) RANK=(\d) LOCAL_RANK=(\d) "
                       r"LOCAL_WORLD_SIZE=(\d) (MASTER=\S+)$", r.stdout, re.M)  # fmt: skip
    assert sorted(t[:6] for t in lines) == [
        ("node-0", "0", "3", "0", "0", "1"),
        ("node-1", "1", "3", "1", "0", "1"),
        ("node-2", "2", "3", "2", "0", "1"),
    ], r.stdout
    assert all(t[6].startswith(master) for t in lines)
    # The repo's torchrun example, as it is: its node rank line and rank 0's result
    shutil.copy(ROOT / "examples" / "train_ddp.py", tmp_path / "train_ddp.py")
    r = gpufleet(gpufleet_home, "run", "--cluster", "ddp", "--launcher", "mpirun",
                 "--workdir", str(tmp_path), "--", "train_ddp.py", "--steps", "20",
                 timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    up = set(re.findall(r"^\[(node-\d)\] rank (\d)/3 up on node (\d)", r.stdout, re.M))
    assert up == {("node-0", "0", "0"), ("node-1", "1", "1"), ("node-2", "2", "2")}, r.stdout
    assert re.search(r"^\[node-0\] done world_size=3 ", r.stdout, re.M), r.stdout


@requires_torch
@pytest.mark.skipif(not importlib.util.find_spec("deepspeed"), reason="deepspeed not installed")
@pytest.mark.skipif(not shutil.which("pdsh"), reason="pdsh not installed")
def test_deepspeed_runner_trains_on_three_nodes(make_sandbox, gpufleet_home, tmp_path):
    """DeepSpeed's runner starts `deepspeed.launcher.launch` on every host with pdsh; each
    sets RANK/WORLD_SIZE/MASTER_* for its ranks, here a gloo DDP job across the 3 nodes."""
    make_sandbox("ds", nodes=3)
    (tmp_path / "report.py").write_text(REPORT)
    shutil.copy(ROOT / "examples" / "train_ddp.py", tmp_path / "train_ddp.py")
    r = gpufleet(gpufleet_home, "run", "--cluster", "ds", "--launcher", "deepspeed",
                 "--workdir", str(tmp_path), "--", "report.py", timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert ranks(r.stdout) == {"rank 0/3 on node-0", "rank 1/3 on node-1", "rank 2/3 on node-2"}
    r = gpufleet(gpufleet_home, "run", "--cluster", "ds", "--launcher", "deepspeed",
                 "--workdir", str(tmp_path), "--", "train_ddp.py", "--steps", "20",
                 timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "world_size=3" in r.stdout
