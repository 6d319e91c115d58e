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


def test_open_es_direction_aligns_with_the_gradient_as_the_population_grows():
    cosines = [
        diagnostics.gradient_alignment(
            jaxes.open_es(p, 0.1, noise="gaussian"),
            jnp.zeros(20),
            quadratic,
            0.1,
            jax.random.key(1),
            draws=16,
            samples=64,
        ).cosine_mean  # fmt: skip
        for p in (4, 32, 512)
    ]
    assert cosines[0] < cosines[1] < cosines[2], cosines
    assert cosines[0] < 0.7 and cosines[2] > 0.95, cosines


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
