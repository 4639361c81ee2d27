"""Pulumi program: this stack's config -> ClusterSpec -> GpuFleet -> the contract's exports."""

import gc

import pulumi

from gpufleet.components.preview import PROGRAM_GC_THRESHOLD
from gpufleet.components.registry import REGION_KEYS
from gpufleet.components.stackconfig import (
    CONFIG_KEY,
    CONFIG_NAMESPACE,
    build,
    exports,
    spec_from_config,
)

# This process is the program: its Outputs live until it ends (components/preview.py, the figures
# in docs/benchmarks.md "Plan at the maxima").
gc.set_threshold(*PROGRAM_GC_THRESHOLD)
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
