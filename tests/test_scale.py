"""The scalable default: chunked evaluation, a bounded memory plan, any dtype, any PRNG, traced
hyper-parameters, and the edges of the core (issue 10)."""

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import strategies

import jaxes
from jaxes import evaluation, step, training
from jaxes.tasks.functions import function_task
from jaxes.training import checkpoint

STRATEGIES = strategies(
    16,
    0.1,
    open_es=dict(learning_rate=0.05),
    pgpe=dict(learning_rate=0.05),
    snes=dict(sigma=0.3),
    ars=dict(learning_rate=0.05, top_k=4),
    sep_cma_es=dict(sigma=0.3),
)


def quadratic(params):
    return -sum(jnp.sum(jnp.square(x.astype(jnp.float32) - 0.5)) for x in jax.tree.leaves(params))


def memory_plan(strategy, dim):
    """Bytes per parameter of the compiled default generation step (arguments + temporaries +
    outputs - aliases), from XLA's memory analysis: compiled, never run."""
    task = function_task("sphere", dim)
    abstract = jax.eval_shape(lambda: training.init_state(strategy, task, 0))
    compiled = jax.jit(step.generation_step(strategy, task), donate_argnums=0).lower(abstract)
    m = compiled.compile().memory_analysis()
    used = (
        m.argument_size_in_bytes
        + m.temp_size_in_bytes
        + m.output_size_in_bytes
        - m.alias_size_in_bytes
    )
    return used / dim


def test_default_generation_step_plans_under_48_bytes_per_param_whatever_the_population():
    dim = 10_000_000
    at_256 = memory_plan(jaxes.open_es(256), dim)
    at_64 = memory_plan(jaxes.open_es(64), dim)
    assert at_256 < 48, f"{at_256:.1f} bytes/param at d = 10M, P = 256"
    assert at_256 < 1.05 * at_64, f"P = 64: {at_64:.1f}, P = 256: {at_256:.1f} bytes/param"


def test_chunked_generation_equals_one_chunk_and_devices():
    task = function_task("rastrigin", 6)
    one = jaxes.open_es(16, 0.1, learning_rate=0.05)
    chunked = jaxes.open_es(16, 0.1, learning_rate=0.05, memory_budget=6 * 8 * 4)  # 4 members
    assert chunked.eval_chunk(chunked.init(jax.random.key(0), jnp.ones(6))) == 4

    def run(es):
        ts = training.init_state(es, task, 0)
        ts, metrics = jax.jit(
            lambda t: jax.lax.scan(lambda c, _: step.generation_step(es, task)(c), t, None, 5)
        )(ts)
        return ts.strategy_state.params, metrics

    (a, ma), (b, mb) = run(one), run(chunked)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ma["fitness_mean"], mb["fitness_mean"], rtol=1e-5)
    np.testing.assert_array_equal(ma["evaluations"], mb["evaluations"])


