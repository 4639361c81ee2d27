"""Azure: the node's self-delete at expiry retries, waits out RBAC propagation, falls back to
deallocate, and never powers off (images/ttl/gpufleet-expire, arm-delete), against a fake curl."""

from __future__ import annotations

import pytest

from tests.images.test_steps import Node, expire, make_node, prebake

# Read 2026-11-25:
# - learn.microsoft.com/azure/virtual-machines/states-billing: power state -> compute billed?
BILLED = {"Running": True, "Stopped": True, "Deallocated": False}
# - learn.microsoft.com/azure/role-based-access-control/troubleshooting ("Role assignment
#   changes are not being detected"): a new role assignment can take up to 10 minutes.
PROPAGATION_S = 10 * 60
# - learn.microsoft.com/rest/api/compute/virtual-machines/deallocate: the call.
DEALLOCATE = (
    "POST",
    "https://management.azure.com/subscriptions/{subscriptionId}/resourceGroups/"
    "{resourceGroupName}/providers/Microsoft.Compute/virtualMachines/{vmName}/deallocate",
)
# - curl(1), --retry: retries timeouts, FTP 4xx and HTTP 408/429/500/502/503/504 only;
#   --retry-connrefused: a refused connection counts as transient too; --retry-all-errors
#   (7.71.0) retries on any error, HTTP errors included with --fail (a 403 while the role
#   propagates, a 404: each five times more, inside one try).
RETRY_FLAGS = ("--retry", "--retry-connrefused")
RETRIES_EVERY_ERROR = "--retry-all-errors"
# - learn.microsoft.com/entra/identity/managed-identities-azure-resources/how-to-use-vm-token:
#   IMDS answers a token request with a JSON body holding access_token.
TOKEN_BODY = '{"access_token":"eyJ0.tok","client_id":"cid","expires_in":"86399"}'


def fake_azure_curl(
    node: Node, deletes_refused: int, deallocate_rc: int = 0, delete_s: int = 0
) -> None:
    """curl as an Azure VM sees it: IMDS answers; ARM refuses the first `deletes_refused`
    DELETEs (exit 22: curl --fail on 403 AuthorizationFailed while the role propagates);
    the deallocate POST exits `deallocate_rc`; each DELETE takes `delete_s` seconds. jq is
    absent; sleep and each DELETE only move a fake clock, which `date +%s` reads."""
    count = node.root / "deletes"
    clock = node.root / "clock"
    clock.write_text("100000\n")
    tick = f"echo $(($(cat {clock}) + {{s}})) > {clock}"
    (node.bin / "curl").write_text(
        f'#!/bin/sh\necho "curl $*" >> {node.calls}\ncase "$*" in\n'
        f'  *"-X DELETE"*) {tick.format(s=delete_s)}\n'
        f"    n=$(($(cat {count} 2>/dev/null || echo 0) + 1)); echo $n > {count}\n"
        f"    [ $n -gt {deletes_refused} ] || {{ echo AuthorizationFailed; exit 22; }} ;;\n"
        f"  *deallocate*) exit {deallocate_rc} ;;\n"
        f"  *oauth2/token*) echo '{TOKEN_BODY}' ;;\n"
        "  *compute/name*) echo azure-nd-a100-node-0 ;;\n"
        "esac\n"
    )
    (node.bin / "jq").write_text("#!/bin/sh\nexit 127\n")  # a custom image without jq
    (node.bin / "sleep").write_text(
        f'#!/bin/sh\necho "sleep $*" >> {node.calls}\n{tick.format(s="$1")}\n'
    )
    (node.bin / "date").write_text(f"#!/bin/sh\ncat {clock}\n")
    for tool in ("curl", "jq", "sleep", "date"):
        (node.bin / tool).chmod(0o755)


@pytest.fixture
def node(tmp_path) -> Node:
    n = prebake(make_node(tmp_path, "azure", "Standard_ND96asr_v4"))
    n.set_env(
        GPUFLEET_AZURE_CLIENT_ID="cid", AZURE_SUBSCRIPTION_ID="sub", AZURE_RESOURCE_GROUP="rg"
    )
    n.set_env(GPUFLEET_EXPIRES_AT="1000")
    return n


def _calls(node: Node) -> list[str]:
    return node.recorded().splitlines()


def test_a_refused_delete_is_retried_until_the_role_assignment_has_propagated(node):
    """The VM's role assignment is made after the VM and may take 10 minutes to work: the node
    keeps asking (a fresh token each time), with curl's own retries on every call, and once
    ARM takes the DELETE it is done: no deallocate, no poweroff, no jq."""
    fake_azure_curl(node, deletes_refused=3)
    r = expire(node)
    assert r.returncode == 0, r.stderr
    calls = _calls(node)
    deletes = [c for c in calls if "-X DELETE" in c]
    assert len(deletes) == 4
    assert deletes[-1].endswith(
        "https://management.azure.com/subscriptions/sub/resourceGroups/rg/providers/"
        "Microsoft.Compute/virtualMachines/azure-nd-a100-node-0?api-version=2024-07-01"
    )
    assert all("Authorization: Bearer eyJ0.tok" in c for c in deletes)
    assert all(all(f in c.split() for f in RETRY_FLAGS) for c in calls if c.startswith("curl"))
    assert not [c for c in calls if RETRIES_EVERY_ERROR in c.split()]
    assert all("client_id=cid" in c for c in calls if "oauth2/token" in c)
    assert [c for c in calls if c.startswith("sleep")] == ["sleep 30"] * 3
    assert not [c for c in calls if "deallocate" in c or "poweroff" in c]


def test_a_delete_refused_past_the_propagation_window_deallocates_and_fails(node):
    """Past 10 minutes of refusals the node deallocates itself (compute stops billing; a
    Stopped VM would bill in full) and exits non-zero so the timer tries again."""
    assert BILLED["Stopped"] and not BILLED["Deallocated"]
    fake_azure_curl(node, deletes_refused=10_000)
    r = expire(node)
    assert r.returncode == 1
    calls = _calls(node)
    waited = sum(int(c.split()[1]) for c in calls if c.startswith("sleep"))
    assert waited >= PROPAGATION_S
    method, path = DEALLOCATE
    (post,) = [c for c in calls if "deallocate" in c]
    url = path.format(subscriptionId="sub", resourceGroupName="rg", vmName="azure-nd-a100-node-0")
    assert f"-X {method}" in post and post.endswith(f"{url}?api-version=2024-07-01")
    assert "poweroff" not in node.recorded() and "deallocated instead" in r.stderr


def test_when_arm_refuses_both_the_node_stays_up_and_says_so(node):
    fake_azure_curl(node, deletes_refused=10_000, deallocate_rc=22)
    r = expire(node)
    assert r.returncode == 1
    assert "poweroff" not in node.recorded()
    assert "not powering off" in r.stderr


def test_the_propagation_window_is_measured_by_the_clock_not_by_tries(node):
    """Each try can take minutes (curl's own retries on three calls): the node still gives up
    on the DELETE once the 10 minutes are past, and deallocates, instead of counting tries."""
    fake_azure_curl(node, deletes_refused=10_000, delete_s=200)
    r = expire(node)
    assert r.returncode == 1 and "deallocated instead" in r.stderr
    calls = _calls(node)
    deletes = [c for c in calls if "-X DELETE" in c]
    waited = sum(int(c.split()[1]) for c in calls if c.startswith("sleep"))
    assert waited + 200 * len(deletes) <= PROPAGATION_S + 200 + 30
