"""Pulumi program: this stack's config -> ClusterSpec -> GpuFleet -> the contract's exports."""

import pulumi

from components.stackconfig import CONFIG_KEY, CONFIG_NAMESPACE, build, exports, spec_from_config

spec = spec_from_config(
    {
        f"{CONFIG_NAMESPACE}:{CONFIG_KEY}": pulumi.Config(CONFIG_NAMESPACE).require_object(
            CONFIG_KEY
        )
    },
    stack=pulumi.get_stack(),
)
for key, value in exports(build(spec)).items():
    pulumi.export(key, value)
