"""The population split over 4 (fake CPU) devices and over 2 processes gives the one-device run."""

import os
import re
import socket
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import TINY_FLAGS

import jaxes
from jaxes import parallel, training
from jaxes.app import train
from jaxes.step import TrainState, generation_step
from jaxes.tasks.brax import brax_task, observation_size
from jaxes.tasks.functions import function_task

GENERATIONS = 20
N = 4
STRATEGY = jaxes.open_es(16, 0.05, learning_rate=0.05)
FN_TASK = function_task("rosenbrock", 10, start=0.0)
BRAX_TASK = brax_task("inverted_pendulum", "spring", 50, "mlp", hidden_sizes=(32, 32))


def one_device(task, strategy=STRATEGY):
    step = generation_step(strategy, task)
    state = training.init_state(strategy, task, seed=0)
    return jax.block_until_ready(
        jax.jit(lambda s: jax.lax.scan(lambda c, _: step(c), s, None, GENERATIONS))(state)[0]
    )


def shard_mapped(task, strategy=STRATEGY):
    mesh = parallel.make_mesh(N)
    step = parallel.sharded_step(strategy, task, mesh)
    state = training.place(training.init_state(strategy, task, seed=0), mesh)
    # Block: two multi-device programs in flight at once can stall each other's collectives
    # on a CPU with fewer cores than (fake) devices.
    return jax.block_until_ready(
        jax.jit(lambda s: jax.lax.scan(lambda c, _: step(c), s, None, GENERATIONS))(state)[0]
    )


def pmapped(task):
    # A user's loop: replicate the state, pmap the per-device step with an axis name.
    pstep = jax.pmap(
        parallel.local_step(STRATEGY, task, N, "devices"), axis_name="devices", donate_argnums=0
    )
    state = training.init_state(STRATEGY, task, seed=0)
    state = jax.tree.map(lambda x: jnp.stack([x] * N), state)
    for _ in range(GENERATIONS):
        state, _ = pstep(state)
    # Device 0's copy as it is: indexing a pmapped array (x[0]) runs a program across all the
    # devices, and with the 64 MiB noise table in the state that collective aborted XLA's CPU
    # runtime now and then on this 2-core machine.
    return jax.tree.map(lambda x: x.addressable_data(0).reshape(x.shape[1:]), state)


def max_diff(a, b):
    return max(
        (
            float(jnp.max(jnp.abs(x - y)))
            for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
        ),
        default=0.0,
    )


@pytest.mark.parametrize("task", [FN_TASK, BRAX_TASK], ids=["rosenbrock", "brax-obs-norm"])
def test_one_device_shard_map_and_pmap_agree(task):
    single = one_device(task)
    assert max_diff(single.strategy_state.params, shard_mapped(task).strategy_state.params) <= 1e-6
    by_pmap = pmapped(task)
    assert max_diff(single.strategy_state.params, by_pmap.strategy_state.params) <= 1e-6
    if task is BRAX_TASK:
        # Observation statistics agree up to float noise amplified by the physics, measured in
        # standard deviations (the means sit near zero, so relative error would mislead).
        a, b = single.task_state.obs_stats, by_pmap.task_state.obs_stats
        std = np.sqrt(np.asarray(a.m2) / float(a.count))
        assert float(a.count) == float(b.count)
        assert np.max(np.abs(np.asarray(a.mean) - np.asarray(b.mean)) / std) < 5e-2
        np.testing.assert_allclose(a.m2, b.m2, rtol=5e-2)
    moved = max_diff(
        single.strategy_state.params, training.init_state(STRATEGY, task, 0).strategy_state.params
    )
    assert moved > 1e-3  # the runs really trained


@pytest.mark.parametrize(
    "strategy",
    [
        jaxes.pgpe(16, 0.05, learning_rate=0.05),
        jaxes.snes(16, 0.05),
        jaxes.ars(16, 0.05, learning_rate=0.05, top_k=4),
        jaxes.sep_cma_es(16, 0.05),
        jaxes.ma_es(16, 0.05),
        jaxes.lm_ma_es(16, 0.05),
        jaxes.guided_es(16, 0.5, learning_rate=0.05, past_steps=True),  # jaxes train's
        jaxes.ga(16, 0.01, truncation=4),
        jaxes.cr_fm_nes(16, 0.05),
    ],
    ids=["pgpe", "snes", "ars", "sep_cma_es", "ma_es", "lm_ma_es", "guided_es", "ga", "cr_fm_nes"],
)
def test_every_strategy_splits_over_devices(strategy):
    single = one_device(FN_TASK, strategy).strategy_state
    split = shard_mapped(FN_TASK, strategy).strategy_state
    assert max_diff(single.params, split.params) <= 1e-5
    floats = [  # σ, evolution paths and optimizer state too, not only the mean
        (a, b)
        for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(split), strict=True)
        if jnp.issubdtype(a.dtype, jnp.floating)
    ]
    assert max(max_diff(a, b) for a, b in floats) <= 1e-5
    assert (
        max_diff(single.params, training.init_state(strategy, FN_TASK, 0).strategy_state.params)
        > 1e-3
    )


