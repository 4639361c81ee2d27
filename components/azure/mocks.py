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


def fake_call(token: str, args: dict[str, Any]) -> dict | None:
    if token == "azure-native:authorization:getClientConfig":
        return client_config(FAKE_SUBSCRIPTION)
    return None


def fake_provider_call(
    token: str, args: dict[str, Any], provider: dict[str, Any] | None
) -> dict | None:
    """An invoke asked of an explicit azure-native Provider: getClientConfig answers its
    subscriptionId from the provider resource's inputs, as the provider answers from its
    credentials."""
    if token != "azure-native:authorization:getClientConfig" or provider is None:
        return None
    return client_config(provider.get("subscriptionId") or FAKE_SUBSCRIPTION)


def client_config(subscription: str) -> dict[str, str]:
    return {
        "subscriptionId": subscription,
        "tenantId": "tenant",
        "clientId": "client",
        "objectId": "object",
    }
