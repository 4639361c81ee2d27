"""torchrun's rendezvous on a real sandbox: clean endings, node order, `-m module` jobs."""

from __future__ import annotations

import json

import pytest

from tests.integration.conftest import ROOT, gpufleet, requires_sshd, requires_torch

pytestmark = [requires_sshd, requires_torch]
EXAMPLES = str(ROOT / "examples")


@pytest.mark.parametrize("nodes", [2, 3])
def test_successful_run_ends_without_exit_barrier_traceback(gpufleet_home, nodes):
    """With the static backend the head's agent hosts the store and exits first, so the
    other agents' exit barrier fails with a C++ "Error waiting on exit barrier" traceback
    (pytorch/pytorch#69520). The store gpufleet hosts outlives every agent."""
    name = f"rdzv{nodes}"
    r = gpufleet(
        gpufleet_home,
        *("run", "--nodes", str(nodes), "--name", name, "--workdir", EXAMPLES),
        *("--", "train_ddp.py", "--steps", "20"),
        timeout=300,
    )
    both = r.stdout + r.stderr
    assert r.returncode == 0, both
    assert "Traceback" not in both
    assert "exit barrier" not in both
    for k in range(nodes):  # node-K holds rank K, whatever order c10d joined them in
        assert any(ln.startswith(f"[node-{k}] rank {k}/{nodes} up") for ln in r.stdout.splitlines())
    assert json.loads(gpufleet(gpufleet_home, "list", "--json").stdout)["clusters"] == []


def test_module_form_runs_the_module(gpufleet_home, tmp_path):
    """`-- -m pkg.mod args` is torchrun's module form: run the module, not a file named -m."""
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(
        "import os, sys\nprint('module rank', os.environ['RANK'], sys.argv[1:], flush=True)\n"
    )
    r = gpufleet(
        gpufleet_home,
        *("run", "--nodes", "2", "--name", "modrun", "--workdir", str(tmp_path)),
        *("--", "-m", "mypkg.train", "--epochs", "1"),
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[node-0] module rank 0 ['--epochs', '1']" in r.stdout
    assert "[node-1] module rank 1 ['--epochs', '1']" in r.stdout
