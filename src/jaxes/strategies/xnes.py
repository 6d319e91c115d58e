"""Exponential NES (Glasmachers et al. 2010): natural-gradient ascent on a full Gaussian.

Members are ``x_i = m + σ B z_i`` on the flattened params with ``det B = 1`` (``A = σB``).
With the NES utilities ``u_i`` (log ranks, summing to zero; ``shaping.log_rank_utilities``):

- the mean moves by ``η_μ Σ u_i δ_i`` (``δ_i = x_i - m``): with masses ``u_i - min u`` that is
  ``η_μ (m̄ (M - m) + min(u) Σ δ_i)``, a displacement toward the utility-weighted centre of
  mass, corrected for the sampled centroid's offset (zero in expectation);
- ``G_M = Σ u_i z_i z_iᵀ``; σ grows by ``exp(η_σ tr(G_M) / 2d)``; ``B`` turns by
  ``expm(η_B (G_M - tr(G_M)/d · I) / 2)``, the exponential of a symmetric matrix, taken from
  its eigendecomposition, so ``B`` stays of determinant one.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxes import centroid
from jaxes import shaping as shaping_lib
from jaxes.checks import check_positive
from jaxes.strategies import termination
from jaxes.strategies.base import EstimateStats
from jaxes.strategies.core import Rule, build
from jaxes.strategies.samplers import (
    DEFAULT_COVARIANCE_BUDGET,
    FullSampler,
    Population,
    Sample,
    check_dimension,
    unflat,
)
from jaxes.strategies.settings import (
    check_fixed_sigma,
    check_population_size,
    floor_sigma,
)
from jaxes.strategies.state import StrategyState, state_dataclass
from jaxes.types import Strategy


@state_dataclass
class XNESState(StrategyState):
    """xNES's state: everything that changes between generations.

    Attributes:
      sigma: the global step size ``σ``.
      shape: ``B`` (``d × d``, ``det B = 1``): members are ``m + σ B z``.
      history: recent best and median fitness (termination).
    """

    strategy = "xnes"
    sigma: jax.Array
    shape: jax.Array
    history: termination.History


def default_learning_rates(d: int) -> float:
    """``η_σ = η_B = 3 (3 + ln d) / (5 d √d)`` (Glasmachers et al. 2010).

    Example:
      >>> round(default_learning_rates(10), 4)
      0.1006
    """
    return 3.0 * (3.0 + math.log(d)) / (5.0 * d * math.sqrt(d))


class XNESEstimate(NamedTuple):
    """xNES's estimate: the direction and its stats (whose weights are the utilities), and the
    rebuilt sample the update reads."""

    direction: object
    stats: EstimateStats
    sample: Sample


def xnes(
    population_size: int,
    sigma=0.5,
    learning_rate=1.0,
    *,
    sigma_learning_rate=None,
    shape_learning_rate=None,
    sigma_floor=None,
    covariance_budget: int = DEFAULT_COVARIANCE_BUDGET,
    track_best: bool = True,
) -> Strategy:
    """xNES with a full covariance over the flattened params.

    Args:
      population_size: ``λ = P`` (>= 2); ``cma_constants.default_population_size(d)`` is the usual.
      sigma: the initial step size ``σ0`` (> 0).
      learning_rate: ``η_μ`` (> 0), the mean's step size.
      sigma_learning_rate, shape_learning_rate: ``η_σ`` and ``η_B`` (> 0); ``None``:
        ``default_learning_rates(d)``.
      sigma_floor: σ never goes below it; ``None``: ``default_sigma_floor`` of the dtype.
      covariance_budget, track_best: as for ``cma_es``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> es = xnes(population_size=8, sigma=0.5)
      >>> state = es.init(jax.random.key(0), jnp.ones(3))
      >>> population, state = jax.jit(es.ask)(jax.random.key(1), state)
      >>> state, info = jax.jit(es.tell)(state, -jnp.sum(population**2, axis=1))
      >>> bool(jnp.sum(state.params**2) < 3.0)
      True
    """
    p = check_population_size(population_size, antithetic=False)
    check_fixed_sigma(sigma, "xnes")
    sigma0 = check_positive("sigma", sigma)
    eta_mu = check_positive("learning_rate", learning_rate)
    given = {"sigma_learning_rate": sigma_learning_rate, "shape_learning_rate": shape_learning_rate}
    rates = {name: None if v is None else check_positive(name, v) for name, v in given.items()}
    if sigma_floor is not None:
        check_positive("sigma_floor", sigma_floor)

    def eta(name: str, d: int) -> float:
        return default_learning_rates(d) if rates[name] is None else rates[name]

    budget = int(covariance_budget)

    def init(master):
        d, dtype = check_dimension(master, "xnes", budget)
        own = {
            "sigma": jnp.asarray(sigma0, dtype),
            "shape": jnp.eye(d, dtype=dtype),
            "history": termination.empty_history(termination.windows(d, p)[1], dtype),
        }
        return own, (own["sigma"], jnp.eye(d, dtype=dtype))

    def factor(state):
        return state.sigma, state.shape

    def estimate(state, fitness, population: Population) -> XNESEstimate:
        sample = population.sample
        dtype = sample.z.dtype
        u = shaping_lib.log_rank_utilities(fitness).astype(dtype)
        masses = centroid.masses(u)
        stats = EstimateStats(u, masses, population.moments(masses), state.sigma)
        m = stats.moments
        direction = jax.tree.map(lambda a, b: a + jnp.min(u) * b, m.mass_moment, m.displacement_sum)
        return XNESEstimate(direction, stats, sample)

    def update(state, est: XNESEstimate):
        sample, u = est.sample, est.stats.weights
        d = sample.z.shape[1]
        step = eta_mu * state.sigma * (u @ sample.y)
        g_m = (sample.z * u[:, None]).T @ sample.z
        g_sigma = jnp.trace(g_m) / d
        g_b = g_m - g_sigma * jnp.eye(d, dtype=g_m.dtype)
        values, vectors = jnp.linalg.eigh(0.5 * eta("shape_learning_rate", d) * g_b)
        rotation = (vectors * jnp.exp(values)[None, :]) @ vectors.T
        sigma = state.sigma * jnp.exp(0.5 * eta("sigma_learning_rate", d) * g_sigma)
        shape = state.shape @ rotation
        state = state.replace(sigma=floor_sigma(sigma, sigma_floor), shape=shape)
        return unflat(step, state.params), state

    finish = termination.finisher(p, sigma0, _geometry)
    return build(
        Rule(init, factor, estimate, update, finish=finish),
        XNESState,
        FullSampler(p),
        rank_based=True,
        track_best=track_best,
    )


def _geometry(state: XNESState) -> termination.Geometry:
    """The shape of ``C = σ² B Bᵀ`` pycma's termination criteria read (xNES has no ``p_c``)."""
    return termination.Geometry(
        axes=state.shape,
        axis_lengths=jnp.linalg.svd(state.shape, compute_uv=False),
        variances=jnp.sum(jnp.square(state.shape), axis=1),
        path_c=jnp.zeros(state.shape.shape[:1], state.shape.dtype),
    )
