"""Old import paths, kept for one release: one dated table, and the ``__getattr__`` that a shim
module at each old path uses.

A shim is a few lines at the old path (``jaxes/low_rank.py``)::

    from jaxes._moved import moved

    __getattr__ = moved(__name__)

Reading a name from it warns (``DeprecationWarning``, naming the new module and the date the
old path goes) and returns the new module's object, the same one. Importing the old path
alone does not warn; nothing in the package imports one (tests/test_moved.py).

Example:
  >>> import warnings
  >>> with warnings.catch_warnings(record=True) as caught:
  ...     warnings.simplefilter("always")
  ...     from jaxes.low_rank import LowRank
  >>> print(caught[0].message)
  jaxes.low_rank is deprecated and goes on 2027-06-01: import LowRank from jaxes.factored.lowrank
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable

# old module -> (new module, the date the old path goes). Issue 58: the big-model wing (the
# LowRank type, low-rank noise, the factored evaluation) in one subpackage, jaxes.factored.
MOVED: dict[str, tuple[str, str]] = {
    "jaxes.low_rank": ("jaxes.factored.lowrank", "2027-06-01"),
    "jaxes.ordering": ("jaxes.factored.ordering", "2027-06-01"),
    "jaxes.noise.factors": ("jaxes.factored.noise", "2027-06-01"),
    "jaxes.layer_terms": ("jaxes.factored.terms", "2027-06-01"),
    "jaxes.quantized": ("jaxes.factored.int8", "2027-06-01"),
}


def moved(old: str) -> Callable[[str], object]:
    """The module-level ``__getattr__`` of the shim at ``old``: each name the new module has
    warns and is the new module's object; any other (a dunder, a name a tool probes for) is an
    ``AttributeError``, without a warning. The warning names the jaxes module that defines the
    object, its one home (``jaxes.noise.factors.LowRank``: ``jaxes.factored.lowrank``)."""
    new, date = MOVED[old]

    def __getattr__(name: str) -> object:
        target = importlib.import_module(new)
        if name.startswith("__") or not hasattr(target, name):
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        value = getattr(target, name)
        home = getattr(value, "__module__", None)
        defined = isinstance(home, str) and home.startswith("jaxes.")
        if not (defined and getattr(sys.modules.get(home), name, None) is value):
            home = new
        warnings.warn(
            f"{old} is deprecated and goes on {date}: import {name} from {home}",
            DeprecationWarning,
            stacklevel=2,
        )
        return value

    return __getattr__
