"""The nodes' identity: one service account and one custom role per project, never deleted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulumi
import pulumi_gcp as gcp

from gpufleet.components.gcp.rules import (
    NODE_ACCOUNT_ID,
    SELF_DELETE_PERMISSIONS,
    SELF_DELETE_ROLE_ID,
)
from gpufleet.components.validators import offline

# The node's token must be able to call the Compute API at all: a VM's access scopes cap what
# its service account may do, and IAM (the role below) is what actually limits it
# (compute/docs/access/service-accounts#scopes_best_practice).
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


def _exists(lookup: Callable[[], Any], key: str) -> bool:
    """Whether the lookup finds it: it raises (live) or answers without `key` when not found."""
    try:
        found = lookup()
    except Exception:  # not found (or not readable): the stack creates it, GCE says if it can't
        return False
    return bool(found.get(key) if isinstance(found, dict) else getattr(found, key, None))


def project_id() -> str:
    """The provider's project (gcp:project, or the environment the provider reads)."""
    return str(gcp.organizations.get_client_config().project)


class SharedIdentity:
    """What lets a node delete its own VM at its lease or expiry (images/ttl/gpufleet-expire).

    One account and one custom role holding only compute.instances.delete, with fixed ids, per
    project. The first cluster creates them; every later one adopts them (`import_`, after a
    lookup) instead of creating its own; `retain_on_delete` keeps them when a cluster goes down,
    so no cluster's `down` or failed attempt deletes them: a deleted role counts toward the
    project's 300 for 7 days (iam projects.roles.delete) and its id is taken for up to 37. The
    role is granted per instance (an instance-level binding,
    compute/docs/access/managing-access-to-resources), never on the project: the account can
    delete only VMs of live gpufleet clusters (of any of them: a node's token reaches its
    neighbours' clusters too, the price of sharing one account).
    """

    def __init__(self, name: str, child: pulumi.ResourceOptions):
        account_import = role_import = None
        if not offline():
            project = project_id()
            email = f"{NODE_ACCOUNT_ID}@{project}.iam.gserviceaccount.com"
            role = f"projects/{project}/roles/{SELF_DELETE_ROLE_ID}"
            account = lambda: gcp.serviceaccount.get_account(account_id=NODE_ACCOUNT_ID)  # noqa: E731
            if _exists(account, "email"):
                account_import = f"projects/{project}/serviceAccounts/{email}"
            if _exists(
                lambda: gcp.projects.get_iam_custom_role(
                    project=project, role_id=SELF_DELETE_ROLE_ID
                ),
                "name",
            ):
                role_import = role
        kept = pulumi.ResourceOptions(retain_on_delete=True)
        self.account = gcp.serviceaccount.Account(
            f"{name}-nodes",
            account_id=NODE_ACCOUNT_ID,
            display_name="gpufleet nodes",
            description="gpufleet: its nodes delete their own VMs at expiry (shared by clusters)",
            opts=pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions.merge(kept, pulumi.ResourceOptions(import_=account_import)),
            ),
        )
        self.role = gcp.projects.IAMCustomRole(
            f"{name}-self-delete",
            role_id=SELF_DELETE_ROLE_ID,
            title="gpufleet: delete own VMs",
            description="Lets a gpufleet node delete its own VM at its lease or expiry",
            permissions=list(SELF_DELETE_PERMISSIONS),
            opts=pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions.merge(kept, pulumi.ResourceOptions(import_=role_import)),
            ),
        )
        self.member = self.account.email.apply(lambda e: f"serviceAccount:{e}")

    def attach(self) -> Any:
        """The instance's service account, with a token the Compute API takes."""
        return gcp.compute.InstanceServiceAccountArgs(
            email=self.account.email, scopes=[CLOUD_PLATFORM_SCOPE]
        )

    def grant(self, label: str, vm: Any, child: Any) -> Any:
        """The role on this one instance, for the nodes' account (deleted with the cluster)."""
        return gcp.compute.InstanceIAMMember(
            label,
            instance_name=vm.name,
            zone=vm.zone,
            project=vm.project,
            role=self.role.name,
            member=self.member,
            opts=child,
        )
