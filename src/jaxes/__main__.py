"""``python -m jaxes`` is the ``jaxes`` command."""

from jaxes.cli import entry

entry()
