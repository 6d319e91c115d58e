"""ES directions against the autodiff gradient of the smoothed objective."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxes
from jaxes import diagnostics

H = jnp.diag(jnp.linspace(0.5, 3.0, 20))


def quadratic(x):
    return -0.5 * (x - 1.0) @ H @ (x - 1.0)


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_smoothed_gradient_of_a_quadratic_is_its_gradient(mode):
    g = diagnostics.smoothed_gradient(quadratic, jnp.zeros(20), 0.3, jax.random.key(0), 512, mode)
    np.testing.assert_allclose(g, H @ jnp.ones(20), rtol=1e-4)  # antithetic: exact here


A = jnp.linspace(0.2, 1.0, 20)
X0 = jnp.full(20, 0.5)


def exponential(x):
    return jnp.sum(jnp.exp(A * x))


def exponential_terms(sigma):
    """E[∇F(x + σε)] = a e^(ax) e^(a²σ²/2) in closed form, the unsmoothed ∇F = a e^(ax), and
    the standard deviation of one antithetic pair's average, a e^(ax) cosh(aσε)."""
    a, x = np.asarray(A, np.float64), np.asarray(X0, np.float64)
    s2 = (a * sigma) ** 2
    gradient = a * np.exp(a * x)
    pair_sd = gradient * np.sqrt((np.exp(2 * s2) + 1) / 2 - np.exp(s2))
    return gradient * np.exp(s2 / 2), gradient, pair_sd


@pytest.mark.parametrize("sigma", [0.3, 1.0])
def test_smoothed_gradient_of_an_exponential_has_its_sigma_dependent_closed_form(sigma):
    # Unlike a quadratic's, this smoothed gradient depends on σ: a σ dropped, squared or
    # applied twice moves it many standard errors.
    samples = 512
    reverse = diagnostics.smoothed_gradient(exponential, X0, sigma, jax.random.key(0), samples)
    forward = diagnostics.smoothed_gradient(
        exponential, X0, sigma, jax.random.key(0), samples, "forward"
    )
    np.testing.assert_allclose(forward, reverse, rtol=1e-6)  # the same points, either mode
    exact, unsmoothed, pair_sd = exponential_terms(sigma)
    stderr = pair_sd / np.sqrt(samples // 2)
    z = np.abs(np.asarray(reverse, np.float64) - exact) / stderr
    assert np.max(z) < 4.5, z
    assert np.min(np.abs(unsmoothed - exact) / stderr) > 4.5  # the control is far: it can fail


def test_open_es_direction_aligns_with_the_gradient_as_the_population_grows():
    found = [
        diagnostics.gradient_alignment(
            jaxes.open_es(p, 0.1, noise="gaussian"),
            jnp.zeros(20),
            quadratic,
            0.1,
            jax.random.key(1),
            draws=16,
            samples=64,
        )  # fmt: skip
        for p in (4, 32, 512)
    ]
    cosines = [a.cosine_mean for a in found]
    assert cosines[0] < cosines[1] < cosines[2], cosines
    assert cosines[0] < 0.7 and cosines[2] > 0.95, cosines
    # A quadratic's smoothed gradient is its gradient: H (1 - 0).
    exact = float(np.linalg.norm(np.diag(np.asarray(H))))
    assert all(a.gradient_norm == pytest.approx(exact, rel=1e-5) for a in found)
    # The direction averages P members' terms: its variance falls as 1/P (16x from 32 to 512;
    # measured 17), and the cosines spread less.
    ratio = found[1].direction_variance / found[2].direction_variance
    assert 8 < ratio < 32, ratio
    assert found[0].cosine_std > found[1].cosine_std > found[2].cosine_std, found


def step_fitness(x):
    return jnp.sum(jnp.round(x))


def argmax_fitness(x):
    return (jnp.argmax(x) == 3).astype(jnp.int32)


@pytest.mark.parametrize("fn", [step_fitness, argmax_fitness], ids=["round", "argmax"])
def test_a_fitness_jax_grad_cannot_see_is_refused_by_name(fn):
    with pytest.raises(ValueError, match=rf"^fitness_fn: .*{fn.__name__}.*differentiable"):
        diagnostics.smoothed_gradient(fn, jnp.zeros(5), 0.1, jax.random.key(0), 8)


def test_bad_settings_name_the_argument():
    with pytest.raises(ValueError, match=r"^samples: expected an even count"):
        diagnostics.smoothed_gradient(quadratic, jnp.zeros(20), 0.1, jax.random.key(0), 7)
    with pytest.raises(ValueError, match=r"^sigma: expected a finite number > 0"):
        diagnostics.smoothed_gradient(quadratic, jnp.zeros(20), 0.0, jax.random.key(0), 8)
    with pytest.raises(ValueError, match=r"^mode: unknown 'backward'; allowed"):
        diagnostics.smoothed_gradient(
            quadratic, jnp.zeros(2), 0.1, jax.random.key(0), 8, "backward"
        )


def rippled(x):
    # ∇F = 40 cos(40 x): ±40 at every point, while at σ = 1 the smoothed gradient is ~0.
    return jnp.sum(jnp.sin(40.0 * x))


def test_an_autodiff_average_that_pins_nothing_down_is_reported_and_warned_about():
    es = jaxes.open_es(8, 1.0, noise="gaussian")
    with pytest.warns(UserWarning, match=r"^gradient_alignment: .*rippled.* relative standard"):
        noisy = diagnostics.gradient_alignment(es, jnp.zeros(4), rippled, 1.0,
                                               jax.random.key(0), draws=2, samples=64)  # fmt: skip
    assert noisy.gradient_error > diagnostics.RELIABLE_ERROR
    # A quadratic's antithetic pairs average to its exact gradient: no error, no warning.
    exact = diagnostics.gradient_alignment(es, jnp.zeros(20), quadratic, 0.1,
                                           jax.random.key(0), draws=2, samples=8)  # fmt: skip
    assert exact.gradient_error < 1e-4


def test_gradient_error_of_an_exponential_equals_a_numpy_recomputation():
    # Where the error is not 0 by construction: the antithetic pairs' averages, from the same
    # normal draws, differentiated by hand in float64.
    sigma, samples, key = 0.5, 512, jax.random.key(2)
    found = diagnostics.gradient_alignment(
        jaxes.open_es(8, sigma, noise="gaussian"), X0, exponential, sigma, key, draws=2,
        samples=samples,
    )  # fmt: skip
    grad_key, _ = jax.random.split(key)
    eps = np.asarray(jax.random.normal(grad_key, (samples // 2, 20), jnp.float32), np.float64)
    a, x = np.asarray(A, np.float64), np.asarray(X0, np.float64)
    pairs = a * (np.exp(a * (x + sigma * eps)) + np.exp(a * (x - sigma * eps))) / 2
    mean = pairs.mean(0)
    error = np.sqrt(pairs.var(0, ddof=1).sum() / len(pairs)) / np.linalg.norm(mean)
    assert found.gradient_error == pytest.approx(error, rel=1e-4)
    assert 0.001 < error < diagnostics.RELIABLE_ERROR, error  # neither 0 nor unreliable
    np.testing.assert_allclose(found.gradient, mean, rtol=1e-5)
    assert found.gradient_norm == pytest.approx(np.linalg.norm(mean), rel=1e-5)
