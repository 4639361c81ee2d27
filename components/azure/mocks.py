"""What Azure would fill in, for the offline plan and the tests (components/preview.py)."""

from __future__ import annotations

from typing import Any

FAKE_SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"


def fake_outputs(typ: str, name: str, inputs: dict[str, Any], count: int) -> dict | None:
    if typ == "azure-native:network:NetworkInterface":
        configs = [dict(c) for c in inputs.get("ipConfigurations", [])]
        for c in configs:
            c["privateIPAddress"] = f"10.45.0.{10 + count % 200}"
        return {"ipConfigurations": configs}
    if typ == "azure-native:network:PublicIPAddress":
        return {"ipAddress": f"198.51.100.{10 + count % 200}"}
    if typ == "azure-native:managedidentity:UserAssignedIdentity":
        return {"principalId": f"principal-{name}", "clientId": f"client-{name}"}
    if typ == "azure-native:compute:VirtualMachine":
        identity = dict(inputs.get("identity") or {})
        # Input: a list of identity ids; output: a map id -> details (as ARM returns it).
        identity["userAssignedIdentities"] = {
            i: {} for i in identity.get("userAssignedIdentities") or []
        }
        storage = dict(inputs.get("storageProfile") or {})
        os_disk = dict(storage.get("osDisk") or {})
        os_disk["managedDisk"] = {
            **(os_disk.get("managedDisk") or {}),
            "id": f"/subscriptions/{FAKE_SUBSCRIPTION}/resourceGroups/rg/providers/"
            f"Microsoft.Compute/disks/{name}-osdisk",
        }
        storage["osDisk"] = os_disk
        return {"vmId": f"vm-{count:04d}", "identity": identity, "storageProfile": storage}
    if typ == "azure-native:logic:Workflow":
        return {"identity": {"type": "SystemAssigned", "principalId": f"principal-{name}"}}
    if typ == "azure-native:resources:ResourceGroup":
        return {"name": inputs.get("resourceGroupName", name)}
    if typ.startswith("azure-native:"):
        return {"name": name}
    return None


def fake_call(
    token: str, args: dict[str, Any], provider: dict[str, Any] | None = None
) -> dict | None:
    """`provider`: the recorded inputs of the explicit provider asked ({}: the default one),
    whose subscriptionId answers getClientConfig as the real provider would."""
    if token == "azure-native:authorization:getClientConfig":
        return {
            "subscriptionId": (provider or {}).get("subscriptionId") or FAKE_SUBSCRIPTION,
            "tenantId": "tenant",
            "clientId": "client",
            "objectId": "object",
        }
    return None
