"""The layer contract: which gpufleet packages may import which (read from the source with ast).

Every .py under gpufleet/ and components/ (the package gpufleet.components) is parsed, and every
import in it counts: top-level ones and the lazy ones inside functions (a lazy import is still a
dependency; the fast CLI path imports lazily only to start quickly), `from gpufleet import x`
(x is a module) and relative imports. gpufleet/components (a symlink to components/) and
gpufleet/_pickled (the old import paths of pickled Pulumi providers, a compatibility shim) are
not read.

The rules:

- components never imports the rest of gpufleet: it is the Pulumi program's side, which runs in
  Pulumi's own processes and is shipped on its own.
- Only gpufleet/cli/ (and gpufleet/__main__.py, which starts it) imports gpufleet.cli: the CLI
  parses and prints; nothing below it knows about it.
- The packages in LAYERS, bottom to top; a package imports only packages below it (and itself):
    components   the cloud/Pulumi side and the shared tables (errors, exit codes, catalog)
    core         errors, state, signals, deadline, providers: what every other layer needs
    remote       ssh: connections, the holder, the tree, groups
    provision    providers that make nodes (local sshd, VM, Pulumi), over remote
    clusters     cluster operations, cost and plans, over provision
    jobs         running work on a cluster's nodes (run, exec, sync, health), over clusters
    cli          typer commands: parse and print, over everything
  gpufleet/__main__.py sits at the top, with cli; gpufleet/__init__.py (only __version__) at the
  bottom: every gpufleet import runs it first, so anything may read it and it may import nothing.
- No import cycles between modules, function-local imports included (a package's __init__ is a
  module like any other: `import gpufleet.jobs.run` also runs gpufleet/jobs/__init__.py, but that
  edge is not counted, or every package with a registry in __init__ would be a cycle). An
  import under `if TYPE_CHECKING:` is held to the layer rules but makes no cycle: it never runs.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

LAYERS = ["components", "core", "remote", "provision", "clusters", "jobs", "cli"]
TOP = len(LAYERS)  # gpufleet/__main__.py: above every package


@dataclass(frozen=True)
class Edge:
    src: str  # importing module, dotted
    dst: str  # imported module, dotted
    line: int
    typing_only: bool = False  # under `if TYPE_CHECKING:`: a layer edge, never run

    def __str__(self) -> str:
        return f"{self.src} -> {self.dst} (line {self.line})"


def modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module under gpufleet/ and components/ (gpufleet.components)."""
    found: dict[str, Path] = {}
    for base, prefix in (
        (root / "gpufleet", "gpufleet"),
        (root / "components", "gpufleet.components"),
    ):
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base)
            parts = rel.with_suffix("").parts
            if prefix == "gpufleet" and parts[0] in ("components", "_pickled"):
                continue
            # a symlink loop (components/components -> ../components) repeats the tree
            if any((base.joinpath(*parts[:i])).is_symlink() for i in range(1, len(parts))):
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((prefix, *parts))] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> list[Edge]:
    """Every gpufleet module that the module `name` imports, at any depth of its body."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    edges = []
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If)
        and (ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"))
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            # `from pkg import x`: x is a module when one by that name exists
            targets = [
                f"{mod}.{alias.name}" if f"{mod}.{alias.name}" in known else mod
                for alias in node.names
            ]
        for target in targets:
            if target == "gpufleet" or target.startswith("gpufleet."):
                # `import gpufleet.a.b.c` where c is a name in b: the longest known module
                while target not in known and "." in target:
                    target = target.rpartition(".")[0]
                edges.append(Edge(name, target, node.lineno, id(node) in typing_only))
    return edges


def graph(root: Path) -> list[Edge]:
    mods = modules(root)
    known = set(mods)
    edges = [edge for name, path in mods.items() for edge in imports(name, path, known)]
    return list(dict.fromkeys(edges))  # `from a import x, y`: one edge per line


def package(module: str) -> str:
    """The layer package of a module: gpufleet.jobs.run -> jobs; gpufleet/__init__ -> ''."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else ""


def rank(module: str) -> int:
    pkg = package(module)
    if pkg:
        return LAYERS.index(pkg)
    # gpufleet/__init__.py (only __version__) runs before any gpufleet module: below them all
    return -1 if module == "gpufleet" else TOP


def components_alone(edges: list[Edge]) -> list[str]:
    return [
        str(e) for e in edges if package(e.src) == "components" and package(e.dst) != "components"
    ]


def cli_only_from_cli(edges: list[Edge]) -> list[str]:
    return [
        str(e)
        for e in edges
        if package(e.dst) == "cli" and package(e.src) != "cli" and e.src != "gpufleet.__main__"
    ]


def downward_only(edges: list[Edge]) -> list[str]:
    return [
        str(e) for e in edges if package(e.src) != package(e.dst) and rank(e.dst) >= rank(e.src)
    ]


