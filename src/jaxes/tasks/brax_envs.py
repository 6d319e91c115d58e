"""Kept so that existing imports work: this module is ``jaxes.tasks.brax.envs``."""

import sys

from jaxes.tasks.brax import envs as _module

sys.modules[__name__] = _module
