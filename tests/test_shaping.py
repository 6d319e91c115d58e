import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxes import shaping


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(-10_000, 10_000), min_size=2, max_size=12))
def test_centered_rank_range_sum_and_monotone_invariance(values):
    # Integers keep the maps below strictly increasing after float32 rounding.
    f = jnp.asarray(values, jnp.float32)
    w = shaping.centered_rank(f)
    assert float(jnp.min(w)) >= -0.5 and float(jnp.max(w)) <= 0.5
    assert abs(float(jnp.sum(w))) < 1e-5
    # Strictly increasing maps keep the order, hence the weights.
    # Transforms in float64 numpy: XLA's vectorised float32 exp/arctan may round equal inputs
    # differently (SIMD body vs tail), which would break ties that the map must keep.
    f64 = np.asarray(values, np.float64)
    np.testing.assert_array_equal(
        shaping.centered_rank(jnp.asarray(np.arctan(f64 / 1e3), jnp.float32)), w
    )
    np.testing.assert_array_equal(shaping.centered_rank(3.0 * f + 11.0), w)
    np.testing.assert_array_equal(
        shaping.centered_rank(jnp.asarray(np.exp(f64 / 1e4), jnp.float32)), w
    )


def test_centered_rank_orders_and_ties():
    w = shaping.centered_rank(jnp.array([0.0, 5.0, 5.0, -1.0]))
    np.testing.assert_allclose(w, [-1 / 6, 1 / 3, 1 / 3, -0.5], atol=1e-7)
    np.testing.assert_array_equal(shaping.centered_rank(jnp.full(6, 2.5)), jnp.zeros(6))


@pytest.mark.parametrize("name", sorted(shaping.SHAPINGS))
def test_non_finite_fitness_ranks_worst(name):
    f = jnp.array([1.0, jnp.nan, 3.0, jnp.inf, -jnp.inf, 2.0])
    w = shaping.get_shaping(name)(f)
    assert bool(jnp.all(jnp.isfinite(w)))
    worst = float(jnp.min(w))
    assert all(float(w[i]) == worst for i in (1, 3, 4))
    # Ranks put non-finite values strictly last; raw and z_score give them the worst finite value.
    ranked = name in ("centered_rank", "log_rank")
    assert float(w[0]) > worst if ranked else float(w[0]) == worst
    assert float(w[2]) > float(w[5]) > float(w[0])


@pytest.mark.parametrize("name", sorted(shaping.SHAPINGS))
def test_all_non_finite_gives_equal_weights(name):
    w = shaping.get_shaping(name)(jnp.array([jnp.nan, jnp.inf, jnp.nan, -jnp.inf]))
    assert bool(jnp.all(jnp.isfinite(w))) and float(jnp.ptp(w)) == 0.0


def test_z_score_and_raw():
    f = jnp.array([1.0, 2.0, 3.0, 6.0])
    z = shaping.z_score(f)
    assert abs(float(jnp.mean(z))) < 1e-6 and abs(float(jnp.std(z)) - 1.0) < 1e-5
    np.testing.assert_array_equal(shaping.z_score(jnp.ones(4)), jnp.zeros(4))
    np.testing.assert_array_equal(shaping.raw(f), f)


def test_unknown_shaping_names_allowed():
    with pytest.raises(ValueError, match="fitness_shaping.*centered_rank"):
        shaping.get_shaping("rank")
