"""HostKeyRotation: a real node's defaults, and nothing but its three fields."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpufleet.components.hostkeyrotation import HostKeyRotation


def test_defaults_are_a_real_nodes_sshd():
    r = HostKeyRotation()
    assert r.key_file == "/etc/ssh/ssh_host_ed25519_key"
    assert "systemctl reload ssh" in r.reload and r.sudo is True


def test_unknown_fields_are_refused():
    with pytest.raises(ValidationError):
        HostKeyRotation(keyfile="x")
