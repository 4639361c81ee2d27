"""GCP nodes' Artifact Registry read access under Pulumi mocks, and the refusals.

Faked: the GCP API (Pulumi mocks, components/gcp/mocks.py; the fleet's project is the stack's
gcp:project, my-gcp-project); real: the resources and inputs the fleet program registers.
"""

from __future__ import annotations

import pytest

from gpufleet.components.clusterspec import ContainerSpec
from gpufleet.components.containerimage import parse
from gpufleet.components.gcp.pullaccess import gar_repository
from tests.components.stackplans import plan, refused_before_anything

MEMBER = "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember"
VM = "gcp:compute/instance:Instance"
PROJECT = "my-gcp-project"  # stacks/Pulumi.gcp-a2.yaml gcp:project

# Written from the Artifact Registry docs, read 2026-11-25:
# https://docs.cloud.google.com/artifact-registry/docs/transition/gcr-repositories
#   "gcr.io domain support": Container Registry hostname -> Artifact Registry repository
#   location, repository name
GCR_FACTS = {
    "gcr.io": ("us", "gcr.io"),
    "asia.gcr.io": ("asia", "asia.gcr.io"),
    "eu.gcr.io": ("europe", "eu.gcr.io"),
    "us.gcr.io": ("us", "us.gcr.io"),
}
# https://cloud.google.com/artifact-registry/docs/access-control#roles
#   "Artifact Registry Reader (roles/artifactregistry.reader)": read and download artifacts
READER_ROLE = "roles/artifactregistry.reader"


def with_image(image: str | None):
    return plan("gcp-a2", container=ContainerSpec(image=image) if image else None)


def test_gar_image_grants_the_nodes_account_reader_on_its_repository():
    p = with_image(f"us-central1-docker.pkg.dev/{PROJECT}/team/train:v1")
    (m,) = p.of_type(MEMBER)
    got = {k: m.inputs[k] for k in ("project", "location", "repository", "role", "member")}
    print("grant:", got)
    assert got == {
        "project": PROJECT,
        "location": "us-central1",
        "repository": "team",
        "role": READER_ROLE,
        "member": "serviceAccount:gpufleet-nodes@p.iam.gserviceaccount.com",
    }
    # the account is shared by the project's clusters: the binding outlives this one
    assert m.retain_on_delete
    vms = p.of_type(VM)
    assert len(vms) == 2 and all(m.name in vm.depends_on for vm in vms)


@pytest.mark.parametrize("host", sorted(GCR_FACTS))
def test_gcr_io_image_grants_on_its_gcr_repository(host):
    p = with_image(f"{host}/{PROJECT}/train@sha256:" + "a" * 64)
    (m,) = p.of_type(MEMBER)
    assert (m.inputs["location"], m.inputs["repository"]) == GCR_FACTS[host]
    assert m.inputs["project"] == PROJECT


@pytest.mark.parametrize(
    "image",
    [
        None,
        "nvcr.io/nvidia/pytorch:25.01-py3",
        "python:3.12",
        "mirror.gcr.io/library/python:3.12",  # Google's public mirror
        # another project (Google's public Deep Learning Containers): no grant there
        "us-docker.pkg.dev/deeplearning-platform-release/gcr.io/pytorch-cu121:latest",
        "myreg.azurecr.io/train:1",  # ACR on GCP: pulled anonymously
        "oci-archive:/tmp/img.tar",
    ],
)
def test_no_grant_for_other_images(image):
    assert with_image(image).of_type(MEMBER) == []


def test_repository_parsing_takes_nested_paths():
    ref = parse("europe-west4-docker.pkg.dev/proj/repo/a/b:1")
    repo = gar_repository(ref)
    assert repo is not None and (repo.project, repo.location, repo.repository) == (
        "proj",
        "europe-west4",
        "repo",
    )


def test_ecr_image_is_refused_before_anything():
    err, registered = refused_before_anything(
        "gcp-a2",
        container=ContainerSpec(image="123456789012.dkr.ecr.us-east-1.amazonaws.com/x:1"),
    )
    print("refusal:", err, "| fix:", err.hint)
    assert err.field == "container.image" and "ECR" in str(err)
    assert registered == []
