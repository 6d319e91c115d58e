import warnings

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxes

P = 8
PARAMS = {"w": jnp.ones((3, 2)), "nested": {"b": jnp.full(2, 0.5)}}


def sphere(params):
    return -sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in jax.tree.leaves(params))


ES = jaxes.open_es(P, sigma=0.1, learning_rate=0.05)


def generation(state, key):
    population, state = ES.ask(key, state)
    return ES.tell(state, jax.vmap(sphere)(population))


jit_generation = jax.jit(generation)
jit_ask = jax.jit(ES.ask)
jit_fitness = jax.jit(jax.vmap(sphere))  # the fitness ``generation`` tells
jit_best_params = jax.jit(ES.best_params)


def run_scan(seed, generations=20):
    state = ES.init(jax.random.key(seed), PARAMS)
    keys = jax.random.split(jax.random.key(seed + 1), generations)
    return jax.lax.scan(generation, state, keys)


jit_run_scan = jax.jit(run_scan, static_argnums=1)


def assert_trees_equal(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_jit_tell_moves_toward_the_optimum_and_reports_info():
    state = ES.init(jax.random.key(0), PARAMS)
    start = float(sphere(state.params))
    best_fitness, best_row, kept = -np.inf, None, 0
    for key in jax.random.split(jax.random.key(1), 30):
        # The population this generation evaluates, and the fitness it tells, rebuilt here.
        population, _ = jit_ask(key, state)
        fitness = np.asarray(jit_fitness(population))
        state, info = jit_generation(state, key)
        np.testing.assert_array_equal(state.fitness, fitness)
        i = int(np.argmax(fitness))
        if fitness[i] > best_fitness:
            best_fitness, best_row = fitness[i], jax.tree.map(lambda x, i=i: x[i], population)
        else:
            kept += 1
        # The best so far is the best member ever told, and its recipe (key, index, θ and σ of
        # its population) rebuilds exactly that member, which scores exactly best_fitness.
        assert float(state.best_fitness) == float(info.best_fitness) == best_fitness
        best = jit_best_params(state)
        assert_trees_equal(best, best_row)
        assert float(jit_fitness(jax.tree.map(lambda x: x[None], best))[0]) == best_fitness
    assert kept > 0  # some generation scored worse than the best so far, which was kept
    assert float(sphere(state.params)) > 0.5 * start  # fitness is -‖θ‖², maximised
    assert int(state.generation) == 30
    assert float(info.com_displacement_norm) > 0.0 and float(info.update_norm) > 0.0
    np.testing.assert_allclose(
        [info.fitness_min, info.fitness_mean, info.fitness_max],
        [fitness.min(), fitness.mean(), fitness.max()],
        rtol=1e-6,
    )
    assert float(info.sigma) == pytest.approx(0.1)


def test_python_loop_equals_scan_and_same_seed_is_bit_identical():
    final, infos = jit_run_scan(0)
    again, _ = jit_run_scan(0)
    assert_trees_equal(final.params, again.params)
    state = ES.init(jax.random.key(0), PARAMS)
    for key in jax.random.split(jax.random.key(1), 20):
        state, _ = jit_generation(state, key)
    # The loop and the scan are two XLA programs: the same state and keys reach the same
    # numbers, but XLA fuses each program its own way, so float32 rounding may differ by an ulp
    # (xnes at default flags, pgpe with the runner's CPU option, and this run once its noise
    # draw lost its rolled loop): equal to rounding, not bit for bit.
    for x, y in zip(jax.tree.leaves(state.params), jax.tree.leaves(final.params), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7)
    other, _ = jit_run_scan(5)
    assert not np.allclose(other.params["w"], final.params["w"])
    # best_fitness is the running max of every generation's best (the ranking's argmax and the
    # finite statistics are separate code paths), and it did differ from the latest max.
    running = np.maximum.accumulate(np.asarray(infos.fitness_max))
    np.testing.assert_array_equal(infos.best_fitness, running)
    assert np.any(running > np.asarray(infos.fitness_max))


def test_antithetic_members_mirror_each_other_around_theta():
    # At θ = 0 a member is exactly ±σε: the pairs are bitwise mirror images.
    zero = jax.tree.map(jnp.zeros_like, PARAMS)
    population, _ = jit_ask(jax.random.key(1), ES.init(jax.random.key(0), zero))
    for x in jax.tree.leaves(population):
        np.testing.assert_array_equal(x[0::2], -x[1::2])
        assert np.all(x[0::2] != 0) and not np.array_equal(x[0], x[2])
    # Elsewhere x = θ ± σε is rounded to float32, so x_2k - θ and θ - x_2k+1 differ by at most
    # the two roundings (half an ulp of each member), never by anything of the size of σε.
    theta = PARAMS
    population, _ = jit_ask(jax.random.key(1), ES.init(jax.random.key(0), theta))
    for x, t in zip(jax.tree.leaves(population), jax.tree.leaves(theta), strict=True):
        x, t = np.asarray(x), np.asarray(t, np.float64)
        plus, minus = x[0::2].astype(np.float64) - t, x[1::2].astype(np.float64) - t
        rounding = 0.5 * (np.spacing(np.abs(x[0::2])) + np.spacing(np.abs(x[1::2])))
        assert np.all(np.abs(plus + minus) <= rounding)
        assert np.min(np.abs(plus)) > 1e3 * np.max(rounding)  # the displacements are real


def test_independent_members_report_the_offset_of_their_centroid():
    es = jaxes.open_es(P, sigma=0.1, learning_rate=0.05, antithetic=False)
    state = es.init(jax.random.key(0), PARAMS)
    population, state = jax.jit(es.ask)(jax.random.key(1), state)
    _, info = jax.jit(es.tell)(state, jax.vmap(sphere)(population))
    # ‖c - θ‖ with c the plain mean of the members ask built, in float64.
    mean = [
        np.mean(np.asarray(x, np.float64) - np.asarray(t, np.float64), axis=0)
        for x, t in zip(jax.tree.leaves(population), jax.tree.leaves(PARAMS), strict=True)
    ]
    offset = np.sqrt(sum(np.sum(np.square(m)) for m in mean))
    assert offset > 0.01  # about σ·√(d/P) = 0.1: far from 0
    np.testing.assert_allclose(float(info.centroid_offset_norm), offset, rtol=1e-5)


def test_vmap_over_seeds_runs_independent_searches():
    seeds = jnp.arange(3)
    finals, infos = jax.jit(jax.vmap(lambda s: run_scan(s, 20)))(seeds)
    assert finals.params["w"].shape == (3, 3, 2)
    for i in range(3):
        single, _ = jit_run_scan(i)
        np.testing.assert_allclose(finals.params["w"][i], single.params["w"], atol=1e-6)
    assert infos.fitness_mean.shape == (3, 20)


def test_ask_and_tell_trace_once_over_50_generations():
    es = jaxes.open_es(P, sigma=0.1)
    ask = jax.jit(chex.assert_max_traces(es.ask, n=1))
    tell = jax.jit(chex.assert_max_traces(es.tell, n=1))
    state = es.init(jax.random.key(0), PARAMS)
    for key in jax.random.split(jax.random.key(1), 50):
        population, state = ask(key, state)
        state, _ = tell(state, jax.vmap(sphere)(population))
    assert int(state.generation) == 50


def test_mixed_precision_and_flax_params():
    model = nn.Dense(3)
    flax_params = model.init(jax.random.key(0), jnp.ones(4))
    params = {"net": flax_params, "scale": jnp.ones(2, jnp.bfloat16)}
    es = jaxes.open_es(4, sigma=0.1)
    state = es.init(jax.random.key(0), params)
    population, state = es.ask(jax.random.key(1), state)
    assert population["scale"].dtype == jnp.bfloat16
    assert population["net"]["params"]["kernel"].shape == (4, 4, 3)
    fitness = jax.vmap(lambda p: jnp.sum(model.apply(p["net"], jnp.ones(4))))(population)
    state, _ = es.tell(state, fitness)
    dtypes = jax.tree.map(lambda x: x.dtype, jaxes.centre(state))
    assert dtypes == jax.tree.map(lambda x: x.dtype, params)
    # The master copy is float32 whatever the members' dtype.
    assert {x.dtype for x in jax.tree.leaves(state.params)} == {jnp.dtype(jnp.float32)}
    jaxes.testing.assert_update_matches_classical(
        es, params, lambda p: sphere(p), jax.random.key(2)
    )


def test_all_equal_fitness_leaves_params_unchanged():
    state = ES.init(jax.random.key(0), PARAMS)
    _, state = ES.ask(jax.random.key(1), state)
    direction, stats = ES.estimate(state, jnp.full(P, 3.0))
    assert float(stats.moments.total_mass) == 0.0
    assert all(float(jnp.max(jnp.abs(g))) == 0.0 for g in jax.tree.leaves(direction))
    new_state, _ = ES.tell(state, jnp.full(P, 3.0))
    assert_trees_equal(new_state.params, state.params)


def test_non_finite_fitness_never_reaches_params():
    state = ES.init(jax.random.key(0), PARAMS)
    population, state = ES.ask(jax.random.key(1), state)
    fitness = (
        jax.vmap(sphere)(population)
        .at[jnp.array([0, 3, 5])]
        .set(jnp.array([jnp.nan, jnp.inf, -jnp.inf]))
    )
    new_state, info = ES.tell(state, fitness)
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(new_state.params))
    assert np.isfinite(float(info.fitness_mean))
    # +inf is treated as a failure, not as the best member.
    assert float(info.best_fitness) < np.inf
    all_bad, info = ES.tell(state, jnp.full(P, jnp.nan))
    assert_trees_equal(all_bad.params, state.params)


