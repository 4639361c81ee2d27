"""`components.*` as stacks made before gpufleet.components pickled it; only on Pulumi's path."""
