"""Kept so that existing imports work: this module is ``jaxes.tasks.control.running_stats``."""

import sys

from jaxes.tasks.control import running_stats as _module

sys.modules[__name__] = _module