def test_evaluate_maps_a_fitness_over_members_in_chunks():
    es = jaxes.open_es(8, 0.1, memory_budget=2 * 3 * 8)  # 2 members of 3 float32 + noise
    state = es.init(jax.random.key(0), jnp.ones(3))
    population, state = es.ask(jax.random.key(1), state)
    expected = jax.vmap(quadratic)(population)
    np.testing.assert_allclose(jaxes.evaluate(es, state, quadratic), expected, rtol=1e-6)
    np.testing.assert_allclose(
        jaxes.evaluate(es, state, quadratic, chunk_size=8), expected, rtol=1e-6
    )
    with pytest.raises(ValueError, match="chunk_size: 3 does not divide"):
        jaxes.evaluate(es, state, quadratic, chunk_size=3)
    with pytest.raises(ValueError, match="fitness_fn: expected a scalar"):
        jaxes.evaluate(es, state, lambda p: p)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_bf16_and_mixed_params_train_under_scan_like_float32(name):
    def final_loss(dtype):
        es = STRATEGIES[name]()
        params = {"w": jnp.zeros(12, dtype), "b": jnp.zeros(4, jnp.float32)}

        @jax.jit
        def run(key):
            def gen(state, k):
                population, state = es.ask(k, state)
                return es.tell(state, jax.vmap(quadratic)(population))

            state = es.init(key, params)
            state, infos = jax.lax.scan(gen, state, jax.random.split(key, 100))
            return state, infos

        # Four seeds in one program: the median, not one seed's luck, is compared.
        state, infos = jax.vmap(run)(jax.random.split(jax.random.key(0), 4))
        assert jaxes.centre(state)["w"].dtype == dtype  # members keep the leaf's dtype
        assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state.params))
        losses = -jax.vmap(quadratic)(state.params)
        return float(jnp.median(losses)), -quadratic(params)

    bf16, start = final_loss(jnp.bfloat16)
    f32, _ = final_loss(jnp.float32)
    assert bf16 < 0.25 * float(start), f"{name}: bf16 loss {bf16:.3g} from {float(start):.3g}"
    assert bf16 < max(3 * f32, 0.02), f"{name}: bf16 loss {bf16:.3g} vs float32 {f32:.3g}"


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_bf16_state_types_are_stable_across_jitted_generations(name):
    es = STRATEGIES[name]()

    @jax.jit
    @chex.assert_max_traces(n=1)
    def gen(state, key):
        population, state = es.ask(key, state)
        return es.tell(state, jax.vmap(quadratic)(population))

    chex.clear_trace_counter()
    state = es.init(jax.random.key(0), {"w": jnp.zeros(4, jnp.bfloat16), "b": jnp.zeros(2)})
    for key in jax.random.split(jax.random.key(1), 3):
        state, _ = gen(state, key)  # a second trace would raise


def test_bf16_update_uses_the_displacement_each_member_had():
    es = jaxes.open_es(8, 0.01)  # σ ε much smaller than bf16's spacing near 100
    params = {"w": jnp.full(4, 100.0, jnp.bfloat16)}
    state = es.init(jax.random.key(0), params)
    population, state = es.ask(jax.random.key(1), state)
    _, stats = es.estimate(state, jax.vmap(quadratic)(population))
    realised = np.asarray(population["w"], np.float64) - 100.0
    m = np.asarray(stats.masses, np.float64)
    np.testing.assert_allclose(stats.moments.mass_moment["w"], m @ realised, atol=1e-6)


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg", "unsafe_rbg"])
def test_members_rebuilt_bit_identically_under_every_prng_implementation(impl):
    params = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
    with jax.default_prng_impl(impl):
        for es in (jaxes.open_es(8, 0.1), jaxes.open_es(8, 0.1, noise="gaussian")):
            for key in (jax.random.key(3), jax.random.PRNGKey(3)):  # typed and raw keys
                state = es.init(key, params)
                population, state = jax.jit(es.ask)(key, state)
                rows = jax.jit(jax.vmap(lambda i, s=state, e=es: e.member(s, i)))(jnp.arange(8))
                for a, b in zip(jax.tree.leaves(rows), jax.tree.leaves(population), strict=True):
                    np.testing.assert_array_equal(a, b)
            jaxes.testing.assert_moments_match_population(es, params, quadratic, key)


def sweep_run(sigma, learning_rate):
    es = jaxes.open_es(16, sigma, learning_rate=learning_rate)

    def gen(state, k):
        population, state = es.ask(k, state)
        return es.tell(state, jax.vmap(quadratic)(population))[0], None

    state = es.init(jax.random.key(0), jnp.zeros(5))
    state, _ = jax.lax.scan(gen, state, jax.random.split(jax.random.key(1), 20))
    return state.params


def test_a_run_vmaps_over_a_grid_of_sigma_and_learning_rate():
    sigmas = jnp.array([0.02, 0.1, 0.3])
    finals = jax.jit(jax.vmap(sweep_run))(sigmas, jnp.full(3, 0.05))
    single = jax.jit(sweep_run, static_argnums=(0, 1))(0.1, 0.05)
    np.testing.assert_allclose(finals[1], single, rtol=1e-5, atol=1e-6)
    assert not np.allclose(finals[0], finals[2])
    by_lr = jax.jit(jax.vmap(sweep_run))(jnp.full(2, 0.1), jnp.array([0.01, 0.1]))
    assert not np.allclose(by_lr[0], by_lr[1])


