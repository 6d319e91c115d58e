"""Kept so that existing imports work: this module is ``jaxes.training.rundir``."""

import sys

from jaxes.training import rundir as _module

sys.modules[__name__] = _module
