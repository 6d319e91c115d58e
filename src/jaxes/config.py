"""Kept so that existing imports work: this module is ``jaxes.app.config``."""

import sys

from jaxes.app import config as _module

sys.modules[__name__] = _module
