"""Children: a driver runs itself with `--child <spec json>` in a fresh process, so that each
measurement has a process (its memory, its compiles) of its own.

The parent calls `spawn` (or `spawn_all` for a list of specs); the child's `main` (see
`_driver.main`) prints its result as one line "RESULT {json}" (`print_result`), which `spawn`
reads back. Nothing here imports JAX at import time: the children control how and when they do.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import json
import os
import resource
import subprocess
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

RESULT_PREFIX = "RESULT "  # a child prints its result as one line "RESULT {json}"
TAIL_CHARS = 2000  # how much of a failed child's output its row keeps


# --------------------------------------------------------------------------------------------
# The child's side.
# --------------------------------------------------------------------------------------------


def print_result(result: dict) -> None:
    """A child's answer to `spawn`: one line "RESULT {json}" on stdout."""
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def guarded(measure: Callable[[dict], dict]) -> Callable[[dict], dict]:
    """`measure` as a child runs it: `spec | measure(spec)`, or, when it raises (an allocation
    failure, a library error), the spec with status "error" and the traceback's tail: a row
    of the table, not a crashed child."""

    @functools.wraps(measure)
    def run(spec: dict) -> dict:
        try:
            return spec | measure(spec)
        except Exception as error:
            tail = traceback.format_exc()[-3000:]
            return spec | {"status": "error", "error": f"{type(error).__name__}: {tail}"}

    return run


def quiet_import(*modules: str, fresh_compiles: bool = False):
    """Imports `modules` with their import chatter (prints on stdout, warnings) silenced, as
    Brax and MuJoCo make; returns the `jax` module. With `fresh_compiles` it raises when
    JAX's persistent compilation cache is on (a timing of compiles would read the cache)."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        for name in ("jax", *modules):
            importlib.import_module(name)
    jax = sys.modules["jax"]
    if fresh_compiles and jax.config.jax_compilation_cache_dir is not None:
        raise RuntimeError("the persistent compilation cache is on; unset it for a fair timing")
    return jax


# --------------------------------------------------------------------------------------------
# The machine's other load.
# --------------------------------------------------------------------------------------------


def busy_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (all processes, all cores)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds(who: int) -> float:
    """User + system CPU seconds of this process (`resource.RUSAGE_SELF`) or of its finished
    children (`resource.RUSAGE_CHILDREN`)."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


class CpuWatch:
    """A block's wall seconds (`wall`) and the share of the machine's CPU time that other
    processes took meanwhile (`other_cpu_share`); `who` says whose CPU time is ours: this
    process's (`RUSAGE_SELF`) or its children's (`RUSAGE_CHILDREN`)."""

    def __init__(self, who: int = resource.RUSAGE_SELF):
        self.who = who

    def __enter__(self) -> CpuWatch:
        self.busy0, self.own0 = busy_cpu_seconds(), own_cpu_seconds(self.who)
        self.wall0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self.wall0
        own = own_cpu_seconds(self.who) - self.own0
        other = max(0.0, busy_cpu_seconds() - self.busy0 - own)
        self.other_cpu_share = other / (self.wall * (os.cpu_count() or 1))


# --------------------------------------------------------------------------------------------
# The parent's side.
# --------------------------------------------------------------------------------------------


class Outcome(NamedTuple):
    """A finished child: its result (None when it printed none), "ok" or why not ("timeout",
    "killed": SIGKILL, most likely out of memory, or "error"), that reason with the tail of
    its output, its wall seconds and the share of the CPU other processes took meanwhile
    (0 after a timeout: not measured)."""

    result: dict | None
    status: str
    error: str | None
    wall_s: float
    other_cpu_share: float

    def row(self, spec: dict) -> dict:
        """The child's result with `child_wall_s` and `other_cpu_share`, or `spec` with the
        `status` and `error` of a child that gave none."""
        if self.status == "timeout":
            return spec | {"status": self.status, "error": self.error}
        wall = {"child_wall_s": self.wall_s, "other_cpu_share": self.other_cpu_share}
        if self.result is not None:
            return self.result | wall
        return spec | wall | {"status": self.status, "error": self.error}


def spawn(
    script: str, spec: dict, timeout: float, env: dict | None = None, tee_stderr: bool = False
) -> Outcome:
    """Runs `python script --child <spec json>` in a fresh process (environment `env`, or this
    one's) and reads the line its `print_result` wrote. With `tee_stderr` the child's stderr
    is also copied to this process's stderr as it comes (progress of a long child)."""
    cmd = [sys.executable, str(Path(script).resolve()), "--child", json.dumps(spec)]
    try:
        with CpuWatch(resource.RUSAGE_CHILDREN) as watch:
            if tee_stderr:
                proc = _run_teeing_stderr(cmd, timeout, env)
            else:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return Outcome(None, "timeout", f"timed out after {timeout:g} s", timeout, 0.0)
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX) :])
            return Outcome(result, "ok", None, watch.wall, watch.other_cpu_share)
    if proc.returncode == -9:
        status, why = "killed", "killed by SIGKILL (most likely out of memory)"
    else:
        status, why = "error", f"exit code {proc.returncode}"
    tail = (proc.stderr or proc.stdout)[-TAIL_CHARS:]
    return Outcome(None, status, f"{why}: {tail}", watch.wall, watch.other_cpu_share)


def spawn_all(
    script: str,
    specs: list[dict],
    timeout: float,
    describe: Callable[[dict], str],
    status: Callable[[dict], str],
) -> list[dict]:
    """`spawn(...).row(spec)` of each spec in turn, the children's stderr shown as it comes;
    on stderr, "[i/n] describe(spec)" before each child and "-> status(row)" after it."""
    rows, start = [], time.perf_counter()
    for i, spec in enumerate(specs):
        print(f"[{i + 1}/{len(specs)}] {describe(spec)}", file=sys.stderr)
        row = spawn(script, spec, timeout, tee_stderr=True).row(spec)
        rows.append(row)
        print(
            f"    -> {status(row)} (child {row.get('child_wall_s', 0):.0f} s, "
            f"total {time.perf_counter() - start:.0f} s)",
            file=sys.stderr,
        )
    return rows


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