def collectives(hlo_text):
    """(op, element count) of every cross-device collective in compiled HLO."""
    found = []
    ops = "all-gather|all-reduce|collective-permute|all-to-all|reduce-scatter"
    pattern = r"=\s*(\(.*?\)|\S+)\s+(" + ops + r")(-start)?\("
    for result, op, _ in re.findall(pattern, hlo_text):
        for dims in re.findall(r"\[([0-9,]*)\]", result):
            count = int(np.prod([int(d) for d in dims.split(",") if d])) if dims else 1
            found.append((op, count))
    return found


def test_only_fitness_and_fixed_statistics_cross_devices():
    mesh = parallel.make_mesh(N)
    state = training.place(training.init_state(STRATEGY, BRAX_TASK, 0), mesh)
    step = jax.jit(parallel.sharded_step(STRATEGY, BRAX_TASK, mesh))
    hlo = step.lower(state).compile().as_text()
    found = collectives(hlo)
    n_params = sum(x.size for x in jax.tree.leaves(state.strategy_state.params))
    obs = observation_size(BRAX_TASK.env)
    assert found, "expected a gather of fitness values"
    assert n_params > 20 * STRATEGY.population_size  # a parameter-sized transfer would show
    # Fitness (P) and per-member observation moments (P × obs), nothing parameter-sized.
    assert max(count for _, count in found) <= STRATEGY.population_size * obs
    assert any(op == "all-gather" and count == STRATEGY.population_size for op, count in found)


SMALL = jaxes.open_es(16, 0.05, learning_rate=0.05, noise=jaxes.noise.noise_table(2**16))


def sphere(x):
    return -jnp.sum(x**2)


def users_loop(gather):
    """A user's own loop, as the user writes it: ``shard_map`` (default ``check_vma``) around a
    ``lax.scan`` of ask → this device's members → fitness → ``gather`` → tell."""
    share = SMALL.population_size // N

    def run(state, keys):
        first = jax.lax.axis_index("d") * share

        def generation(state, key):
            _, state = SMALL.ask(key, state)
            mine = first + jnp.arange(share)
            fitness = jax.vmap(lambda i: sphere(SMALL.member(state, i)))(mine)
            return SMALL.tell(state, gather(fitness, "d"))[0], None

        return jax.lax.scan(generation, state, keys)[0]

    mesh = jax.make_mesh((N,), ("d",))
    spec = jax.sharding.PartitionSpec()
    return jax.jit(jax.shard_map(run, mesh=mesh, in_specs=spec, out_specs=spec))


def test_a_users_shard_map_loop_needs_gather_members_under_the_vma_check():
    state = SMALL.init(jax.random.key(0), jnp.ones(10))
    keys = jax.random.split(jax.random.key(1), GENERATIONS)
    # A plain all_gather types the gathered fitness, and so the told update, as varying over
    # the axis: the scan's carry refuses it (at trace time; nothing is compiled), or for a big
    # state tell's cond on "applied" (new state or old) does first.
    plain = users_loop(lambda x, axis: jax.lax.all_gather(x, axis, tiled=True))
    with pytest.raises(TypeError, match=r"(?s)must have equal (output )?types.*V:d"):
        plain.lower(state, keys)
    split = jax.block_until_ready(users_loop(parallel.gather_members)(state, keys))

    def generation(state, key):  # one device, the whole population
        population, state = SMALL.ask(key, state)
        return SMALL.tell(state, jax.vmap(sphere)(population))[0], None

    single = jax.jit(lambda s, k: jax.lax.scan(generation, s, k)[0])(state, keys)
    assert max_diff(single.params, split.params) <= 1e-6
    assert max_diff(single.params, state.params) > 1e-3  # it trained


