"""The API reference's pages, for docs/conf.py and tests/test_docs_api.py: which modules are
public, and what each module's page describes.

Every importable ``jaxes`` module is public except those with a leading underscore in their
path (``jaxes._moved``, ``jaxes.strategies._state``) and the shims at old paths that only
forward to a new one (``jaxes._moved.MOVED``). A page describes the functions, classes and
constants its module defines (autodoc's ``:members:``; for a module with ``__all__``, those of
its ``__all__``); a name a package re-exports from another public module (``jaxes.open_es``,
defined in ``jaxes.strategies.open_es``) is listed on the package's page and linked to its one
description, so that each object is described once and a cross-reference has one target.
"""

import importlib
import inspect
import pkgutil
import sys


def public_modules() -> list[str]:
    """Every public jaxes module by its full name, ``jaxes`` first."""
    import jaxes
    from jaxes._moved import MOVED

    names = ["jaxes"]
    for info in pkgutil.walk_packages(jaxes.__path__, "jaxes."):
        private = any(part.startswith("_") for part in info.name.split("."))
        if not private and info.name not in MOVED:
            names.append(info.name)
    return names


def home(obj, public: list[str]) -> str | None:
    """The public module whose page describes ``obj``, where it is a function or a class
    (None: a constant, or a name its module does not make public)."""
    module_name = getattr(obj, "__module__", None)
    name = getattr(obj, "__name__", "")
    if not (inspect.isclass(obj) or inspect.isfunction(obj)) or module_name not in public:
        return None
    module = sys.modules[module_name]
    listed = getattr(module, "__all__", None)
    if name.startswith("_") or getattr(module, name, None) is not obj:
        return None
    if listed is not None and name not in listed:
        return None
    return module_name


def page_names(module_name: str, public: list[str]) -> tuple[list[str] | None, list[str]]:
    """(the names the module's page describes, None: autodoc's choice, the public names the
    module defines; the full names of those it re-exports, described elsewhere)."""
    module = importlib.import_module(module_name)
    listed = getattr(module, "__all__", None)
    if listed is None:
        return None, []
    here, elsewhere = [], []
    for name in listed:
        obj = getattr(module, name)
        if inspect.ismodule(obj):
            continue  # a submodule has its own page
        where = home(obj, public)
        if where is None or where == module_name:
            here.append(name)
        else:
            elsewhere.append(f"{where}.{obj.__name__}")
    return here, elsewhere


def api_page(module_name: str, public: list[str] | None = None) -> str:
    """The reST page of one module: its docstring and the members it describes, then the
    names it re-exports, each linked to its description."""
    here, elsewhere = page_names(module_name, public or public_modules())
    lines = [module_name, "=" * len(module_name), "", f".. automodule:: {module_name}"]
    if here is None:
        lines.append("   :members:")
    elif here:
        lines.append(f"   :members: {', '.join(here)}")
    if elsewhere:
        lines += ["", f".. rubric:: Also importable from ``{module_name}``", ""]
        lines += ["Each is described in the module that defines it.", ""]
        # Named from the module (autosummary's rule): jaxes.strategies.snes.snes is snes.snes.
        relative = [target.removeprefix(f"{module_name}.") for target in elsewhere]
        lines += [".. autosummary::", ""] + [f"   ~{target}" for target in relative]
    return "\n".join(lines) + "\n"
