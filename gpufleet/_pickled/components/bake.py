"""`components.bake`, where an older bake stack's state pickled its BuilderReady provider."""

from gpufleet.components.bake import *  # noqa: F403
from gpufleet.components.bake import _BuilderReadyProvider  # noqa: F401
