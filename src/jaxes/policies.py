"""Kept so that existing imports work: this module is ``jaxes.tasks.control.policies``."""

import sys

from jaxes.tasks.control import policies as _module

sys.modules[__name__] = _module
