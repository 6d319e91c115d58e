"""CMA-ES and xNES (issue 24): what a full covariance buys, pycma as the reference, the
termination criteria and the restart drivers. (The update formulas themselves are checked
against NumPy in tests/test_strategies.py, for every strategy.)"""

from __future__ import annotations

import cma
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxes
from jaxes import step
from jaxes.strategies import cma_constants, restarts, termination
from jaxes.strategies.cma_constants import default_population_size, weights

D = 10
RNG = np.random.default_rng(0)
ROTATION, _ = np.linalg.qr(RNG.standard_normal((D, D)))
SCALES = 10.0 ** (6 * np.arange(D) / (D - 1))  # condition 1e6
OPTIMUM = RNG.uniform(-3, 3, D)
LAM = default_population_size(D)
BUDGET = 12_000  # evaluations


def ellipsoid(x):
    """The rotated ellipsoid, f* = 0 at OPTIMUM (minimised)."""
    z = (x - OPTIMUM) @ ROTATION.T
    return jnp.sum(SCALES * z**2, axis=-1)


def axis_ellipsoid(x):
    """The same ellipsoid without the rotation: separable, what a diagonal C can follow."""
    return jnp.sum(SCALES * (x - OPTIMUM) ** 2, axis=-1)


def best_f_within_budget(es, seed=0, f=ellipsoid):
    """The lowest f any member reached within BUDGET evaluations (float64)."""
    generations = BUDGET // es.population_size
    state = es.init(jax.random.key(seed), jnp.zeros(D, jnp.float64))

    def generation(state, key):
        population, state = es.ask(key, state)
        values = f(population)
        state, _ = es.tell(state, -values)
        return state, jnp.min(values)

    run = jax.jit(lambda s, k: jax.lax.scan(generation, s, jax.random.split(k, generations)))
    _, best = run(state, jax.random.key(seed + 1))
    return float(jnp.min(best))


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield


def test_pycma_meets_the_budget():
    """The budget is one pycma meets: 1e-10 on the same ellipsoid from the same start."""
    f = lambda x: float(ellipsoid(np.asarray(x)))  # noqa: E731
    options = {"seed": 1, "verbose": -9, "ftarget": 1e-10, "maxfevals": BUDGET}
    result = cma.CMAEvolutionStrategy(np.zeros(D), 2.0, options).optimize(f).result
    assert result.fbest <= 1e-10 and result.evaluations <= BUDGET


@pytest.mark.parametrize("name", ["cma_es", "xnes"])
def test_full_covariance_solves_the_rotated_ellipsoid(x64, name):
    es = getattr(jaxes, name)(LAM, sigma=2.0)
    assert best_f_within_budget(es) <= 1e-10


def test_a_diagonal_covariance_does_not_but_solves_the_unrotated_one(x64):
    """Sep-CMA-ES cannot follow the rotated valley in the same budget, yet reaches 1e-10 on
    the same ellipsoid unrotated (measured: about 2,800 evaluations of the 12,000), so a
    broken sep_cma_es cannot pass the first half alone."""
    assert best_f_within_budget(jaxes.sep_cma_es(LAM, sigma=2.0)) > 1e-4
    assert best_f_within_budget(jaxes.sep_cma_es(LAM, sigma=2.0), f=axis_ellipsoid) <= 1e-10


def test_recombination_equals_pycma_on_the_same_members(x64):
    """Tell pycma the members jaxes drew and the same fitness: the new means agree."""
    es = jaxes.cma_es(LAM, sigma=0.7)
    start = np.linspace(-1.0, 1.0, D)
    state = es.init(jax.random.key(0), jnp.asarray(start))
    population, state = es.ask(jax.random.key(1), state)
    f = np.asarray(ellipsoid(population))
    state, _ = es.tell(state, -jnp.asarray(f))
    reference = cma.CMAEvolutionStrategy(start, 0.7, {"popsize": LAM, "verbose": -9})
    reference.ask()
    reference.tell(list(np.asarray(population)), list(f))
    np.testing.assert_allclose(np.asarray(state.params), reference.mean, rtol=0, atol=1e-12)


