"""`python -m gpufleet` runs the CLI."""

from gpufleet.cli import entry

entry()