@pytest.mark.parametrize("name", ["open_es", "ars"])
def test_a_sigma_schedule_reaching_zero_never_makes_nan(name):
    schedule = optax.linear_schedule(0.1, 0.0, 10)
    es = {
        "open_es": lambda: jaxes.open_es(8, schedule, learning_rate=0.05),
        "ars": lambda: jaxes.ars(8, schedule, learning_rate=0.05),
    }[name]()
    state = es.init(jax.random.key(0), jnp.ones(3))
    gen = jax.jit(lambda s, k: es.tell(es.ask(k, s)[1], jax.vmap(quadratic)(es.ask(k, s)[0])))
    for key in jax.random.split(jax.random.key(1), 25):
        state, info = gen(state, key)
        assert bool(jnp.all(jnp.isfinite(state.params))) and float(info.sigma) > 0
    # From generation 10 σ sits at the float32 floor, 1e-8, where members near 1 round to the
    # centre: equal fitness, no ranking, and tell says so (applied is false).
    assert float(info.sigma) == np.float32(1e-8) and not bool(info.applied)
    # With a floor the members can resolve, the search goes on at it: every tell applies and
    # moves the params.
    floored = getattr(jaxes, name)(8, schedule, learning_rate=0.05, sigma_floor=1e-3)
    state = floored.init(jax.random.key(0), jnp.ones(3))
    gen = jax.jit(
        lambda s, k: floored.tell(floored.ask(k, s)[1], jax.vmap(quadratic)(floored.ask(k, s)[0]))
    )
    for g, key in enumerate(jax.random.split(jax.random.key(1), 25)):
        before = state.params
        state, info = gen(state, key)
        assert bool(info.applied) and float(jnp.max(jnp.abs(state.params - before))) > 1e-4, g
        assert g < 10 or float(info.sigma) == np.float32(1e-3), (g, float(info.sigma))


@pytest.mark.parametrize("name", ["pgpe", "snes", "sep_cma_es"])
def test_a_sigma_schedule_is_refused_where_sigma_is_adapted(name):
    with pytest.raises(ValueError, match=f"sigma: {name} adapts σ"):
        getattr(jaxes, name)(16, sigma=optax.linear_schedule(0.1, 0.0, 10))


def test_info_holds_only_scalars_so_a_long_scan_stacks_no_parameters():
    es = jaxes.open_es(16)
    dim = 100_000

    def run(state, keys):
        def gen(s, k):
            population, s = es.ask(k, s)
            return es.tell(s, jaxes.evaluate(es, s, quadratic))

        return jax.lax.scan(gen, state, keys)

    state = jax.eval_shape(lambda: es.init(jax.random.key(0), jnp.zeros(dim)))
    _, infos = jax.eval_shape(run, state, jax.random.split(jax.random.key(1), 1000))
    assert all(x.shape == (1000,) for x in jax.tree.leaves(infos))


def test_best_member_is_rebuilt_on_request_or_not_tracked():
    es = jaxes.open_es(8, 0.1)
    state = es.init(jax.random.key(0), jnp.ones(3))
    best_seen = -np.inf
    for key in jax.random.split(jax.random.key(1), 5):
        population, state = es.ask(key, state)
        fitness = jax.vmap(quadratic)(population)
        best_seen = max(best_seen, float(fitness.max()))
        state, info = es.tell(state, fitness)
    assert float(info.best_fitness) == best_seen
    assert float(quadratic(es.best_params(state))) == pytest.approx(best_seen, rel=1e-6)
    lean = jaxes.open_es(8, 0.1, track_best=False)
    lean_state = lean.init(jax.random.key(0), jnp.ones(3))
    assert lean_state.best.centre is None
    with pytest.raises(ValueError, match="track_best=False"):
        lean.best_params(lean_state)


