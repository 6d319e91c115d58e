"""Fitness shaping: fitness (maximised) -> weights.

Every shaping treats NaN and ±inf fitness as the worst possible value, so a member whose
rollout blew up gets the lowest weight and can never put a NaN into the parameters.
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp

Shaping = Callable[[jnp.ndarray], jnp.ndarray]


def centered_rank(fitness: jnp.ndarray) -> jnp.ndarray:
    """Ranks scaled to [-0.5, 0.5] (Salimans et al. 2017); ties share their average rank.

    The weights sum to zero and depend only on the order of the fitness values, so any
    strictly increasing map of fitness leaves them unchanged. Non-finite fitness ranks last.

    Example:
      >>> [round(float(w), 4) for w in centered_rank(jnp.array([3.0, -1.0, 10.0, jnp.nan]))]
      [0.1667, -0.1667, 0.5, -0.5]
    """
    f = jnp.where(jnp.isfinite(fitness), fitness, -jnp.inf).astype(jnp.float32)
    p = f.shape[0]
    ordered = jnp.sort(f)
    low = jnp.searchsorted(ordered, f, side="left")
    high = jnp.searchsorted(ordered, f, side="right") - 1
    # (2·rank - (P-1)) / (2(P-1)) with 2·rank = low + high: integer numerators symmetric about
    # zero, so the weights are exactly antisymmetric and sum to exactly zero.
    return (low + high - (p - 1)).astype(jnp.float32) / (2.0 * (p - 1))


def _finite_or_worst(fitness: jnp.ndarray) -> jnp.ndarray:
    finite = jnp.isfinite(fitness)
    worst = jnp.min(jnp.where(finite, fitness, jnp.inf))
    worst = jnp.where(jnp.any(finite), worst, 0.0)
    return jnp.where(finite, fitness, worst).astype(jnp.float32)


def z_score(fitness: jnp.ndarray) -> jnp.ndarray:
    """``(F - mean) / std``; zeros when all fitness is equal. Non-finite fitness becomes the
    worst finite value first.

    Example:
      >>> [round(float(w), 3) for w in z_score(jnp.array([1.0, 2.0, 3.0]))]
      [-1.225, 0.0, 1.225]
    """
    f = _finite_or_worst(fitness)
    std = jnp.std(f)
    return jnp.where(std > 0, (f - jnp.mean(f)) / jnp.where(std > 0, std, 1.0), 0.0)


def raw(fitness: jnp.ndarray) -> jnp.ndarray:
    """Fitness as it is, except non-finite values become the worst finite value.

    Example:
      >>> raw(jnp.array([1.0, jnp.inf, -2.0])).tolist()
      [1.0, -2.0, -2.0]
    """
    return _finite_or_worst(fitness)


SHAPINGS: dict[str, Shaping] = {
    "centered_rank": centered_rank,
    "z_score": z_score,
    "raw": raw,
}


def get_shaping(shaping: str | Shaping) -> Shaping:
    """Looks up a shaping by name, or passes a callable through."""
    if callable(shaping):
        return shaping
    if shaping not in SHAPINGS:
        raise ValueError(
            f"fitness_shaping: unknown value {shaping!r}; allowed: {sorted(SHAPINGS)} or a callable"
        )
    return SHAPINGS[shaping]
