"""The `gpufleet` command: assembles the command groups and is the one error boundary."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpufleet.core.state import ClusterRecord


def epilog() -> str:
    """`gpufleet --help`'s epilog: the exit-code table (gpufleet/components/exitcodes.py)."""
    from gpufleet.components.exitcodes import help_text

    # \b: click keeps the paragraph's line breaks
    return (
        "\b\n" + help_text() + "\n\n--debug (or GPUFLEET_DEBUG=1) prints the traceback of an error."
    )


def build_app():
    """The typer app with every command group (built on demand: exec's fast path skips it)."""
    import typer

    from gpufleet.cli import (
        catalog,
        cluster,
        completion,
        health,
        image,
        plan,
        remote,
        root,
        run,
        runs,
        setup,
        sync,
    )

    app = typer.Typer(
        name="gpufleet",
        help="Multi-node GPU clusters as code: create, run distributed jobs, tear down.",
        epilog=epilog(),
        no_args_is_help=True,
        add_completion=False,  # `gpufleet completion bash|zsh|fish` instead: no shell detection
        pretty_exceptions_enable=False,
        rich_markup_mode=None,  # rich help costs ~90 ms of imports on every command
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    app.callback()(root.root)
    for module in (
        cluster,
        remote,
        run,
        runs,
        sync,
        catalog,
        plan,
        image,
        health,
        setup,
        completion,
    ):
        module.register(app)
    return app


COMPLETE_VAR = "_GPUFLEET_COMPLETE"


def build_command():
    """The click command behind the app, with a word for every value in --help (not <str>)."""
    import typer

    if COMPLETE_VAR in os.environ:  # a shell asks for completions (`gpufleet completion SHELL`)
        from typer._completion_classes import completion_init

        completion_init()

    command = typer.main.get_command(build_app())
    _metavars(command)
    _eof_is_an_error(command)
    return command


def _eof_is_an_error(command) -> None:
    """An EOFError out of a command (a closed SSH connection) becomes ConnectionClosed: click
    would print a bare 'Aborted!' for it, and no command may end without saying why."""
    import functools

    from gpufleet.core.errors import ConnectionClosed

    callback = command.callback
    if callback is not None:

        @functools.wraps(callback)
        def guarded(*args, **kwargs):
            try:
                return callback(*args, **kwargs)
            except EOFError as e:
                raise ConnectionClosed(e) from e

        command.callback = guarded
    for sub in getattr(command, "commands", {}).values():
        _eof_is_an_error(sub)


def _metavars(command) -> None:

    for param in command.params:
        if param.metavar is None and not getattr(param, "is_flag", False) and param.name:
            param.metavar = param.name.upper()
        if param.param_type_name == "argument":
            # typer writes arguments as {NAME} <str> in help; say NAME, [NAME] when optional
            param.display_type_rich = lambda ctx: None
            param._usage_display_name = lambda p=param: (
                (p.metavar if p.required else f"[{p.metavar}]")
                + ("..." if p.nargs != 1 and not p.metavar.endswith("...") else "")
            )
    for sub in getattr(command, "commands", {}).values():
        _metavars(sub)


def _fast_exec(args: list[str]) -> int | None:
    """`exec` without typer or pydantic (start-up is most of a small fan-out); None: not handled."""
    from gpufleet.cli.exec import parse_fast

    parsed = parse_fast(args)
    if parsed is None:
        return None
    from gpufleet.cli.exec import run_exec
    from gpufleet.core import state

    info = state.load_view(parsed["name"])
    return run_exec(
        info, parsed["command"], parsed["nodes"], parsed["timeout"], parsed["json"], parsed["tree"]
    )


def _fast_sync(args: list[str]) -> int | None:
    """`sync` without typer or pydantic: start-up would be most of a no-change sync."""
    if args[:1] != ["sync"]:  # the parser is not imported for the other commands
        return None
    from gpufleet.cli.fastsync import parse_fast

    parsed = parse_fast(args)
    if parsed is None:
        return None
    from gpufleet.core import state

    info = state.load_view(parsed["name"])
    run_sync(
        info,
        parsed["workdir"],
        include=parsed["include"],
        exclude=parsed["exclude"],
        method=parsed["method"],
        as_json=parsed["json"],
    )
    return 0


def run_sync(
    info: ClusterRecord,
    workdir: str,
    *,
    include: list[str],
    exclude: list[str],
    method: str,
    as_json: bool,
) -> None:
    """The `sync` command once parsed (typer's and the fast path): progress on stderr, --json
    on stdout."""
    from pathlib import Path

    from gpufleet.cli.common import print_json, progress
    from gpufleet.jobs.sync import sync

    report = sync(
        info,
        Path(workdir).resolve(),
        include=include,
        exclude=exclude,
        progress=progress,
        method=method,
    )
    if as_json:
        from gpufleet.cli.documents import sync as document

        print_json(document(info.name, report, [n.name for n in info.nodes]))


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; GpufleetError becomes 'error: ...' and its exit code (--debug: traceback)."""
    from gpufleet.core.errors import ConnectionClosed, GpufleetError
    from gpufleet.core.signals import install_handlers

    # paramiko imports invoke (~60 ms) only for ssh_config `Match exec`, which gpufleet
    # never uses; the CLI's start-up time is on every command's critical path.
    sys.modules.setdefault("invoke", None)  # type: ignore[arg-type]
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("GPUFLEET_DEBUG") == "1"
    args = [a for a in args if a != "--debug"]
    install_handlers()
    _thread_errors(debug)
    try:
        fast = _fast_exec(args)
        if fast is None:
            fast = _fast_sync(args)
        if fast is not None:
            return fast
        build_command().main(args=args, prog_name="gpufleet")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except GpufleetError as e:
        return _report(e, debug)
    except EOFError as e:  # from the fast paths (exec, sync), which run outside click
        return _report(ConnectionClosed(e), debug)
    except ModuleNotFoundError as e:  # a cloud SDK imported where no cloud_sdk() was around it
        from gpufleet.components.errors import missing_extra

        extra = missing_extra(e)
        if extra is None:
            return _internal(e, debug)
        return _report(extra, debug)
    except KeyboardInterrupt:  # a signal before the handlers took over
        _say("error: interrupted")
        return 130
    except Exception as e:  # a defect: still no traceback for the user, unless --debug
        return _internal(e, debug)
    return 0


def _thread_errors(debug: bool) -> None:
    """An error no thread caught is one line, not a traceback (--debug: Python's own). A
    connection dropping under paramiko's transport threads says nothing here: each node's
    result already says what it did to that node."""
    if debug:
        return
    import threading

    def hook(a: threading.ExceptHookArgs) -> None:
        if a.exc_type is SystemExit:
            return
        dropped = issubclass(a.exc_type, (EOFError, OSError)) or a.exc_type.__module__.startswith(
            "paramiko"
        )
        if dropped and type(a.thread).__module__.startswith("paramiko"):
            return
        who = a.thread.name if a.thread else "a thread"
        _say(f"gpufleet: {who}: {a.exc_type.__name__}: {a.exc_value}"[:500])

    threading.excepthook = hook


def _report(e: Any, debug: bool) -> int:
    """A GpufleetError as `error:` + `fix:`; its exit code."""
    if debug:
        import traceback

        traceback.print_exc()
    _say(f"error: {e}")
    if e.hint:
        _say(f"  fix: {e.hint}")
    return int(e.exit_code)


def _internal(e: Exception, debug: bool) -> int:
    """A defect: still no traceback for the user, unless --debug."""
    from gpufleet.components.exitcodes import ExitCode

    if debug:
        raise e
    _say(f"error: internal error: {type(e).__name__}: {e}"[:2000])
    _say("  fix: run again with --debug and report the traceback")
    return ExitCode.INTERNAL


def _say(line: str) -> None:
    """To stderr, unless it is gone (SIGHUP: the terminal was closed); the exit code stays."""
    import contextlib

    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


def entry() -> None:
    sys.exit(main())