def test_runner_donates_and_checkpoints_rebuild_the_noise_table(tmp_path):
    es, task = (
        jaxes.open_es(4, 0.1, noise=jaxes.noise.noise_table(2**20)),
        function_task("sphere", 3),
    )
    state = training.init_state(es, task, 0)
    params = state.strategy_state.params
    run_block = training.block_runner(es, task, 2)
    new, _, _ = run_block(state, jax.random.key(1))
    assert params.is_deleted()  # donated: the new state reuses the buffers
    ckpt = checkpoint.Checkpointer(str(tmp_path / "ckpt"))
    ckpt.save(2, new)
    stored = sum(f.stat().st_size for f in (tmp_path / "ckpt").rglob("*") if f.is_file())
    assert stored < 1_000_000 < new.strategy_state.noise_state.values.nbytes
    _, restored = ckpt.restore(training.init_state(es, task, 0))
    ckpt.close()
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(new), strict=True):
        if not checkpoint.is_key(a):
            np.testing.assert_array_equal(a, b)


def test_tell_without_a_pending_ask_changes_nothing_and_says_so():
    es = jaxes.open_es(8, 0.1)
    state = es.init(jax.random.key(0), jnp.ones(3))
    new, info = es.tell(state, jnp.arange(8.0))  # no ask yet
    assert not bool(info.applied) and int(new.generation) == 0
    np.testing.assert_array_equal(new.params, state.params)
    _, asked = es.ask(jax.random.key(1), state)
    told, info = es.tell(asked, jnp.arange(8.0))
    assert bool(info.applied) and int(told.generation) == 1
    again, info = es.tell(told, jnp.arange(8.0))  # a second tell for the same ask
    assert not bool(info.applied)
    np.testing.assert_array_equal(again.params, told.params)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_fitness_without_ranking_freezes_every_strategy(name):
    es = STRATEGIES[name]()
    state = es.init(jax.random.key(0), {"w": jnp.ones(3)})
    for key in jax.random.split(jax.random.key(1), 20):
        _, asked = es.ask(key, state)
        flat = jnp.full(16, 2.0) if int(asked.generation) % 2 else jnp.full(16, jnp.nan)
        new, info = es.tell(asked, flat)
        assert not bool(info.applied)
        if int(asked.generation) % 2 == 0:
            assert int(info.num_finite) == 0
        searched = [f.name for f in dataclasses.fields(new)]
        searched = [f for f in searched if f not in ("key", "generation", "pending", "fitness")]
        searched = [f for f in searched if f not in ("best", "best_fitness")]
        for field in searched:
            for a, b in zip(
                jax.tree.leaves(getattr(new, field)),
                jax.tree.leaves(getattr(state, field)),
                strict=True,
            ):
                np.testing.assert_array_equal(a, b, err_msg=f"{name}: {field} moved")
        state = new


def test_sep_cma_sigma_stays_above_its_floor_on_a_sphere():
    es = jaxes.sep_cma_es(8, 1.0, sigma_floor=1e-6)

    @jax.jit
    def run(state, keys):
        def gen(s, k):
            population, s = es.ask(k, s)
            return es.tell(s, jax.vmap(lambda x: -jnp.sum(x**2))(population))[0], None

        return jax.lax.scan(gen, state, keys)[0]

    state = run(es.init(jax.random.key(0), jnp.ones(2)), jax.random.split(jax.random.key(1), 600))
    assert float(state.sigma) >= np.float32(1e-6) and bool(jnp.all(jnp.isfinite(state.params)))