def test_l2_coefficient_shrinks_params():
    def step(l2):
        es = jaxes.open_es(P, sigma=0.1, optimizer=optax.sgd(0.1), l2_coeff=l2)
        state = es.init(jax.random.key(0), PARAMS)
        population, state = es.ask(jax.random.key(1), state)
        return es.tell(state, jax.vmap(sphere)(population))[0].params["w"]

    # SGD: the penalty adds -lr · l2 · θ to the step the fitness alone gives.
    np.testing.assert_allclose(step(0.5) - step(0.0), -0.05 * PARAMS["w"], atol=1e-6)


def test_sigma_schedule_with_floor():
    schedule = optax.exponential_decay(0.2, transition_steps=1, decay_rate=0.5)
    es = jaxes.open_es(4, sigma=schedule, sigma_floor=0.04)
    state = es.init(jax.random.key(0), jnp.zeros(3))
    sigmas = []
    for key in jax.random.split(jax.random.key(1), 4):
        _, state = es.ask(key, state)
        state, info = es.tell(state, jnp.arange(4.0))
        sigmas.append(float(info.sigma))
    np.testing.assert_allclose(sigmas, [0.2, 0.1, 0.05, 0.04], rtol=1e-6)


def test_memory_lean_evaluation_matches_ask():
    # 3 perturbations of PARAMS' 8 float32 values a chunk
    es = jaxes.open_es(P, sigma=0.1, learning_rate=0.05, memory_budget=3 * 8 * 4)

    @jax.jit
    def lean(state, key):
        _, state = es.ask(key, state)
        fitness = jax.lax.map(lambda i: sphere(es.member(state, i)), jnp.arange(P), batch_size=2)
        return es.tell(state, fitness)

    state = es.init(jax.random.key(0), PARAMS)
    a, _ = lean(state, jax.random.key(1))
    population, s2 = ES.ask(jax.random.key(1), state)
    ref, _ = ES.tell(s2, jax.vmap(sphere)(population))
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(ref.params), strict=True):
        np.testing.assert_allclose(x, y, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"population_size": 7}, r"population_size.*even.*got 7.*6 or 8"),
        ({"population_size": 1, "antithetic": False}, r"population_size.*>= 2"),
        ({"population_size": 8.0}, r"population_size.*int"),
        ({"population_size": 8, "sigma": 0.0}, r"sigma.*> 0.*0.0"),
        ({"population_size": 8, "sigma": -1.0}, r"sigma.*> 0"),
        ({"population_size": 8, "sigma": float("nan")}, r"sigma"),
        ({"population_size": 8, "learning_rate": 0}, r"learning_rate.*> 0"),
        ({"population_size": 8, "l2_coeff": -0.1}, r"l2_coeff.*>= 0"),
        ({"population_size": 8, "noise": "uniform"}, r"noise.*table.*gaussian"),
        ({"population_size": 8, "noise": 3}, r"noise: expected a jaxes.noise source"),
        ({"population_size": 8, "optimizer": "adam"}, r"optimizer.*GradientTransformation"),
        ({"population_size": 8, "fitness_shaping": "ranks"}, r"fitness_shaping"),
    ],
)
def test_bad_settings_fail_at_construction(kwargs, match):
    with pytest.raises(ValueError, match=match):
        jaxes.open_es(**kwargs)


