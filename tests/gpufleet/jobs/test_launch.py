"""Launch commands and rank environments: goldens, NCCL env per fabric, failure attribution."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpufleet.components.catalog import instance_nccl_env
from gpufleet.components.clusterinfo import ClusterInfo
from gpufleet.components.errors import SpecError
from gpufleet.jobs import launch
from gpufleet.jobs.launch import LaunchOptions
from tests.gpufleet import fakes as clusters


def cluster(fabric: str = "efa", gpus: int = 8, cloud: str = "aws") -> ClusterInfo:
    info = clusters.cluster(gpus=gpus, cloud=cloud, fabric=fabric, python="/opt/venv/bin/python")
    if fabric == "efa":  # the goldens' aws-p4d
        info = info.model_copy(update={"instance_type": "p4d.24xlarge"})
    return info


OPTS = LaunchOptions(
    launcher="torchrun",
    command=["train.py", "--epochs", "1"],
    master_port=29611,
    run_id="r1",
    env={"WANDB_MODE": "offline"},
)


@pytest.mark.parametrize("launcher", launch.LAUNCHERS)
def test_golden_commands(golden, launcher):
    opts = LaunchOptions(**{**OPTS.__dict__, "launcher": launcher})
    text = "".join(f"# node-{i}\n{launch.node_command(cluster(), i, opts)}\n" for i in range(2))
    golden(f"launch/aws-p4d-{launcher}.sh", text)


def test_torchrun_arguments_per_node():
    """Every agent is a c10d client of the store on the head (is_host=false), never its host:
    with the static backend the head's agent hosts the store, exits first, and the others'
    exit barrier fails with a traceback (pytorch/pytorch#69520)."""
    c = cluster()
    for i in range(2):
        cmd = launch.node_command(c, i, OPTS)
        assert "--nnodes=2" in cmd and "--nproc-per-node=8" in cmd
        assert "--rdzv-backend=c10d --rdzv-endpoint=10.0.0.10:29611 --rdzv-id=r1" in cmd
        assert "--rdzv-conf=is_host=false" in cmd and f"--local-addr=10.0.0.1{i}" in cmd
        assert "--node-rank" not in cmd and "--master-addr" not in cmd
        assert cmd.endswith(".gpufleet/runs/r1/rank_wrapper.py train.py --epochs 1")


def test_module_form_goes_to_the_wrapper_as_is():
    opts = LaunchOptions(**{**OPTS.__dict__, "command": ["-m", "pkg.train", "--lr", "1"]})
    assert launch.node_command(cluster(), 0, opts).endswith("rank_wrapper.py -m pkg.train --lr 1")


def test_rendezvous_store_command_and_file():
    cmd = launch.rendezvous_command(cluster(), OPTS)
    exports, _, store = cmd.rpartition("; exec ")
    assert store == "/opt/venv/bin/python .gpufleet/runs/r1/rendezvous_store.py 29611"
    # the head ranks' environment, the user's --env included (a container's PYTHONPATH)
    assert exports == launch.node_command(cluster(), 0, OPTS).split("; exec ")[0]
    with_env = LaunchOptions(**{**OPTS.__dict__, "env": {"PYTHONPATH": "/opt/t"}})
    assert "PYTHONPATH=/opt/t;" in launch.rendezvous_command(cluster(), with_env)
    store = launch.run_files(cluster(), OPTS)[".gpufleet/runs/r1/rendezvous_store.py"]
    compile(store, "rendezvous_store.py", "exec")
    assert launch.STORE_READY in store


def test_rendezvous_store_serves_until_stdin_closes(tmp_path):
    """The store answers clients while gpufleet holds its stdin open, and exits on EOF."""
    pytest.importorskip("torch")
    import socket
    from datetime import timedelta

    from torch.distributed import TCPStore

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "store.py").write_text(launch.RENDEZVOUS_STORE)
    proc = subprocess.Popen(
        [sys.executable, str(tmp_path / "store.py"), str(port)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == launch.STORE_READY
        client = TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=30))
        client.set("k", "v")
        assert client.get("k") == b"v"
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    ("slots", "node", "local", "rank"), [("8,8", "1", "3", "11"), ("1,2,1", "2", "0", "3")]
)
def test_rank_wrapper_numbers_ranks_in_node_order(tmp_path, slots, node, local, rank):
    """c10d numbers nodes in its own order; node-K's ranks follow the hostfile's order."""
    wrapper = tmp_path / "rank_wrapper.py"
    wrapper.write_text(launch.RANK_WRAPPER)
    script = tmp_path / "job.py"
    script.write_text("import os; print(os.environ['RANK'], os.environ['GROUP_RANK'])\n")
    env = {"GPUFLEET_SLOTS_PER_NODE": slots, "GPUFLEET_NODE_RANK": node, "LOCAL_RANK": local}
    r = subprocess.run(
        [sys.executable, str(wrapper), str(script)],
        env={**os.environ, "RANK": "0", "GROUP_RANK": "0", **env},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert r.stdout.split() == [rank, node]


def test_rank_wrapper_runs_a_module(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text(
        "import sys\nif __name__ == '__main__':\n    print(sys.argv[1:])\n    sys.exit(4)\n"
    )
    wrapper = tmp_path / "rank_wrapper.py"
    wrapper.write_text(launch.RANK_WRAPPER)
    r = subprocess.run(
        [sys.executable, str(wrapper), "-m", "pkg.train", "--lr", "1"],
        cwd=tmp_path, env={**os.environ, "RANK": "2"}, capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 4 and r.stdout.strip() == "['--lr', '1']"
    assert (tmp_path / "rank-2.rc").read_text().split()[0] == "4"


def test_nproc_is_gpus_or_one_or_override():
    assert "--nproc-per-node=1" in launch.node_command(cluster("none", 0, "local"), 0, OPTS)
    opts = LaunchOptions(**{**OPTS.__dict__, "nproc_per_node": 3})
    assert "--nproc-per-node=3" in launch.node_command(cluster(), 1, opts)


def env_type(fabric: str) -> str | None:
    return cluster(fabric).instance_type


@pytest.mark.parametrize("fabric", ["efa", "infiniband", "tcpx", "tcpxo", "none"])
def test_rank_env_has_cluster_vars_and_fabric_nccl(fabric):
    env = launch.rank_env(cluster(fabric), 1, OPTS)
    assert env["GPUFLEET_NODE_RANK"] == "1" and env["GPUFLEET_NUM_NODES"] == "2"
    assert env["GPUFLEET_NODE_IPS"] == "10.0.0.10,10.0.0.11"
    assert env["MASTER_ADDR"] == "10.0.0.10" and env["MASTER_PORT"] == "29611"
    for k, v in instance_nccl_env("aws", env_type(fabric), fabric).items():
        assert env[k] == v
    if fabric == "none":
        assert not any(k.startswith(("NCCL_", "FI_")) for k in env)


@pytest.mark.parametrize(
    ("instance_type", "rdma"), [("p4d.24xlarge", True), ("g5.12xlarge", False)]
)
def test_every_rank_asks_for_efa_device_rdma_only_where_the_type_has_it(instance_type, rdma):
    """libfabric aborts a rank that sets FI_EFA_USE_DEVICE_RDMA=1 on an EFA without RDMA read
    (ofiwg/libfabric man/fi_efa.7.md); g5's EFA has none (AWS EC2 user guide, efa.md)."""
    info = cluster("efa").model_copy(update={"instance_type": instance_type})
    env = launch.rank_env(info, 1, OPTS)
    assert (env.get("FI_EFA_USE_DEVICE_RDMA") == "1") == rdma


def test_every_rank_on_an_azure_nd_size_gets_the_images_topology_file():
    """Azure's ubuntu-hpc image ships one NCCL topology file per ND size and points NCCL at
    it through /etc/nccl.conf (azhpc-images customizations/ndv4.sh, ndv5.sh); a rank that
    does not read that file (a container, a custom image) needs NCCL_TOPO_FILE itself, or
    NCCL mis-pairs GPUs and HCAs. The catalog names the file per size."""
    for size, topo in (
        ("Standard_ND96asr_v4", "/opt/microsoft/ndv4/topo.xml"),
        ("Standard_ND96isr_H100_v5", "/opt/microsoft/ndv5/topo.xml"),
    ):
        info = cluster("infiniband", cloud="azure").model_copy(update={"instance_type": size})
        assert launch.rank_env(info, 1, OPTS)["NCCL_TOPO_FILE"] == topo


def test_user_env_wins_over_fabric_defaults():
    opts = LaunchOptions(**{**OPTS.__dict__, "env": {"NCCL_DEBUG": "INFO"}})
    assert launch.rank_env(cluster("efa"), 0, opts)["NCCL_DEBUG"] == "INFO"


def test_exports_survive_a_real_shell(tmp_path):
    """The command's export prefix, run by sh, yields exactly the rank env (+ hostfile path)."""
    opts = LaunchOptions(
        launcher="none",
        command=[sys.executable, "-c", "'import json,os; print(json.dumps(dict(os.environ)))'"],
        env={"TRICKY": "a b'c\"$HOME"},
        run_id="r2",
    )
    c = cluster("efa")
    cmd = launch.node_command(c, 1, opts)
    out = subprocess.run(
        ["sh", "-c", cmd],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
        env={"PATH": os.environ["PATH"]},
    ).stdout
    import json

    got = json.loads(out)
    for k, v in launch.rank_env(c, 1, opts).items():
        assert got[k] == v, k
    assert got["GPUFLEET_HOSTFILE"] == f"{tmp_path}/.gpufleet/runs/r2/hostfile"
    assert got["LD_LIBRARY_PATH"].startswith("/opt/amazon/efa/lib:")


def test_mpirun_runs_from_the_head_only():
    opts = LaunchOptions(**{**OPTS.__dict__, "launcher": "mpirun"})
    assert launch.node_command(cluster(), 1, opts) is None
    head = launch.node_command(cluster(), 0, opts)
    assert "mpirun --hostfile .gpufleet/runs/r1/hosts -np 16" in head
    assert '--mca plm_rsh_args "-F $PWD/.gpufleet/runs/r1/ssh_config"' in head


def test_mpirun_starts_every_rank_through_the_wrapper_with_tagged_output():
    """Each rank runs the wrapper (the torch contract from OMPI_*) and gets its node rank
    from there, not the head's GPUFLEET_NODE_RANK=0 through -x."""
    opts = LaunchOptions(**{**OPTS.__dict__, "launcher": "mpirun"})
    head = launch.node_command(cluster(), 0, opts)
    assert "--map-by slot --tag-output" in head
    assert head.endswith(
        "/opt/venv/bin/python .gpufleet/runs/r1/rank_wrapper.py train.py --epochs 1"
    )
    assert "-x MASTER_ADDR -x MASTER_PORT" in head and "-x GPUFLEET_NODE_RANK" not in head


def _mpi_rank(tmp_path, slots: str, rank: int, local: int, local_size: int, size: int):
    wrapper = tmp_path / "rank_wrapper.py"
    wrapper.write_text(launch.RANK_WRAPPER)
    script = tmp_path / "job.py"
    names = [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GPUFLEET_NODE_RANK",
    ]
    script.write_text(f"import os; print(*[os.environ[k] for k in {names!r}])\n")
    env = {k: v for k, v in os.environ.items() if k not in names}
    env.update(
        GPUFLEET_SLOTS_PER_NODE=slots, GPUFLEET_NODE_RANK="0", OMPI_COMM_WORLD_RANK=str(rank),
        OMPI_COMM_WORLD_SIZE=str(size), OMPI_COMM_WORLD_LOCAL_RANK=str(local),
        OMPI_COMM_WORLD_LOCAL_SIZE=str(local_size), OMPI_COMM_WORLD_NODE_RANK=str(local),
    )  # fmt: skip
    return subprocess.run(
        [sys.executable, str(wrapper), str(script)], env=env, capture_output=True, text=True
    )


@pytest.mark.parametrize(
    ("slots", "rank", "local", "node"),
    [
        ("1,1,1", 2, 0, 2),
        ("1,1,1", 0, 0, 0),
        ("8,8", 11, 3, 1),
        ("1,2,1", 2, 1, 1),
        ("1,2,1", 3, 0, 2),
    ],
)
def test_rank_wrapper_gives_mpirun_ranks_the_torch_contract(tmp_path, slots, rank, local, node):
    """Open MPI sets only OMPI_*: the wrapper sets torch's variables and the node rank (the
    node whose slots hold the rank; OMPI_COMM_WORLD_NODE_RANK counts processes, not nodes)."""
    per = [int(s) for s in slots.split(",")]
    r = _mpi_rank(tmp_path, slots, rank, local, per[node], sum(per))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(rank), str(sum(per)), str(local), str(per[node]), str(node),
                                str(node)]  # fmt: skip


def test_rank_wrapper_refuses_an_mpirun_placement_off_the_hostfile(tmp_path):
    r = _mpi_rank(tmp_path, "2,2", rank=1, local=0, local_size=1, size=4)  # --map-by node
    assert r.returncode == 1
    assert "rank 1 as local rank 0" in r.stderr and "--map-by slot" in r.stderr


def test_mpirun_output_goes_under_the_node_of_its_rank():
    """--tag-output lines: `[job,rank]<stdout>:text` (Open MPI 4), `: text` (Open MPI 5)."""
    c = cluster()  # two nodes of 8 slots
    opts = LaunchOptions(**{**OPTS.__dict__, "launcher": "mpirun"})
    assert launch.mpi_output_node(c, opts, "[1,9]<stdout>:  File x") == ("node-1", "  File x")
    assert launch.mpi_output_node(c, opts, "[1,7]<stderr>:oops") == ("node-0", "oops")
    assert launch.mpi_output_node(c, opts, "[1,8]<stdout>: hi", space=True) == ("node-1", "hi")
    assert launch.mpi_output_node(c, opts, "mpirun noticed ...") == (None, "mpirun noticed ...")
    assert launch.mpi_output_node(c, opts, "[1,16]<stdout>:x") == (None, "[1,16]<stdout>:x")
    assert launch.node_of_rank(c, LaunchOptions(**{**opts.__dict__, "nproc_per_node": 1}), 1) == (
        "node-1"
    )


@pytest.mark.parametrize(
    ("text", "found"),
    [
        (
            "mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/",
            ("openmpi", 4),
        ),
        ("mpirun (Open MPI) 5.0.3\n", ("openmpi", 5)),
        (
            "HYDRA build details:\n    Version:                                 4.0.2\n",
            ("other", 0),
        ),
        ("", None),
    ],
)
def test_mpi_version(text, found):
    assert launch.mpi_version(text) == found


def test_deepspeed_runs_its_runner_from_the_head_with_pdsh_over_the_run_ssh_config():
    """DeepSpeed's runner (deepspeed/launcher/runner.py) reads `host slots=N` hostfiles,
    starts `deepspeed.launcher.launch` on every host through pdsh, which appends
    PDSH_SSH_ARGS_APPEND to its ssh command, and exports the lines of $DS_ENV_FILE."""
    opts = LaunchOptions(**{**OPTS.__dict__, "launcher": "deepspeed"})
    assert launch.node_command(cluster(), 1, opts) is None
    head = launch.node_command(cluster(), 0, opts)
    assert "-m deepspeed.launcher.runner --hostfile .gpufleet/runs/r1/hosts --launcher pdsh" in head
    assert "--master_addr=10.0.0.10 --master_port=29611 train.py --epochs 1" in head
    assert 'PDSH_SSH_ARGS_APPEND="-F $PWD/.gpufleet/runs/r1/ssh_config"' in head
    files = launch.run_files(cluster(), opts)
    assert files[".gpufleet/runs/r1/hosts"] == "t-node-0 slots=8\nt-node-1 slots=8\n"
    env = dict(line.split("=", 1) for line in files[".gpufleet/runs/r1/deepspeed_env"].split())
    assert env["NCCL_SOCKET_IFNAME"] == "^docker,lo,veth" and "GPUFLEET_NODE_RANK" not in env
    assert "HostName 10.0.0.11" in files[".gpufleet/runs/r1/ssh_config"]  # node to node


def test_run_files_hostfile_and_wrapper():
    files = launch.run_files(cluster(), OPTS)
    assert files[".gpufleet/runs/r1/hostfile"] == "10.0.0.10 slots=8\n10.0.0.11 slots=8\n"
    compile(files[".gpufleet/runs/r1/rank_wrapper.py"], "rank_wrapper.py", "exec")


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("import sys; sys.exit(3)", 3),
        ("raise ValueError('x')", 1),
        ("pass", 0),
        ("import sys; sys.exit('bad')", 1),
    ],
)
def test_rank_wrapper_records_failing_code(tmp_path, body, code):
    wrapper = tmp_path / "rank_wrapper.py"
    wrapper.write_text(launch.RANK_WRAPPER)
    script = tmp_path / "job.py"
    script.write_text(body + "\n")
    r = subprocess.run(
        [sys.executable, str(wrapper), str(script)],
        env={**os.environ, "RANK": "5"},
        capture_output=True,
        text=True,
    )
    assert r.returncode == code
    rc = tmp_path / "rank-5.rc"
    if code:
        assert int(rc.read_text().split()[0]) == code
    else:
        assert not rc.exists()


