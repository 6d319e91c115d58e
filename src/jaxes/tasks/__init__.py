"""Fitness sources: each factory returns a ``jaxes.types.Task``."""
