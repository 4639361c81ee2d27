"""What re-applying a changed plan does to each resource: create, delete, update, replace; why."""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Action = Literal["create", "delete", "update", "replace", "refused"]
# A planned resource's id under mocks is "<name>-id" (components/preview.py): how one input
# names another resource.
MOCK_ID_SUFFIX = "-id"
_INDEX = re.compile(r"\[\d+\]")


@dataclass(frozen=True)
class Follow:
    """`path` takes the newest version of the resource whose id is at `ref`: a change of
    that resource makes a new version, and `path` changes with it."""

    path: str
    ref: str


@dataclass(frozen=True)
class ForceNew:
    """One cloud's facts on what its provider does with a changed input, by resource type.

    force_new: inputs whose change replaces the resource (the provider's ForceNew).
    immutable: inputs the cloud refuses to change on an existing resource; Pulumi replaces it
      only when the resource lists them in replace_on_changes, else the update fails.
    versioned: a change of any input makes a new version of the resource (the words say so).
    unversioned: inputs of a versioned resource updated in place without a new version (its
      own resource tags).
    follows: inputs that take another resource's newest version.
    nodes: the types that are the cluster's nodes (named "node k" in the text).
    labels: the words for an input path, for the text ("user data").
    notes: what an in-place update of an input means for a running node, said after it.
    refusals: by type, why the cloud refuses an immutable change and what to do instead
      (the default says replace_on_changes is missing).
    A path ending in ".#" is a list's own length: the list itself changed, not its items.
    """

    force_new: Mapping[str, Sequence[str]] = field(default_factory=dict)
    immutable: Mapping[str, Sequence[str]] = field(default_factory=dict)
    versioned: Mapping[str, str] = field(default_factory=dict)
    unversioned: Mapping[str, Sequence[str]] = field(default_factory=dict)
    follows: Mapping[str, Sequence[Follow]] = field(default_factory=dict)
    nodes: Sequence[str] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    kinds: Mapping[str, str] = field(default_factory=dict)  # type -> words ("launch template")
    notes: Mapping[str, str] = field(default_factory=dict)
    refusals: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Change:
    type: str
    name: str
    action: Action
    paths: tuple[str, ...] = ()  # every changed input
    forcing: tuple[str, ...] = ()  # the inputs that force the replacement (or refuse it)
    reason: str = ""
    node: int | None = None  # the node index when the resource is a node
    order: str | None = None  # for a replace: create-then-delete or delete-then-create

    def as_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "name": self.name,
            "action": self.action,
            "paths": list(self.paths),
            "forcing": list(self.forcing),
            "reason": self.reason,
            "node": self.node,
            "order": self.order,
        }

    def line(self) -> str:
        """One line for `plan`: "node 0: replaced (launch template user data changed, ...)"."""
        who = f"node {self.node}" if self.node is not None else f"{self.type} {self.name}"
        verb = {
            "create": "created",
            "delete": "deleted",
            "update": "updated in place",
            "replace": "replaced",
            "refused": "update refused by the cloud",
        }[self.action]
        return f"{who}: {verb}" + (f" ({self.reason})" if self.reason else "")


def merged() -> ForceNew:
    """Every cloud's table (components/<cloud>/forcenew.py) and the common one, as one: the
    resource types are namespaced by provider, so no cloud's entry hides another's."""
    tables = [COMMON]
    for cloud in ("aws", "gcp", "azure"):
        try:
            tables.append(importlib.import_module(f"gpufleet.components.{cloud}.forcenew").TABLE)
        except ModuleNotFoundError:
            continue
    out: dict[str, dict[str, Any]] = {
        k: {}
        for k in (
            "force_new",
            "immutable",
            "versioned",
            "unversioned",
            "follows",
            "labels",
            "kinds",
            "notes",
            "refusals",
        )
    }
    nodes: list[str] = []
    for t in tables:
        for k in out:
            out[k].update(getattr(t, k))
        nodes += list(t.nodes)
    return ForceNew(nodes=tuple(nodes), **out)


def _versioning(t: ForceNew, typ: str, paths: Sequence[str]) -> list[str]:
    """The changed paths of a versioned resource that make a new version (none: not versioned)."""
    if typ not in t.versioned:
        return []
    skip = t.unversioned.get(typ, ())
    return [p for p in paths if not any(p == s or p.startswith(s + ".") for s in skip)]


