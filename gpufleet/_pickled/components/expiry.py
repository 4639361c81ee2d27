"""`components.expiry`, the path an older stack's state pickled its Expiry provider under."""

from gpufleet.components.expiry import *  # noqa: F403
from gpufleet.components.expiry import _ExpiryProvider  # noqa: F401
