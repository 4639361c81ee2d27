"""Bad invocations of the real CLI: each refused with `error:` and a code, no traceback.

In process (hundreds, fast) through the one error boundary, main(); then a sample as
subprocesses, which is what a user sees.
"""

from __future__ import annotations

import itertools
import sys

import pytest

from gpufleet.cli import main
from gpufleet.core import state
from tests.integration.conftest import gpufleet

BAD_YAML = {
    "tabs": "config:\n\tgpufleet:cluster:\n\t\tnodes: 2\n",
    "unclosed": "config:\n  gpufleet:cluster: [cloud, aws\n",
    "docs": "config: {}\n---\nconfig: {}\n",
    "nul": "config:\n  gpufleet:cluster: {nodes: 2}\x00\n",
    "python": "config: !!python/object:os.system {}\n",
    "string": "config: hello\n",
    "list": "config: [1, 2]\n",
    "number": "config: 7\n",
    "digits": "config:\n  gpufleet:cluster: {cloud: aws, nodes: " + "9" * 5000 + "}\n",
    "ttl": "config:\n  gpufleet:cluster: {cloud: aws, instance_type: p4d.24xlarge,"
    " ttl_minutes: 1000000000000000}\n",
    "cluster-str": "config:\n  gpufleet:cluster: aws\n",
    "empty": "",
    "bom-garbage": "\ufeff:::\n",
}
BAD_TTLS = ["0x", "²", "99999999999999999999d", "-1h", "1h 30m", "9" * 5000, "", "h"]
BAD_NODES = ["²", "-1", "1e3", "9" * 5000, "two"]
BAD_NAMES = ["X", "a_b", "ok\n", "", "-a", "a" * 40, "../etc"]


def invocations(stacks: str) -> list[list[str]]:
    out: list[list[str]] = []
    out += [["plan", "--stack", s, "--stacks-dir", stacks] for s in BAD_YAML]
    out += [["plan", "--stack", "missing", "--stacks-dir", stacks]]
    for cmd, ttl in itertools.product(["up", "run"], BAD_TTLS):
        out.append([cmd, "--ttl", ttl, "--name", "t", *(["--", "true"] if cmd == "run" else [])])
    for cmd, n in itertools.product(["up", "run"], BAD_NODES):
        out.append([cmd, "--nodes", n, "--name", "t", *(["--", "true"] if cmd == "run" else [])])
    for cmd, name in itertools.product(["up", "run"], BAD_NAMES):
        out.append([cmd, "--name", name, *(["--", "true"] if cmd == "run" else [])])
    out += [
        ["run", "--cluster", "", "--", "true"],
        ["run", "--cluster", "nope", "--", "true"],
        ["run", "--launcher", "bogus", "--", "x"],
        ["up", "--cloud", "mars"],
        ["up", "--cloud", "aws"],
        ["up", "--cloud", "aws", "--instance-type", "nope"],
        ["up", "--ssh-cidr", "300.1.1.1/99"],
        ["up", "--tag", "novalue"],
        ["down", "nope"],
        ["down"],
        ["down", "--all"],
        ["status", "nope"],
        ["status", "damaged"],
        ["extend", "nope", "1h"],
        ["extend", "damaged", "0m"],
        ["extend", "damaged", "²"],
        ["exec", "nope", "--", "true"],
        ["exec", "damaged", "--", "true"],
        ["hostfile", "damaged"],
        ["ssh-config", "damaged"],
    ]
    return out


@pytest.fixture
def stacks(tmp_path):
    for name, text in BAD_YAML.items():
        (tmp_path / f"Pulumi.{name}.yaml").write_bytes(text.encode("utf-8", "surrogatepass"))
    d = state.cluster_dir("damaged")
    d.mkdir(parents=True)
    (d / "cluster.json").write_text('{"name": "damaged", "nod')  # a truncated write
    return str(tmp_path)


def test_every_bad_invocation_is_refused_without_a_traceback(stacks, capsys, monkeypatch):
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False, raising=False)
    codes: dict[int, int] = {}
    for argv in invocations(stacks):
        rc = main(argv)  # an exception escaping main() would be the user's traceback
        err = capsys.readouterr().err
        assert rc not in (0, 70), f"{argv}: exit {rc}\n{err}"
        assert "Traceback" not in err and "internal error" not in err, f"{argv}\n{err}"
        assert err.strip(), f"{argv}: refused silently"
        codes[rc] = codes.get(rc, 0) + 1
    print(f"\nbad invocations in process: {sum(codes.values())}, exit codes {codes}, 0 tracebacks")


def test_a_sample_through_the_real_cli_prints_no_traceback(stacks, gpufleet_home):
    sample = invocations(stacks)[::6]
    tracebacks = 0
    for argv in sample:
        r = gpufleet(gpufleet_home, *argv, timeout=120, stdin=None)
        tracebacks += "Traceback" in r.stderr
        assert r.returncode not in (0, 70), f"{argv}: {r.stderr}"
    print(f"\nbad invocations as subprocesses: {len(sample)}, tracebacks: {tracebacks}")
    assert tracebacks == 0
