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
