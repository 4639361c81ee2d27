"""What the head is handed: the workers' pinned keys at private addresses, a valid sh."""

from __future__ import annotations

import subprocess

from gpufleet.remote import head
from tests.gpufleet.jobs.test_rsync import _info


def test_head_known_hosts_pins_workers_at_private_addresses():
    assert head.head_known_hosts(_info()) == (
        "10.0.0.2 ssh-ed25519 AAAAkey1\n10.0.0.3 ssh-ed25519 AAAAkey2\n"
    )


def test_prepare_script_is_valid_sh_and_warms_every_worker():
    script = head.prepare_script(_info())
    subprocess.run(["sh", "-n", "-c", script], check=True)
    assert script.endswith("\ncommand -v rsync >/dev/null 2>&1 || exit 99\n")
    assert "node-1 ubuntu@10.0.0.2 22 gpufleet ssh-ed25519\nnode-2 " in script


def _vm_info():
    """VM-shaped: each node's ssh_port is forwarded on this machine's 127.0.0.1; inside the
    VMs' network (where the head reaches the workers) sshd listens on 22."""
    from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo

    nodes = [
        NodeInfo(
            name=f"node-{i}",
            private_ip=f"10.77.0.{10 + i}",
            public_ip="127.0.0.1",
            ssh_port=40100 + i,
            private_ssh_port=22,
            host_key=f"ssh-ed25519 AAAAkey{i}",
        )
        for i in range(3)
    ]
    return ClusterInfo(
        name="v",
        cloud="vm",
        ssh_user="gpufleet",
        ssh_key_path="/k/id_ed25519",
        known_hosts_path="/k/known_hosts",
        nodes=nodes,
    )


def test_vm_head_reaches_workers_on_their_private_sshd_port():
    info = _vm_info()
    assert head.head_known_hosts(info) == (
        "10.77.0.11 ssh-ed25519 AAAAkey1\n10.77.0.12 ssh-ed25519 AAAAkey2\n"
    )
    assert head.worker_rows(info) == [
        "node-1 gpufleet@10.77.0.11 22 gpufleet ssh-ed25519",
        "node-2 gpufleet@10.77.0.12 22 gpufleet ssh-ed25519",
    ]


def test_vm_known_hosts_pins_forwarded_public_and_private_ports():
    from gpufleet.remote import knownhosts

    lines = knownhosts.render(_vm_info().nodes[:2]).splitlines()
    assert lines == [
        "[127.0.0.1]:40100 ssh-ed25519 AAAAkey0",
        "10.77.0.10 ssh-ed25519 AAAAkey0",
        "[127.0.0.1]:40101 ssh-ed25519 AAAAkey1",
        "10.77.0.11 ssh-ed25519 AAAAkey1",
    ]


def test_popen_spools_stderr_so_a_chatty_command_cannot_stall_on_a_full_pipe():
    """rsync or the head's fan-out may write far more than a pipe holds (64 KB on Linux) to
    stderr before its stdout ends; the reader reads stdout to its end first."""
    import sys

    chatty = "import sys; sys.stderr.write('w' * 300_000); sys.stderr.flush(); print('done')"
    proc = head.popen([sys.executable, "-c", chatty])
    assert proc.stdout.read() == b"done\n"
    assert head.stderr_text(proc) == "w" * 300_000
    assert proc.returncode == 0


def test_a_control_path_is_kept_only_where_openssh_can_bind_its_master(tmp_path):
    """OpenSSH binds the master at the path + 17 characters (measured: 90 made one on Linux,
    94 did not); past that, no kept connection rather than an error line on every command."""
    from pathlib import Path

    room = head.MAX_CONTROL_PATH - len("/mux-head")
    fits = Path("/" + "d" * (room - 1))
    assert head.control_path(fits) == f"{fits}/mux-head"
    assert head.control_path(Path(f"{fits}x")) is None


def test_the_heads_worker_sockets_fit_however_deep_its_workdir():
    """On the head: an absolute socket path (keys folder + /m- + %C's 40 characters) where it
    fits OpenSSH's bound, the relative one where it does not."""
    import tempfile
    from pathlib import Path

    room = head.LINUX_MAX_CONTROL_PATH - len("/m-") - 40
    with tempfile.TemporaryDirectory(dir="/tmp") as top:
        for extra, absolute in ((0, True), (1, False)):
            wd = Path(top) / ("w" * (room + extra - len(f"{top}/") - len(f"/{head.HEAD_KEYS}")))
            (wd / head.HEAD_KEYS).mkdir(parents=True)
            script = "\n".join([*head.HEAD_ENV, 'printf %s "$CP"'])
            cp = subprocess.run(
                ["sh", "-c", script], cwd=wd, capture_output=True, text=True, check=True
            ).stdout
            assert cp.startswith("/") is absolute
            assert len(cp.replace("%C", "c" * 40)) <= head.LINUX_MAX_CONTROL_PATH
