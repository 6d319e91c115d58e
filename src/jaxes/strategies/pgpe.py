"""PGPE (Sehnke et al. 2010) with per-coordinate σ and the ClipUp optimizer (Toklu et al. 2020).

Written as centre-of-mass displacements. With symmetric (antithetic) pairs and masses
``m_i = w_i - min w``:

* the mean's ascent direction ``(1/N) Σ_j ((w⁺_j - w⁻_j)/2) δ_j`` (``N = P/2`` pairs) is
  ``m̄ (M - c)``: the displacement from the plain centroid ``c = θ`` to the centre of mass;
* σ's gradient ``(1/N) Σ_j (ā_j - w̄)(δ_j² - σ²)/σ`` (``ā_j`` a pair's mean weight) is
  ``m̄ (S_M - S_c)/σ``: how much wider, per coordinate, the mass-weighted cloud is than the
  plain one (``S_M = Σ m_i δ_i²/Σ m_i``, ``S_c = (1/P) Σ δ_i²``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from jaxes import centroid, optim
from jaxes import shaping as shaping_lib
from jaxes.checks import check_below, check_positive
from jaxes.noise import NoiseSource
from jaxes.strategies import settings
from jaxes.strategies._tell import optimizer_step
from jaxes.strategies.base import EstimateStats
from jaxes.strategies.core import Estimate, Rule, build
from jaxes.strategies.samplers import Population, diagonal
from jaxes.strategies.settings import (
    check_fixed_sigma,
    check_optimizer,
    check_population_size,
    check_sigma,
    is_rank_shaping,
    is_zero,
    per_coordinate,
)
from jaxes.strategies.state import StrategyState, state_dataclass
from jaxes.types import Params, Strategy


@state_dataclass
class PGPEState(StrategyState):
    """PGPE's state: everything that changes between generations.

    Attributes:
      sigma: per-coordinate σ (a pytree like ``params``).
      opt_state: the optimizer state of the mean (ClipUp's velocity by default).
    """

    strategy = "pgpe"
    sigma: Params
    opt_state: optax.OptState


@settings.accepts_old_noise_keywords
def pgpe(
    population_size: int,
    sigma=0.05,
    learning_rate=0.03,
    sigma_learning_rate=0.1,
    sigma_max_change=0.2,
    *,
    optimizer: optax.GradientTransformation | None = None,
    max_speed=None,
    momentum=0.9,
    fitness_shaping="centered_rank",
    noise: str | NoiseSource = "auto",
    memory_budget: int | None = None,
    track_best: bool = True,
) -> Strategy:
    """PGPE: symmetric sampling, the mean stepped toward the centre of mass, σ adapted per
    coordinate toward the spread of the mass-weighted cloud.

    Args:
      population_size: ``P``, even (``P/2`` symmetric pairs).
      sigma: initial σ, a number > 0 or a pytree like the params.
      learning_rate: ClipUp's step size for the mean (used when ``optimizer`` is None).
      sigma_learning_rate: step size of σ (>= 0; 0 keeps σ fixed).
      sigma_max_change: largest relative change of σ per generation, in (0, 1).
      optimizer: any optax transformation for the mean; defaults to
        ``jaxes.optim.clipup(learning_rate, max_speed, momentum)``.
      max_speed: ClipUp's speed limit (default ``2 * learning_rate``).
      momentum: ClipUp's momentum in ``[0, 1)``.
      fitness_shaping: ``"centered_rank"``, ``"z_score"``, ``"raw"``, ``"log_rank"`` or a
        callable.
      noise, memory_budget, track_best:
        as in ``jaxes.strategies``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> es = pgpe(population_size=8, sigma=0.5)
      >>> state = es.init(jax.random.key(0), jnp.ones(3))
      >>> population, state = jax.jit(es.ask)(jax.random.key(1), state)
      >>> state, info = jax.jit(es.tell)(state, -jnp.sum(population**2, axis=1))
      >>> bool(jnp.sum(state.params**2) < 3.0)
      True
    """
    p = check_population_size(population_size, antithetic=True)
    sigma_lr = check_positive("sigma_learning_rate", sigma_learning_rate, allow_zero=True)
    adapts_sigma = not is_zero(sigma_lr)
    max_change = check_positive("sigma_max_change", sigma_max_change)
    check_below("sigma_max_change", max_change, 1.0, "(0, 1)")
    check_fixed_sigma(sigma, "pgpe")
    check_sigma(sigma)
    optimizer = check_optimizer(
        optimizer,
        lambda: optim.clipup(check_positive("learning_rate", learning_rate), max_speed, momentum),
    )
    shape_fitness = shaping_lib.get_shaping(fitness_shaping)

    def init(master: Params):
        sigmas = per_coordinate(sigma, master)
        return {"sigma": sigmas, "opt_state": optimizer.init(master)}, sigmas

    def estimate(state: PGPEState, fitness, population: Population) -> Estimate:
        """Ascent direction of the mean, ``m̄ (M - c)``."""
        weights = shape_fitness(fitness)
        mass = centroid.masses(weights)
        moments = population.moments(mass, squares=adapts_sigma)
        mean_mass = moments.total_mass / p
        direction = jax.tree.map(
            lambda com, c: mean_mass * (com - c),
            centroid.centre_of_mass(moments),
            centroid.plain_centroid(moments),
        )
        return Estimate(direction, EstimateStats(weights, mass, moments, state.sigma))

    def update(state: PGPEState, est: Estimate):
        step, opt_state = optimizer_step(optimizer, state, est.direction)
        state = state.replace(opt_state=opt_state)
        if adapts_sigma:
            sigma = sigma_update(est.stats.moments, state.sigma, sigma_lr, max_change)
            state = state.replace(sigma=sigma)
        return step, state

    gaussian = "pgpe's σ update (sigma_learning_rate; pass 0 to keep σ fixed)"
    return build(
        Rule(init, lambda state: state.sigma, estimate, update),
        PGPEState,
        diagonal(noise, memory_budget, p, True, gaussian if adapts_sigma else None),
        rank_based=is_rank_shaping(fitness_shaping),
        track_best=track_best,
    )


def sigma_gradient(moments: centroid.PopulationMoments, sigma: Params) -> Params:
    """PGPE's σ ascent direction ``m̄ (S_M - S_c)/σ`` per coordinate.

    Example (the wider pair carries all the mass, so σ should grow):
      >>> import jax.numpy as jnp
      >>> from jaxes import centroid
      >>> d = jnp.array([[1.0], [-1.0], [0.5], [-0.5]])  # two antithetic pairs
      >>> m = centroid.moments(d, jnp.array([1.0, 1.0, 0.0, 0.0]), squares=True)
      >>> sigma_gradient(m, jnp.ones(1)).tolist()  # 0.5 * (1.0 - 0.625) / 1.0
      [0.1875]
    """
    mean_mass = moments.total_mass / moments.count
    return jax.tree.map(
        lambda sm, sc, s: mean_mass * (sm - sc) / s,
        centroid.mass_spread(moments),
        centroid.plain_spread(moments),
        sigma,
    )


def sigma_update(moments, sigma: Params, learning_rate: float, max_change: float) -> Params:
    """``σ + lr · ∇σ``, clipped to ``σ (1 ± max_change)``.

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxes import centroid
      >>> d = jnp.array([[1.0], [-1.0], [0.5], [-0.5]])
      >>> m = centroid.moments(d, jnp.array([1.0, 1.0, 0.0, 0.0]), squares=True)
      >>> [round(s, 5) for s in sigma_update(m, jnp.ones(1), 0.1, 0.25).tolist()]  # 1 + 0.1·0.1875
      [1.01875]
      >>> sigma_update(m, jnp.ones(1), 10.0, 0.25).tolist()  # clipped to 1 + 0.25
      [1.25]
    """
    grad = sigma_gradient(moments, sigma)
    return jax.tree.map(
        lambda s, g: jnp.clip(s + learning_rate * g, s * (1 - max_change), s * (1 + max_change)),
        sigma,
        grad,
    )
