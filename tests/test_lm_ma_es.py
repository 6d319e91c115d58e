"""LM-MA-ES (issue 62): it solves the sphere and a rotated ellipsoid in float64, its members
and update are Loshchilov, Glasmachers & Beyer's (2019, algorithm 1) on the population ``ask``
drew, its transform is the dense product it stands for, its state runs the same through
``jit`` and ``lax.scan``, and it keeps no ``d × d`` array."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_ma_es import (
    LAM,
    best_of_two_seeds,
    ellipsoid,
    one_generation,
    ranked_weights,
    scan_equals_steps,
    sphere,
    x64,  # noqa: F401 - the fixture
)

from jaxes.strategies.cma_constants import elite_weights
from jaxes.strategies.lm_ma_es import Paths, constants, lm_ma_es
from jaxes.strategies.samplers import standard_normal


# Evaluations within which both seeds reach f* + 1e-8 with σ0 = 2. Measured with these keys
# (seeds 0, 1): 1,400/1,100 on the sphere and 94,820/109,180 on the ellipsoid: at d = 10 the
# ten vectors learn its axes at rates c_d = 1/(1.5^j d), some 20 times slower than MA-ES's M.
@pytest.mark.parametrize("function, budget", [("sphere", 4_000), ("ellipsoid", 200_000)])
def test_solves_to_1e_8_in_float64_within_the_budget(x64, function, budget):  # noqa: F811
    f = {"sphere": sphere, "ellipsoid": ellipsoid}[function]
    reached = best_of_two_seeds(lm_ma_es(LAM, sigma=2.0), f, budget)
    assert np.all(reached <= 1e-8), reached


def test_lm_ma_es_members_and_update_are_algorithm_1(x64):  # noqa: F811
    """Loshchilov, Glasmachers & Beyer (2019), algorithm 1, in NumPy: each member is
    ``y + σ d_i`` with d_i from z_i through the min(t, m) vectors in order (lines 5-9), then
    the mean (10), p_σ (11), every vector at its own rate (12-13) and σ (14)."""
    n, lam, m = 30, 12, 5
    es = lm_ma_es(lam, sigma=0.6, memory_size=m)
    start = jnp.linspace(-1.0, 1.0, n)
    f = lambda x: -jnp.sum(10.0 ** (3 * jnp.arange(n) / n) * (x - 0.3) ** 2, axis=-1)  # noqa: E731
    state, pop, fitness, told = one_generation(es, start, f, warm=3)
    assert int(state.updates) == 3  # so only the first three vectors are in use
    mu = lam // 2
    w = ranked_weights(fitness, mu)
    mu_w = 1 / np.sum(w**2)
    c_sigma = 2 * lam / n
    c_d = 1 / (1.5 ** np.arange(m) * n)
    c_c = lam / (4.0 ** np.arange(m) * n)
    paths, sigma, y = np.asarray(state.paths), float(state.sigma), np.asarray(state.params)
    z = np.stack([standard_normal(state.key, i, n, jnp.float64) for i in range(lam)])
    d = z.copy()
    for j in range(min(int(state.updates), m)):
        d = (1 - c_d[j]) * d + c_d[j] * np.outer(d @ paths[j], paths[j])
    np.testing.assert_allclose(pop, y + sigma * d, rtol=0, atol=1e-12)
    np.testing.assert_allclose(told.params, y + sigma * (w @ d), rtol=0, atol=1e-12)
    z_w = w @ z
    p_s = (1 - c_sigma) * np.asarray(state.path_sigma) + math.sqrt(
        mu_w * c_sigma * (2 - c_sigma)
    ) * z_w
    np.testing.assert_allclose(told.path_sigma, p_s, rtol=0, atol=1e-12)
    want = (1 - c_c)[:, None] * paths + np.sqrt(mu_w * c_c * (2 - c_c))[:, None] * z_w
    np.testing.assert_allclose(told.paths, want, rtol=0, atol=1e-12)
    change = c_sigma / 2 * (np.sum(p_s**2) / n - 1)
    np.testing.assert_allclose(float(told.sigma), sigma * math.exp(change), rtol=1e-12)
    assert int(told.updates) == 4


def test_lm_ma_es_caps_the_rates_where_d_is_small():
    """Below d = 2λ the paper's c_σ = 2λ/d and c_c,1 = λ/d pass 1 (a path would flip sign and
    √(c(2 - c)) is undefined): capped at 1; c_d at 1/2 (d = 1). Above, the paper's own."""
    k = constants(10, 10, elite_weights(5), 4)
    assert k.c_sigma == 1.0 and k.c_c.tolist() == [1.0, 0.25, 0.0625, 0.015625]
    assert constants(1, 4, elite_weights(2), 2).c_d.tolist() == [0.5, 0.5]
    k = constants(1000, 24, elite_weights(12), 3)
    assert k.c_sigma == 0.048 and np.allclose(k.c_d, [1e-3, 1e-3 / 1.5, 1e-3 / 2.25])


