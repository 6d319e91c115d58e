"""A low-rank population's sum kept as factors through ``tell`` (``jaxes.factored.lowrank``,
``jaxes.optim.TakesFactors``): the same step as multiplied out, and no parameter-sized
temporary beyond one matrix (XLA's ``memory_analysis``, compile only)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxes
from jaxes.factored import lowrank as low_rank
from jaxes.noise.moments import worth_keeping

KEY = jax.random.key(0)


def _factors(shape, rank, seed):
    *lead, m, n = shape
    ka, kb = jax.random.split(jax.random.key(seed))
    return low_rank.LowRank(
        jax.random.normal(ka, (*lead, m, rank)), jax.random.normal(kb, (*lead, n, rank))
    )


@pytest.mark.parametrize("shape", [(5, 3), (2, 4, 6)])
def test_norms_inner_products_and_differences_equal_the_dense_ones(shape):
    x, y = _factors(shape, 3, 1), _factors(shape, 2, 2)
    v = jax.random.normal(jax.random.key(3), shape)
    np.testing.assert_allclose(low_rank.square_norm(x), jnp.sum(x.dense() ** 2), rtol=1e-5)
    np.testing.assert_allclose(low_rank.inner(v, x), jnp.sum(v * x.dense()), rtol=1e-5)
    np.testing.assert_allclose(
        low_rank.subtract(x, y).dense(), x.dense() - y.dense(), rtol=1e-5, atol=1e-5
    )
    zero = low_rank.zeros_like_factors(shape)
    assert low_rank.subtract(x, zero) is x and float(low_rank.square_norm(zero)) == 0.0
    later = low_rank.after(x, jnp.array([jnp.nan, 1.0]))  # what it waits on does not matter
    assert bool(jnp.all(later.a == x.a)) and later.b is x.b


def _params(dtype):
    # Matrices big enough that 4 bases of rank 2 are kept as factors (worth_keeping).
    keys = jax.random.split(KEY, 3)
    return {
        "w1": (0.1 * jax.random.normal(keys[0], (64, 48))).astype(dtype),
        "w2": (0.1 * jax.random.normal(keys[1], (3, 32, 40))).astype(dtype),
        "b": (0.1 * jax.random.normal(keys[2], (40,))).astype(dtype),
    }


def test_the_test_matrices_are_kept_as_factors_and_small_ones_are_not():
    assert worth_keeping(64, 48, 8) and worth_keeping(32, 40, 8)
    assert not worth_keeping(24, 16, 8)


def _fitness(population):
    def distance(x):
        return jnp.sum((x.astype(jnp.float32) - 0.2) ** 2, axis=tuple(range(1, x.ndim)))

    return -sum(distance(x) for x in jax.tree.leaves(population))


def _run(optimizer, params, fitness_of=_fitness, generations=4, memory_budget=None):
    noise = jaxes.noise.lowrank(2)
    es = jaxes.open_es(8, 0.1, optimizer=optimizer, noise=noise, memory_budget=memory_budget)
    state = es.init(KEY, params)
    tell = jax.jit(es.tell)
    infos = []
    for g in range(generations):
        population, state = es.ask(jax.random.key(g + 1), state)
        state, info = tell(state, fitness_of(population))
        infos.append(info)
    return es, state, infos


def _close(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_allclose(
            np.asarray(x, np.float64), np.asarray(y, np.float64), rtol=1e-5, atol=1e-6
        )


@pytest.mark.parametrize(
    "dtype, memory_budget", [(jnp.float32, None), (jnp.bfloat16, None), (jnp.bfloat16, 6000)]
)
def test_the_factored_step_equals_the_multiplied_out_one(dtype, memory_budget):
    # The same ClipUp as a plain optax transformation gets the gradient multiplied out; a
    # budget of 6000 bytes draws the 4 bases' factors 2 at a time.
    clipup = jaxes.optim.clipup(0.05)
    plain = optax.GradientTransformation(*clipup)
    assert jaxes.optim.takes_factors(clipup) and not jaxes.optim.takes_factors(plain)
    es, factored, infos = _run(clipup, _params(dtype), memory_budget=memory_budget)
    _, dense, dense_infos = _run(plain, _params(dtype), memory_budget=memory_budget)
    _close(factored, dense)
    _close(infos, dense_infos)
    assert all(bool(i.applied) for i in infos)
    direction, stats = es.estimate(factored, jnp.arange(8.0))  # public values: dense
    assert not any(
        low_rank.is_factored(x)
        for x in jax.tree.leaves((direction, stats), is_leaf=low_rank.is_factored)
    )


def test_an_update_not_applied_leaves_theta_and_velocity_as_they_were():
    _, state, infos = _run(jaxes.optim.clipup(0.05), _params(jnp.float32), lambda p: jnp.ones(8))
    assert not any(bool(i.applied) for i in infos)
    assert all(float(i.update_norm) == 0.0 for i in infos)
    _close(state.params, _params(jnp.float32))
    assert all(bool(jnp.all(v == 0)) for v in jax.tree.leaves(state.opt_state.velocity))


def _tell_temp_bytes(optimizer, params):
    # As the 1B plan runs it: track_best would keep a copy of θ of its own.
    es = jaxes.open_es(
        16, 0.01, optimizer=optimizer, noise=jaxes.noise.lowrank(1), track_best=False
    )
    state = jax.eval_shape(lambda: es.ask(KEY, es.init(KEY, params))[1])
    fitness = jax.ShapeDtypeStruct((16,), jnp.float32)
    compiled = jax.jit(es.tell, donate_argnums=0).lower(state, fitness).compile()
    return compiled.memory_analysis().temp_size_in_bytes


def test_tell_holds_one_matrix_not_the_whole_gradient():
    # Six bf16 matrices and a bf16 bias (rounded members: summed dense beside the factors).
    shapes = [(384, 256)] * 6
    params = {f"w{i}": jnp.zeros(s, jnp.bfloat16) for i, s in enumerate(shapes)}
    params["b"] = jnp.zeros(256, jnp.bfloat16)
    float32_params = 4 * sum(math.prod(s) for s in shapes)
    one_matrix = 4 * 384 * 256
    # 8 antithetic bases of rank 1 side by side, and their draw (twice: XLA's two stages)
    factors = 3 * 4 * 8 * ((384 + 256) * 6 + 256)
    clipup = jaxes.optim.clipup(0.01)
    factored = _tell_temp_bytes(clipup, params)
    dense = _tell_temp_bytes(optax.GradientTransformation(*clipup), params)
    assert factored <= one_matrix + factors + 64 * 1024
    assert dense >= float32_params  # the gradient multiplied out is held whole


def test_clipup_as_a_plain_transformation_takes_factors_multiplied_out():
    clipup = jaxes.optim.clipup(0.1)
    x = _factors((6, 5), 2, 4)
    state = clipup.init({"w": jnp.zeros((6, 5))})
    factored, _ = clipup.update({"w": x}, state)
    dense, _ = clipup.update({"w": x.dense()}, state)
    np.testing.assert_array_equal(factored["w"], dense["w"])
