"""Kept so that existing imports work: this module is ``jaxes.training.compilation``."""

import sys

from jaxes.training import compilation as _module

sys.modules[__name__] = _module
