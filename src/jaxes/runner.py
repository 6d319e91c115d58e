"""Kept so that existing imports work: this module is ``jaxes.training.runner``."""

import sys

from jaxes.training import runner as _module

sys.modules[__name__] = _module
