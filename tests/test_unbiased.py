"""The estimator, averaged over many generations, is the gradient of the Gaussian-smoothed
objective E[f(θ + σε)], checked against closed forms within a few standard errors."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxes

DIM, P, SIGMA, DRAWS = 4, 16, 0.3, 4000
THETA = jnp.array([0.3, -0.2, 0.5, 0.1])
A = jnp.array([1.0, -2.0, 0.5, 0.25])
H = jnp.array([[2.0, 0.3, 0, 0], [0.3, 1.0, 0, 0], [0, 0, 3.0, -0.5], [0, 0, -0.5, 0.5]])
B = jnp.array([0.1, -0.4, 0.2, 0.0])

OBJECTIVES = {
    # name: (f, closed-form gradient of E[f(θ + σε)])
    "linear": (lambda x: A @ x, A),
    "quadratic": (lambda x: 0.5 * x @ H @ x + B @ x, H @ THETA + B),
    "exponential": (
        lambda x: jnp.exp(A @ x),
        A * jnp.exp(A @ THETA + SIGMA**2 * jnp.sum(A**2) / 2),
    ),
}


@functools.partial(jax.jit, static_argnums=(0, 1))
def estimates(name, antithetic):
    f, _ = OBJECTIVES[name]
    es = jaxes.open_es(P, SIGMA, fitness_shaping="raw", antithetic=antithetic)
    state = es.init(jax.random.key(0), THETA)

    def one(key):
        population, s = es.ask(key, state)
        direction, _ = es.estimate(s, jax.vmap(f)(population))
        return direction

    return jax.vmap(one)(jax.random.split(jax.random.key(1), DRAWS))


def within_standard_errors(samples, truth, k=4.5):
    samples = np.asarray(samples, np.float64)
    mean = samples.mean(0)
    stderr = samples.std(0, ddof=1) / np.sqrt(len(samples))
    z = np.abs(mean - np.asarray(truth)) / stderr
    assert np.all(z < k), f"mean {mean} vs {np.asarray(truth)}: {z} standard errors"


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_antithetic_estimator_is_unbiased(name):
    within_standard_errors(estimates(name, True), OBJECTIVES[name][1])


def test_mean_subtraction_without_pairs_shrinks_by_one_minus_one_over_p():
    # E[(1/(Pσ)) Σ (F_i - F̄) ε_i] = (1 - 1/P) ∇ when the ε_i are independent.
    samples = estimates("linear", False)
    within_standard_errors(samples, (1 - 1 / P) * A)
    # ... and the bias is really there: the unscaled gradient is many standard errors away.
    stderr = np.asarray(samples).std(0, ddof=1) / np.sqrt(DRAWS)
    assert np.max(np.abs(np.asarray(samples).mean(0) - A) / stderr) > 4.5
