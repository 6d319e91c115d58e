"""Kept so that existing imports work: this module is ``jaxes.app.presets``."""

import sys

from jaxes.app import presets as _module

sys.modules[__name__] = _module
