"""Checks of the account before anything is created: one per fact, each naming its API and fix."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from gpufleet.components.errors import GpufleetError
from gpufleet.components.exitcodes import ExitCode
from gpufleet.components.offers import under_mocks

if TYPE_CHECKING:
    from gpufleet.components.catalog import InstanceType
    from gpufleet.components.clusterspec import ClusterSpec

Status = Literal["passed", "skipped"]
OFFLINE = (
    "offline: no account to ask (a plan under mocks); `up`, `run`, `plan --check` "
    "and `pulumi preview` ask it before creating anything"
)


class AccountError(GpufleetError):
    """The account cannot hold what the spec asks (a quota, an image, a role, a zone).

    Raised by a validator before any resource is registered; names the fact, what the account
    answered, and the fix. Nothing was created.
    """

    exit_code = ExitCode.USAGE

    def __init__(self, fact: str, api: str, problem: str, fix: str):
        super().__init__(f"{fact}: {problem} (asked {api}); nothing was created", hint=fix)
        self.fact = fact
        self.api = api
        self.problem = problem
        self.fix = fix


class Unanswered(Exception):  # noqa: N818 (not an error: the fact could not be asked)
    """The account could not answer this fact (an API not enabled, no permission to read it);
    the validator is skipped with this reason, said in the plan and `up`'s progress, and the
    cloud itself refuses at creation if the fact does not hold."""


@dataclass(frozen=True)
class Validator:
    """One fact the account must satisfy, the call that answers it, and the check itself.

    `check` returns a one-line detail of what it found ("quota 192 vCPUs, need 192"), or None
    when the fact does not apply to this spec (a quota of a family the type is not in); it
    raises AccountError (validators.refuse) when the account says no, and Unanswered when the
    account cannot be asked (the API is disabled, or the credentials may not read it).
    """

    cloud: str
    fact: str
    api: str
    check: Callable[[ClusterSpec, InstanceType], str | None]
    applies: str = "every cluster"  # when it runs, for the validator table in the docs


@dataclass(frozen=True)
class Outcome:
    fact: str
    api: str
    status: Status
    detail: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def refuse(v: Validator, problem: str, fix: str) -> AccountError:
    """The error a validator raises: `raise refuse(THIS, "quota is 0 vCPUs", "ask for ...")`."""
    return AccountError(v.fact, v.api, problem, fix)


@dataclass
class FakeAccount:
    """A stand-in account for tests: invokes answered by token, ARM GETs by URL.

    `invokes[token](args)` answers as the cloud API would (the shape the provider returns);
    `arm(url)` answers an ARM REST GET with its JSON body (raise to fail the call).
    Installed with preview.evaluate(..., account=FakeAccount(...)); the validators then run
    against it instead of being skipped as offline.
    """

    invokes: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = field(default_factory=dict)
    arm: Callable[[str], dict[str, Any]] | None = None

    def call(self, token: str, args: dict[str, Any]) -> dict[str, Any] | None:
        answer = self.invokes.get(token)
        return None if answer is None else answer(args)


def fake_account() -> FakeAccount | None:
    """Under mocks, the FakeAccount a test installed, else None (live, or offline)."""
    from pulumi.runtime import settings

    mocks = getattr(settings.get_monitor(), "mocks", None)
    return getattr(mocks, "account", None)


def offline() -> bool:
    """True when there is no account to ask: under mocks without a FakeAccount."""
    return under_mocks() and fake_account() is None


def arm_get() -> Callable[[str], dict[str, Any]] | None:
    """Under a FakeAccount, its ARM GET; None live (the caller uses its own HTTP GET)."""
    account = fake_account()
    return account.arm if account else None


def cloud_validators(cloud: str) -> list[Validator]:
    """The cloud's validators (components/<cloud>/validators.py VALIDATORS), in order."""
    try:
        module = importlib.import_module(f"gpufleet.components.{cloud}.validators")
    except ModuleNotFoundError as e:
        if e.name == f"gpufleet.components.{cloud}.validators":
            return []
        raise
    return list(module.VALIDATORS)


def run_validators(spec: ClusterSpec, it: InstanceType, cloud: str | None = None) -> list[Outcome]:
    """Every validator of the spec's cloud, in order, before anything is registered.

    The first refusal raises AccountError; offline (a plan with no account) each is skipped with
    the reason said. A check that answers None does not apply and is left out.
    """
    validators = cloud_validators(cloud or spec.cloud)
    if offline():
        return [Outcome(v.fact, v.api, "skipped", OFFLINE) for v in validators]
    outcomes = []
    for v in validators:
        try:
            detail = v.check(spec, it)
        except Unanswered as e:
            outcomes.append(Outcome(v.fact, v.api, "skipped", f"not answered: {e}"))
            continue
        if detail is not None:
            outcomes.append(Outcome(v.fact, v.api, "passed", detail))
    return outcomes
