"""package/__main__.py starts the provider Pulumi talks to, and answers its schema request."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from unittest import mock

from gpufleet.components.package import FleetProvider
from tests.package.helpers import ROOT, SCHEMA_FILE, plugin


def test_plugin_hands_pulumis_arguments_to_the_provider_main():
    with mock.patch("pulumi.provider.main") as main:
        plugin().run(["127.0.0.1:50051", "--logtostderr"])
    [(provider, argv)] = [c.args for c in main.call_args_list]
    assert isinstance(provider, FleetProvider)
    assert argv == ["127.0.0.1:50051", "--logtostderr"]
    # GetSchema answers with the provider's schema: what `pulumi package get-schema` prints.
    assert json.loads(provider.schema) == provider.get_schema()
    assert provider.get_schema() == json.loads(SCHEMA_FILE.read_text())


def test_plugin_runs_as_a_script():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "package/__main__.py", "schema"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["name"] == "gpufleet"


def test_plugin_manifest_and_requirements():
    import yaml

    manifest = yaml.safe_load((ROOT / "package" / "PulumiPlugin.yaml").read_text())
    assert manifest == {"runtime": "python"}
    reqs = (ROOT / "package" / "requirements.txt").read_text().split()
    assert "..[clouds]" in reqs  # gpufleet from the checkout the plugin is in
