import jax.numpy as jnp
import numpy as np

from jaxes.tasks.control import running_stats as rs


def test_merging_batches_equals_numpy_over_the_masked_rows():
    rng = np.random.default_rng(0)
    stats = rs.init(3)
    seen = []
    for _ in range(4):
        x = rng.normal(5.0, 2.0, size=(6, 7, 3)).astype(np.float32)
        mask = rng.random((6, 7)) < 0.6
        stats = rs.merge(stats, rs.batch_moments(stats, jnp.asarray(x), jnp.asarray(mask)))
        seen.append(x[mask])
    seen = np.concatenate(seen)
    assert float(stats.count) == len(seen)
    np.testing.assert_allclose(stats.mean, seen.mean(0), rtol=1e-5)
    np.testing.assert_allclose(rs.variance(stats), seen.var(0), rtol=1e-4)


def test_moments_of_parts_add_up_to_the_whole():
    # What psum across devices does: sums of moments about one shared shift.
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.normal(size=(8, 2)).astype(np.float32))
    mask = jnp.asarray(rng.random(8) < 0.7)
    stats = rs.merge(rs.init(2), rs.batch_moments(rs.init(2), x[:3], mask[:3]))
    whole = rs.batch_moments(stats, x, mask)
    parts = rs.add_moments(
        rs.batch_moments(stats, x[:4], mask[:4]), rs.batch_moments(stats, x[4:], mask[4:])
    )
    for a, b in zip(whole, parts, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_empty_batch_changes_nothing_and_normalize_is_safe():
    stats = rs.init(2)
    same = rs.merge(stats, rs.zero_moments(2))
    np.testing.assert_array_equal(same.mean, stats.mean)
    out = rs.normalize(stats, jnp.array([3.0, -1e9]))
    assert bool(jnp.all(jnp.isfinite(out))) and float(jnp.max(jnp.abs(out))) <= 10.0
