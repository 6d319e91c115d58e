"""What machine and code a benchmark's result came from, and the JSON it is written to.

Each script is run as `python benchmarks/<name>.py`, which puts benchmarks/ on `sys.path`, so
`from _common import ...` works there and in the children they spawn (the same script, by its
path). Beside it: `_children.py` (fresh processes) and `_driver.py` (the drivers' skeleton).
Nothing here imports JAX at import time (`machine_info(jax_backend=True)` does, when called).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


# --------------------------------------------------------------------------------------------
# The machine and the code measured.
# --------------------------------------------------------------------------------------------


def utc_now() -> str:
    """The current UTC time, to the second, in ISO 8601."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def cpu_model() -> str:
    """The CPU's "model name" from /proc/cpuinfo ("unknown" where it has none)."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def ram_gib() -> float:
    """Total memory (MemTotal of /proc/meminfo) in GiB, to one decimal."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 2**20, 1)
    raise RuntimeError("no MemTotal in /proc/meminfo")


def python_name() -> str:
    """The interpreter as typed from the repository root (`.venv/bin/python`) where it is inside."""
    exe = Path(sys.executable).absolute()
    return os.path.relpath(exe, REPO) if exe.is_relative_to(REPO) else str(exe)


def source_digest() -> str:
    """A digest of src/jaxes/**/*.py, naming exactly the jaxes code that was measured."""
    digest = hashlib.sha256()
    for path in sorted((REPO / "src" / "jaxes").rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def git_revision() -> str:
    """The commit, with "+dirty" when src/ differs from it (read-only git calls)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "src"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "unknown"
    return head + ("+dirty" if status else "")


_XLA_FLAGS_GIVEN = os.environ.get("XLA_FLAGS", "")


def machine_info(
    argv: list[str], packages: tuple[str, ...] = ("jax", "jaxlib"), jax_backend: bool = False
) -> dict:
    """Where and from what a result came: CPU, cores, RAM, load, Python, the installed version
    of each of `packages`, JAX's default backend (only with `jax_backend`: it imports JAX and
    starts the backend in this process), the date, the command (`argv` as typed from the
    repository root, after `XLA_FLAGS=...` when that is set), the commit and the digest of
    src/jaxes."""
    from importlib.metadata import version

    info = {
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "ram_gib": ram_gib(),
        "load_average_at_start": list(os.getloadavg()),
        "python": platform.python_version(),
        **{name: version(name) for name in packages},
    }
    if jax_backend:
        import jax

        info["jax_backend"] = jax.default_backend()
    # XLA reads XLA_FLAGS when the backend starts: part of the command that made a result
    # (as given, not as a script extends it, e.g. with a dump folder of its own).
    flags = _XLA_FLAGS_GIVEN.strip()
    prefix = [f"XLA_FLAGS={shlex.quote(flags)}"] if flags else []
    command = shlex.join([python_name(), os.path.relpath(argv[0], REPO), *argv[1:]])
    return info | {
        "date_utc": utc_now(),
        "command": " ".join([*prefix, command]),
        "git": git_revision(),
        "src_sha256": source_digest(),
    }


def write_json(path: str | os.PathLike, payload: dict) -> None:
    """Writes `payload` to `path` as indented JSON (and a final newline), making its folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")


def read_runs(path: str | os.PathLike) -> list[dict]:
    """The records of a JSONL runs file, one a line (none when it does not exist): the file a
    study appends each finished run to, so that a sitting resumes where it stopped."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def append_run(path: str | os.PathLike, row: dict) -> None:
    """Appends one record to a JSONL runs file, making its folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")


def finish_machine_info(info: dict, other_warnings: list[str]) -> None:
    """Adds `finished_utc` and `warnings` to `info` (from `machine_info`): `other_warnings`,
    after one of its own when src/jaxes changed since `machine_info` took its digest."""
    info["finished_utc"] = utc_now()
    changed = source_digest() != info["src_sha256"]
    info["warnings"] = (["src/jaxes changed while the benchmark ran"] if changed else []) + list(
        other_warnings
    )


def write_results(
    out: str | os.PathLike,
    info: dict,
    warnings: list[str],
    printed: list[str],
    payload: dict,
    show_machine: bool = True,
) -> None:
    """A driver's last step: finishes `info` (`finish_machine_info` with `warnings`), prints
    it as JSON (unless not `show_machine`) and then each text of `printed` (its tables and
    verdicts) on stdout, and writes `{"machine": info, **payload}` to `out`."""
    finish_machine_info(info, warnings)
    if show_machine:
        print(json.dumps(info, indent=2))
    for text in printed:
        print(text)
    write_json(out, {"machine": info, **payload})
    print(f"wrote {out}", file=sys.stderr)


# How jaxes.tasks.sequence.generate prefills, recorded with the LLM benchmarks' rows: results
# from before this change computed the head at every prompt position.
PREFILL = "every prompt token but the last, then a decode step from it (no prompt logits)"
