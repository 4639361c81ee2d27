"""The gpufleet package's plugin: hosts the three fleet components for any Pulumi language."""

import sys
from importlib import metadata


def version() -> str:
    """gpufleet's version, the package's; 0.0.0 (the SDK's default) from a bare checkout."""
    try:
        return metadata.version("gpufleet")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def run(argv: list[str]) -> None:
    """`schema`: print the package schema; anything else: the arguments Pulumi starts it with."""
    from gpufleet.components.package import FleetProvider, schema_text

    if argv[:1] == ["schema"]:
        sys.stdout.write(schema_text(version()))
        return
    from pulumi.provider import main

    main(FleetProvider(version()), argv)


if __name__ == "__main__":
    run(sys.argv[1:])
