"""No cloud names outside the providers' registry and the provisioners: what differs between
providers is a trait in PROVIDERS (gpufleet/core/providers.py), never `if cloud == "aws"`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpufleet.provision import PROVIDERS

ROOT = Path(__file__).resolve().parents[1] / "gpufleet"
ALLOWED = ("provision", "components")  # the provisioners, the spec's own tables
REGISTRY = Path("core/providers.py")  # the one table of providers and their traits
CLOUD_LISTS = ("PULUMI_CLOUDS",)  # components/clouds.py's table


def _cloud(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in PROVIDERS


def _names_clouds(node: ast.AST) -> bool:
    """A cloud name, a literal collection holding one, or a table of clouds."""
    if _cloud(node):
        return True
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_cloud(e) for e in node.elts)
    if isinstance(node, ast.Name | ast.Attribute):
        return (node.id if isinstance(node, ast.Name) else node.attr) in CLOUD_LISTS
    return False


def cloud_branches(source: str) -> list[tuple[int, str]]:
    """(line, what) for every comparison with a cloud name, every literal listing two or more
    of them, every dict keyed by one, and every use of a table of clouds."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            if any(_names_clouds(n) for n in (node.left, *node.comparators)):
                found.append((node.lineno, "compares a cloud name"))
        elif isinstance(node, ast.Tuple | ast.List | ast.Set):
            if sum(_cloud(e) for e in node.elts) >= 2:
                found.append((node.lineno, "lists cloud names"))
        elif isinstance(node, ast.Dict):
            if any(k is not None and _cloud(k) for k in node.keys):
                found.append((node.lineno, "keys a table by cloud name"))
        elif isinstance(node, ast.Name | ast.Attribute) and _names_clouds(node):
            found.append((node.lineno, "uses a table of clouds"))
        elif isinstance(node, ast.alias) and node.name in CLOUD_LISTS:
            found.append((getattr(node, "lineno", 0), "imports a table of clouds"))
    return sorted(set(found))


def _modules() -> list[Path]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in ALLOWED or rel == REGISTRY or path.is_symlink():
            continue
        out.append(path)
    return out


def test_no_module_outside_the_registry_branches_on_a_cloud_name():
    assert len(_modules()) > 40  # the walk found the package
    offenders = [
        f"{path.relative_to(ROOT.parent)}:{line}: {what}"
        for path in _modules()
        for line, what in cloud_branches(path.read_text())
    ]
    assert offenders == []


@pytest.mark.parametrize(
    "snippet",
    [
        'if spec.cloud == "aws":\n    pass\n',
        'if info.cloud != "ssh":\n    pass\n',
        'x = info.cloud in ("local", "vm", "ssh")\n',
        'x = cloud not in ["local"]\n',
        'wait = {"local": 30, "ssh": 60}.get(spec.cloud, 600)\n',
        "from gpufleet.components.clouds import PULUMI_CLOUDS\n",
        "x = spec.cloud in PULUMI_CLOUDS\n",
        "x = spec.cloud in spec_module.PULUMI_CLOUDS\n",
        'CLOUDS = ("aws", "gcp", "azure")\n',
    ],
)
def test_the_check_catches_a_branch_on_a_cloud_name(snippet):
    assert cloud_branches(snippet)


@pytest.mark.parametrize(
    "snippet",
    [
        'path = shutil.which("ssh")\n',
        'args = ["ssh", "-F", str(cfg), alias]\n',
        "if traits(spec.cloud).bills:\n    pass\n",
        'def up(cloud: str = DEFAULT_CLOUD, region: str = "local") -> None: ...\n',
    ],
)
def test_the_check_leaves_the_ssh_binary_and_traits_alone(snippet):
    assert cloud_branches(snippet) == []
