"""Old import paths of Pulumi dynamic providers that stacks' state pickled (pulumi/pulumi#7755)."""
