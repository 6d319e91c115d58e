"""Kept so that existing imports work: this module is ``jaxes.tasks.brax.offline_page``."""

import sys

from jaxes.tasks.brax import offline_page as _module

sys.modules[__name__] = _module
