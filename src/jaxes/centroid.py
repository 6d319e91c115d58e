"""Centre-of-mass algebra of one sampled population.

Notation (docs/maths.md): model θ, members ``x_i = θ + δ_i`` with ``δ_i = σ ε_i``, weights ``w_i``.

* masses ``m_i = w_i - min_j w_j`` (non-negative; a constant shift of ``w`` changes nothing),
* plain centroid ``c = θ + (1/P) Σ δ_i`` (``c = θ`` exactly with antithetic pairs),
* centre of mass ``M = θ + Σ m_i δ_i / Σ m_i``,
* update ``g = (m̄ / σ²) (M - c)`` with ``m̄ = Σ m_i / P``.

``g`` equals the mean-subtracted ES gradient estimator ``(1/(Pσ)) Σ (w_i - w̄) ε_i`` exactly, for
every finite ``P``. Measuring from the model instead (``origin="model"``) gives the estimator
without mean subtraction. Everything is computed from displacements ``δ_i``, never from
``x_i - θ``, so small σ loses no precision.

Strategies stream ``Σ m_i δ_i`` and ``Σ δ_i`` straight from regenerated noise
(``PopulationMoments``); ``moments`` builds the same summary from an explicit population, so
users, notebooks and the strategies share one code path for the update itself.
``classical_estimator`` is the textbook formula, kept only as a reference for tests.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxes.factored.lowrank import is_factored, map_linear, subtract
from jaxes.trees import tree_norm  # noqa: F401 - documented here too: the norm of a centroid
from jaxes.types import Params

_HIGHEST = jax.lax.Precision.HIGHEST


class PopulationMoments(NamedTuple):
    """What the update needs to know about a weighted population, measured from the model.

    Attributes:
      total_mass: ``Σ m_i``.
      count: ``P``.
      mass_moment: ``Σ m_i δ_i`` (pytree like the params).
      displacement_sum: ``Σ δ_i`` (pytree like the params).
      mass_square_moment: ``Σ m_i δ_i²`` per coordinate, or ``None`` when not needed
        (strategies that adapt a per-coordinate σ use it).
      square_sum: ``Σ δ_i²`` per coordinate, or ``None``.
    """

    total_mass: jax.Array
    count: int
    mass_moment: Params
    displacement_sum: Params
    mass_square_moment: Params | None = None
    square_sum: Params | None = None


def masses(weights: jax.Array) -> jax.Array:
    """Non-negative masses ``w - min(w)``.

    Example:
      >>> masses(jnp.array([-0.5, 0.0, 0.5])).tolist()
      [0.0, 0.5, 1.0]
    """
    return weights - jnp.min(weights)


def moments(displacements: Params, mass: jax.Array, squares: bool = False) -> PopulationMoments:
    """Summarises an explicit population (leaves with leading axis ``P``).

    Args:
      displacements: ``δ_i = x_i - θ`` as a pytree whose leaves have leading axis ``P``.
      mass: ``(P,)`` non-negative masses.
      squares: also the second moments ``Σ m_i δ_i²`` and ``Σ δ_i²``.

    Example:
      >>> import jax.numpy as jnp
      >>> d = {"w": jnp.array([[0.5, 1.0], [-0.5, -1.0]])}
      >>> m = moments(d, jnp.array([1.0, 0.0]), squares=True)
      >>> m.count, float(m.total_mass)
      (2, 1.0)
      >>> m.mass_moment["w"].tolist(), m.displacement_sum["w"].tolist()
      ([0.5, 1.0], [0.0, 0.0])
      >>> m.square_sum["w"].tolist()
      [0.5, 2.0]
    """
    mass = jnp.asarray(mass)
    mass = mass.astype(jnp.promote_types(mass.dtype, jnp.float32))
    d32 = jax.tree.map(lambda d: d.astype(jnp.promote_types(d.dtype, mass.dtype)), displacements)

    def weighted(d):
        return jnp.tensordot(mass, d, axes=(0, 0), precision=_HIGHEST)

    sq = jax.tree.map(jnp.square, d32) if squares else None
    return PopulationMoments(
        total_mass=jnp.sum(mass),
        count=mass.shape[0],
        mass_moment=jax.tree.map(weighted, d32),
        displacement_sum=jax.tree.map(lambda d: jnp.sum(d, 0), d32),
        mass_square_moment=jax.tree.map(weighted, sq) if squares else None,
        square_sum=jax.tree.map(lambda d: jnp.sum(d, 0), sq) if squares else None,
    )


def scale_moments(m: PopulationMoments, factor) -> PopulationMoments:
    """The moments of the population with every displacement multiplied by ``factor``.

    Example:
      >>> import jax.numpy as jnp
      >>> m = moments(jnp.array([[0.5], [1.5]]), jnp.array([1.0, 0.0]), squares=True)
      >>> m2 = scale_moments(m, 2.0)
      >>> m2.mass_moment.tolist(), m2.square_sum.tolist()  # first moments x2, second x4
      ([1.0], [10.0])
    """

    def times(tree, power):
        return None if tree is None else jax.tree.map(lambda x: x * factor**power, tree)

    return m._replace(
        mass_moment=times(m.mass_moment, 1),
        displacement_sum=times(m.displacement_sum, 1),
        mass_square_moment=times(m.mass_square_moment, 2),
        square_sum=times(m.square_sum, 2),
    )


def plain_centroid(m: PopulationMoments) -> Params:
    """``c - θ = (1/P) Σ δ_i``.

    Example:
      >>> import jax.numpy as jnp
      >>> m = moments({"w": jnp.array([[0.5], [1.5]])}, jnp.array([1.0, 0.0]))
      >>> plain_centroid(m)["w"].tolist()
      [1.0]
    """
    return map_linear(lambda s: s / m.count, m.displacement_sum)


def centre_of_mass(m: PopulationMoments) -> Params:
    """``M - θ = Σ m_i δ_i / Σ m_i``; zero when the total mass is zero (all weights equal).

    Example:
      >>> import jax.numpy as jnp
      >>> d = {"w": jnp.array([[1.0], [-1.0]])}
      >>> centre_of_mass(moments(d, jnp.array([3.0, 1.0])))["w"].tolist()  # (3 - 1) / 4
      [0.5]
      >>> centre_of_mass(moments(d, jnp.zeros(2)))["w"].tolist()
      [0.0]
    """
    positive = m.total_mass > 0
    safe_total = jnp.where(positive, m.total_mass, 1.0)
    return map_linear(lambda s: jnp.where(positive, s / safe_total, 0.0), m.mass_moment)


def mass_spread(m: PopulationMoments) -> Params:
    """``Σ m_i δ_i² / Σ m_i``: per-coordinate second moment of the mass-weighted cloud about θ
    (zero when the total mass is zero). Needs moments taken with ``squares=True``.

    Example:
      >>> import jax.numpy as jnp
      >>> d = jnp.array([[1.0], [-1.0], [0.5], [-0.5]])
      >>> mass_spread(moments(d, jnp.array([1.0, 1.0, 0.0, 0.0]), squares=True)).tolist()
      [1.0]
    """
    positive = m.total_mass > 0
    safe_total = jnp.where(positive, m.total_mass, 1.0)
    return jax.tree.map(lambda s: jnp.where(positive, s / safe_total, 0.0), m.mass_square_moment)


def plain_spread(m: PopulationMoments) -> Params:
    """``(1/P) Σ δ_i²``: per-coordinate second moment of the plain cloud about θ. Needs
    moments taken with ``squares=True``.

    Example:
      >>> import jax.numpy as jnp
      >>> d = jnp.array([[1.0], [-1.0], [0.5], [-0.5]])
      >>> plain_spread(moments(d, jnp.array([1.0, 1.0, 0.0, 0.0]), squares=True)).tolist()
      [0.625]
    """
    return jax.tree.map(lambda s: s / m.count, m.square_sum)


def displacement_update(m: PopulationMoments, sigma, origin: str = "centroid") -> Params:
    """The ES step ``g = (m̄/σ²)(M - o)``, with ``o`` the plain centroid or the model.

    ``origin="centroid"`` is the mean-subtracted estimator; ``origin="model"`` the raw one.
    ``sigma`` is a scalar or a pytree like the params (per-coordinate σ).

    Example:
      >>> d = {"w": jnp.array([[0.1], [-0.1]])}
      >>> g = displacement_update(moments(d, jnp.array([1.0, 0.0])), 0.1)
      >>> round(float(g["w"][0]), 4)  # (0.5 / 0.01) * (0.1 - 0.0)
      5.0
    """
    if origin not in ("centroid", "model"):
        raise ValueError(f"origin: expected 'centroid' or 'model', got {origin!r}")
    com = centre_of_mass(m)
    mean_mass = m.total_mass / m.count
    if origin == "centroid":
        target = jax.tree.map(subtract, com, plain_centroid(m), is_leaf=is_factored)
    else:
        target = com
    structure = jax.tree.structure(target, is_leaf=is_factored)
    if jax.tree.structure(sigma) != structure:
        return map_linear(lambda t: mean_mass / jnp.square(sigma) * t, target)
    return jax.tree.map(
        lambda t, s: map_linear(lambda v: mean_mass / jnp.square(s) * v, t),
        target,
        sigma,
        is_leaf=is_factored,
    )


def classical_estimator(
    weights: jax.Array, noise: Params, sigma, mean_subtract: bool = True
) -> Params:
    """Reference only: ``(1/(Pσ)) Σ (w_i - w̄) ε_i`` (or ``Σ w_i ε_i`` without mean subtraction).

    Args:
      weights: ``(P,)`` shaped fitness (maximised).
      noise: ``ε_i`` as a pytree whose leaves have leading axis ``P``.
      sigma: scalar σ.
      mean_subtract: subtract ``w̄`` first.

    Example:
      >>> import jax.numpy as jnp
      >>> w, eps, sigma = jnp.array([1.0, 0.0]), {"w": jnp.array([[1.0], [-1.0]])}, 0.5
      >>> classical_estimator(w, eps, sigma)["w"].tolist()
      [1.0]
      >>> d = {"w": sigma * eps["w"]}  # the same step as a centre-of-mass displacement
      >>> displacement_update(moments(d, masses(w)), sigma)["w"].tolist()
      [1.0]
    """
    w = jnp.asarray(weights)
    w = w.astype(jnp.promote_types(w.dtype, jnp.float32))
    if mean_subtract:
        w = w - jnp.mean(w)
    p = w.shape[0]
    return jax.tree.map(
        lambda e: (
            jnp.tensordot(
                w, e.astype(jnp.promote_types(e.dtype, w.dtype)), axes=(0, 0), precision=_HIGHEST
            )
            / (p * sigma)
        ),
        noise,
    )
