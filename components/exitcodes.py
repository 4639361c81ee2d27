"""gpufleet's exit codes: the one table the errors, `gpufleet --help` and the docs use."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """What a `gpufleet` process's exit status means.

    A job's (or a remote command's) own code never becomes gpufleet's: it would read as one of
    gpufleet's outcomes (a job exiting 4 as "a node did not answer SSH"). Any failure of the job
    is 1, and the node's own code is in the message and in --json. Every other code is an
    outcome of gpufleet itself. `gpufleet ssh` is the one exception: once it has found the node
    it becomes OpenSSH, whose status is the remote command's (255: ssh's own error).
    """

    OK = 0
    JOB_FAILED = 1
    USAGE = 2
    HOST_KEY = 3
    UNREACHABLE = 4
    NODE_FAILED = 5
    NODE_EXPIRED = 6
    DECLINED = 7
    OPERATION_FAILED = 8
    INTERNAL = 70
    TIMEOUT = 124
    SIGHUP = 129
    SIGINT = 130
    SIGTERM = 143

    @property
    def meaning(self) -> str:
        return _MEANING[self][0]

    @property
    def examples(self) -> str:
        return _MEANING[self][1]


_MEANING: dict[ExitCode, tuple[str, str]] = {
    ExitCode.OK: ("success", "the job ran on every node and exited 0"),
    ExitCode.JOB_FAILED: (
        "the job or remote command failed (its own code: in the message and --json)",
        "`run` whose rank exited 4; `exec` whose command exited non-zero on a node "
        "(`gpufleet ssh` alone is OpenSSH's: the remote code, 255 its own)",
    ),
    ExitCode.USAGE: (
        "bad input: flags, spec, unknown/expired cluster or node, missing tool/extra, --max-cost",
        "`--nodes 0`; `exec c --node node-9`; `catalog --gpu Z999`; `plan` without pulumi_aws",
    ),
    ExitCode.HOST_KEY: (
        "a node's host key did not match the pinned one",
        "a BYO host re-installed, an address taken over",
    ),
    ExitCode.UNREACHABLE: (
        "a node did not answer SSH",
        "an unreachable BYO host; a node whose sshd is gone",
    ),
    ExitCode.NODE_FAILED: (
        "`health` found a failing node, or `run` lost a node",
        "ECC errors; a node killed under a job",
    ),
    ExitCode.NODE_EXPIRED: (
        "a node reached its expiry (TTL or lease) during `run`",
        "`--max-duration 10m` for a 20-minute job",
    ),
    ExitCode.DECLINED: (
        "a question was answered no: nothing was created or installed",
        "`Create it? [Y/n] n`",
    ),
    ExitCode.OPERATION_FAILED: (
        "a step of gpufleet's own failed: creating/removing nodes, sync, extend, image build",
        "`pulumi up` refused by the cloud; rsync out of disk space",
    ),
    ExitCode.INTERNAL: (
        "a defect in gpufleet (EX_SOFTWARE): please report it",
        "`error: internal error: ...`; --debug shows the traceback",
    ),
    ExitCode.TIMEOUT: (
        "--timeout ran out (`run`, `exec`)",
        "`run --timeout 45m`; as timeout(1) exits",
    ),
    ExitCode.SIGHUP: ("SIGHUP: the terminal was closed", "128 + 1"),
    ExitCode.SIGINT: ("Ctrl-C", "128 + 2"),
    ExitCode.SIGTERM: ("SIGTERM", "128 + 15"),
}


def help_text() -> str:
    """The epilog of `gpufleet --help`: one code per line."""
    lines = [f"  {int(c):>3}  {c.meaning}" for c in ExitCode]
    return "Exit codes (a job's own code is in its message and --json):\n" + "\n".join(lines)


def markdown() -> str:
    """The docs' table (code, meaning, examples)."""
    rows = ["| code | meaning | examples |", "|---|---|---|"]
    rows += [f"| {int(c)} | {c.meaning} | {c.examples} |" for c in ExitCode]
    return "\n".join(rows) + "\n"
