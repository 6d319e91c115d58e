"""What every ``tell`` reads off the fitness (``strategies._tell.fitness_summary``): the same
numbers as the plain reductions it replaces, from one variadic reduction."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxes.strategies._tell import fitness_summary

NAN, INF = float("nan"), float("inf")
CASES = [
    [1.0, 3.0, -2.0, 3.0],  # a tie at the top: the first is the best member
    [NAN, 2.0, INF, -INF, 0.5, NAN],  # non-finite values are left out
    [NAN, INF, -INF],  # none finite
    [4.0, 4.0, 4.0],  # finite but carrying no ranking
    list(np.random.default_rng(0).normal(size=64)),  # past XLA's split of long reductions
]


def _reference(values):
    f = np.asarray(values, np.float64)
    finite = np.isfinite(f)
    if not finite.any():
        return 0, NAN, NAN, NAN, 0
    ranked = np.where(finite, f, -np.inf)
    kept = f[finite]
    return finite.sum(), kept.mean(), kept.max(), kept.min(), int(np.argmax(ranked))


@pytest.mark.parametrize("values", CASES)
def test_fitness_summary_matches_plain_reductions(values):
    s = jax.jit(fitness_summary)(jnp.asarray(values, jnp.float32))
    count, mean, high, low, best = _reference(values)
    assert int(s.count) == count and int(s.best_index) == best
    np.testing.assert_allclose([s.mean, s.max, s.min], [mean, high, low], rtol=1e-6)
    assert bool(s.informative) == (count > 0 and high > low)
    assert s.count.dtype == jnp.int32 and s.max.dtype == jnp.float32


def test_fitness_summary_is_one_reduction_besides_the_sum():
    text = jax.jit(fitness_summary).lower(jnp.zeros(8)).as_text()
    assert text.count("stablehlo.reduce(") == 2