def cycles(edges: list[Edge]) -> list[str]:
    """Each import cycle once, as 'a -> b (line N) -> a (line M)'."""
    out: dict[str, list[Edge]] = {}
    for e in edges:
        # a package's own __init__ runs before its modules: not an edge of its own
        if e.src == e.dst or e.src.startswith(e.dst + "."):
            continue
        if e.typing_only:  # never imported at run time: it cannot make an import cycle
            continue
        out.setdefault(e.src, []).append(e)
    # Tarjan's strongly connected components, then one cycle through each
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    sccs: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for e in out.get(v, []):
            if e.dst not in index:
                visit(e.dst)
                low[v] = min(low[v], low[e.dst])
            elif e.dst in on:
                low[v] = min(low[v], index[e.dst])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                sccs.append(sorted(scc))

    for v in sorted(out):
        if v not in index:
            visit(v)
    found = []
    for scc in sccs:
        members = set(scc)
        # shortest way back to the start, breadth first inside the component
        start = scc[0]
        prev: dict[str, Edge] = {}
        queue = [start]
        while queue and start not in prev:
            v = queue.pop(0)
            for e in out.get(v, []):
                if e.dst in members and e.dst not in prev:
                    prev[e.dst] = e
                    queue.append(e.dst)
        path = []
        v = start
        while True:
            e = prev[v]
            path.append(e)
            v = e.src
            if v == start:
                break
        path.reverse()
        found.append(path[0].src + "".join(f" -> {e.dst} (line {e.line})" for e in path))
    return found


def check(root: Path) -> dict[str, list[str]]:
    edges = graph(root)
    return {
        "components imports the rest of gpufleet": components_alone(edges),
        "gpufleet.cli imported from outside the CLI": cli_only_from_cli(edges),
        f"a package imports one not below it ({' < '.join(LAYERS)})": downward_only(edges),
        "import cycles": cycles(edges),
    }


def report(found: dict[str, list[str]]) -> str:
    return "\n".join(f"{rule}:\n  " + "\n  ".join(v) for rule, v in found.items() if v)


def test_the_layers_hold():
    found = check(ROOT)
    if any(found.values()):
        pytest.fail(report(found), pytrace=False)


def test_the_checker_reads_the_real_tree():
    edges = graph(ROOT)
    mods = modules(ROOT)
    assert "gpufleet.components.catalog" in mods and "gpufleet.cli" in mods
    assert not any(
        m.startswith(("gpufleet._pickled", "gpufleet.components.components")) for m in mods
    )
    # a lazy import inside a function counts
    assert any(e.src == "gpufleet.cli" and package(e.dst) == "jobs" for e in edges)


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for pkg in {p.parent for p in root.rglob("*.py")}:
        (pkg / "__init__.py").touch()
    return root


def test_a_back_import_from_components_is_reported(tmp_path):
    root = _tree(
        tmp_path,
        {
            "gpufleet/jobs/run.py": "def run(): pass\n",
            "components/x.py": "def f():\n    from gpufleet.jobs import run\n",
        },
    )
    found = check(root)
    assert found["components imports the rest of gpufleet"] == [
        "gpufleet.components.x -> gpufleet.jobs.run (line 2)"
    ]
    assert "gpufleet.components.x -> gpufleet.jobs.run (line 2)" in next(
        v for k, v in found.items() if k.startswith("a package imports")
    )


def test_an_import_of_the_cli_from_below_is_reported(tmp_path):
    root = _tree(
        tmp_path,
        {
            "gpufleet/cli/common.py": "",
            "gpufleet/core/state.py": "import os\nfrom ..cli import common\n",
            "gpufleet/__main__.py": "from gpufleet.cli import common\n",
            "gpufleet/cli/run.py": "from gpufleet.jobs import exec\n",
            "gpufleet/jobs/exec.py": "",
        },
    )
    found = check(root)
    assert found["gpufleet.cli imported from outside the CLI"] == [
        "gpufleet.core.state -> gpufleet.cli.common (line 2)"
    ]
    upward = next(v for k, v in found.items() if k.startswith("a package imports"))
    assert upward == ["gpufleet.core.state -> gpufleet.cli.common (line 2)"]


def test_an_upward_import_between_packages_is_reported(tmp_path):
    root = _tree(
        tmp_path,
        {
            "gpufleet/remote/group.py": "import gpufleet.provision.local\n",
            "gpufleet/provision/local.py": "from gpufleet.remote import group\n",
        },
    )
    upward = next(v for k, v in check(root).items() if k.startswith("a package imports"))
    assert upward == ["gpufleet.remote.group -> gpufleet.provision.local (line 1)"]


def test_a_cycle_is_reported(tmp_path):
    root = _tree(
        tmp_path,
        {
            "gpufleet/core/a.py": "from gpufleet.core import b\n",
            "gpufleet/core/b.py": "import os\n\n\ndef f():\n    from . import a\n",
            "gpufleet/core/c.py": "from gpufleet.core.a import x\n",
        },
    )
    assert check(root)["import cycles"] == [
        "gpufleet.core.a -> gpufleet.core.b (line 1) -> gpufleet.core.a (line 5)"
    ]
