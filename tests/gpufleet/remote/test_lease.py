"""The lease and hard-expiry writes: atomic files in the node's state directory."""

from __future__ import annotations


def test_lease_command_writes_and_removes_the_lease_in_the_state_dir(tmp_path):
    import subprocess

    from gpufleet.remote.lease import lease_command

    env = {"GPUFLEET_STATE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    subprocess.run(["sh", "-c", lease_command(1234567890.7)], env=env, check=True)
    assert (tmp_path / "lease").read_text() == "1234567890\n"
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
    subprocess.run(["sh", "-c", lease_command(1900000000)], env=env, check=True)
    assert (state / "lease").read_text() == "1900000000\n"
