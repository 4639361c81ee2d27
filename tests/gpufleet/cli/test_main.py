"""The one error boundary, main(): nothing reaching it ends without `error:` and `fix:`."""

from __future__ import annotations

import pytest

from gpufleet.cli import main
from gpufleet.core import state
from gpufleet.core.errors import ConnectionClosed
from gpufleet.jobs import run as job
from tests.gpufleet import fakes as clusters


@pytest.fixture
def recorded_cluster():
    """A cluster `t` in the state dir (local: no cost gate), for `run --cluster t`."""
    state.save(clusters.cluster(cloud="local", gpus=0, n=3))
    return "t"


@pytest.mark.parametrize("launcher", ["mpirun", "torchrun"])
def test_an_eof_error_under_run_says_why_not_aborted(
    recorded_cluster, launcher, tmp_path, monkeypatch, capsys
):
    """paramiko raises EOFError when a connection closes, Group.connect EOFError('group
    closed'): click turns an EOFError into a bare 'Aborted!' and exit 1 unless gpufleet
    names it first."""

    def closed(*args, **kwargs):
        raise EOFError("group closed")

    monkeypatch.setattr(job, "run_on_cluster", closed)
    (tmp_path / "job.py").write_text("print('hi')\n")
    argv = ["run", "--cluster", recorded_cluster, "--launcher", launcher]
    code = main([*argv, "--workdir", str(tmp_path), "--", "job.py"])
    err = capsys.readouterr().err
    assert "Aborted" not in err
    assert (
        "error: an SSH connection closed while gpufleet was using it (EOFError: group closed)"
        in err
    )
    assert "  fix: check the nodes with `gpufleet status`" in err
    assert code == ConnectionClosed.exit_code
    assert "failed in" in err  # the run's own last line, and its record, came first


def test_an_eof_error_out_of_any_command_says_why(monkeypatch, capsys):
    from gpufleet.components import catalog

    def closed(*args, **kwargs):
        raise EOFError

    monkeypatch.setattr(catalog, "types", closed)
    assert main(["catalog"]) == ConnectionClosed.exit_code
    err = capsys.readouterr().err
    assert "Aborted" not in err and "error: an SSH connection closed" in err and "fix:" in err


def test_an_eof_error_on_the_fast_exec_path_says_why(recorded_cluster, monkeypatch, capsys):
    """`exec` runs outside click (start-up time); its EOFError is named the same way."""
    from gpufleet.cli import exec as execute

    def closed(*args, **kwargs):
        raise EOFError("group closed")

    monkeypatch.setattr(execute, "run_exec", closed)
    assert main(["exec", recorded_cluster, "--", "true"]) == ConnectionClosed.exit_code
    err = capsys.readouterr().err
    assert "error: an SSH connection closed" in err and "fix:" in err


def test_an_error_no_thread_caught_prints_no_traceback(monkeypatch, capfd):
    """paramiko's transport threads can raise as a connection drops under them (EOFError from
    a tunnel's close): nothing then, as each node's result says it; anything else, or in another
    thread, is one line.
    --debug keeps Python's hook, and its traceback."""
    import threading

    import paramiko

    from gpufleet.cli import _thread_errors

    before = threading.excepthook
    monkeypatch.setattr(threading, "excepthook", before)
    _thread_errors(True)
    assert threading.excepthook is before
    _thread_errors(False)

    class Transport(threading.Thread):  # as paramiko.Transport is a Thread
        pass

    Transport.__module__ = paramiko.Transport.__module__

    def boom(e: BaseException) -> None:
        raise e

    for kind, e in (
        (Transport, EOFError()),
        (Transport, paramiko.SSHException("x")),
        (Transport, ValueError("a paramiko bug")),
        (threading.Thread, PermissionError("lease file")),
    ):
        t = kind(target=boom, args=(e,), name="worker")
        t.start()
        t.join()
    err = capfd.readouterr().err
    assert err.splitlines() == [
        "gpufleet: worker: ValueError: a paramiko bug",
        "gpufleet: worker: PermissionError: lease file",
    ]