@pytest.mark.parametrize(
    "fitness, match",
    [
        (jnp.zeros(P - 1), r"fitness.*\(8,\).*\(7,\)"),
        (jnp.zeros((P, 1)), r"fitness.*\(8,\).*\(8, 1\)"),
        (jnp.zeros(P, jnp.int32), r"fitness.*floating.*int32"),
    ],
)
def test_bad_fitness_fails_at_trace_time(fitness, match):
    state = ES.init(jax.random.key(0), PARAMS)
    with pytest.raises(ValueError, match=match):
        jax.jit(ES.tell)(state, fitness)


def test_state_can_be_donated():
    step = jax.jit(generation, donate_argnums=0)
    # The state holds the caller's float32 params, so donate copies (PARAMS stays usable).
    state = ES.init(jax.random.key(0), jax.tree.map(jnp.array, PARAMS))
    reference = ES.init(jax.random.key(0), PARAMS)
    with warnings.catch_warnings():
        # A buffer XLA cannot reuse only warns: make that fail the test.
        warnings.filterwarnings("error", message=".*donated buffers were not usable")
        for key in jax.random.split(jax.random.key(1), 2):
            donated = state
            state, _ = step(state, key)
            reference, _ = jit_generation(reference, key)
            # Every buffer the step reads and rewrites (θ, optimizer state, noise table,
            # fitness, best-member recipe) was handed over to XLA and reused.
            for x in jax.tree.leaves(
                (donated.params, donated.opt_state, donated.noise_state, donated.fitness)
                + (donated.best_fitness, donated.best)
            ):
                assert x.is_deleted()
    assert int(state.generation) == 2

    def without_key(s):
        return s.replace(key=jax.random.key_data(s.key))

    assert_trees_equal(without_key(state), without_key(reference))  # as if not donated
