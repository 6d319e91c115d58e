"""``python -m jaxes`` is the ``jaxes`` command."""

from jaxes.app.cli import entry

entry()
