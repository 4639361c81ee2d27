"""`exec`'s work: one command on every node at once (holder, tree or Group), and its exit code."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpufleet.components.exitcodes import ExitCode

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpufleet.components.clusterspec import ContainerSpec
    from gpufleet.core.state import ClusterRecord
    from gpufleet.remote.session import Stream


def run_on_nodes(
    info: ClusterRecord,
    command: list[str],
    nodes: list[str],
    timeout: float | None,
    stream: Stream | None,
    tree: bool | None = None,
    container: ContainerSpec | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run `command` on `nodes` (all when empty): through the head's tree, a warm holder, or
    connections made here (leaving a holder for the next command); node -> HostResult.
    tree: True --tree, False --no-tree, None: a warm holder if there is one, else the tree
    from remote/tree.TREE_FROM nodes on (choose_tree).
    container: in that image instead (exec --image): the nodes' containers are started for
    this one command, like a run's, and removed after it."""
    from gpufleet.remote import holder

    refuse_tree(tree, container)
    cmd = " ".join(command)  # as ssh and pdsh do: the remote shell interprets the words
    if container is not None:
        return _in_containers(info, cmd, nodes, timeout, stream, container, progress)
    results = None
    if tree is True and timeout is not None:
        from gpufleet.core.errors import GpufleetError

        raise GpufleetError(
            "--timeout is not supported with --tree",
            hint="drop one of the two",
            exit_code=ExitCode.USAGE,
        )
    # A warm holder first unless --tree: it is the fastest warm path at every N measured
    # (docs/benchmarks.md); the tree's default is for the cold ones.
    if tree is not True and holder.enabled():
        every = nodes or [n.name for n in info.nodes]
        results = holder.request(info.name, cmd, every, timeout, stream)
    if results is None and choose_tree(tree, len(nodes or info.nodes), timeout, container):
        from gpufleet.remote.tree import TreeFailed, run_tree

        try:
            results = run_tree(info, cmd, nodes or None, stream)
        except TreeFailed as e:
            if tree or e.started:  # asked for, or the head may have started it: not run twice
                raise
            if progress:
                progress(f"{e.message}; reaching every node from here")
    if results is None:  # cold: connect from here, and leave a holder for the next command
        from gpufleet.remote import Group

        with Group(info, nodes or None) as g:
            results = g.run(cmd, stream=stream, check=False, timeout=timeout)
        if holder.enabled():
            holder.spawn(info.name)
    return results


def choose_tree(
    tree: bool | None, count: int, timeout: float | None, container: ContainerSpec | None
) -> bool:
    """Whether exec goes through the head: as asked (--tree / --no-tree), else from
    TREE_FROM nodes on when nothing needs the direct path (--timeout, --image)."""
    if tree is not None:
        return tree
    if timeout is not None or container is not None:
        return False
    from gpufleet.remote.tree import by_default

    return by_default(count)


def refuse_tree(tree: bool | None, container: ContainerSpec | None) -> None:
    """--tree with --image: a usage error before anything runs (the containers are started
    from here, one per node; the head's fan-out has no part in that). Tree mode only by
    default gives way to the direct path instead."""
    if tree and container is not None:
        from gpufleet.core.errors import GpufleetError

        raise GpufleetError(
            "--tree is not supported with --image",
            hint="drop --tree: exec --image reaches every node from here",
            exit_code=ExitCode.USAGE,
        )


def _in_containers(
    info: ClusterRecord,
    cmd: str,
    nodes: list[str],
    timeout: float | None,
    stream: Stream | None,
    spec: ContainerSpec,
    progress: Callable[[str], None] | None,
) -> dict[str, Any]:
    """exec --image: start one container per node (jobs/container.py, held as a run's are, so
    a dead CLI's go with its SSH sessions), run the command in each, remove them."""
    import secrets

    from gpufleet.core.signals import shielded
    from gpufleet.jobs import container, containerhost
    from gpufleet.remote import Group

    say = progress or (lambda _m: None)
    containerhost.check_where(info.cloud, spec)
    with Group(info, nodes or None) as g:
        g.wait_ready(60, refused_fails=True)
        boxes = container.start(info, g, spec, f"exec-{secrets.token_hex(4)}", say)  # type: ignore[arg-type]
        try:
            return g.run(boxes.every(cmd), stream=stream, check=False, timeout=timeout)
        except BaseException:
            with shielded():
                g.cancel()
                boxes.stop()
            raise
        finally:
            left = boxes.close()
            if left:
                say(f"containers {boxes.name} still on {', '.join(sorted(left))}")


def exit_code(results: dict[str, Any]) -> int:
    """exec's exit status: never a node's own code, which could read as one of gpufleet's.

    UNREACHABLE when a node gave no exit status (connection failed or lost), else TIMEOUT
    when --timeout killed the command, else JOB_FAILED when a command exited non-zero.
    """
    failed = [r for r in results.values() if not r.ok]
    if not failed:
        return ExitCode.OK
    no_status = [r for r in failed if r.exit_code is None]
    if any(not (r.error or "").startswith("timed out") for r in no_status):
        return ExitCode.UNREACHABLE
    if no_status:
        return ExitCode.TIMEOUT
    return ExitCode.JOB_FAILED
