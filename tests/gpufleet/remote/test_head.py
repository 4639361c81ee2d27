"""What the head is handed: the workers' pinned keys at private addresses, a valid sh."""

from __future__ import annotations

import subprocess

from gpufleet.remote import head
from tests.gpufleet.test_sync import _info


def test_head_known_hosts_pins_workers_at_private_addresses():
    assert head.head_known_hosts(_info()) == (
        "10.0.0.2 ssh-ed25519 AAAAkey1\n10.0.0.3 ssh-ed25519 AAAAkey2\n"
    )


def test_prepare_script_is_valid_sh_and_warms_every_worker():
    script = head.prepare_script(_info())
    subprocess.run(["sh", "-n", "-c", script], check=True)
    assert script.endswith("\ncommand -v rsync >/dev/null 2>&1 || exit 99\n")
    assert "node-1 ubuntu@10.0.0.2 22 gpufleet ssh-ed25519\nnode-2 " in script
