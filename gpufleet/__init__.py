"""gpufleet: multi-node GPU clusters as code, and one-shot distributed jobs on them."""

__version__ = "0.1.0"
