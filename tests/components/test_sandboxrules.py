"""The rules of local, vm and ssh clusters: nothing of a real cloud, one host per ssh node."""

from __future__ import annotations

import pytest

from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.errors import SpecError


def spec(**kw) -> ClusterSpec:
    return ClusterSpec.from_input({"name": "t", **kw})


@pytest.mark.parametrize(
    ("kw", "field", "fix_part"),
    [
        ({"cloud": "vm", "instance_type": "p5.48xlarge"}, "instance_type", "--cloud aws"),
        ({"region": "us-east-1"}, "region", "drop --region"),
        ({"cloud": "vm", "zone": "a"}, "zone", "drop --zone"),
        ({"spot": True}, "spot", "drop --spot"),
        ({"cloud": "vm", "gpus_per_node": 1}, "gpus_per_node", "--cloud vm"),
        ({"cloud": "ssh", "nodes": 2, "hosts": ["h1"]}, "hosts", "--hosts"),
    ],
)
def test_what_a_sandbox_cloud_refuses_names_field_and_fix(kw, field, fix_part):
    with pytest.raises(SpecError) as e:
        spec(**kw)
    assert e.value.field == field
    assert fix_part in e.value.fix


def test_own_hosts_may_have_gpus_and_the_clouds_own_instance_type():
    s = spec(cloud="ssh", nodes=2, hosts=["h1", "h2"], gpus_per_node=8, instance_type="ssh")
    assert (s.gpus, s.hosts) == (8, ["h1", "h2"])
    assert spec(cloud="vm", instance_type="vm").instance_type == "vm"
