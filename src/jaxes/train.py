"""Kept so that existing imports work: this module is ``jaxes.app.train``."""

import sys

from jaxes.app import train as _module

sys.modules[__name__] = _module
