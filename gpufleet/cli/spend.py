"""Before money is spent: the plan summary, --dry-run, --max-cost and the Y/n prompt."""

from __future__ import annotations

import sys

from gpufleet.cli.common import ask
from gpufleet.clusters import cost
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.errors import GpufleetError
from gpufleet.components.exitcodes import ExitCode
from gpufleet.provision import traits


class Declined(GpufleetError):
    exit_code = ExitCode.DECLINED

    def __init__(self) -> None:
        super().__init__(
            "not confirmed: nothing was created", hint="pass --yes to skip the question"
        )


def gate(
    spec: ClusterSpec,
    *,
    yes: bool,
    dry_run: bool,
    max_cost: float | None,
    extra: dict | None = None,
) -> cost.Estimate:
    """Check the budget, then print the plan (--dry-run: and stop) or ask Y/n on a terminal."""
    from gpufleet.cli.common import print_json

    est = cost.estimate(spec)
    # before the plan is shown or Y/n asked; lifecycle.up and run_job check it again for
    # every caller, Python ones included
    cost.check_budget(est, max_cost)
    if dry_run:
        from gpufleet.components.registry import unchecked_availability

        available = unchecked_availability(spec)
        if extra is not None and extra.get("json"):
            from gpufleet.cli.documents import envelope

            shown = {k: v for k, v in extra.items() if k != "json"}
            if available:
                shown["availability"] = available.as_dict()
            print_json(envelope("dry-run", cluster=spec.name, **est.as_dict(), **shown))
        else:
            print(f"would create cluster {spec.name}:")
            print("\n".join(cost.summary(est)))
            if available:
                print(f"  available  {available.line()}")
            for k, v in (extra or {}).items():
                if k != "json":
                    print(f"  {k:<10} {v}")
            print("dry run: nothing was created")
        import typer

        raise typer.Exit(0)
    provider = traits(spec.cloud)
    if provider.bills and not yes and sys.stdin.isatty():
        sys.stderr.write(f"gpufleet will create cluster {spec.name}:\n")
        sys.stderr.write("\n".join(cost.summary(est)) + "\n")
        if not ask("Create it?"):
            raise Declined()
    if provider.pulumi:
        ensure_pulumi(yes)
    return est


def ensure_pulumi(yes: bool) -> None:
    """First cloud use without the Pulumi CLI: install the pinned one (--yes, or asked)."""
    from gpufleet.cli.common import progress
    from gpufleet.core.errors import MissingTool
    from gpufleet.provision import pulumicli
    from gpufleet.provision.pulumi import find_pulumi

    try:
        find_pulumi()
        return
    except MissingTool:
        if not yes and not sys.stdin.isatty():
            raise
    question = (
        f"The Pulumi CLI is not installed. Install {pulumicli.PINNED} into "
        f"{pulumicli.install_root()}?"
    )
    if not yes and not ask(question):
        raise Declined()
    pulumicli.install(progress)
    find_pulumi()
