"""The run directory: its layout, who may write it, and whether a run starts, restarts or resumes.

A run directory holds ``config.json`` (the settings, written first), ``metrics.jsonl`` (a line
per generation), ``checkpoints/`` (whole states; the newest ``checkpoint.KEEP`` are kept) and,
with the ``plot`` extra, ``learning_curve.png``. A directory of several seeds' runs
(``run_seeds``) holds ``seeds.json``, ``summary.json``, ``learning_curves.png`` (with the
``plot`` extra) and one run directory ``seed-S`` per seed. Every path of these is built here
(``checkpoints_of``, ``metrics_of``, ``seed_dir``).

Admission (``open_run``, ``open_seeds``, ``resume_target``): a new run needs an empty directory
(or one holding only a run that never reached its first checkpoint, which restarts in place); a
resumed run must have the settings in its ``config.json`` (only ``settings.MAY_CHANGE`` may
change, and ``config.json`` is updated to them).

Every write is whole or absent: JSON files are written to a temporary name and renamed, and a
metrics line is one ``write`` of strict JSON (non-finite numbers become ``null``). A process
killed at any moment therefore leaves at worst a cut last metrics line, which ``read_metrics``
drops (that generation is redone from the last checkpoint anyway). One process at a time may
write a run: ``lock`` holds an exclusive ``flock`` that the OS releases when the process dies,
so a killed run never leaves a stale lock behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import time
from collections.abc import Iterator

from jaxes.training import checkpoint
from jaxes.training.settings import MAY_CHANGE

LOCK = ".lock"
CONFIG = "config.json"
METRICS = "metrics.jsonl"
CHECKPOINTS = "checkpoints"
LEARNING_CURVE = "learning_curve.png"
# A directory of several seeds' runs (``run_seeds``): these beside one ``seed-S`` per seed.
SEEDS = "seeds.json"
SUMMARY = "summary.json"
LEARNING_CURVES = "learning_curves.png"


class RunDirError(ValueError):
    """The output directory cannot be used as asked."""


def check_out(out) -> str:
    """``out`` as a directory path; a ``RunDirError`` for an empty or non-string one.

    Example:
      >>> check_out("")
      Traceback (most recent call last):
        ...
      jaxes.training.rundir.RunDirError: out: expected a directory path, got ''
    """
    if not isinstance(out, str | os.PathLike) or not str(out).strip():
        raise RunDirError(f"out: expected a directory path, got {out!r}")
    return os.fspath(out)


def checkpoints_of(out: str) -> str:
    """The directory of the run's checkpoints.

    Example:
      >>> checkpoints_of("runs/r")
      'runs/r/checkpoints'
    """
    return os.path.join(out, CHECKPOINTS)


def metrics_of(out: str) -> str:
    """The path of the run's ``metrics.jsonl``."""
    return os.path.join(out, METRICS)


def seed_dir(out: str, seed: int) -> str:
    """The run directory of ``seed`` in ``out``, a directory of several seeds' runs.

    Example:
      >>> seed_dir("runs/r", 3)
      'runs/r/seed-3'
    """
    return os.path.join(out, f"seed-{seed}")


def default_out(name: str) -> str:
    """A new run directory for ``name``: ``runs/NAME-DATE-TIME``."""
    return os.path.join("runs", f"{name}-{time.strftime('%Y%m%d-%H%M%S')}")


def config_of(out: str, argument: str) -> str:
    """The path of the run's ``config.json``; a ``RunDirError`` naming ``argument`` when ``out``
    holds no run.

    Example:
      >>> config_of("/nonexistent", "--resume")  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      jaxes.training.rundir.RunDirError: --resume: /nonexistent holds no run (config.json is ...)
    """
    path = os.path.join(check_out(out), CONFIG)
    if not os.path.isfile(path):
        seeds = seeds_of(out)
        if seeds:
            raise RunDirError(
                f"{argument}: {out} holds the runs of seeds {seeds}; name one of them, e.g. "
                f"{seed_dir(out, seeds[0])}"
            )
        raise RunDirError(f"{argument}: {out} holds no run (config.json is missing)")
    return path


def seeds_of(out: str) -> list[int] | None:
    """The seeds whose runs ``out`` holds (its ``seeds.json``), or ``None``."""
    path = os.path.join(out, SEEDS)
    if not os.path.isfile(path):
        return None
    saved = read_json(path)
    seeds = saved.get("seeds") if isinstance(saved, dict) else None
    if not isinstance(seeds, list) or not all(isinstance(s, int) for s in seeds):
        raise RunDirError(f'{path}: expected {{"seeds": [ints]}}, got {saved!r:.60}')
    return seeds


