"""The run directory: its lock, ``config.json`` and ``metrics.jsonl``.

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
from collections.abc import Iterator

LOCK = ".lock"
CONFIG = "config.json"
METRICS = "metrics.jsonl"
SEEDS = "seeds.json"  # a directory of several seeds' runs (runner.run_seeds), one per seed-S


class RunDirError(ValueError):
    """The output directory cannot be used as asked."""


def check_out(out) -> str:
    """``out`` as a directory path; a ``RunDirError`` for an empty or non-string one.

    Example:
      >>> check_out("")
      Traceback (most recent call last):
        ...
      jaxes.rundir.RunDirError: out: expected a directory path, got ''
    """
    if not isinstance(out, str | os.PathLike) or not str(out).strip():
        raise RunDirError(f"out: expected a directory path, got {out!r}")
    return os.fspath(out)


def config_of(out: str, argument: str) -> str:
    """The path of the run's ``config.json``; a ``RunDirError`` naming ``argument`` when ``out``
    holds no run.

    Example:
      >>> config_of("/nonexistent", "--resume")
      Traceback (most recent call last):
        ...
      jaxes.rundir.RunDirError: --resume: /nonexistent holds no run (config.json is missing)
    """
    path = os.path.join(check_out(out), CONFIG)
    if not os.path.isfile(path):
        seeds = seeds_of(out)
        if seeds:
            raise RunDirError(
                f"{argument}: {out} holds the runs of seeds {seeds}; name one of them, e.g. "
                f"{os.path.join(out, f'seed-{seeds[0]}')}"
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
      jaxes.rundir.RunDirError: out: another process is writing to ... (it holds ...
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