def test_paths_times_and_solve_are_the_dense_product_and_its_inverse(x64):  # noqa: F811
    n, m = 9, 4
    vectors = jax.random.normal(jax.random.key(0), (m, n), jnp.float64)
    rates = jnp.array([0.2, 0.1, 0.0, 0.05])  # a vector not in use: A_j = I
    paths = Paths(vectors, rates)
    dense = np.eye(n)
    for v, c in zip(np.asarray(vectors), np.asarray(rates), strict=True):
        dense = ((1 - c) * np.eye(n) + c * np.outer(v, v)) @ dense
    z = np.asarray(jax.random.normal(jax.random.key(1), (5, n), jnp.float64))
    np.testing.assert_allclose(paths.times(jnp.asarray(z)), z @ dense.T, rtol=1e-12)
    np.testing.assert_allclose(paths.times(jnp.asarray(z[0])), dense @ z[0], rtol=1e-12)
    np.testing.assert_allclose(paths.solve(paths.times(jnp.asarray(z))), z, rtol=1e-10)


def test_a_scan_of_generations_is_the_same_run_as_jitted_steps():
    scan_equals_steps(lm_ma_es(8, sigma=0.5))


def test_lm_ma_es_keeps_no_d_by_d_array():
    """At d = 200,000 (float32), the compiled donated ``tell`` plans O(d (m + λ)) bytes: its
    arguments, temporaries and outputs stay under 2m + 5λ floats a coordinate (280 for
    m = λ = 40; measured 246: the paths and their best-member copy, z, y and the moments'
    displacements); one d × d matrix would be 160 GB."""
    d, lam = 200_000, 40
    es = lm_ma_es(lam, sigma=0.1)
    assert es.init(jax.random.key(0), jnp.zeros(3)).paths.shape == (7, 3)  # 4 + ⌊3 ln 3⌋
    state = jax.eval_shape(lambda: es.init(jax.random.key(0), jnp.zeros(d)))
    assert state.paths.shape == (40, d)  # 4 + ⌊3 ln d⌋
    fitness = jax.ShapeDtypeStruct((lam,), jnp.float32)
    compiled = jax.jit(es.tell, donate_argnums=0).lower(state, fitness).compile()
    memory = compiled.memory_analysis()
    used = (
        memory.argument_size_in_bytes
        + memory.temp_size_in_bytes
        + memory.output_size_in_bytes
        - memory.alias_size_in_bytes
    )
    assert used / (4 * d) < 2 * 40 + 5 * lam, used / (4 * d)


def operands(jaxpr, primitive: str):
    """The operand shapes of every ``primitive`` in ``jaxpr`` and the programs it calls."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == primitive:
            yield [v.aval.shape for v in eqn.invars]
        for value in eqn.params.values():
            for sub in value if isinstance(value, list | tuple) else [value]:
                inner = getattr(sub, "jaxpr", None)
                if inner is not None:
                    yield from operands(getattr(inner, "jaxpr", inner), primitive)


def test_tell_applies_the_transform_to_two_sums_not_to_every_member():
    """The update's ``Σ w_i y_i`` and the moments' sums are linear in z, so ``tell`` applies
    T to ``Σ w_i z_i`` and ``Σ z_i`` only: no scan over the vectors and no product with them
    takes the ``P`` rows (``ask`` has applied T to them already;
    benchmarks/lm_ma_es_large.py)."""
    from jax.interpreters import partial_eval as pe

    es = lm_ma_es(16, sigma=0.5)  # m = 9 vectors at d = 7
    _, state = es.ask(jax.random.key(1), es.init(jax.random.key(0), jnp.zeros(7)))
    jaxpr = jax.make_jaxpr(es.tell)(state, jnp.zeros(16)).jaxpr
    used, _ = pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars))  # what XLA keeps
    products = [x for x in operands(used, "dot_general") if (16, 7) in x]
    assert products and all(x == [(16,), (16, 7)] for x in products), products  # masses @ z
    assert all((16, 7) not in x for x in operands(used, "scan"))


def test_paths_times_rows_through_its_compact_form(x64):  # noqa: F811
    """Rows go through ``T = s I + V K Vᵀ``, one vector through the factors in turn; both are
    the dense product (rates at LM-MA-ES's ``1/(1.5^j d)`` and a vector not in use)."""
    n, m = 40, 8
    vectors = jax.random.normal(jax.random.key(0), (m, n), jnp.float64)
    rates = jnp.asarray(1 / (1.5 ** np.arange(m) * 3)).at[5].set(0.0)
    dense = np.eye(n)
    for v, c in zip(np.asarray(vectors), np.asarray(rates), strict=True):
        dense = ((1 - c) * np.eye(n) + c * np.outer(v, v)) @ dense
    s, k = Paths(vectors, rates).compact()
    np.testing.assert_allclose(s * np.eye(n) + vectors.T @ k @ vectors, dense, atol=1e-12)
    z = np.asarray(jax.random.normal(jax.random.key(1), (12, n), jnp.float64))
    for rows in (z, z[:1], z[0]):  # a population, one member as a row, one vector
        np.testing.assert_allclose(Paths(vectors, rates).times(rows), rows @ dense.T, rtol=1e-11)


def test_bad_settings_name_the_argument():
    for make, message in [
        (lambda: lm_ma_es(8, memory_size=0), r"^memory_size: expected an int >= 1, got 0"),
        (lambda: lm_ma_es(8, memory_size=2.5), r"^memory_size: expected an int >= 1"),
        (lambda: lm_ma_es(8, sigma=0.0), "^sigma: expected a finite number > 0"),
        (lambda: lm_ma_es(8, sigma=lambda g: 0.1), "^sigma: lm_ma_es adapts σ itself"),
    ]:
        with pytest.raises(ValueError, match=message):
            make()
