"""Kept so that existing imports work: this module is ``jaxes.tasks.brax.policies``."""

import sys

from jaxes.tasks.brax import policies as _module

sys.modules[__name__] = _module
