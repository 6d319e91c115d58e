"""MA-ES (issue 62): it solves the sphere and a rotated ellipsoid in float64, its update is
Beyer & Sendhoff's (2017, fig. 3) on the population ``ask`` drew, with evosax's constants, and
its state runs the same through ``jit`` and ``lax.scan``. The helpers serve
tests/test_lm_ma_es.py too."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxes.strategies.cma_constants import default_population_size, elite_weights
from jaxes.strategies.ma_es import ma_es, ma_rates

D = 10
RNG = np.random.default_rng(0)
ROTATION, _ = np.linalg.qr(RNG.standard_normal((D, D)))
SCALES = 10.0 ** (6 * np.arange(D) / (D - 1))  # condition 1e6
OPTIMUM = RNG.uniform(-3, 3, D)
LAM = default_population_size(D)


def sphere(x):
    return jnp.sum((x - OPTIMUM) ** 2, axis=-1)


def ellipsoid(x):
    """The rotated ellipsoid of tests/test_cma_es.py, f* = 0 at OPTIMUM (minimised)."""
    return jnp.sum(SCALES * ((x - OPTIMUM) @ ROTATION.T) ** 2, axis=-1)


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield


def best_of_two_seeds(es, f, budget: int) -> np.ndarray:
    """The lowest f each of seeds 0 and 1 reached within ``budget`` evaluations from the
    origin (float64; one program for both)."""

    @jax.jit
    @jax.vmap
    def best(seed):
        def generation(state, key):
            population, state = es.ask(key, state)
            values = f(population)
            return es.tell(state, -values)[0], jnp.min(values)

        state = es.init(jax.random.fold_in(jax.random.key(0), seed), jnp.zeros(D, jnp.float64))
        run_key = jax.random.fold_in(jax.random.key(1), seed)
        keys = jax.random.split(run_key, budget // es.population_size)
        return jnp.min(jax.lax.scan(generation, state, keys)[1])

    return np.asarray(best(jnp.arange(2)))


# Evaluations within which both seeds reach f* + 1e-8 with σ0 = 2. Measured with these keys
# (seeds 0, 1): 1,420/1,340 on the sphere, 5,000/5,430 on the ellipsoid (cma_es: about 3,900).
@pytest.mark.parametrize("function, budget", [("sphere", 4_000), ("ellipsoid", 12_000)])
def test_solves_to_1e_8_in_float64_within_the_budget(x64, function, budget):
    f = {"sphere": sphere, "ellipsoid": ellipsoid}[function]
    reached = best_of_two_seeds(ma_es(LAM, sigma=2.0), f, budget)
    assert np.all(reached <= 1e-8), reached


def one_generation(es, params, fitness_fn, warm=3):
    """The state after ``warm`` generations and an ask, its population (flat, float64), the
    fitness and the told state: a state whose σ, paths and transform are not the initial."""
    state = es.init(jax.random.key(0), params)
    for g in range(warm):
        population, state = es.ask(jax.random.key(10 + g), state)
        state, _ = es.tell(state, fitness_fn(population))
    population, state = jax.jit(es.ask)(jax.random.key(99), state)
    fitness = fitness_fn(population)
    told, info = jax.jit(es.tell)(state, fitness)
    assert bool(info.applied)
    return state, np.asarray(population, np.float64), np.asarray(fitness, np.float64), told


def ranked_weights(fitness, mu):
    """``ln(μ + 1/2) - ln k`` for the best ``μ`` by rank (fitness maximised), summing to one."""
    order = np.argsort(-fitness, kind="stable")
    w = np.zeros(len(fitness))
    w[order[:mu]] = elite_weights(mu)
    return w


def test_ma_es_update_is_figure_3_on_the_members_ask_drew(x64):
    """Beyer & Sendhoff (2017), fig. 3, in NumPy from the explicit population, with the paper's
    constants written out here: m += σ Σ w d_i (M9), s (M10), M ← M[I + c1/2 (s sᵀ - I) +
    cw/2 (Σ w z zᵀ - I)] (M11, the product taken), σ by CSA (M12)."""
    es = ma_es(12, sigma=0.7)
    start = jnp.linspace(-1.0, 1.0, 7)
    state, pop, fitness, told = one_generation(es, start, lambda x: -ellipsoid_7(x))
    n, mu = 7, 6
    w = ranked_weights(fitness, mu)
    mu_eff = 1 / np.sum(w**2)
    c_s = (mu_eff + 2) / (mu_eff + n + 5)
    c_1 = 2 / ((n + 1.3) ** 2 + mu_eff)
    c_w = min(1 - c_1, 2 * (mu_eff + 1 / mu_eff - 2) / ((n + 2) ** 2 + mu_eff))
    d_s = 1 + c_s + 2 * max(0.0, math.sqrt((mu_eff - 1) / (n + 1)) - 1)
    chi = math.sqrt(n) * (1 - 1 / (4 * n) + 1 / (21 * n * n))
    m, sigma = np.asarray(state.params), float(state.sigma)
    big_m = np.asarray(state.transform)
    d = (pop - m) / sigma
    z = np.linalg.solve(big_m, d.T).T
    np.testing.assert_allclose(told.params, m + sigma * (w @ d), rtol=0, atol=1e-12)
    s = (1 - c_s) * np.asarray(state.path_sigma) + math.sqrt(mu_eff * c_s * (2 - c_s)) * (w @ z)
    np.testing.assert_allclose(told.path_sigma, s, rtol=0, atol=1e-10)
    eye = np.eye(n)
    want = big_m @ (eye + c_1 / 2 * (np.outer(s, s) - eye) + c_w / 2 * ((z.T * w) @ z - eye))
    np.testing.assert_allclose(told.transform, want, rtol=0, atol=1e-10)
    change = c_s / d_s * (np.linalg.norm(s) / chi - 1)
    np.testing.assert_allclose(float(told.sigma), sigma * math.exp(change), rtol=1e-12)


def ellipsoid_7(x):
    return jnp.sum(10.0 ** jnp.arange(7) * (x - 0.3) ** 2, axis=-1)


def test_ma_es_constants_are_evosaxs(x64):
    """The tutorial's rates MA-ES takes are evosax's MA_ES defaults too (its weights, with no
    negative ones, are ln((λ+1)/2) - ln k: the same for an even λ)."""
    ma = pytest.importorskip("evosax.algorithms.distribution_based.ma_es")
    for d, lam in [(10, 10), (40, 16), (3, 8)]:
        params = ma.MA_ES(lam, jnp.zeros(d)).default_params
        k = ma_rates(d, elite_weights(lam // 2))
        got = [k.mu_eff, k.c_sigma, k.d_sigma, k.c_1, k.c_mu, k.chi_n]
        want = [params.mu_eff, params.c_std, params.d_std, params.c_1, params.c_mu, params.chi_n]
        np.testing.assert_allclose(got, np.asarray(want, np.float64), rtol=1e-6)


def test_a_scan_of_generations_is_the_same_run_as_jitted_steps():
    scan_equals_steps(ma_es(8, sigma=0.5))


def scan_equals_steps(es):
    """The state round-trips through ``jit`` and ``lax.scan``: the same generations, stepped
    one jitted call at a time or scanned, end in the same state (and its own structure)."""
    params = {"w": jnp.linspace(-1.0, 1.0, 6).reshape(2, 3), "b": jnp.full(2, 0.5)}

    def fitness(population):
        return -sum(
            jnp.sum((x - 0.2) ** 2, axis=tuple(range(1, x.ndim)))
            for x in jax.tree.leaves(population)
        )

    def generation(state, key):
        population, state = es.ask(key, state)
        return es.tell(state, fitness(population))[0], None

    start = es.init(jax.random.key(0), params)
    keys = jax.random.split(jax.random.key(1), 12)
    scanned = jax.jit(lambda s, k: jax.lax.scan(generation, s, k)[0])(start, keys)
    stepped, step = start, jax.jit(generation)
    for key in keys:
        stepped = step(stepped, key)[0]
    assert jax.tree.structure(scanned) == jax.tree.structure(start)
    for a, b in zip(jax.tree.leaves(scanned), jax.tree.leaves(stepped), strict=True):
        if jnp.issubdtype(a.dtype, jnp.floating):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(raw(a), raw(b))
    assert int(scanned.generation) == 12 and float(jnp.sum((scanned.params["w"] - 0.2) ** 2)) < 0.5


def raw(x):
    """A key array's data, or the array itself."""
    return jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x


def test_bad_settings_name_the_argument():
    for make, message in [
        (lambda: ma_es(1), r"^population_size: expected an int >= 2"),
        (lambda: ma_es(8, elite_size=9), r"^elite_size: expected an int in \[1, 8\]"),
        (lambda: ma_es(8, sigma=lambda g: 0.1), "^sigma: ma_es adapts σ itself"),
    ]:
        with pytest.raises(ValueError, match=message):
            make()
    es = ma_es(8, covariance_budget=2**20)
    with pytest.raises(ValueError, match=r"^params: ma_es keeps d × d matrices, and d = 1000"):
        es.init(jax.random.key(0), jnp.zeros(1000))
