"""Which provider a component's lookups ask: the one its resources will use, not the default."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar

import pulumi

_CURRENT: ContextVar[pulumi.InvokeOptions | None] = ContextVar("gpufleet_invoke", default=None)


def explicit_provider(
    opts: pulumi.ResourceOptions | None, package: str
) -> pulumi.ProviderResource | None:
    """The provider the component's `package` resources will use, from its options: `provider`,
    `providers`, or the parent's; None: the default provider."""
    if opts is None:
        return None
    if isinstance(opts.provider, pulumi.ProviderResource) and opts.provider.package == package:
        return opts.provider
    providers = opts.providers
    if isinstance(providers, Mapping):
        if package in providers:
            return providers[package]
    elif providers:
        for p in providers:
            if isinstance(p, pulumi.ProviderResource) and p.package == package:
                return p
    parent = opts.parent
    inherited = getattr(parent, "_providers", None) if parent is not None else None
    return inherited.get(package) if isinstance(inherited, dict) else None


def invoke_options(
    opts: pulumi.ResourceOptions | None, package: str
) -> pulumi.InvokeOptions | None:
    """Options for a lookup made before the component exists, so it asks the same provider
    (region, account) as the resources it decides; None: the default provider."""
    provider = explicit_provider(opts, package)
    return pulumi.InvokeOptions(provider=provider) if provider is not None else None


@contextlib.contextmanager
def asking(opts: pulumi.InvokeOptions | None) -> Iterator[None]:
    """Within it, `lookup_opts()` is `opts`: set around a component's offer check, validators
    and other lookups made before it exists."""
    token = _CURRENT.set(opts)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def lookup_opts() -> pulumi.InvokeOptions | None:
    """The options every invoke of the component being declared passes (`opts=`)."""
    return _CURRENT.get()
