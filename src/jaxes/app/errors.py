"""The ``jaxes`` command's error line: ``jaxes: error: MESSAGE`` on stderr, exit status 2."""

from __future__ import annotations

import sys


def fail(message: str) -> int:
    """Writes the one error line of ``message``; returns the exit status, 2.

    Example:
      >>> import contextlib, io
      >>> with contextlib.redirect_stderr(io.StringIO()) as err:
      ...     code = fail("out: expected a directory path, got ''")
      >>> code, err.getvalue()
      (2, "jaxes: error: out: expected a directory path, got ''\\n")
    """
    sys.stderr.write(f"jaxes: error: {message}\n")
    return 2