def test_first_failure_is_the_earliest():
    files = {
        "node-0": {"rank-0.rc": "1 1700000005.5", "rank-1.rc": "1 1700000005.6"},
        "node-1": {"rank-9.rc": "3 1700000004.0", "garbage.rc": "x"},
    }
    assert launch.first_failure(files) == ("node-1", 9, 3)
    assert launch.first_failure({}) is None


def test_rank_wrapper_keeps_c10d_ranks_when_elastic_and_makes_the_checkpoint_dir(tmp_path):
    """Elastic: node-2 of 3 may be the second node present; gpufleet's order would give it
    ranks past WORLD_SIZE, so c10d's dense numbering stands. The checkpoint folder is made."""
    wrapper = tmp_path / "rank_wrapper.py"
    wrapper.write_text(launch.RANK_WRAPPER)
    script = tmp_path / "job.py"
    script.write_text("import os; print(os.environ['RANK'], os.environ['GROUP_RANK'])\n")
    ckpt = tmp_path / "ck" / "r1"
    env = {"GPUFLEET_SLOTS_PER_NODE": "2,2,2", "GPUFLEET_NODE_RANK": "2", "LOCAL_RANK": "1",
           "GPUFLEET_ELASTIC": "1:3", "GPUFLEET_CHECKPOINT_DIR": str(ckpt)}  # fmt: skip
    r = subprocess.run(
        [sys.executable, str(wrapper), str(script)],
        env={**os.environ, "RANK": "3", "GROUP_RANK": "1", **env},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert r.stdout.split() == ["3", "1"]
    assert ckpt.is_dir()


def test_torchrun_ranks_get_nccl_timeouts_unless_the_user_set_them():
    """A lost peer must not hold the survivors in a collective (pytorch#111646)."""
    env = launch.rank_env(cluster(), 1, OPTS)
    assert env["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"] == "300"
    assert env["TORCH_NCCL_ENABLE_MONITORING"] == "1"
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    mine = LaunchOptions(**{**OPTS.__dict__, "env": {"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "900"}})
    assert launch.rank_env(cluster(), 1, mine)["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"] == "900"
    assert "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC=900" in launch.node_command(cluster(), 1, mine)
    for other in ("none", "mpirun"):
        opts = LaunchOptions(**{**OPTS.__dict__, "launcher": other})
        assert "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC" not in launch.rank_env(cluster(), 0, opts)


def test_elastic_torchrun_uses_min_max_nodes_and_max_restarts():
    opts = LaunchOptions(**{**OPTS.__dict__, "elastic": "1:2", "max_restarts": 3})
    for i in range(2):
        cmd = launch.node_command(cluster(), i, opts)
        assert "--nnodes=1:2 " in cmd and "--max-restarts=3 " in cmd
        assert "--rdzv-backend=c10d --rdzv-endpoint=10.0.0.10:29611" in cmd
        assert "GPUFLEET_ELASTIC=1:2" in cmd
    plain = launch.node_command(cluster(), 0, OPTS)
    assert "--nnodes=2 " in plain and "--max-restarts=0 " in plain
    assert "GPUFLEET_ELASTIC" not in plain


@pytest.mark.parametrize(
    ("elastic", "launcher", "restarts", "field"),
    [
        ("0:2", "torchrun", 0, "elastic"),
        ("2:1", "torchrun", 0, "elastic"),
        ("1:3", "torchrun", 0, "elastic"),  # the cluster has 2 nodes
        ("2", "torchrun", 0, "elastic"),
        ("a:b", "torchrun", 0, "elastic"),
        ("1:2", "mpirun", 0, "elastic"),
        (None, "torchrun", -1, "max_restarts"),
    ],
)
def test_bad_elastic_options_name_the_field(elastic, launcher, restarts, field):
    opts = LaunchOptions(
        **{**OPTS.__dict__, "elastic": elastic, "launcher": launcher, "max_restarts": restarts}
    )
    with pytest.raises(SpecError) as e:
        launch.node_command(cluster(), 0, opts)
    assert e.value.field == field and e.value.fix


def test_mpirun_carries_the_recovery_contract_to_every_rank():
    """mpirun starts the other nodes' ranks through its daemons: only -x names reach them."""
    opts = LaunchOptions(
        **{**OPTS.__dict__, "launcher": "mpirun", "restart_count": 2,
           "recovery_reason": "node-1 lost"}
    )  # fmt: skip
    cmd = launch.node_command(cluster(), 0, opts)
    for name in ("GPUFLEET_CHECKPOINT_DIR", "GPUFLEET_RESTART_COUNT", "GPUFLEET_RECOVERY_REASON"):
        assert f" -x {name} " in cmd
    assert "GPUFLEET_RESTART_COUNT=2;" in cmd and "GPUFLEET_RECOVERY_REASON='node-1 lost';" in cmd


def test_deepspeed_env_file_carries_the_recovery_contract(tmp_path):
    """The head's shell (real bash) writes the env file DeepSpeed exports to every node: the
    checkpoint folder resolved from the head's $PWD, the restart count and the reason."""
    opts = LaunchOptions(
        **{**OPTS.__dict__, "launcher": "deepspeed", "restart_count": 1,
           "recovery_reason": "node-1 preempted"}
    )  # fmt: skip
    for path, text in launch.run_files(cluster(), opts).items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    head = launch.node_command(cluster(), 0, opts)
    assert head is not None
    subprocess.run(["bash", "-c", head.split("; exec ")[0]], cwd=tmp_path, check=True)
    lines = (tmp_path / ".gpufleet/runs/r1/deepspeed_env.run").read_text().splitlines()
    env = dict(line.split("=", 1) for line in lines)
    assert env["GPUFLEET_CHECKPOINT_DIR"] == f"{tmp_path}/.gpufleet/checkpoints/r1"
    assert env["GPUFLEET_RESTART_COUNT"] == "1"
    assert env["GPUFLEET_RECOVERY_REASON"] == "node-1 preempted"
    assert (tmp_path / ".gpufleet/checkpoints/r1").is_dir()
