"""Each node's AcrPull on the container image's registry, only for an ACR image."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_azure_native as az

from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.containerimage import parse
from gpufleet.components.errors import SpecError

# The built-in AcrPull role's id, the same in every subscription: only
# Microsoft.ContainerRegistry/registries/pull/read (its definition as Azure lists it, e.g.
# `az role definition list --name AcrPull`; container-registry-roles.md: the pull role for a
# pull-only identity). A registry in "RBAC Registry + ABAC Repository Permissions" mode reads
# repository roles instead (Container Registry Repository Reader): docs/containers.md says so.
ACR_PULL = "7f951dda-4ed3-4680-a7ca-43fe172d538d"


def acr_registry_id(spec: ClusterSpec) -> str | None:
    """The ACR registry the nodes pull the container image from (container.registry_id), or
    None: no container, or an image elsewhere. An ACR image without the id is refused: the
    host `NAME.azurecr.io` names neither the registry's subscription nor its group."""
    if spec.container is None:
        return None
    ref = parse(spec.container.image)
    if ref.registry_kind != "acr":
        return None
    name = ref.host.split(".", 1)[0]
    rid = spec.container.registry_id
    if rid is None:
        raise SpecError(
            "container.registry_id",
            f"is missing: container.image {ref.host} is an ACR registry, and each node's "
            "identity needs AcrPull on it, which gpufleet grants on the registry's resource id",
            f"set container.registry_id (the CLI's --registry-id) to the output of "
            f"`az acr show -n {name} --query id -o tsv`, or use a public image",
        )
    if rid.rsplit("/", 1)[1].lower() != name:
        raise SpecError(
            "container.registry_id",
            f"names registry {rid.rsplit('/', 1)[1]}, but container.image is in {ref.host}",
            f"give the id of registry {name} (`az acr show -n {name} --query id -o tsv`)",
        )
    return rid


def role_definition(registry_id: str) -> str:
    """AcrPull's definition id in the registry's subscription."""
    subscription = registry_id.split("/")[2]
    return (
        f"/subscriptions/{subscription}/providers/Microsoft.Authorization/"
        f"roleDefinitions/{ACR_PULL}"
    )


def refuse_foreign_ecr(spec: ClusterSpec) -> None:
    """An ECR image on an Azure fleet: refused before anything exists. ECR serves a private
    repository only with a token from ecr:GetAuthorizationToken, which needs AWS credentials
    (ECR user guide, repository-policy-examples); an Azure node has none."""
    if spec.container is not None and parse(spec.container.image).registry_kind == "ecr":
        raise SpecError(
            "container.image",
            f"{spec.container.image} is in Amazon ECR; an Azure node has no AWS identity to "
            "get an ECR token with",
            "push the image to your ACR registry (and set container.registry_id), or use a "
            "public registry",
        )


def acr_pull(label: str, identity: Any, registry_id: str, opts: pulumi.ResourceOptions) -> Any:
    """AcrPull for one node's identity on the registry (made before its VM: the boot pull
    needs it; a new assignment can take minutes to apply, and the pull retries)."""
    return az.authorization.RoleAssignment(
        label,
        principal_id=identity.principal_id,
        principal_type="ServicePrincipal",
        role_definition_id=role_definition(registry_id),
        scope=registry_id,
        opts=opts,
    )
