"""The nodes' Artifact Registry read access, only for a container image in the fleet's project."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.containerimage import ImageRef, parse
from gpufleet.components.errors import SpecError

READER = "roles/artifactregistry.reader"
# gcr.io hosts served by Artifact Registry `gcr.io` repositories (Container Registry is shut
# down since 2025-03-18): host -> (the repository's location, its name), in the image's project
# (artifact-registry/docs/transition/gcr-repositories, "gcr.io domain support"). Other *.gcr.io
# hosts (mirror.gcr.io, k8s.gcr.io) are Google's public ones: nothing to grant.
GCR_REPOSITORIES = {
    "gcr.io": ("us", "gcr.io"),
    "us.gcr.io": ("us", "us.gcr.io"),
    "eu.gcr.io": ("europe", "eu.gcr.io"),
    "asia.gcr.io": ("asia", "asia.gcr.io"),
}
PKG_SUFFIX = "-docker.pkg.dev"


@dataclass(frozen=True)
class GarRepository:
    project: str
    location: str
    repository: str


def gar_repository(ref: ImageRef) -> GarRepository | None:
    """The Artifact Registry repository of an image: LOCATION-docker.pkg.dev/PROJECT/REPO/...,
    or a gcr.io host's `gcr.io` repository (GCR_REPOSITORIES); None for any other image."""
    if ref.registry_kind != "gar":
        return None
    parts = ref.reference.split("@", 1)[0].split("/")
    host = parts[0]
    if host.endswith(PKG_SUFFIX) and len(parts) >= 4:
        return GarRepository(parts[1], host.removesuffix(PKG_SUFFIX), parts[2])
    if host in GCR_REPOSITORIES and len(parts) >= 3:
        location, name = GCR_REPOSITORIES[host]
        return GarRepository(parts[1], location, name)
    return None


def refuse_foreign_ecr(spec: ClusterSpec) -> None:
    """An ECR image on a GCP fleet: refused before anything exists. ECR serves a private
    repository only with a token from ecr:GetAuthorizationToken, which needs AWS credentials
    (ECR user guide, registry_auth and repository-policy-examples: "Amazon ECR requires that
    users have permission to make calls to the ecr:GetAuthorizationToken API through an IAM
    policy"); a GCP node has none, and its boot pull would fail after the GPUs bill."""
    if spec.container is not None and parse(spec.container.image).registry_kind == "ecr":
        raise SpecError(
            "container.image",
            f"{spec.container.image} is in Amazon ECR; a GCP node has no AWS identity to get "
            "an ECR token with",
            "push the image to Artifact Registry in the fleet's project (its nodes get read "
            "access), or use a public registry",
        )


def fleet_project(live: bool) -> str | None:
    """The project the fleet's resources go to (asked of the provider; offline its config)."""
    if live:
        from gpufleet.components.gcp.identity import project_id

        return project_id()
    return pulumi.Config("gcp").get("project")


def grant_reader(
    name: str, spec: ClusterSpec, member: Any, live: bool, opts: pulumi.ResourceOptions
) -> Any:
    """roles/artifactregistry.reader on the image's repository for the nodes' account, when the
    repository is in the fleet's own project (fleet_project(live)); None otherwise.

    An image in another project gets no grant: setting a policy there needs
    artifactregistry.repositories.setIamPolicy in that project (Google's public images, e.g.
    deeplearning-platform-release, would fail the `up`); the node pulls it with its account's
    token, which works for a public repository or one whose owner granted the account.

    The account is shared by the project's clusters (components/gcp/identity.py), so the
    binding is kept when a cluster goes (`retain_on_delete`): another cluster pulling the same
    repository still needs it. IAM changes take effect within minutes (iam/docs/
    access-change-propagation); the boot pull retries with a fresh token on each attempt.
    """
    if spec.container is None:
        return None
    repo = gar_repository(parse(spec.container.image))
    if repo is None:
        return None
    project = fleet_project(live)
    if project is not None and repo.project != project:
        pulumi.log.warn(
            f"container.image {spec.container.image} is in project {repo.project}, not the "
            f"fleet's ({project}): gpufleet grants no read there; the nodes' account needs "
            f"{READER} on {repo.location}/{repo.repository} unless it is public"
        )
        return None
    return gcp.artifactregistry.RepositoryIamMember(
        f"{name}-image-reader",
        project=repo.project,
        location=repo.location,
        repository=repo.repository,
        role=READER,
        member=member,
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(retain_on_delete=True)),
    )
