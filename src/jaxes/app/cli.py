"""The ``jaxes`` command: train, eval, render, envs, finetune and export.

This module holds the CLI's output policy; ``parser`` holds the arguments, ``train_command``,
``finetune_command`` and ``commands`` the commands. Errors print one line (``jaxes: error:
...``) and exit with status 2, no traceback, and nothing already written is touched; Ctrl-C
exits with 130 within moments, also during an XLA compile (``jaxes.app.interrupts``).

Importing this module imports no JAX (nor ``import jaxes``, which is lazy): each command's
module is imported when it runs, so ``jaxes --version`` prints without loading JAX.
"""

from __future__ import annotations

import errno
import importlib
import importlib.metadata
import logging
import os
import signal
import sys
import threading
import warnings

from jaxes.app import interrupts
from jaxes.app.errors import fail

# command -> (module, function), imported when the command runs.
COMMANDS = {
    "train": ("jaxes.app.train_command", "train_command"),
    "eval": ("jaxes.app.commands", "eval_command"),
    "render": ("jaxes.app.commands", "render_command"),
    "envs": ("jaxes.app.commands", "envs_command"),
    "finetune": ("jaxes.app.finetune_command", "finetune_command"),
    "export": ("jaxes.app.finetune_command", "export_command"),
}
# The command running, for the interrupt message's resume command (`jaxes finetune` writes a
# run in RUN_DIR too).
COMMAND: list[str] = ["train"]


def _interrupt_message(signum: int) -> str:
    name = "interrupted" if signum == signal.SIGINT else f"stopped by signal {signum}"
    # The signal watcher's thread imports nothing: a run directory is set only once a command
    # has loaded train_command (and with it rundir and checkpoint).
    train_command = sys.modules.get("jaxes.app.train_command")
    out = None if train_command is None else train_command.RUN_DIR[0]
    if out is None:
        return name
    from jaxes.training import rundir
    from jaxes.training.checkpoint import complete_steps

    if complete_steps(rundir.checkpoints_of(out)):
        return f"{name}; continue with `jaxes {COMMAND[0]} --out {out} --resume`"
    if os.path.isfile(os.path.join(out, rundir.CONFIG)):
        return (
            f"{name} before the first checkpoint; run the same command again to start over in {out}"
        )
    return name


def _quiet_libraries() -> None:
    """Keeps library chatter (Brax's maintenance notice, orbax's and absl's logs) off the
    CLI's output: errors reach the user as the one line ``main`` prints."""
    warnings.filterwarnings("ignore")
    logging.getLogger().setLevel(logging.CRITICAL)
    for name in ("absl", "jax", "orbax"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def main(argv: list[str] | None = None) -> int:
    """Runs one ``jaxes`` command and returns its exit status (errors: one line, status 2)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--version"]:  # as argparse would, before the parser imports the strategies
        print(f"jaxes {importlib.metadata.version('jaxes')}")
        return 0
    from jaxes.app.parser import parser

    args = parser().parse_args(argv)
    COMMAND[0] = args.command
    import jax

    from jaxes.extras import MissingExtra
    from jaxes.training.checkpoint import CheckpointError

    # Compiled programs persist between runs, so a second `jaxes train` skips most compiles.
    jax.config.update(
        "jax_compilation_cache_dir",
        os.environ.get("JAXES_CACHE_DIR", os.path.expanduser("~/.cache/jaxes/xla")),
    )
    _quiet_libraries()
    try:
        module, function = COMMANDS[args.command]
        return getattr(importlib.import_module(module), function)(args)
    except (ValueError, CheckpointError, OSError, ConnectionError, MissingExtra) as err:
        if isinstance(err, BrokenPipeError):
            raise
        return fail(_error_line(err))
    except KeyboardInterrupt:
        return fail(_interrupt_message(signal.SIGINT))
    except Exception as err:  # noqa: BLE001 - the CLI promises one line, never a traceback
        if os.environ.get("JAXES_DEBUG"):
            raise
        first = str(err).splitlines()[0] if str(err) else ""
        return fail(
            f"unexpected {type(err).__name__}: {first} (rerun with JAXES_DEBUG=1 for the "
            "traceback, and please report it)"
        )


def _error_line(err: Exception) -> str:
    """An expected error in one line; out of space says what failed, where, and that what
    was written is safe."""
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        where = f" ({err.filename})" if err.filename else ""
        return (
            f"{err.strerror}{where} while writing the run; files already written are whole, "
            "resume with --resume once it is fixed"
        )
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def entry() -> None:
    """The ``jaxes`` console script: ``main`` with signals handled, ending the process at once
    (no interpreter teardown, whose library finalizers could print after the last line)."""
    interrupts.exit_on_signal(_interrupt_message)
    # Tracebacks that background threads and finalizers (orbax's) print on their own.
    threading.excepthook = lambda _args: None
    sys.unraisablehook = lambda _unraisable: None
    try:
        code = main()
    except BrokenPipeError:
        code = 0  # `jaxes envs | head`: the reader stopped listening, which is not an error
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = 0
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
