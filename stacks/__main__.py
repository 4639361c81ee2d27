"""Pulumi program: this stack's config -> ClusterSpec -> GpuFleet -> the contract's exports."""

import pulumi

from gpufleet.components.registry import REGION_KEYS
from gpufleet.components.stackconfig import (
    CONFIG_KEY,
    CONFIG_NAMESPACE,
    build,
    exports,
    spec_from_config,
)

config = {
    f"{CONFIG_NAMESPACE}:{CONFIG_KEY}": pulumi.Config(CONFIG_NAMESPACE).require_object(CONFIG_KEY)
}
for key in REGION_KEYS.values():  # the provider's region, checked against the spec's
    namespace, name = key.split(":")
    if (value := pulumi.Config(namespace).get(name)) is not None:
        config[key] = value
spec = spec_from_config(config, stack=pulumi.get_stack())
for key, value in exports(build(spec)).items():
    pulumi.export(key, value)
