"""OpenAI-ES reaches stated targets on benchmark functions within stated budgets."""

import jax
import jax.numpy as jnp
import pytest

import jaxes


def sphere(x):
    return -jnp.sum(x**2)


def rosenbrock(x):
    return -jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def final_value(fn, start, population, sigma, learning_rate, generations, seed=0):
    es = jaxes.open_es(population, sigma, learning_rate=learning_rate)

    @jax.jit
    def run(key):
        init_key, run_key = jax.random.split(key)

        def step(state, k):
            population, state = es.ask(k, state)
            state, _ = es.tell(state, jax.vmap(fn)(population))
            return state, None

        state, _ = jax.lax.scan(
            step, es.init(init_key, start), jax.random.split(run_key, generations)
        )
        return fn(state.params)

    return float(run(jax.random.key(seed)))


@pytest.mark.slow
def test_sphere_d100_reaches_0_1_within_500_generations():
    # Starts at -100 (θ = 1); budget 500 × 64 = 32k evaluations.
    assert final_value(sphere, jnp.ones(100), 64, 0.05, 0.03, 500) > -0.1


@pytest.mark.slow
def test_rosenbrock_d100_drops_below_10_within_5000_generations():
    # Starts at -99 (θ = 0); budget 5000 × 256 = 1.28M evaluations.
    assert final_value(rosenbrock, jnp.zeros(100), 256, 0.01, 0.02, 5000) > -10.0
