"""Strategy factories; each returns a ``jaxes.Strategy``."""

from jaxes.strategies.open_es import OpenESInfo, OpenESState, open_es

__all__ = ["OpenESInfo", "OpenESState", "open_es"]