def test_members_are_rebuilt_for_a_pytree_in_float64(x64):
    params = {"w": jnp.ones((2, 3), jnp.float64), "b": jnp.zeros(2, jnp.float64)}
    for es in (jaxes.cma_es(6, sigma=0.3), jaxes.xnes(6, sigma=0.3)):
        jaxes.testing.assert_members_rebuilt(es, params, jax.random.key(0))
        state = es.init(jax.random.key(0), params)
        assert state.params["w"].dtype == jnp.float64 and state.sigma.dtype == jnp.float64


def test_bf16_params_run():
    es = jaxes.cma_es(8, sigma=0.5)
    state = es.init(jax.random.key(0), jnp.ones(4, jnp.bfloat16))
    population, state = jax.jit(es.ask)(jax.random.key(1), state)
    assert population.dtype == jnp.bfloat16
    state, info = jax.jit(es.tell)(state, -jnp.sum(population.astype(jnp.float32) ** 2, axis=1))
    assert bool(info.applied) and bool(jnp.all(jnp.isfinite(state.covariance)))
    assert jaxes.centre(state).dtype == jnp.bfloat16


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: jaxes.cma_es(8, sigma=-1.0), "sigma: expected a finite number > 0"),
        (lambda: jaxes.xnes(8, sigma=0.0), "sigma: expected a finite number > 0"),
        (lambda: jaxes.cma_es(1), "population_size: expected an int >= 2"),
        (lambda: jaxes.xnes(1), "population_size: expected an int >= 2"),
    ],
)
def test_bad_settings_are_refused(build, message):
    with pytest.raises(ValueError, match=message):
        build()


@pytest.mark.parametrize("name", ["cma_es", "xnes"])
def test_a_covariance_beyond_the_budget_is_refused_naming_the_largest_d(name):
    es = getattr(jaxes, name)(8, sigma=1.0, covariance_budget=2**20)
    with pytest.raises(
        ValueError, match=r"params: .* d = 1000 .*the largest d it fits in float32 is 209"
    ):
        es.init(jax.random.key(0), jnp.zeros(1000))


def test_flat_fitness_stops_and_with_restarts_restarts_inside_scan():
    es = restarts.with_restarts(jaxes.cma_es(6, sigma=1.0))
    state = es.init(jax.random.key(0), jnp.ones(3))

    def generation(state, xs):
        key, t = xs
        population, state = es.ask(key, state)
        f = jnp.sum(population**2, axis=1)
        # Informative for 4 generations, then flat: each flat one stops and restarts.
        f = jnp.where(t < 4, f, 1.0)
        return es.tell(state, -f)

    xs = (jax.random.split(jax.random.key(1), 7), jnp.arange(7))
    state, info = jax.jit(lambda s, xs: jax.lax.scan(generation, s, xs))(state, xs)
    assert info.info.flat_fitness.tolist() == [False] * 4 + [True] * 3
    assert info.restarts.tolist() == [0, 0, 0, 0, 1, 2, 3]
    assert int(state.inner.generation) == 0  # the last restart left a fresh run
    best = es.best_params(state)
    assert float(jnp.sum(best**2)) == pytest.approx(-float(state.best_fitness), rel=1e-6)


def test_a_converged_float64_run_reports_tolfun_and_tolx(x64):
    es = jaxes.cma_es(8, sigma=1.0)
    state = es.init(jax.random.key(0), jnp.ones(4, jnp.float64))

    def generation(state, key):
        population, state = es.ask(key, state)
        return es.tell(state, -jnp.sum(population**2, axis=1))

    _, info = jax.jit(lambda s, k: jax.lax.scan(generation, s, jax.random.split(k, 1000)))(
        state, jax.random.key(1)
    )
    first = int(np.argmax(np.asarray(info.stop)))
    assert first > 0 and not bool(np.any(np.asarray(info.stop)[:first]))
    assert bool(info.tolfun[first] | info.tolx[first])
    assert float(info.fitness_max[first]) > -1e-9  # stopped only once it had converged
    window, _ = termination.windows(4, 8)
    assert first >= window


