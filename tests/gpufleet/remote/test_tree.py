"""Tree-mode exec's pure parts: the head's script, and reading its prefixed lines back."""

from __future__ import annotations

import subprocess

from gpufleet.remote import tree
from tests.gpufleet.jobs.test_rsync import _info


def test_script_is_valid_sh_and_runs_only_the_chosen_nodes():
    script = tree.tree_script(_info(), "echo 'a b'", ["node-0", "node-2"])
    subprocess.run(["sh", "-n", "-c", script], check=True)
    assert "GF_CMD='echo '\"'\"'a b'\"'\"''" in script
    assert "node-2 ubuntu@10.0.0.3 22" in script and "node-1 " not in script


def _feed(lines):
    seen = []
    c = tree._Collector(lambda n, text, err: seen.append((n, text)))
    for line in lines:
        c.feed(line)
    return c, seen


def test_mark_after_newline_ends_output_without_an_extra_line():
    c, seen = _feed(["[node-1] a", "[node-1] ", "[node-1] __GPUFLEET_TREE__ 0"])
    assert seen == [("node-1", "a")]
    r = c.results(["node-1"])["node-1"]
    assert (r.exit_code, r.stdout, r.ok) == (0, "a\n", True)


def test_output_without_final_newline_and_real_empty_lines_are_kept():
    c, seen = _feed(
        [
            "[node-0] x",
            "[node-0] ",
            "[node-0] ",
            "[node-0] __GPUFLEET_TREE__ 3",
            "[node-2] partial",
            "[node-2] __GPUFLEET_TREE__ 0",
        ]
    )
    res = c.results(["node-0", "node-2", "node-1"])
    assert res["node-0"].stdout == "x\n\n" and res["node-0"].exit_code == 3
    assert res["node-2"].stdout == "partial\n"
    assert res["node-1"].exit_code is None and res["node-1"].error


def test_lease_script_runs_where_workers_log_in():
    script = tree.tree_script(_info(), "true", ["node-1"], in_workdir=False)
    subprocess.run(["sh", "-n", "-c", script], check=True)
    assert '"$GF_RCMD" </dev/null' in script and "cd $4" not in script
    assert "cd $4 && $GF_RCMD" in tree.tree_script(_info(), "true", ["node-1"])


def test_every_process_but_the_heads_ssh_carries_the_runs_id_and_stop_finds_it():
    script = tree.tree_script(_info(), "sleep 9", ["node-0", "node-1"], exec_id="ab12")
    assert "GF_RCMD='exec env GPUFLEET_TREE_ID=ab12 /bin/sh -c '" in script
    assert "GPUFLEET_TREE_ID=ab12\nexport GF_CMD GF_RCMD GPUFLEET_TREE_ID" in script
    assert "unset GPUFLEET_TREE_ID; { $RSH" in script  # its kept connections outlive the run
    stop = tree.stop_command("ab12")
    subprocess.run(["sh", "-n", "-c", stop], check=True)
    assert "grep -qxF GPUFLEET_TREE_ID=ab12" in stop


def test_why_a_node_failed_names_ssh_s_last_line():
    from gpufleet.core.errors import HostResult

    assert tree.why_failed(HostResult("node-1", 0, "a\n")) is None
    refused = HostResult("node-1", 255, "ssh: connect to host 10.0.0.2 port 22: refused\n")
    assert tree.why_failed(refused) == "exit 255: ssh: connect to host 10.0.0.2 port 22: refused"
    assert tree.why_failed(HostResult("node-2", 1)) == "exit 1"
    assert tree.why_failed(HostResult("node-3", None, error="timed out after 20s")) == (
        "timed out after 20s"
    )


def test_the_heads_own_part_runs_and_reads_back(tmp_path):
    (tmp_path / ".gpufleet" / "ssh").mkdir(parents=True)
    script = tree.tree_script(_info(), "printf 'a\\n\\nb'; exit 3", ["node-0"])
    out = subprocess.run(["sh", "-c", script], cwd=tmp_path, capture_output=True, text=True)
    c, seen = _feed(out.stdout.splitlines())
    r = c.results(["node-0"])["node-0"]
    assert (r.exit_code, r.stdout) == (3, "a\n\nb\n") and seen[0] == ("node-0", "a")


def test_each_line_is_written_whole_where_sed_can():
    # GNU sed -u: one write per line, so the nodes' lines never interleave inside a line
    got = subprocess.run(
        ["sh", "-c", "\n".join([*tree.LINE_SED, 'echo "$SEDU"'])], capture_output=True, text=True
    )
    assert got.stdout == "sed -u\n"
    assert '| $SEDU "s/^/[$1] /"' in tree.tree_script(_info(), "true", ["node-1"])


def test_every_worker_runs_at_once_so_a_rendezvous_on_hundreds_of_nodes_can_end():
    """`xargs -P 256` held worker 257 on until one of the first 256 ended: a job's rendezvous on
    260 nodes never would. Real xargs and sh run the script's fan-out line, each 'worker' waiting
    for all 299 to have started (a barrier), with a bound on the wait."""
    n = 260  # past the 256 of the old cap
    info = _info()
    one = info.nodes[1]
    info.nodes = [info.nodes[0]] + [
        type(one)(**{**vars(one), "name": f"node-{i}", "private_ip": f"10.0.{i // 250}.{i % 250}"})
        for i in range(1, n)
    ]
    script = tree.tree_script(info, "true", [f"node-{i}" for i in range(1, n)])
    fan_out = next(ln for ln in script.splitlines() if ln.startswith("xargs "))
    assert fan_out.startswith(f"xargs -P {n - 1} ")
    rows = script.split("<<'EOF'\n", 1)[1].split("\nEOF", 1)[0]
    barrier = (
        'd=$(mktemp -d) && trap "rm -rf $d" EXIT && '
        "xargs -P " + fan_out.split()[2] + ' -L 1 sh -c \'touch "$0/$1"; '
        'i=0; while set -- "$0"/*; [ $# -lt ' + str(n - 1) + " ]; do "
        'i=$((i+1)); [ $i -gt 300 ] && exit 1; sleep 0.2; done\' "$d"'
    )
    r = subprocess.run(["sh", "-c", barrier], input=rows, text=True, timeout=120)
    assert r.returncode == 0


def test_the_head_says_it_starts_before_it_starts_the_command_anywhere():
    """A default tree that fails falls back to the direct path only while nothing can have run:
    the head's STARTED line comes before the head's own command and before the fan-out."""
    script = tree.tree_script(_info(), "true", ["node-0", "node-1", "node-2"])
    lines = script.splitlines()
    started = lines.index(f"echo {tree.STARTED}")
    local = next(i for i, ln in enumerate(lines) if ln.startswith("{ sh -c"))
    fan_out = next(i for i, ln in enumerate(lines) if ln.startswith("xargs "))
    assert started < local < fan_out
