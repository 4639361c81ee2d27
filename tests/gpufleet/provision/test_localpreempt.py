"""The sandbox's watcher start (the notice itself: tests/integration/test_preempt_sandbox.py)."""

from __future__ import annotations

import pytest

from gpufleet.components import preempt
from gpufleet.core.providers import PROVIDERS
from gpufleet.provision.localpreempt import ENV, start_watcher


def test_the_watchers_clouds_are_the_providers_with_notices():
    assert set(preempt.CLOUDS) == {p.notices for p in PROVIDERS.values() if p.notices}
    assert all(name == p.notices for name, p in PROVIDERS.items() if p.notices)


def test_no_watcher_unless_a_test_points_the_sandbox_at_a_fake(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert start_watcher("c", tmp_path, "node-0", tmp_path) is None
    for bad in ("http://x", "vm=http://x", "aws="):
        monkeypatch.setenv(ENV, bad)
        with pytest.raises(ValueError):
            start_watcher("c", tmp_path, "node-0", tmp_path)
