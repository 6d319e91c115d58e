"""Doctest collection over src/jaxes skips the compatibility aliases.

An alias module (``jaxes.runner``, ``jaxes.config``, ...) replaces itself in ``sys.modules``
with the module that now holds its code; that module's doctests are collected where it lives.
"""

from pathlib import Path

ALIAS_MARK = "sys.modules[__name__] = "


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    in_src = collection_path.suffix == ".py" and "src" in collection_path.parts
    return True if in_src and ALIAS_MARK in collection_path.read_text() else None
