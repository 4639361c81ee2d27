"""The nodes' identity: one service account and one custom role per project, never deleted."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_gcp as gcp

from gpufleet.components.gcp.rules import (
    NODE_ACCOUNT_ID,
    SELF_DELETE_PERMISSIONS,
    SELF_DELETE_ROLE_ID,
)
from gpufleet.components.invokes import lookup_opts
from gpufleet.components.validators import offline

# The node's token must be able to call the Compute API at all: a VM's access scopes cap what
# its service account may do, and IAM (the role below) is what actually limits it
# (compute/docs/access/service-accounts#scopes_best_practice).
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


def role_state(project: str) -> tuple[str, Any]:
    """("absent" | "deleted" | "live", the role as read) of the shared custom role.

    Not found is an empty answer or a 404; any other failure (403: the caller may not read
    roles) raises, so an unreadable role is never mistaken for an absent one."""
    try:
        found = gcp.projects.get_iam_custom_role(
            project=project, role_id=SELF_DELETE_ROLE_ID, opts=lookup_opts()
        )
    except Exception as e:
        if any(k in str(e) for k in ("404", "notFound", "was not found", "does not exist")):
            return "absent", None
        raise
    get = (
        (lambda k: found.get(k)) if isinstance(found, dict) else (lambda k: getattr(found, k, None))
    )
    if not get("name"):
        return "absent", None
    return ("deleted" if get("deleted") else "live"), found


def project_id() -> str:
    """The provider's project (gcp:project, or the environment the provider reads)."""
    return str(gcp.organizations.get_client_config(opts=lookup_opts()).project)


class SharedIdentity:
    """What lets a node delete its own VM at its lease or expiry (images/ttl/gpufleet-expire).

    One account and one custom role holding only compute.instances.delete, with fixed ids, per
    project, never deleted by a cluster (`retain_on_delete`): a deleted role counts toward the
    project's 300 for 7 days (iam projects.roles.delete) and its id is taken for up to 37.

    The account is created with create_ignore_already_exists: when it exists (another cluster
    made it, or two first `up`s race), Create adopts it instead of failing, and no import
    compares its inputs. The role is imported when it is live, ignoring title, description,
    stage and permissions (an import whose inputs differ from the live role fails); the ROLE
    validator checks before that the live role holds compute.instances.delete. A role deleted
    within the last 7 days is not imported: Create undeletes it (terraform-provider-google
    resource_google_project_iam_custom_role.go calls Roles.Undelete). Two clusters' first `up`
    at the same moment can still both try to create the role; the second fails with "already
    exists" and succeeds when run again (it then imports it).

    The trade-off of sharing one account: the role is granted per instance (an instance-level
    binding, compute/docs/access/managing-access-to-resources), never on the project, so a
    node's token holds compute.instances.delete on every instance that has a binding, that is
    on the VMs of every live gpufleet cluster of the project, not only its own. It holds no
    list permission (compute.instances.list), and instance names carry a random suffix (Pulumi
    auto-naming), so a node cannot enumerate its neighbours; it can still delete one whose name
    and zone it learns.
    """

    def __init__(self, name: str, child: pulumi.ResourceOptions):
        role_opts = pulumi.ResourceOptions()
        if not offline():
            project = project_id()
            state, _ = role_state(project)
            if state == "live":
                role_opts = pulumi.ResourceOptions(
                    import_=f"projects/{project}/roles/{SELF_DELETE_ROLE_ID}",
                    ignore_changes=["title", "description", "stage", "permissions"],
                )
        kept = pulumi.ResourceOptions(retain_on_delete=True)
        self.account = gcp.serviceaccount.Account(
            f"{name}-nodes",
            account_id=NODE_ACCOUNT_ID,
            display_name="gpufleet nodes",
            description="gpufleet: its nodes delete their own VMs at expiry (shared by clusters)",
            create_ignore_already_exists=True,
            opts=pulumi.ResourceOptions.merge(child, kept),
        )
        self.role = gcp.projects.IAMCustomRole(
            f"{name}-self-delete",
            role_id=SELF_DELETE_ROLE_ID,
            title="gpufleet: delete own VMs",
            description="Lets a gpufleet node delete its own VM at its lease or expiry",
            permissions=list(SELF_DELETE_PERMISSIONS),
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions.merge(kept, role_opts)),
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
