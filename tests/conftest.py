"""Shared fixtures: an isolated state dir, and golden files for rendered text."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture(autouse=True)
def gpufleet_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Every test gets its own $GPUFLEET_HOME, so no test sees another's clusters."""
    home = tmp_path_factory.mktemp("gpufleet-home")
    monkeypatch.setenv("GPUFLEET_HOME", str(home))
    yield home
    # Safety net for a test that failed before its own teardown: nothing started under this
    # home (sshd, watchdog, QEMU, holder, mux, sessions) outlives it. Fixtures that assert
    # "no leftovers" tear down before this one, so a real leak still fails its test.
    monkeypatch.setenv("GPUFLEET_HOME", str(home))  # in case the test pointed it elsewhere
    stop_everything_under(home)


@pytest.fixture(autouse=True)
def policy_pack_prepared(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """`up` on a cloud prepares gpufleet's policy pack with pip (network): every test gets a
    folder standing for a prepared one ($GPUFLEET_POLICY_PACK, outside $GPUFLEET_HOME);
    test_policypack.py unsets it to prepare one with a fake pip."""
    pack = tmp_path_factory.mktemp("prepared-policy-pack")
    (pack / "PulumiPolicy.yaml").write_text("runtime: python\n")
    monkeypatch.setenv("GPUFLEET_POLICY_PACK", str(pack))
    return pack


def stop_everything_under(home: Path) -> None:
    """Stop each cluster folder's holder, head mux and sandbox processes, then any strays.

    GPUFLEET_HOME must name `home`: the helpers find a cluster's processes through it.
    """
    from gpufleet.core import state
    from gpufleet.provision import localprocs
    from gpufleet.remote import head, holder

    clusters = home / "clusters"
    for cdir in sorted(clusters.iterdir()) if clusters.is_dir() else []:
        if not cdir.is_dir():
            continue
        with contextlib.suppress(Exception):
            holder.stop(cdir.name)
        with contextlib.suppress(Exception):
            head.stop_mux(state.load(cdir.name))  # as `down` does; a damaged record: below
        localprocs.stop_by_folder(cdir.name)  # sshds, watchdog, QEMU, sessions, mux by folder
    localprocs.terminate(localprocs.stray_processes())  # of folders already removed


@pytest.fixture
def golden():
    """golden(name, text): compare with tests/golden/<name>; GPUFLEET_UPDATE_GOLDEN=1 rewrites.

    Regenerate after an intended change with `make golden`, then review the diff.
    """

    def check(name: str, text: str) -> None:
        path = GOLDEN / name
        if os.environ.get("GPUFLEET_UPDATE_GOLDEN") == "1":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return
        assert path.exists(), f"missing golden file {path}; create it with `make golden`"
        assert text == path.read_text(), f"{name} differs from its golden file (`make golden`)"

    return check
