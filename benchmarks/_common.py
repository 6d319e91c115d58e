"""Helpers shared by the benchmark scripts: what machine and code a result came from, and
children run in fresh processes.

Each script is run as `python benchmarks/<name>.py`, which puts benchmarks/ on `sys.path`, so
`from _common import ...` works there and in the children they spawn (the same script, by its
path). Nothing here imports JAX at import time: the children control how and when they do.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import importlib
import io
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
RESULT_PREFIX = "RESULT "  # a child prints its result as one line "RESULT {json}"


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


def machine_info(
    argv: list[str], packages: tuple[str, ...] = ("jax", "jaxlib"), jax_backend: bool = False
) -> dict:
    """Where and from what a result came: CPU, cores, RAM, load, Python, the installed version
    of each of `packages`, JAX's default backend (only with `jax_backend`: it imports JAX and
    starts the backend in this process), the date, the command (`argv` as typed from the
    repository root), the commit and the digest of src/jaxes."""
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
    return info | {
        "date_utc": utc_now(),
        "command": shlex.join([python_name(), os.path.relpath(argv[0], REPO), *argv[1:]]),
        "git": git_revision(),
        "src_sha256": source_digest(),
    }


def write_json(path: str | os.PathLike, payload: dict) -> None:
    """Writes `payload` to `path` as indented JSON (and a final newline), making its folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")


def finish_machine_info(info: dict, other_warnings: list[str]) -> None:
    """Adds `finished_utc` and `warnings` to `info` (from `machine_info`): `other_warnings`,
    after one of its own when src/jaxes changed since `machine_info` took its digest."""
    info["finished_utc"] = utc_now()
    changed = source_digest() != info["src_sha256"]
    info["warnings"] = (["src/jaxes changed while the benchmark ran"] if changed else []) + list(
        other_warnings
    )


# --------------------------------------------------------------------------------------------
# Children: a script runs itself with `--child <spec json>` in a fresh process.
# --------------------------------------------------------------------------------------------


def busy_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (all processes, all cores)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def quiet_import(*modules: str):
    """Imports `modules` with their import chatter (prints on stdout, warnings) silenced, as
    Brax and MuJoCo make; returns the `jax` module."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        for name in ("jax", *modules):
            importlib.import_module(name)
    return sys.modules["jax"]


def print_result(result: dict) -> None:
    """A child's answer to `spawn_child`: one line "RESULT {json}" on stdout."""
    print(RESULT_PREFIX + json.dumps(result), flush=True)


class Child(NamedTuple):
    """A finished child: its result (None when it printed none), the process, and the share
    of the machine's CPU time that other processes took while it ran."""

    result: dict | None
    proc: subprocess.CompletedProcess
    other_cpu_share: float


def spawn_child(
    script: str, spec: dict, timeout: float, env: dict | None = None, tee_stderr: bool = False
) -> Child:
    """Runs `python script --child <spec json>` in a fresh process (environment `env`, or this
    one's) and reads the line its `print_result` wrote. With `tee_stderr` the child's stderr
    is also copied to this process's stderr as it comes (progress of a long child)."""
    cmd = [sys.executable, str(Path(script).resolve()), "--child", json.dumps(spec)]
    busy0, wall0 = busy_cpu_seconds(), time.perf_counter()
    own0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if tee_stderr:
        proc = _run_teeing_stderr(cmd, timeout, env)
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    own1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter() - wall0
    own = (own1.ru_utime - own0.ru_utime) + (own1.ru_stime - own0.ru_stime)
    other = max(0.0, busy_cpu_seconds() - busy0 - own)
    share = other / (wall * (os.cpu_count() or 1))
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            return Child(json.loads(line[len(RESULT_PREFIX) :]), proc, share)
    return Child(None, proc, share)


def _run_teeing_stderr(cmd: list[str], timeout: float, env: dict | None):
    """`subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)`, except that each
    line the child writes on stderr is also written on this process's stderr at once."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, bufsize=1
    )
    out: list[str] = []
    err: list[str] = []

    def tee():
        for line in proc.stderr:
            err.append(line)
            sys.stderr.write(line)
            sys.stderr.flush()

    def collect():
        out.append(proc.stdout.read())

    threads = [threading.Thread(target=tee, daemon=True), threading.Thread(target=collect)]
    for thread in threads:
        thread.start()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    finally:
        for thread in threads:
            thread.join()
    return subprocess.CompletedProcess(cmd, proc.returncode, "".join(out), "".join(err))


def spawn_result(script: str, spec: dict, timeout: float) -> dict:
    """``spawn_child``'s result with the child's wall time, or ``spec`` with a ``status``
    ("timeout", "killed": SIGKILL, most likely out of memory, or "error") and the output's
    tail when the child gave no result."""
    start = time.perf_counter()
    try:
        child = spawn_child(script, spec, timeout, tee_stderr=True)
    except subprocess.TimeoutExpired:
        return spec | {"status": "timeout", "error": f"timed out after {timeout:g} s"}
    wall = {"child_wall_s": time.perf_counter() - start, "other_cpu_share": child.other_cpu_share}
    if child.result is not None:
        return child.result | wall
    code = child.proc.returncode
    if code == -9:
        status, why = "killed", "killed by SIGKILL (most likely out of memory)"
    else:
        status, why = "error", f"exit code {code}"
    tail = (child.proc.stderr or child.proc.stdout)[-2000:]
    return spec | wall | {"status": status, "error": f"{why}: {tail}"}
