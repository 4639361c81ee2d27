"""`make demo`'s program, examples/demo.py, run exactly as the README's first command runs it."""

from __future__ import annotations

import os
import sys

from tests.integration.conftest import ROOT, requires_sshd, requires_torch, run_in_session


@requires_sshd
@requires_torch
def test_the_readme_demo_trains_on_two_nodes_and_leaves_nothing(gpufleet_home):
    """The demo parses `list --json`, the JSON contract's envelope: a shape change that the
    demo did not follow crashed it for every newcomer while every other test passed."""
    r = run_in_session(
        [sys.executable, str(ROOT / "examples" / "demo.py")],
        timeout=600,
        cwd=ROOT,
        env=dict(os.environ, GPUFLEET_HOME=str(gpufleet_home)),
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "demo ok: 2-node training ran over SSH and the cluster is gone" in r.stdout
    assert "clusters recorded afterwards: none" in r.stdout
    assert "sandbox processes left: 0, sandbox sshd left: 0" in r.stdout