def test_ipop_doubles_the_population_at_each_restart(x64):
    d = 3

    def rastrigin(x):
        return 10 * d + jnp.sum(x**2 - 10 * jnp.cos(2 * jnp.pi * x), axis=-1)

    evaluate = jax.jit(lambda population: -rastrigin(population))
    starts = []

    def initial(key):
        starts.append(key)
        return jax.random.uniform(key, (d,), jnp.float64, -4.0, 4.0)

    result = restarts.ipop(
        jaxes.cma_es,
        evaluate,
        jnp.full(d, 3.0),
        1.0,
        jax.random.key(0),
        max_evaluations=6000,
        population_size=6,
        target=-1e-8,
        initial=initial,
    )
    sizes = [run.population_size for run in result.runs]
    assert sizes == [6 * 2**k for k in range(len(sizes))]
    assert result.evaluations == sum(run.evaluations for run in result.runs) <= 6000
    assert all(run.reason != "budget" for run in result.runs[:-1])
    assert len(starts) == len(result.runs) - 1  # every run after the first starts afresh
    assert result.best_fitness == max(run.best_fitness for run in result.runs)
    assert float(evaluate(result.best_params[None])[0]) == pytest.approx(result.best_fitness)


def test_bipop_interleaves_small_runs(x64):
    evaluate = jax.jit(lambda population: jnp.zeros(population.shape[0]))  # every run stops at once
    result = restarts.bipop(
        jaxes.cma_es,
        evaluate,
        jnp.zeros(2),
        1.0,
        jax.random.key(0),
        max_evaluations=400,
        population_size=6,
        max_restarts=3,
    )
    large = [r.population_size for r in result.runs if r.sigma == 1.0]
    assert large == [6, 12, 24, 48]  # the first run and max_restarts = 3 more
    assert all(r.reason == "flat_fitness" for r in result.runs)
    assert any(r.sigma < 1.0 for r in result.runs)  # the small regime ran with a smaller σ0
    # Each small run's (λ_s, σ_s) from the driver's draws (two uniforms per small run, from a
    # NumPy generator seeded by the key): λ_s = ⌊λ0 (λ_large / 2λ0)^(u²)⌋, σ_s = σ0 10^(-2v).
    seed = np.asarray(jax.random.key_data(jax.random.key(0))).ravel().tolist()
    rng = np.random.default_rng(seed)
    lam_large, small = 6, 0
    for run in result.runs:
        if run.sigma == 1.0:
            lam_large = run.population_size
            continue
        small += 1
        u = rng.uniform()
        assert run.population_size == max(2, int(6 * (lam_large / 12) ** (u * u)))
        assert run.sigma == pytest.approx(10 ** (-2 * rng.uniform()))
        if lam_large > 6:  # after the first large restart, at most half the large λ
            assert run.population_size <= lam_large // 2
    assert small >= 2


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(max_evaluations=0), "max_evaluations"),
        (dict(increase=1.0), "increase: expected a number > 1"),
        (dict(population_size=1), "population_size"),
    ],
)
def test_restart_drivers_check_their_arguments(bad, message):
    kwargs = dict(max_evaluations=100, population_size=6) | bad
    with pytest.raises(ValueError, match=message):
        restarts.ipop(
            jaxes.cma_es,
            lambda p: -jnp.sum(p**2, 1),
            jnp.zeros(2),
            1.0,
            jax.random.key(0),
            **kwargs,
        )


@pytest.mark.parametrize("name", ["cma_es", "xnes"])
def test_a_donated_tell_fits_the_six_matrices_the_budget_counts(name):
    d = 400
    es = getattr(jaxes, name)(8, sigma=1.0)
    state = jax.eval_shape(lambda: es.init(jax.random.key(0), jnp.zeros(d)))
    fitness = jax.ShapeDtypeStruct((8,), jnp.float32)
    memory = jax.jit(es.tell, donate_argnums=0).lower(state, fitness).compile().memory_analysis()
    peak = memory.argument_size_in_bytes + memory.temp_size_in_bytes
    assert memory.alias_size_in_bytes >= memory.argument_size_in_bytes - 1024  # donated
    assert peak <= 6 * d * d * 4 * 1.05


