"""Mergeable running mean and variance, for observation normalisation.

A batch is summarised as sums of moments about the current running mean ``(k, s1, s2)``.
Sums add, so batches from many devices merge into one; summing per-member moments in member
order (``total``) gives every device the same statistics, whatever the device count.
Merging uses ``m2' = m2 + s2 - s1²/n'`` (Chan et al.), stable because the
shift is the running mean itself.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class RunningStats(NamedTuple):
    """Count, mean and sum of squared deviations (``m2``) of everything seen so far.

    ``count`` is float32: past about 1.6e7 samples increments round, which only shifts how much
    a new batch weighs, never the mean of a single batch.
    """

    count: jax.Array
    mean: jax.Array
    m2: jax.Array


class BatchMoments(NamedTuple):
    """Sums over one batch about a shift (the running mean): ``k``, ``Σ(x-μ)``, ``Σ(x-μ)²``."""

    count: jax.Array
    s1: jax.Array
    s2: jax.Array


def init(size: int) -> RunningStats:
    """Empty statistics for vectors of length ``size``.

    Example:
      >>> s = init(3)
      >>> float(s.count), s.mean.tolist(), s.m2.tolist()
      (0.0, [0.0, 0.0, 0.0], [0.0, 0.0, 0.0])
    """
    return RunningStats(jnp.zeros((), jnp.float32), jnp.zeros(size), jnp.zeros(size))


def batch_moments(
    stats: RunningStats, x: jax.Array, mask: jax.Array, axes: tuple[int, ...] | None = None
) -> BatchMoments:
    """Moments of the rows of ``x`` (``(..., size)``) where ``mask`` (``(...)``) is true.

    ``axes`` are the batch axes summed over (default: all of them); the others are kept, e.g.
    one set of moments per population member.

    Example:
      >>> import jax.numpy as jnp
      >>> x = jnp.array([[1.0], [3.0], [100.0]])
      >>> b = batch_moments(init(1), x, jnp.array([True, True, False]))  # the last row is masked
      >>> float(b.count), b.s1.tolist(), b.s2.tolist()
      (2.0, [4.0], [10.0])
      >>> x = jnp.ones((2, 3, 1))  # 2 members x 3 steps, one set of moments per member
      >>> batch_moments(init(1), x, jnp.ones((2, 3), bool), axes=(1,)).count.tolist()
      [3.0, 3.0]
    """
    w = mask.astype(jnp.float32)[..., None]
    d = jnp.where(w > 0, x - stats.mean, 0.0)
    axes = tuple(range(x.ndim - 1)) if axes is None else axes
    return BatchMoments(jnp.sum(w[..., 0], axes), jnp.sum(w * d, axes), jnp.sum(w * d * d, axes))


def total(moments: BatchMoments, axis: int = 0) -> BatchMoments:
    """Per-part moments (leading axis) summed into one, in a fixed order.

    Example:
      >>> import jax.numpy as jnp
      >>> per_member = batch_moments(init(1), jnp.ones((2, 3, 1)), jnp.ones((2, 3), bool), (1,))
      >>> b = total(per_member)
      >>> float(b.count), b.s1.tolist()
      (6.0, [6.0])
    """
    return jax.tree.map(lambda m: jnp.sum(m, axis), moments)


def add_moments(a: BatchMoments, b: BatchMoments) -> BatchMoments:
    """Two batches taken about the same shift, as one.

    Example:
      >>> import jax.numpy as jnp
      >>> a = batch_moments(init(1), jnp.array([[1.0]]), jnp.ones(1, bool))
      >>> b = batch_moments(init(1), jnp.array([[3.0]]), jnp.ones(1, bool))
      >>> ab = add_moments(a, b)
      >>> float(ab.count), ab.s1.tolist(), ab.s2.tolist()
      (2.0, [4.0], [10.0])
    """
    return jax.tree.map(jnp.add, a, b)


def zero_moments(size: int, batch: tuple[int, ...] = ()) -> BatchMoments:
    """Moments of an empty batch (one per index of ``batch``).

    Example:
      >>> z = zero_moments(2, (3,))
      >>> z.count.shape, z.s1.shape, z.s2.shape
      ((3,), (3, 2), (3, 2))
    """
    return BatchMoments(
        jnp.zeros(batch, jnp.float32), jnp.zeros(batch + (size,)), jnp.zeros(batch + (size,))
    )


def merge(stats: RunningStats, batch: BatchMoments) -> RunningStats:
    """Statistics of everything in ``stats`` and in ``batch`` (taken about ``stats.mean``).

    Example:
      >>> import jax.numpy as jnp
      >>> s = merge(init(1), batch_moments(init(1), jnp.array([[1.0], [3.0]]), jnp.ones(2, bool)))
      >>> float(s.count), s.mean.tolist(), s.m2.tolist()
      (2.0, [2.0], [2.0])
      >>> s = merge(s, batch_moments(s, jnp.array([[5.0], [7.0]]), jnp.ones(2, bool)))
      >>> float(s.count), s.mean.tolist(), s.m2.tolist()  # as if [1, 3, 5, 7] came at once
      (4.0, [4.0], [20.0])
    """
    count = stats.count + batch.count
    safe = jnp.maximum(count, 1.0)
    return RunningStats(
        count=count,
        mean=stats.mean + batch.s1 / safe,
        m2=jnp.maximum(stats.m2 + batch.s2 - batch.s1**2 / safe, 0.0),
    )


def variance(stats: RunningStats) -> jax.Array:
    """Population variance (ones until two samples have been seen).

    Example:
      >>> import jax.numpy as jnp
      >>> s = merge(init(1), batch_moments(init(1), jnp.array([[1.0], [3.0]]), jnp.ones(2, bool)))
      >>> variance(s).tolist(), variance(init(1)).tolist()
      ([1.0], [1.0])
      >>> s = merge(s, batch_moments(s, jnp.array([[5.0], [7.0]]), jnp.ones(2, bool)))
      >>> variance(s).tolist()
      [5.0]
    """
    return jnp.where(stats.count > 1, stats.m2 / jnp.maximum(stats.count, 1.0), 1.0)


def normalize(
    stats: RunningStats, x: jax.Array, std_min: float = 1e-3, clip: float = 10.0
) -> jax.Array:
    """``(x - mean) / std``, with std floored at ``std_min`` and the result clipped to ±clip.

    Example:
      >>> s = merge(init(1), batch_moments(init(1), jnp.array([[1.0], [3.0]]), jnp.ones(2)))
      >>> normalize(s, jnp.array([3.0])).tolist()
      [1.0]
    """
    std = jnp.maximum(jnp.sqrt(variance(stats)), std_min)
    return jnp.clip((x - stats.mean) / std, -clip, clip)
