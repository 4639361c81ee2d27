"""Hostfile renderers: formats, slots never 0, env file readable by a shell."""

from __future__ import annotations

import subprocess

import pytest

from gpufleet.components.errors import SpecError
from gpufleet.jobs import hostfile
from tests.gpufleet.fakes import cluster


@pytest.mark.parametrize("fmt", hostfile.FORMATS)
def test_golden_8_gpus(golden, fmt):
    golden(f"hostfile/aws-2x8.{fmt}", hostfile.render(cluster(8), fmt))


def test_formats():
    c = cluster(8)
    assert hostfile.render(c, "openmpi") == "10.0.0.10 slots=8\n10.0.0.11 slots=8\n"
    assert hostfile.render(c, "deepspeed") == "10.0.0.10 slots=8\n10.0.0.11 slots=8\n"
    assert hostfile.render(c, "mpich") == "10.0.0.10:8\n10.0.0.11:8\n"
    assert hostfile.render(c, "plain") == "10.0.0.10\n10.0.0.11\n"


@pytest.mark.parametrize("fmt", ["openmpi", "mpich", "deepspeed"])
def test_slots_are_never_zero(fmt):
    text = hostfile.render(cluster(0, cloud="local"), fmt)
    one = {"openmpi": "{} slots=1", "deepspeed": "{} slots=1", "mpich": "{}:1"}[fmt]
    assert text == "".join(one.format(ip) + "\n" for ip in ("10.0.0.10", "10.0.0.11"))


def test_slots_override():
    assert hostfile.render(cluster(8), "mpich", slots_per_node=2) == "10.0.0.10:2\n10.0.0.11:2\n"


def test_env_file_is_shell_readable(tmp_path):
    env = tmp_path / "env"
    env.write_text(hostfile.render(cluster(4, n=3), "env"))
    out = subprocess.run(
        [
            "sh",
            "-c",
            f". {env}; echo $GPUFLEET_NUM_NODES $MASTER_ADDR $GPUFLEET_WORLD_SIZE "
            "$GPUFLEET_NODE_IPS",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["3", "10.0.0.10", "12", "10.0.0.10,10.0.0.11,10.0.0.12"]


def test_unknown_format_names_the_choices():
    with pytest.raises(SpecError) as e:
        hostfile.render(cluster(1), "slurm")
    assert e.value.field == "format" and "openmpi" in e.value.fix