def test_member_index_outside_the_population():
    es = jaxes.open_es(8, 0.1)
    _, state = es.ask(jax.random.key(1), es.init(jax.random.key(0), jnp.ones(3)))
    for i in (8, -1):
        with pytest.raises(ValueError, match=r"i: expected a member index in \[0, 8\)"):
            es.member(state, i)
    traced = jax.jit(lambda i: es.member(state, i))
    assert bool(jnp.all(jnp.isnan(traced(9)))) and bool(jnp.all(jnp.isfinite(traced(7))))


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: jaxes.open_es(8, memory_budget=0), r"memory_budget: expected an int >= 1"),
        (lambda: jaxes.open_es(8, memory_budget=-5), r"memory_budget"),
        (lambda: jaxes.pgpe(8, sigma="0.1"), r"sigma: expected numbers > 0, got '0.1'"),
        (lambda: jaxes.snes(8, sigma="0.1"), r"sigma: expected numbers > 0, got '0.1'"),
        (lambda: jaxes.open_es(8, sigma="0.1"), r"sigma: expected a number"),
        (
            lambda: jax.jit(lambda p: jaxes.open_es(p).population_size)(8),
            r"population_size: must be a static Python int",
        ),
    ],
)
def test_bad_settings_name_the_argument(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_budget_smaller_than_one_member_is_an_error():
    es = jaxes.open_es(8, memory_budget=100)
    state = es.init(jax.random.key(0), jnp.ones(1000))
    with pytest.raises(ValueError, match=r"memory_budget: 100 bytes cannot hold one member"):
        es.eval_chunk(state)


def test_a_state_from_another_strategy_or_population_is_refused():
    es8, es16, snes8 = jaxes.open_es(8), jaxes.open_es(16), jaxes.snes(8)
    state = es8.init(jax.random.key(0), jnp.ones(3))
    with pytest.raises(ValueError, match="population_size 8, but this open_es has .* 16"):
        es16.tell(state, jnp.zeros(16))
    with pytest.raises(ValueError, match="snes was given open_es.s state.*a SNESState"):
        snes8.tell(state, jnp.zeros(8))


def test_fitness_as_a_list_and_odd_populations():
    es = jaxes.open_es(4, 0.1)
    _, state = es.ask(jax.random.key(1), es.init(jax.random.key(0), jnp.ones(2)))
    _, info = es.tell(state, [0.0, 1.0, 2.0, 3.0])
    assert bool(info.applied)
    with pytest.raises(ValueError, match="fitness: expected an array"):
        es.tell(state, ["a", None])
    # snes and sep_cma_es sample independent members, so an odd P is fine for them.
    assert jaxes.snes(7).population_size == 7 and jaxes.sep_cma_es(7).population_size == 7
    with pytest.raises(ValueError, match="antithetic pairs need an even population"):
        jaxes.pgpe(7)


def test_evaluation_chunk_is_chosen_from_the_budget():
    es = jaxes.open_es(256, memory_budget=10 * 100 * 8)  # 10 members of 100 float32 + noise
    state = jax.eval_shape(lambda: es.init(jax.random.key(0), jnp.zeros(100)))
    assert evaluation.chunk_size(es, state, 256) == 8  # the largest divisor of 256 <= 10
    assert jaxes.open_es(256).eval_chunk(state) == 256


TRACED = {
    "open_es": lambda h: jaxes.open_es(8, h, learning_rate=h, l2_coeff=h, sigma_floor=h / 10),
    "pgpe": lambda h: jaxes.pgpe(
        8,
        h,
        learning_rate=h,
        sigma_learning_rate=h,
        sigma_max_change=h,
        momentum=h,
    ),
    "snes": lambda h: jaxes.snes(8, h, learning_rate=h, sigma_learning_rate=h),
    "ars": lambda h: jaxes.ars(8, h, learning_rate=h),
    "sep_cma_es": lambda h: jaxes.sep_cma_es(8, h, learning_rate=h, sigma_floor=h / 10),
}


@pytest.mark.parametrize("name", sorted(TRACED))
def test_every_numeric_setting_may_be_traced(name):
    def run(h):
        es = TRACED[name](h)

        def gen(state, k):
            population, state = es.ask(k, state)
            return es.tell(state, jax.vmap(quadratic)(population))[0], None

        state = es.init(jax.random.key(0), jnp.ones(3))
        return jax.lax.scan(gen, state, jax.random.split(jax.random.key(1), 3))[0].params

    # Tracing is the test (no compile): a Python check on a traced value would raise here.
    assert jax.eval_shape(jax.vmap(run), jnp.array([0.1, 0.2])).shape == (2, 3)
