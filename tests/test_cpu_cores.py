"""Every core by default (issue 29): ``jaxes train`` splits the population over one CPU device
per core, says so, changes speed and not results, and leaves the user's own choice alone."""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from conftest import TINY_FLAGS

from jaxes import parallel
from jaxes.parallel import COLLECTIVE_TIMEOUT_FLAG, DEVICE_COUNT_FLAG, CpuDevices


def test_the_plan_respects_the_users_flags_and_platforms():
    plan = parallel.plan_cpu_devices
    flags, choice = plan({"XLA_FLAGS": "--xla_cpu_use_thunk_runtime=false"}, cores=2)
    assert choice == CpuDevices(2, "one per core")
    assert flags.split() == [
        "--xla_cpu_use_thunk_runtime=false",  # the user's flags are kept, ours appended
        f"{DEVICE_COUNT_FLAG}=2",
        f"{COLLECTIVE_TIMEOUT_FLAG}=600",
    ]
    timeout = f"{COLLECTIVE_TIMEOUT_FLAG}=30"
    flags, _ = plan({"XLA_FLAGS": timeout}, cores=2)
    assert flags.split() == [timeout, f"{DEVICE_COUNT_FLAG}=2"]  # their timeout stays theirs
    assert plan({"XLA_FLAGS": f"{DEVICE_COUNT_FLAG}=8"}, cores=2) == (
        None,
        CpuDevices(8, "XLA_FLAGS"),
    )
    assert plan({"JAX_PLATFORMS": "cuda"}, cores=2) == (
        None,
        CpuDevices(None, "JAX_PLATFORMS=cuda"),
    )
    assert plan({"JAX_PLATFORMS": "cuda,cpu"}, cores=2)[1] == CpuDevices(2, "one per core")
    assert plan({}, cores=1) == (None, CpuDevices(1, "one per core"))  # one core: no flag
    assert plan({}, cores=2, count=1) == (None, CpuDevices(1, "asked"))
    assert plan({}, cores=2, count=3)[0].split()[0] == f"{DEVICE_COUNT_FLAG}=3"


def test_a_bad_count_is_refused_and_a_started_jax_is_left_as_it_is():
    with pytest.raises(ValueError, match="count: expected an int >= 1"):
        parallel.use_cpu_cores(0)
    jax.devices()  # JAX has started
    before = os.environ.get("XLA_FLAGS")
    assert parallel.use_cpu_cores(2) == CpuDevices(4, "JAX had started")  # conftest's 4
    assert os.environ.get("XLA_FLAGS") == before


def test_the_default_split_is_the_most_devices_that_divide_the_population():
    assert [parallel.default_split(p, 4) for p in (8, 30, 6, 7)] == [4, 3, 3, 1]


def train(out, *flags):
    """``jaxes train`` in a fresh process with no device count of the test set-up's."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run(
        [sys.executable, "-m", "jaxes", "train", *TINY_FLAGS, *flags, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def final_params(out):
    from jaxes.app.train import load_run

    *_, state = load_run(str(out))
    return np.concatenate([np.ravel(x) for x in jax.tree.leaves(state.strategy_state.params)])


def test_every_core_by_default_and_devices_1_give_the_same_run(tmp_path):
    flags = ["--generations", "2", "--eval-every", "2", "--checkpoint-every", "2"]
    flags += ["--no-normalize-observations"]
    split = train(tmp_path / "split", *flags)
    one = train(tmp_path / "one", *flags, "--devices", "1")
    cores = parallel.default_split(8, parallel.cpu_cores())  # P = 8 in TINY_FLAGS
    shown = f"{cores} device(s)" if cores == parallel.cpu_cores() else f"{cores} of "
    assert f"P=8 on {shown}" in split and "(CPU: one per core; --devices 1 for one)" in split
    assert "on 1 device(s) (CPU: as asked)" in one, one
    np.testing.assert_allclose(
        final_params(tmp_path / "split"), final_params(tmp_path / "one"), atol=1e-6
    )


def test_a_gymnax_run_and_its_resume_split_over_every_core_too(tmp_path):
    # Building a gymnax env's config loads the env, which starts JAX: the cores are chosen
    # before that, for a new run and for a resumed one (whose --devices is in config.json).
    flags = ["--env", "CartPole-v1", "--episode-length", "20", "--checkpoint-every", "5"]
    first = train(tmp_path / "cartpole", *flags, "--generations", "5")
    cores = parallel.default_split(8, parallel.cpu_cores())
    assert f"P=8 on {cores} " in first and "(CPU: one per core" in first, first
    resumed = train(tmp_path / "cartpole", *flags, "--generations", "10", "--resume")
    assert f"P=8 on {cores} " in resumed and "(CPU: one per core" in resumed, resumed
    # ... and the split, interrupted and resumed run ends where one device's straight run does.
    train(tmp_path / "straight", *flags, "--generations", "10", "--devices", "1")
    np.testing.assert_allclose(
        final_params(tmp_path / "cartpole"), final_params(tmp_path / "straight"), atol=1e-6
    )
