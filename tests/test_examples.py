"""Every example runs as a user would run it (`python examples/x.py --quick`) and reaches the
result it states on its last line."""

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import NUMBER

ROOT = Path(__file__).resolve().parents[1]


def run_example(name: str, *args: str, timeout: int = 300, quick: bool = True) -> str:
    """Runs ``examples/NAME --quick ARGS`` (without ``--quick`` if not ``quick``) from the
    repository root; returns its stdout."""
    env = dict(os.environ)
    # conftest.py has already put 4 CPU devices into XLA_FLAGS, which the child inherits.
    # The same compile cache as the test process, so reruns skip most compilation.
    env.setdefault("JAXES_CACHE_DIR", os.path.expanduser("~/.cache/jaxes/xla"))
    try:
        proc = subprocess.run(
            [sys.executable, f"examples/{name}", *(["--quick"] if quick else []), *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as stuck:  # say where it waited (XLA logs a stuck collective)
        err = stuck.stderr or b""  # bytes on POSIX even with text=True
        tail = (err.decode(errors="replace") if isinstance(err, bytes) else err)[-3000:]
        pytest.fail(f"{name} did not finish in {timeout} s; its stderr ends:\n{tail}")
    assert proc.returncode == 0, f"{name} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc.stdout


def search(pattern: str, text: str) -> re.Match:
    match = re.search(pattern, text)
    assert match, f"no line matching {pattern!r} in:\n{text[-2000:]}"
    return match


def test_quickstart_shrinks_the_sphere():
    out = run_example("quickstart.py", timeout=120)
    m = search(rf"fitness {NUMBER} -> {NUMBER} after 100 generations", out)
    start, final = float(m[1]), float(m[2])
    assert start < -50 and abs(final) < 0.01 * abs(start), out


def test_pmap_loop_splits_over_devices_and_keeps_replicas_identical():
    # The whole run, not --quick: its 300 steps queued ahead of 4 CPU devices deadlocked XLA's
    # CPU client every time on 2 cores until the loop waited on its metrics (issue 45).
    out = run_example("pmap_loop.py", timeout=120, quick=False)
    assert [int(g) for g in re.findall(r"^generation (\d+): mean fitness", out, re.M)] == list(
        range(25, 301, 25)
    ), out
    m = search(
        rf"(\d+) devices, P=(\d+): fitness {NUMBER} -> {NUMBER}; replicas identical: True", out
    )
    devices, population, start, final = int(m[1]), int(m[2]), float(m[3]), float(m[4])
    assert devices == 4 and population == 8 * devices
    assert abs(final) < 0.05 * abs(start), out


def test_shard_map_loop_passes_the_vma_check_and_equals_one_device():
    out = run_example("shard_map_loop.py", timeout=120)
    m = search(
        rf"(\d+) devices, P=(\d+): centre's fitness {NUMBER} -> {NUMBER} .*"
        rf"1 device's params: max diff {NUMBER}",
        out,
    )
    devices, start, final, diff = int(m[1]), float(m[3]), float(m[4]), float(m[5])
    assert devices == 4 and int(m[2]) == 32
    assert final > 0.1 * start and diff == 0.0, out


@pytest.mark.parametrize(
    "strategy",
    [
        "open_es",
        *(pytest.param(s, marks=pytest.mark.slow) for s in ("pgpe", "snes", "ars", "sep_cma_es")),
    ],
)
def test_custom_fitness_fits_the_data(strategy):
    out = run_example("custom_fitness.py", "--strategy", strategy, timeout=120)
    m = search(rf"final loss {NUMBER} \(start {NUMBER}\)", out)
    final, start = float(m[1]), float(m[2])
    # The data's own noise has variance 0.0025; sin(2x) itself about 0.4.
    assert start > 0.3 and final < 0.1 * start, out
    if strategy == "open_es":
        assert final < 0.01, out


@pytest.mark.slow
def test_flax_policy_balances_the_pendulum():
    out = run_example("flax_policy.py")
    m = search(rf"noise-free eval return: {NUMBER} after (\d+) generations", out)
    assert float(m[1]) >= 900, out
    # The user's module really is what was trained: its own layer names are in the params.
    assert "'norm_0'" in out and "'skip'" in out, out


@pytest.mark.slow
def test_brax_hopper_quick_runs_and_writes_a_run_directory(tmp_path):
    run_dir = tmp_path / "hopper"
    out = run_example("brax_hopper.py", "--out", str(run_dir))
    m = search(rf"hopper: eval return {NUMBER} after (\d+) generations, ([\d,]+) env steps/s", out)
    assert math.isfinite(float(m[1])) and int(m[2]) == 6, out
    assert int(m[3].replace(",", "")) > 0, out
    config = json.loads((run_dir / "config.json").read_text())
    assert (config["env"], config["population_size"], config["hidden_sizes"]) == (
        "hopper",
        16,
        [64, 64],
    )
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["generation"] for x in lines] == list(range(1, 7))
    # It learned: the final policy beats the first generation's population (members within
    # sigma = 0.02 of the untrained policy), whose mean fitness rose over the 6 generations.
    # Measured: eval 167.8 against a first population mean of 102.2 (the untrained policy's
    # own eval: 99.0), the mean rising to 160.7; with every update dropped the run ends at
    # 99.1 and its mean at 104.6.
    means = [json.loads(x)["fitness_mean"] for x in lines]
    assert float(m[1]) >= means[0] + 30 and means[-1] >= means[0] + 30, (m[1], means)
    assert "on 4 device(s)" in out  # P = 16 split over conftest's 4 CPU devices


def test_digits_script_trains_the_small_classifier():
    # The notebook (tests/test_notebooks_digits.py) runs all three models; here the script's
    # own command line, on the small one.
    out = run_example("digits.py", "--model", "full-rank")
    accuracy = float(
        search(r"test accuracy ([\d.]+) \(full-rank, 64-64-10, 100 generations", out)[1]
    )
    assert accuracy >= 0.85, out
