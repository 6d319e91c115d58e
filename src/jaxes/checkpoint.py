"""Kept so that existing imports work: this module is ``jaxes.training.checkpoint``."""

import sys

from jaxes.training import checkpoint as _module

sys.modules[__name__] = _module