def entries(out: str) -> list[str]:
    """What ``out`` holds besides its lock file (``[]`` when absent)."""
    if not os.path.isdir(out):
        return []
    return sorted(x for x in os.listdir(out) if x != LOCK)


@contextlib.contextmanager
def lock(out: str) -> Iterator[None]:
    """Holds ``out``'s write lock; a ``RunDirError`` if another process holds it.

    Example:
      >>> import tempfile
      >>> with tempfile.TemporaryDirectory() as out, lock(out):
      ...     with lock(out):
      ...         pass  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      jaxes.training.rundir.RunDirError: out: another process is writing to ... (it holds ...
    """
    path = os.path.join(out, LOCK)
    try:
        os.makedirs(out, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise RunDirError(f"out: cannot write to {out} ({err.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirError(
                f"out: another process is writing to {out} (it holds {path}); wait for it to "
                "finish or choose another directory"
            ) from None
        yield
    finally:
        os.close(fd)  # closing releases the lock


def open_run(out: str, settings: dict, resume: bool) -> str:
    """Checks that ``out`` can take the run of ``settings`` and writes its ``config.json``;
    returns ``"new"``, ``"restart"`` (a run that never reached its first checkpoint starts
    again in place) or ``"resume"``. Hold ``lock(out)`` around it and the run.

    Example:
      >>> import tempfile
      >>> out = tempfile.mkdtemp()
      >>> open_run(out, {"generations": 4}, resume=False), open_run(out, {"generations": 4}, False)
      ('new', 'restart')
      >>> open_run(out, {"generations": 5, "seed": 1}, resume=False)  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      jaxes.training.rundir.RunDirError: .../config.json: missing settings ['seed']
    """
    config_path = os.path.join(out, CONFIG)
    has_config = os.path.isfile(config_path)
    steps = checkpoint.complete_steps(checkpoints_of(out))
    if resume:
        config_of(out, "resume")
    if not resume and entries(out) and (not has_config or steps):
        _refuse_not_empty(out)
    if has_config:
        _check_same_run(read_json(config_path), settings, config_path, resume)
    if resume and steps and steps[-1] > settings["generations"]:
        raise RunDirError(
            f"generations: the run has done {steps[-1]} generations already; ask for at least "
            f"{steps[-1]}"
        )
    # Written first, so that a run stopped at any later moment can be restarted or resumed.
    write_json(config_path, settings)
    if not has_config:
        return "new"
    return "resume" if steps else "restart"


def _refuse_not_empty(out: str):
    raise RunDirError(
        f"out: {out} already exists and is not empty; resume it (--resume) or choose "
        "another directory"
    )


def _check_same_run(saved, settings: dict, path: str, resume: bool) -> None:
    """``saved`` (the ``config.json`` at ``path``) holds the run of ``settings``: the same
    names, and the same values but for ``MAY_CHANGE`` (which a restart may not change)."""
    if not isinstance(saved, dict):
        raise RunDirError(f"{path}: expected a JSON object of settings")
    missing = sorted(set(settings) - set(saved))
    if missing:
        raise RunDirError(f"{path}: missing settings {missing}")
    for name, value in settings.items():
        if name not in MAY_CHANGE and saved[name] != value:
            if not resume:
                raise RunDirError(
                    f"out: {os.path.dirname(path)} holds a run (stopped before its first "
                    f"checkpoint) whose {name} is {saved[name]!r}, not {value!r}; choose "
                    "another directory, or delete that one"
                )
            raise RunDirError(
                f"resume: {name}={value!r} differs from the run's {saved[name]!r} in {path}; "
                f"only {', '.join(MAY_CHANGE)} may change"
            )
    unknown = sorted(set(saved) - set(settings))
    if unknown:
        raise RunDirError(f"{path}: unknown settings {unknown}")


def open_seeds(out: str, seeds: list[int], resume: bool, primary: bool) -> None:
    """Checks that ``out`` can take (or holds, when resuming) the runs of ``seeds`` and
    records them in ``seeds.json`` (``primary``: the process that writes). Each run is then
    opened in its ``seed_dir`` with ``open_run``.

    Example:
      >>> import tempfile
      >>> out = tempfile.mkdtemp()
      >>> open_seeds(out, [0, 1], resume=False, primary=True)
      >>> open_seeds(out, [0, 2], resume=True, primary=True)
      Traceback (most recent call last):
        ...
      jaxes.training.rundir.RunDirError: seeds: ... holds the runs of seeds [0, 1], not [0, 2]
    """
    held = check_held_seeds(out, seeds, "seeds")
    if held is None and resume:
        raise RunDirError(f"resume: {out} holds no runs of several seeds ({SEEDS})")
    if held is None and entries(out):
        _refuse_not_empty(out)
    if primary:
        write_json(os.path.join(out, SEEDS), {"seeds": seeds})


def check_held_seeds(out: str, seeds: list[int] | None, argument: str) -> list[int] | None:
    """The seeds whose runs ``out`` holds (``None``: not a directory of several seeds' runs);
    a ``RunDirError`` naming ``argument`` when ``seeds`` are given and are not those."""
    held = seeds_of(out)
    if held is not None and seeds is not None and seeds != held:
        raise RunDirError(f"{argument}: {out} holds the runs of seeds {held}, not {seeds}")
    return held


def resume_target(out: str, seeds: list[int] | None = None) -> tuple[list[int] | None, str]:
    """What resuming ``out`` continues: the seeds whose runs it holds (else ``seeds``, else
    ``None`` for one run) and the ``config.json`` of its (first) run. Errors name the flags of
    ``jaxes train``, which calls this.

    Example:
      >>> import tempfile
      >>> out = tempfile.mkdtemp()
      >>> resume_target(out)  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      jaxes.training.rundir.RunDirError: --resume: ... holds no run (config.json is missing)
    """
    held = check_held_seeds(out, seeds, "--seeds")
    if held is not None:
        seeds = held
    first = out if seeds is None else seed_dir(out, seeds[0])
    return seeds, config_of(first, "--resume")


def write_json(path: str, data) -> None:
    """Writes ``data`` as strict JSON to ``path`` atomically (temporary file, then rename)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(data, indent=2, allow_nan=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: str):
    """The JSON value in ``path``; a ``RunDirError`` naming the file if it is not JSON."""
    try:
        with open(path) as f:
            return json.load(f)
    except json.JSONDecodeError as err:
        raise RunDirError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
    except UnicodeDecodeError:
        raise RunDirError(f"{path}: not a text file") from None


def finite_or_null(value):
    """Floats that JSON cannot hold (NaN, ±inf) as ``None``; anything else unchanged.

    Example:
      >>> finite_or_null(float("inf")), finite_or_null(2.5), finite_or_null(3)
      (None, 2.5, 3)
    """
    return None if isinstance(value, float) and not math.isfinite(value) else value


def metrics_line(record: dict) -> str:
    """One strict-JSON line of ``metrics.jsonl``.

    Example:
      >>> metrics_line({"generation": 1, "fitness_mean": float("nan")})
      '{"generation": 1, "fitness_mean": null}\\n'
    """
    clean = {k: finite_or_null(v) for k, v in record.items()}
    return json.dumps(clean, allow_nan=False) + "\n"


def read_metrics(path: str) -> tuple[list[dict], bool]:
    """The records of ``metrics.jsonl`` and whether a cut last line was dropped.

    Only the last line may be cut (a process killed mid-write); any other bad line is a
    ``RunDirError`` naming the file and the line.

    Example:
      >>> import os, tempfile
      >>> path = os.path.join(tempfile.mkdtemp(), "metrics.jsonl")
      >>> with open(path, "w") as f:
      ...     _ = f.write('{"generation": 1}\\n{"generation": 2, "fit')
      >>> read_metrics(path)
      ([{'generation': 1}], True)
    """
    if not os.path.exists(path):
        return [], False
    with open(path, "rb") as f:
        raw = f.read()
    lines = raw.split(b"\n")
    records, dropped = [], False
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or not isinstance(record.get("generation"), int):
                raise ValueError
        except ValueError:
            if number == len(lines):  # no newline after it: the write was cut
                dropped = True
                continue
            raise RunDirError(
                f"{path}: line {number} is not a metrics record; fix or delete that line"
            ) from None
        records.append(record)
    return records, dropped


def truncate_metrics(path: str, generation: int) -> list[dict]:
    """Keeps the records up to ``generation`` (a resumed run redoes the rest); returns them."""
    records, _ = read_metrics(path)
    kept = [x for x in records if x["generation"] <= generation]
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.writelines(metrics_line(x) for x in kept)
    os.replace(tmp, path)
    return kept
