"""The centre-of-mass identities of docs/maths.md, on random pytrees, P and σ."""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxes import centroid

SHAPES = [(3,), (2, 2), ()]


def random_tree(key, p):
    k1, k2, k3 = jax.random.split(key, 3)
    return {
        "w": jax.random.normal(k1, (p,) + SHAPES[0]),
        "nested": {"m": jax.random.normal(k2, (p,) + SHAPES[1])},
        "s": jax.random.normal(k3, (p,) + SHAPES[2]),
    }


def close(a, b, rtol=2e-5, atol=2e-5, scale=None):
    """Equal up to float32 rounding; ``scale`` (a tree) is the size of the summed terms."""
    scales = jax.tree.leaves(scale) if scale is not None else [None] * len(jax.tree.leaves(a))
    for x, y, s in zip(jax.tree.leaves(a), jax.tree.leaves(b), scales, strict=True):
        size = float(np.max(np.abs(np.asarray(y if s is None else s)), initial=0.0))
        np.testing.assert_allclose(
            np.asarray(x), np.asarray(y), rtol=rtol, atol=atol * max(1.0, size)
        )


population = st.integers(2, 24)
sigmas = st.sampled_from([1e-3, 0.02, 0.5, 3.0])
seeds = st.integers(0, 2**31 - 1)


@settings(max_examples=25, deadline=None)
@given(population, sigmas, seeds)
def test_mean_subtracted_estimator_equals_centroid_update(p, sigma, seed):
    k_noise, k_fit = jax.random.split(jax.random.key(seed))
    eps = random_tree(k_noise, p)
    fitness = jax.random.uniform(k_fit, (p,), maxval=10.0)  # F >= 0: masses are F itself
    disp = jax.tree.map(lambda e: sigma * e, eps)
    update = centroid.displacement_update(centroid.moments(disp, fitness), sigma)
    # M - c cancels terms of size (1/(Pσ)) Σ F_i |ε_i|; rounding is relative to those.
    terms = centroid.classical_estimator(fitness, jax.tree.map(jnp.abs, eps), sigma, False)
    close(update, centroid.classical_estimator(fitness, eps, sigma), scale=terms)


@settings(max_examples=25, deadline=None)
@given(population, sigmas, seeds)
def test_raw_estimator_equals_update_measured_from_the_model(p, sigma, seed):
    k_noise, k_fit = jax.random.split(jax.random.key(seed))
    eps = random_tree(k_noise, p)
    fitness = jax.random.uniform(k_fit, (p,), maxval=10.0)
    disp = jax.tree.map(lambda e: sigma * e, eps)
    update = centroid.displacement_update(centroid.moments(disp, fitness), sigma, origin="model")
    close(update, centroid.classical_estimator(fitness, eps, sigma, mean_subtract=False))


@settings(max_examples=25, deadline=None)
@given(population, sigmas, seeds, st.floats(-50, 50), st.floats(0.1, 20))
def test_update_unchanged_by_shift_and_positive_scale_of_masses(p, sigma, seed, k, a):
    k_noise, k_fit = jax.random.split(jax.random.key(seed))
    disp = jax.tree.map(lambda e: sigma * e, random_tree(k_noise, p))
    w = jax.random.normal(k_fit, (p,))

    def step(weights):
        return centroid.displacement_update(centroid.moments(disp, centroid.masses(weights)), sigma)

    def cancelled(weights):
        """The size of the two terms g = (m̄/σ²)(M - c) subtracts, per coordinate: a leaf whose
        step is small next to them (say 0.5 where they are 300) keeps their rounding."""
        mass = centroid.masses(weights)
        size = jax.tree.map(jnp.abs, disp)
        com = centroid.displacement_update(centroid.moments(size, mass), sigma, origin="model")
        mean = jnp.mean(mass) / sigma**2
        return jax.tree.map(lambda c, d: c + mean * jnp.mean(d, 0), com, size)

    base = step(w)
    close(step(w + k), base, rtol=1e-4, atol=1e-4, scale=cancelled(w + k))
    # Positive scaling of the weights scales the step by the same factor.
    scaled = jax.tree.map(lambda g: a * g, base)
    close(step(a * w), scaled, rtol=1e-4, atol=1e-4, scale=cancelled(a * w))


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 12), sigmas, seeds)
def test_antithetic_pairs_put_the_centroid_on_the_model(pairs, sigma, seed):
    k_noise, k_fit = jax.random.split(jax.random.key(seed))
    half = random_tree(k_noise, pairs)
    eps = jax.tree.map(lambda e: jnp.concatenate([e, -e]), half)
    w = jax.random.normal(k_fit, (2 * pairs,))
    disp = jax.tree.map(lambda e: sigma * e, eps)
    offset = centroid.plain_centroid(centroid.moments(disp, centroid.masses(w)))
    close(offset, jax.tree.map(jnp.zeros_like, offset), atol=1e-6)
    close(
        centroid.classical_estimator(w, eps, sigma, mean_subtract=False),
        centroid.classical_estimator(w, eps, sigma, mean_subtract=True),
    )


def test_zero_mass_gives_zero_update_not_nan():
    disp = {"x": jnp.ones((4, 3))}
    mom = centroid.moments(disp, centroid.masses(jnp.full(4, 0.3)))
    assert float(mom.total_mass) == 0.0
    for origin in ("centroid", "model"):
        update = centroid.displacement_update(mom, 0.1, origin=origin)
        np.testing.assert_array_equal(update["x"], jnp.zeros(3))


def test_per_coordinate_sigma():
    sigma = {"x": jnp.array([0.1, 1.0])}
    eps = {"x": jnp.array([[1.0, 2.0], [-0.5, 1.0], [0.3, -2.0]])}
    w = jnp.array([2.0, 0.0, 1.0])
    disp = jax.tree.map(lambda e, s: e * s, eps, sigma)
    update = centroid.displacement_update(centroid.moments(disp, w), sigma)
    wc = w - w.mean()
    expected = (wc @ eps["x"]) / (3 * sigma["x"])
    np.testing.assert_allclose(update["x"], expected, rtol=1e-5)


def test_unknown_origin_is_an_error():
    mom = centroid.moments({"x": jnp.ones((2, 1))}, jnp.ones(2))
    try:
        centroid.displacement_update(mom, 0.1, origin="mean")
    except ValueError as err:
        assert "origin" in str(err)
    else:
        raise AssertionError("expected ValueError")
