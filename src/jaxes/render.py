"""Kept so that existing imports work: this module is ``jaxes.tasks.brax.render``."""

import sys

from jaxes.tasks.brax import render as _module

sys.modules[__name__] = _module
