"""Kept so that existing imports work: this module is ``jaxes.training``."""

import sys

from jaxes import training as _module

sys.modules[__name__] = _module
