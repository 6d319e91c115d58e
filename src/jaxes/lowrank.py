"""Kept so that existing imports work: this module is ``jaxes.noise.lowrank``."""

import sys

from jaxes.noise import lowrank as _module

sys.modules[__name__] = _module
