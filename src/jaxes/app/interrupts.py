"""Ctrl-C that works while XLA compiles: exit at once with one line, from any moment.

Python runs signal handlers only on the main thread between bytecodes, so a ``SIGINT`` that
arrives during a long XLA compile waits for the compile to end, and a ``KeyboardInterrupt``
raised into JAX's or orbax's teardown can crash the interpreter. Instead, the C-level handler
Python installs writes the signal number to a wakeup pipe at once (``signal.set_wakeup_fd``),
and a watcher thread, which runs whenever the main thread is inside C++ with the GIL released
(as XLA's compiler is), prints the line and ends the process with ``os._exit``. That is safe
at any moment because every file the runner writes is whole or absent (``jaxes.training.rundir``,
orbax's rename-on-commit checkpoints) and the run's lock dies with the process.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def exit_on_signal(message: Callable[[int], str]) -> None:
    """From now on ``SIGINT``/``SIGTERM`` print ``message(signum)`` to stderr as one line and
    exit with ``128 + signum`` (130 for Ctrl-C) within moments. Call it from the main thread."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    for signum in SIGNALS:
        # A Python-level handler is what makes the C handler write to the wakeup pipe; the
        # watcher thread does the work.
        signal.signal(signum, lambda *_: None)

    def watch():
        data = os.read(read_end, 1)
        signum = data[0] if data else signal.SIGINT
        try:
            if sys.stdout.isatty():
                sys.stdout.write("\n")  # end a progress line redrawn in place
            sys.stdout.flush()
            sys.stderr.write(f"jaxes: {message(signum)}\n")
            sys.stderr.flush()
        finally:
            os._exit(128 + signum)

    threading.Thread(target=watch, name="jaxes-signal-watcher", daemon=True).start()
