"""Which provider a component's lookups ask: the one its resources will use, not the default."""

from __future__ import annotations

from collections.abc import Mapping

import pulumi

from gpufleet.components.scoped import Scoped

_ASKING: Scoped[pulumi.InvokeOptions | None] = Scoped("invoke", lambda: None)


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


# `with asking(opts):` around a component's offer check, validators and other lookups made
# before it exists; every invoke of the component being declared passes `opts=lookup_opts()`.
asking = _ASKING.within
lookup_opts = _ASKING.get
