"""Moved to ``jaxes.factored.terms``: an old path, warning until its date (``jaxes._moved``)."""

from jaxes._moved import moved

__getattr__ = moved(__name__)