def changed_paths(old: Any, new: Any, path: str = "") -> list[str]:
    """The input paths whose values differ ("osProfile.customData", "networkInterfaces[0].x")."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted(set(old) | set(new)):
            p = f"{path}.{k}" if path else str(k)
            out += [p] if (k in old) != (k in new) else changed_paths(old[k], new[k], p)
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [
            p
            for i, (a, b) in enumerate(zip(old, new, strict=True))
            for p in changed_paths(a, b, f"{path}[{i}]")
        ]
    return [] if old == new else [path]


def covers(prefix: str, path: str) -> bool:
    """Whether `path` (list indices ignored) is `prefix` or inside it."""
    bare = _INDEX.sub("", path)
    if prefix.endswith(".#"):
        return bare == prefix[:-2]
    return bare == prefix or bare.startswith(prefix + ".")


def _value(inputs: Mapping[str, Any], path: str) -> Any:
    v: Any = inputs
    for part in path.split("."):
        v = v.get(part) if isinstance(v, Mapping) else None
    return v


def _label(table: ForceNew, path: str) -> str:
    best = max((p for p in table.labels if covers(p, path)), key=len, default=None)
    return table.labels[best] if best else _INDEX.sub("", path)


def _words(table: ForceNew, paths: Sequence[str]) -> str:
    return ", ".join(dict.fromkeys(_label(table, p) for p in paths))


def _node(name: str) -> int | None:
    m = re.search(r"-node-(\d+)$", name)
    return int(m.group(1)) if m else None


def diff(
    old: Sequence[Mapping[str, Any]],
    new: Sequence[Mapping[str, Any]],
    table: ForceNew | None = None,
) -> list[Change]:
    """Per resource of two plans of one stack (plan --json's `resources`), what a re-apply does.

    Unchanged resources are left out. A resource is matched by (type, name), as Pulumi matches
    it by URN.
    """
    t = table or merged()
    olds = {(r["type"], r["name"]): r for r in old}
    news = {(r["type"], r["name"]): r for r in new}
    paths: dict[tuple[str, str], list[str]] = {}
    causes: dict[tuple[str, str], dict[str, str]] = {}  # path -> why it changed (a follow)
    for key in news.keys() & olds.keys():
        p = changed_paths(olds[key]["inputs"], news[key]["inputs"])
        if p:
            paths[key] = p
    # A versioned resource that changed makes a new version; what follows it changes too.
    by_id = {r["name"] + MOCK_ID_SUFFIX: key for key, r in news.items()}
    for key, r in news.items():
        for f in t.follows.get(key[0], ()):
            target = by_id.get(str(_value(r["inputs"], f.ref)))
            if target is None:
                continue
            versioning = _versioning(t, target[0], paths.get(target, []))
            if versioning:
                kind = t.kinds.get(target[0], target[0])
                paths.setdefault(key, []).append(f.path)
                causes.setdefault(key, {})[f.path] = (
                    f"{kind} {_words(t, versioning)} changed -> {t.versioned[target[0]]}"
                )
    out = []
    for key in sorted(news.keys() - olds.keys()):
        out.append(
            Change(key[0], key[1], "create", node=_node(key[1]) if key[0] in t.nodes else None)
        )
    for key in sorted(olds.keys() - news.keys()):
        out.append(
            Change(key[0], key[1], "delete", node=_node(key[1]) if key[0] in t.nodes else None)
        )
    for key in sorted(paths):
        out.append(_change(t, key, paths[key], causes.get(key, {}), news[key]))
    return sorted(out, key=lambda c: (c.node is None, c.node or 0, c.type, c.name))


def _change(
    t: ForceNew,
    key: tuple[str, str],
    paths: list[str],
    causes: dict[str, str],
    resource: Mapping[str, Any],
) -> Change:
    typ, name = key
    node = _node(name) if typ in t.nodes else None
    forcing = [p for p in paths if any(covers(f, p) for f in t.force_new.get(typ, ()))]
    immutable = [p for p in paths if any(covers(f, p) for f in t.immutable.get(typ, ()))]
    on_changes = list(resource.get("replace_on_changes") or [])
    if any(on_changes == ["*"] or any(covers(r, p) for r in on_changes) for p in immutable):
        forcing += immutable
        immutable = []
    order = "delete-then-create" if resource.get("delete_before_replace") else "create-then-delete"

    def why(ps: Sequence[str]) -> str:
        plain = [p for p in ps if p not in causes]
        parts = [f"{_words(t, plain)} changed"] if plain else []
        return "; ".join(dict.fromkeys([*(causes[p] for p in ps if p in causes), *parts]))

    if forcing:
        return Change(typ, name, "replace", tuple(paths), tuple(forcing), why(forcing), node, order)
    if immutable:
        refusal = t.refusals.get(
            typ,
            "it cannot change on an existing resource, which does not replace on it "
            "(replace_on_changes), so `pulumi up` fails",
        )
        reason = f"{why(immutable)}: {refusal}"
        return Change(typ, name, "refused", tuple(paths), tuple(immutable), reason, node)
    versioning = _versioning(t, typ, paths)
    reason = f"{why(paths)} -> {t.versioned[typ]}" if versioning else why(paths)
    notes = [n for prefix, n in t.notes.items() if any(covers(prefix, p) for p in paths)]
    reason = "; ".join([reason, *dict.fromkeys(notes)])
    return Change(typ, name, "update", tuple(paths), (), reason, node)


# Resources of no one cloud. terraform-provider-tls internal/provider/resource_private_key.go:
# every argument (algorithm, rsa_bits, ecdsa_curve) has RequiresReplace (read 2026-11-25,
# https://github.com/hashicorp/terraform-provider-tls). The expiry (components/expiry.py) is
# a dynamic resource whose diff never asks for a replacement.
COMMON = ForceNew(
    force_new={"tls:index/privateKey:PrivateKey": ("algorithm", "rsaBits", "ecdsaCurve")},
    labels={"ttl_minutes": "TTL"},
)