@pytest.mark.parametrize(
    "strategy",
    [
        SMALL,
        jaxes.pgpe(16, 0.05, learning_rate=0.05),
        jaxes.snes(16, 0.05),
        jaxes.ars(16, 0.05, learning_rate=0.05, top_k=4),
        jaxes.sep_cma_es(16, 0.05),
        jaxes.ma_es(16, 0.05),
        jaxes.lm_ma_es(16, 0.05),
        jaxes.guided_es(16, 0.5, learning_rate=0.05, past_steps=True),
        jaxes.ga(16, 0.01, truncation=4),
        jaxes.cr_fm_nes(16, 0.05),
    ],
    ids=[
        *("open_es", "pgpe", "snes", "ars", "sep_cma_es", "ma_es", "lm_ma_es", "guided_es", "ga"),
        "cr_fm_nes",
    ],
)
def test_local_step_in_a_users_shard_map_passes_the_vma_check(strategy):
    # Tracing only: the check runs while the scan is traced; eval_shape compiles nothing.
    mesh = parallel.make_mesh(N)
    spec = jax.sharding.PartitionSpec()
    step = jax.shard_map(
        parallel.local_step(strategy, FN_TASK, N), mesh=mesh, in_specs=spec, out_specs=spec
    )
    state = jax.eval_shape(
        lambda: TrainState(
            strategy.init(jax.random.key(0), FN_TASK.init_params(None)),
            FN_TASK.init(None),
            jax.random.key(1),
            jnp.zeros((), jnp.int32),
        )
    )
    out = jax.eval_shape(lambda s: jax.lax.scan(lambda c, _: step(c), s, None, 2), state)
    assert jax.tree.structure(out[0]) == jax.tree.structure(state)


def test_the_brax_rollout_passes_the_vma_check_in_a_users_shard_map():
    # The rollout's loop carries start invariant and become varying: typed by
    # collectives.varying, or tracing fails with "carry input and carry output ...".
    mesh = parallel.make_mesh(N)
    spec = jax.sharding.PartitionSpec()
    step = jax.shard_map(
        parallel.local_step(STRATEGY, BRAX_TASK, N), mesh=mesh, in_specs=spec, out_specs=spec
    )
    state = jax.eval_shape(lambda: training.init_state(STRATEGY, BRAX_TASK, 0))
    out, metrics = jax.eval_shape(step, state)
    assert jax.tree.structure(out) == jax.tree.structure(state) and metrics["env_steps"].shape == ()


def test_indivisible_population_names_both_numbers_and_nearest_valid():
    with pytest.raises(
        ValueError,
        match=r"18 members cannot be split evenly over 4 devices; nearest valid population "
        r"sizes: 16 or 20",
    ):
        parallel.check_split(18, 4)
    with pytest.raises(ValueError, match=r"over 3 devices.*: 6 or 12"):
        parallel.check_split(10, 3)
    with pytest.raises(ValueError, match="devices: expected an int from 1 to 4"):
        parallel.make_mesh(5)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(process_id, num_processes, port, out, extra=()):
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jaxes",
            "train",
            *TINY_FLAGS,
            "--out",
            str(out),
            "--coordinator-address",
            f"127.0.0.1:{port}",
            "--num-processes",
            str(num_processes),
            "--process-id",
            str(process_id),
            "--coordinator-timeout",
            "20",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.slow
def test_two_processes_match_the_single_process_four_device_run(tiny_run, tmp_path):
    out = tmp_path / "two_hosts"
    port = free_port()
    procs = [launch(i, 2, port, out) for i in range(2)]
    try:
        results = [p.communicate(timeout=400) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], [r[1][-2000:] for r in results]
    # Process 0 reports, alone (gloo's own connection notes aside).
    assert "done:" in results[0][0] and "jaxes" not in results[1][0]
    _, _, _, step, two = train.load_run(str(out))
    _, _, _, _, one = train.load_run(str(tiny_run))
    assert step == 20
    assert max_diff(two.strategy_state.params, one.strategy_state.params) <= 1e-6


def test_unreachable_coordinator_fails_fast_with_one_line(tmp_path):
    start = time.time()
    proc = launch(1, 2, free_port(), tmp_path / "r", extra=("--coordinator-timeout", "3"))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and time.time() - start < 90
    assert err.strip().splitlines()[-1].startswith("jaxes: error: coordinator: could not reach")
    assert not (tmp_path / "r").exists()


def test_process_id_outside_the_process_count(tmp_path):
    proc = launch(2, 2, free_port(), tmp_path / "r")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert "process_id: expected 0 <= process_id < num_processes (2), got 2" in err


@pytest.mark.slow
def test_mismatched_process_counts_are_refused(tmp_path):
    port = free_port()
    coordinator = launch(0, 2, port, tmp_path / "r")
    other = launch(1, 3, port, tmp_path / "r")
    try:
        _, err = other.communicate(timeout=300)
    finally:
        coordinator.kill()
        coordinator.communicate()
    assert other.returncode == 2
    assert "num_processes: this process was started with 3, but the coordinator" in err