def criteria(history, **changes):
    """termination.check on a 3-D state that meets no criterion unless ``changes`` say so."""
    d = 3
    settings = dict(
        history=history,
        fitness=jnp.array([-1.0, -2.0, -3.0]),
        informative=jnp.array(True),
        mean=jnp.ones(d),
        sigma=jnp.array(0.5),
        sigma0=1.0,
        axes=jnp.eye(d),
        axis_lengths=jnp.ones(d),
        variances=jnp.ones(d),
        path_c=jnp.ones(d),
        generation=jnp.array(7),
        tolfun_window=4,
    )
    return termination.check(**{**settings, **changes})[0]


def filled(best, median):
    history = termination.empty_history(len(best), jnp.float32)
    for b, m in zip(best, median, strict=True):
        history = termination.record(history, jnp.array([b, m, m - 1.0]), True)
    return history


def test_each_criterion_fires_on_its_own_condition():
    rising = np.linspace(-10.0, -1.0, 10)  # maximised: improving
    calm = criteria(filled(rising, rising - 1))
    assert not any(bool(getattr(calm, c)) for c in termination.CRITERIA) and not bool(calm.stop)
    falling = rising[::-1]  # the newest 30 % worse than the oldest
    assert bool(criteria(filled(falling, falling - 1)).stagnation)
    assert not bool(criteria(filled(falling, rising - 1)).stagnation)  # both must stall
    flat = filled(np.full(10, -1.0), np.full(10, -1.0))
    assert bool(criteria(flat, fitness=jnp.full(3, -1.0)).tolfun)
    assert not bool(criteria(flat).tolfun)  # this generation's spread is 2
    assert bool(criteria(filled(rising, rising), sigma=jnp.array(1e-13)).tolx)
    assert bool(criteria(filled(rising, rising), sigma=jnp.array(1e21)).tolupsigma)
    lengths = jnp.array([1.0, 1.0, 1e-8])
    assert bool(criteria(filled(rising, rising), axis_lengths=lengths).conditioncov)
    tiny = jnp.array([1.0, 1e-20, 1.0])
    assert bool(criteria(filled(rising, rising), variances=tiny).noeffectcoord)
    axes = jnp.eye(3).at[:, 7 % 3].set(1e-20)  # the axis generation 7 tries
    assert bool(criteria(filled(rising, rising), axes=axes).noeffectaxis)
    assert bool(criteria(filled(rising, rising), informative=jnp.array(False)).flat_fitness)


def test_each_threshold_is_where_pycma_puts_it_on_both_sides():
    """Probes 10 % on either side of each threshold (the probes above sit 10-10⁴× past them, so
    a tolx 10⁴ times too loose passed)."""
    rising = filled(np.linspace(-10.0, -1.0, 10), np.linspace(-11.0, -2.0, 10))
    # tolx: σ·max √C_ii and σ·max |p_c| both below 1e-12·σ0 (σ0 = 1, C = I, p_c = 1).
    assert bool(criteria(rising, sigma=jnp.array(0.9e-12)).tolx)
    assert not bool(criteria(rising, sigma=jnp.array(1.1e-12)).tolx)
    # A small σ·√C with a long p_c is still moving: not tolx.
    assert not bool(criteria(rising, sigma=jnp.array(0.5e-12), path_c=jnp.full(3, 4.0)).tolx)
    # tolfun: this generation's range and the recent best's range both below 1e-11.
    level = filled(np.zeros(10), np.full(10, -1.0))
    assert bool(criteria(level, fitness=jnp.array([0.0, 0.9e-11, 0.0])).tolfun)
    assert not bool(criteria(level, fitness=jnp.array([0.0, 1.1e-11, 0.0])).tolfun)
    stepped = filled(np.r_[np.zeros(9), 1.1e-11], np.full(10, -1.0))
    assert not bool(criteria(stepped, fitness=jnp.zeros(3)).tolfun)
    # conditioncov: (max/min axis length)² above 1e14.
    for smallest, fires in ((0.9e-7, True), (1.1e-7, False)):
        lengths = jnp.array([1.0, 1.0, smallest])
        assert bool(criteria(rising, axis_lengths=lengths).conditioncov) is fires
    # tolupsigma: σ·max D above 1e20·σ0.
    assert bool(criteria(rising, sigma=jnp.array(1.1e20)).tolupsigma)
    assert not bool(criteria(rising, sigma=jnp.array(0.9e20)).tolupsigma)


