"""Kept so that existing imports work: this module is ``jaxes.app.cli``."""

import sys

from jaxes.app import cli as _module

sys.modules[__name__] = _module
