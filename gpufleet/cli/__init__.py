"""The `gpufleet` command: assembles the command groups and is the one error boundary."""

from __future__ import annotations

import os
import sys


def build_app():
    """The typer app with every command group (built on demand: exec's fast path skips it)."""
    import typer

    from gpufleet.cli import catalog, cluster, health, image, plan, remote, run, runs, sync

    app = typer.Typer(
        name="gpufleet",
        help="Multi-node GPU clusters as code: create, run distributed jobs, tear down.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,  # rich help costs ~90 ms of imports on every command
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    for module in (cluster, remote, run, runs, sync, catalog, plan, image, health):
        module.register(app)
    return app


def _fast_exec(args: list[str]) -> int | None:
    """`exec` without typer or pydantic (start-up is most of a small fan-out); None: not handled."""
    from gpufleet.execute import parse_fast

    parsed = parse_fast(args)
    if parsed is None:
        return None
    from gpufleet import state
    from gpufleet.execute import run_exec

    info = state.load_view(parsed["name"])
    return run_exec(
        info, parsed["command"], parsed["nodes"], parsed["timeout"], parsed["json"], parsed["tree"]
    )


def _fast_sync(args: list[str]) -> int | None:
    """`sync` without typer: its start-up would be most of a no-change sync."""
    from gpufleet import sync

    parsed = sync.parse_fast(args)
    return None if parsed is None else sync.run_fast(parsed)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; GpufleetError becomes 'error: ...' and its exit code (--debug: traceback)."""
    from gpufleet.errors import GpufleetError
    from gpufleet.signals import install_handlers

    # paramiko imports invoke (~60 ms) only for ssh_config `Match exec`, which gpufleet
    # never uses; the CLI's start-up time is on every command's critical path.
    sys.modules.setdefault("invoke", None)  # type: ignore[arg-type]
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("GPUFLEET_DEBUG") == "1"
    args = [a for a in args if a != "--debug"]
    install_handlers()
    try:
        fast = _fast_exec(args)
        if fast is None:
            fast = _fast_sync(args)
        if fast is not None:
            return fast
        build_app()(args=args, prog_name="gpufleet")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except GpufleetError as e:
        if debug:
            import traceback

            traceback.print_exc()
        _say(f"error: {e}")
        if e.hint:
            _say(f"  fix: {e.hint}")
        return e.exit_code
    except KeyboardInterrupt:  # a signal before the handlers took over
        _say("error: interrupted")
        return 130
    except Exception as e:  # a defect: still no traceback for the user, unless --debug
        if debug:
            raise
        _say(f"error: internal error: {type(e).__name__}: {e}"[:2000])
        _say("  fix: run again with --debug and report the traceback")
        return 70  # EX_SOFTWARE
    return 0


def _say(line: str) -> None:
    """To stderr, unless it is gone (SIGHUP: the terminal was closed); the exit code stays."""
    import contextlib

    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


def entry() -> None:
    sys.exit(main())
