"""What GCP would fill in, for the offline plan and the tests (components/preview.py)."""

from __future__ import annotations

from typing import Any


def fake_outputs(typ: str, name: str, inputs: dict[str, Any], count: int) -> dict | None:
    if typ == "gcp:compute/instance:Instance":
        nics = [dict(n) for n in inputs.get("networkInterfaces", [])]
        for k, nic in enumerate(nics):
            nic["networkIp"] = f"10.43.{k}.{10 + count % 200}"
            if nic.get("accessConfigs"):
                nic["accessConfigs"] = [{"natIp": f"198.51.100.{10 + count % 200}"}]
        disk = {**inputs.get("bootDisk", {}), "source": f"projects/p/zones/z/disks/{name}"}
        return {
            "networkInterfaces": nics,
            "instanceId": f"{1000 + count}",
            "bootDisk": disk,
            "name": f"{name}-4f2a9c1",  # Pulumi's auto-name: the resource name + a suffix
            "project": "p",
            "selfLink": "https://www.googleapis.com/compute/v1/projects/p/zones/"
            f"{inputs.get('zone', 'z')}/instances/{name}-4f2a9c1",
        }
    if typ == "gcp:serviceaccount/account:Account":
        return {"email": f"{inputs['accountId']}@p.iam.gserviceaccount.com"}
    if typ == "gcp:projects/iAMCustomRole:IAMCustomRole":
        return {"name": f"projects/p/roles/{inputs['roleId']}"}
    if typ in (
        "gcp:compute/resourcePolicy:ResourcePolicy",
        "gcp:compute/network:Network",
        "gcp:compute/image:Image",
        "gcp:compute/snapshot:Snapshot",
    ):
        return {"selfLink": f"https://www.googleapis.com/compute/v1/projects/p/x/{name}"}
    return None


def fake_call(token: str, args: dict[str, Any]) -> dict | None:
    return None  # offline the fleet asks no data source (its validators are skipped)


CLIENT_CONFIG = "gcp:organizations/getClientConfig:getClientConfig"


def fake_provider_call(
    token: str, args: dict[str, Any], provider: dict[str, Any] | None
) -> dict | None:
    """An invoke asked of an explicit gcp.Provider: getClientConfig answers its project and
    region from the provider resource's inputs, as the provider answers from its config."""
    if token != CLIENT_CONFIG or provider is None:
        return None
    return {
        "id": f"projects/{provider.get('project', '')}/regions/{provider.get('region', '')}",
        "project": provider.get("project", ""),
        "region": provider.get("region", ""),
        "zone": provider.get("zone", ""),
        "accessToken": "",
        "defaultLabels": {},
    }