def test_the_lazy_eigendecomposition_keeps_b_and_d_between_refreshes():
    """d = 200, λ = 8: B and D are refreshed every 4 generations (pycma's gap), the case real
    policy sizes take; every other test's d refreshes each generation."""
    d = 200
    es = jaxes.cma_es(8, sigma=0.3)
    assert weights(d, 8).eigen_gap == 4
    scale = jnp.logspace(0.0, 3.0, d)
    state = es.init(jax.random.key(0), jnp.ones(d))
    ask, tell = jax.jit(es.ask), jax.jit(es.tell)
    refreshes = 0
    for g in range(9):
        population, state = ask(jax.random.key(g), state)
        before = state
        state, _ = tell(state, -jnp.sum(scale * population**2, axis=1))
        if int(state.refreshed) == int(state.generation):  # refreshed at this tell
            refreshes += 1
            rebuilt = (state.axes * state.scales**2) @ state.axes.T
            np.testing.assert_allclose(rebuilt, state.covariance, atol=1e-5)
        else:  # kept: the last refresh's B and D, though C moved on
            np.testing.assert_array_equal(state.axes, before.axes)
            np.testing.assert_array_equal(state.scales, before.scales)
            assert not np.allclose(state.covariance, before.covariance)
    assert refreshes == 2  # after generations 4 and 8
    assert not np.allclose(state.axes, np.eye(d))  # a refresh turned them


@pytest.mark.parametrize("d, lam", [(2, 8), (10, 10), (40, 15), (100, 8)])
def test_the_cma_rates_and_weights_are_pycmas(d, lam):
    """One module holds both CMA files' constants (issue 40); cma_es's are pycma's own."""
    reference = cma.CMAEvolutionStrategy(np.zeros(d), 1.0, {"popsize": lam, "verbose": -9})
    w = cma_constants.weights(d, lam)
    r = w.rates
    sp, csa = reference.sp, reference.adapt_sigma
    mine = [r.mu_eff, r.c_1, r.c_mu, r.c_c, r.c_sigma, r.d_sigma]
    pycmas = [sp.weights.mueff, sp.c1, sp.cmu, sp.cc, csa.cs, csa.damps]
    np.testing.assert_allclose(mine, pycmas, rtol=1e-12)
    np.testing.assert_allclose(w.positive + w.negative, np.asarray(sp.weights), atol=1e-15)


def test_the_stated_departures_from_pycma_hold():
    """The diagonal rates are Ros & Hansen's (d + 2)/3 scaling of the full model's."""
    full, diagonal = (cma_constants.rates(10, 3.0, diagonal=flag) for flag in (False, True))
    assert diagonal.c_1 == pytest.approx(4 * full.c_1)
    assert diagonal.c_mu == pytest.approx(min(1 - diagonal.c_1, 4 * full.c_mu))
    assert diagonal._replace(c_1=0, c_mu=0) == full._replace(c_1=0, c_mu=0)


def test_termination_info_is_the_criteria_in_strategy_info_and_in_the_metrics():
    """Issue 58: one StrategyInfo; the CMA family's criteria are its ``termination`` record,
    read as the info's own fields and logged as columns as before."""
    assert termination.TerminationInfo._fields == (*termination.CRITERIA, "stop", "condition")
    assert jaxes.strategies.StrategyInfo._fields[-1] == "termination"
    es = jaxes.cma_es(6, sigma=1.0)
    state = es.init(jax.random.key(0), jnp.ones(2))
    _, state = es.ask(jax.random.key(1), state)
    _, info = es.tell(state, jnp.zeros(6))  # flat: flat_fitness and stop
    assert bool(info.stop) and bool(info.flat_fitness) and info.stop is info.termination.stop
    assert set(step.scalar_metrics(info)) == {
        *jaxes.strategies.StrategyInfo._fields[:-1],
        *termination.TerminationInfo._fields,
    }
    with pytest.raises(AttributeError, match="no field 'stop'"):
        _ = jaxes.strategies.StrategyInfo(*range(11)).stop
