"""The lease and hard-expiry writes: atomic files in the node's state directory."""

from __future__ import annotations

from pathlib import Path

EXPIRE = Path(__file__).resolve().parents[3] / "images" / "ttl" / "gpufleet-expire"


def test_lease_command_writes_and_removes_the_lease_in_the_state_dir(tmp_path):
    """The node writes its own now + the lease's seconds (issue 19, item 4)."""
    import subprocess
    import time

    from gpufleet.remote.lease import lease_command

    env = {"GPUFLEET_STATE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    before = int(time.time())
    subprocess.run(["sh", "-c", lease_command(300.7)], env=env, check=True)
    assert before + 300 <= int((tmp_path / "lease").read_text()) <= int(time.time()) + 300
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lease"]
    subprocess.run(["sh", "-c", lease_command(None)], env=env, check=True)
    assert not (tmp_path / "lease").exists()


def test_expiry_command_replaces_the_hard_expiry_file_in_the_state_dir(tmp_path):
    """`extend` writes the new hard expiry beside the lease, atomically (a node's timer may
    read it at any moment); writing again replaces it."""
    import subprocess

    from gpufleet.remote.lease import expiry_command

    env = {"GPUFLEET_STATE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for when in (1900000000.4, 1900003600):
        subprocess.run(["sh", "-c", expiry_command(when)], env=env, check=True)
        assert (tmp_path / "expires_at").read_text() == f"{int(when)}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["expires_at"]


def test_lease_is_written_before_the_recipe_has_made_the_state_dir(tmp_path):
    """SSH answers before cloud-init's final stage, where the recipe creates /var/lib/gpufleet
    (cloud-init runs `runcmd` in cloud-final, after sshd starts: cloud-init docs, "Boot stages");
    `run` writes the first lease at that moment, so the command makes the folder itself."""
    import subprocess

    from gpufleet.remote.lease import lease_command

    state = tmp_path / "var/lib/gpufleet"
    env = {"GPUFLEET_STATE_DIR": str(state), "PATH": "/usr/bin:/bin"}
    subprocess.run(["sh", "-c", lease_command(300)], env=env, check=True)
    assert (state / "lease").read_text().strip().isdigit()


def _node(tmp_path, ahead_s: int):
    """A node root for images/ttl/gpufleet-expire whose `date` runs `ahead_s` ahead of this
    machine's clock, and whose `systemctl poweroff` is recorded instead of done."""
    import time

    root = tmp_path / "node"
    (root / "etc/gpufleet").mkdir(parents=True)
    (root / "etc/gpufleet/env").write_text(
        f"GPUFLEET_EXPIRES_AT={int(time.time()) + 4 * 3600}\nGPUFLEET_TTL_ACTION=poweroff\n"
    )
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "date").write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = +%s ]; then echo $(( $(/bin/date +%s) + {ahead_s} )); '
        'else exec /bin/date "$@"; fi\n'
    )
    (bin_ / "systemctl").write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/systemctl.log\n')
    for f in bin_.iterdir():
        f.chmod(0o755)
    env = {
        "GPUFLEET_ROOT": str(root),
        "GPUFLEET_STATE_DIR": str(root / "var/lib/gpufleet"),
        "PATH": f"{bin_}:/usr/bin:/bin",
    }
    return root, env


def test_a_node_clock_300s_ahead_survives_the_first_lease(tmp_path):
    """Issue 19, item 4: the CLI's first lease (300 s) on a node whose clock is 300 s ahead of
    the CLI's must not remove the node at its next timer tick. On main the CLI wrote its own
    now + 300 as an absolute epoch, which the node's clock had already reached."""
    import subprocess

    from gpufleet.jobs import run
    from gpufleet.remote.lease import lease_command

    root, env = _node(tmp_path, ahead_s=300)

    class NodeGroup:  # write_lease as Group does it, run in the fake node's shell
        nodes = ["node-0"]

        def write_lease(self, value):
            subprocess.run(["sh", "-c", lease_command(value)], env=env, check=True)
            return {"node-0": None}

    assert run.LEASE_S == 300
    run._LeaseKeeper(NodeGroup(), print).renew()
    expire = subprocess.run(["bash", str(EXPIRE)], env=env, capture_output=True, text=True)
    assert not (tmp_path / "systemctl.log").exists(), expire.stderr
    assert expire.returncode == 0
