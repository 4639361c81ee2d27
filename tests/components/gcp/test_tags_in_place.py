"""Editing `tags` (GCP labels) updates the nodes in place, never replaces them (issue 20 item 8).

The fact, stated here from the provider source independently of components/gcp/forcenew.py:
hashicorp/terraform-provider-google google/services/compute/resource_compute_instance.go
(read 2026-11-25): instance `labels` have no ForceNew and are set in place (instances.setLabels);
`boot_disk.initialize_params.labels` is ForceNew before v7.3.0 (commit 4724988, 2025-09-11).
"""

from __future__ import annotations

from gpufleet.clusters.plan import plan_stack
from gpufleet.components.replacements import diff

VM = "gcp:compute/instance:Instance"
REPLACES = {"bootDisk.initializeParams.labels": True, "labels": False}


def test_a_tag_edit_is_an_in_place_update_of_every_node():
    old = plan_stack("gcp-a3")
    new = plan_stack("gcp-a3", overrides={"tags": {"team": "research", "cost-center": "42"}})
    changes = [c for c in diff(old["resources"], new["resources"]) if c.type == VM]
    assert {c.node for c in changes} == set(range(old["nodes"]))
    for c in changes:
        assert c.action == "update", c.line()
        assert all(p.startswith("labels") for p in c.paths), c.paths
        assert not any(REPLACES.get(p.split(".team")[0], False) for p in c.paths)


def test_the_boot_disk_labels_hold_only_what_is_fixed_for_the_cluster():
    doc = plan_stack("gcp-a3")
    for r in doc["resources"]:
        if r["type"] == VM:
            disk = r["inputs"]["bootDisk"]["initializeParams"]["labels"]
            assert set(disk) == {"gpufleet-cluster", "managed-by"}
            assert r["inputs"]["labels"]["team"] == "ml-platform"  # the user's, on the VM
