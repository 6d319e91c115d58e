"""Separable natural evolution strategies (SNES, Schaul et al. 2011) as centre-of-mass steps.

SNES samples ``x_i = μ + σ ⊙ z_i`` and, with utilities ``u_i`` that sum to zero, updates
``μ ← μ + η_μ σ ⊙ Σ u_i z_i`` and ``σ ← σ ⊙ exp(η_σ/2 · Σ u_i (z_i² - 1))``. With masses
``m_i = u_i - min u``:

* ``σ ⊙ Σ u_i z_i = P m̄ (M - c)``: the mean moves toward the centre of mass. The default
  utilities make the masses the log weights of the best half summing to one (``P m̄ = 1``),
  so with ``η_μ = 1`` the step is exactly ``M - c``: weighted recombination, measured from
  the plain centroid (``μ' = M`` with antithetic pairs, where ``c = μ``);
* ``Σ u_i (z_i² - 1) = P m̄ (S_M - S_c)/σ²``: σ grows where the mass-weighted cloud is wider
  than the plain one (``S_M = Σ m_i δ_i²/Σ m_i``, ``S_c = (1/P) Σ δ_i²``).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from jaxes import centroid, trees
from jaxes import shaping as shaping_lib
from jaxes.checks import check_positive
from jaxes.noise import NoiseSource
from jaxes.strategies import settings
from jaxes.strategies.base import EstimateStats
from jaxes.strategies.core import Estimate, Rule, build
from jaxes.strategies.samplers import Population, diagonal
from jaxes.strategies.settings import (
    check_fixed_sigma,
    check_population_size,
    check_sigma,
    is_rank_shaping,
    is_zero,
    per_coordinate,
)
from jaxes.strategies.state import StrategyState, state_dataclass
from jaxes.types import Params, Strategy


@state_dataclass
class SNESState(StrategyState):
    """SNES's state: everything that changes between generations.

    Attributes:
      sigma: per-coordinate σ (a pytree like ``params``).
    """

    strategy = "snes"
    sigma: Params


def default_sigma_learning_rate(num_params: int) -> float:
    """``(3 + ln d) / (5 √d)`` (Schaul et al. 2011).

    Example:
      >>> round(default_sigma_learning_rate(10), 4)
      0.3354
    """
    return (3.0 + math.log(num_params)) / (5.0 * math.sqrt(num_params))


@settings.accepts_old_noise_keywords
def snes(
    population_size: int,
    sigma=0.05,
    learning_rate=1.0,
    sigma_learning_rate=None,
    *,
    antithetic: bool = False,
    fitness_shaping="log_rank",
    temperature=None,
    noise: str | NoiseSource = "auto",
    memory_budget: int | None = None,
    track_best: bool = True,
) -> Strategy:
    """SNES: the mean steps toward the centre of mass, σ follows the mass-weighted spread.

    Args:
      population_size: ``P`` (>= 2; even when ``antithetic``). SNES samples independent
        members by default, so any ``P`` works. The paper's default is ``4 + ⌊3 ln d⌋``.
      sigma: initial σ, a number > 0 or a pytree like the params.
      learning_rate: ``η_μ`` (> 0).
      sigma_learning_rate: ``η_σ`` (>= 0; 0 keeps σ fixed); ``None`` uses
        ``(3 + ln d)/(5 √d)``.
      antithetic: sample ``(+z, -z)`` pairs (off in the paper).
      fitness_shaping: the paper's ``"log_rank"`` utilities by default; any shaping name or
        callable (utilities are centred, so only their differences matter).
      temperature: ``None`` or 0 keeps ``fitness_shaping``; ``> 0`` ranks with evosax's
        "DES" weights at that temperature instead (``jaxes.shaping.des_weights``; evosax's
        SNES ``temperature``), with ``fitness_shaping`` left at ``"log_rank"``.
      noise, memory_budget, track_best:
        as in ``jaxes.strategies``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> es = snes(population_size=8)
      >>> state = es.init(jax.random.key(0), jnp.full(3, 2.0))
      >>> population, state = jax.jit(es.ask)(jax.random.key(1), state)
      >>> state, info = jax.jit(es.tell)(state, -jnp.sum(population**2, axis=1))
      >>> bool(jnp.sum(state.params**2) < 12.0)
      True
    """
    p = check_population_size(population_size, antithetic)
    eta_mu = check_positive("learning_rate", learning_rate)
    if sigma_learning_rate is not None:
        check_positive("sigma_learning_rate", sigma_learning_rate, allow_zero=True)
    adapts_sigma = not is_zero(sigma_learning_rate)
    check_fixed_sigma(sigma, "snes")
    check_sigma(sigma)
    shape_fitness = utilities(fitness_shaping, temperature)

    def eta_sigma(params) -> float:
        if sigma_learning_rate is not None:
            return sigma_learning_rate
        return default_sigma_learning_rate(trees.num_params(params))

    def init(master: Params):
        sigmas = per_coordinate(sigma, master)
        return {"sigma": sigmas}, sigmas

    def estimate(state: SNESState, fitness, population: Population) -> Estimate:
        """The mean's natural-gradient direction ``P m̄ (M - c)`` (the step is ``η_μ`` times it)."""
        weights = shape_fitness(fitness)
        mass = centroid.masses(weights)
        moments = population.moments(mass, squares=adapts_sigma)
        direction = jax.tree.map(
            lambda com, c: moments.total_mass * (com - c),
            centroid.centre_of_mass(moments),
            centroid.plain_centroid(moments),
        )
        return Estimate(direction, EstimateStats(weights, mass, moments, state.sigma))

    def update(state: SNESState, est: Estimate):
        step = jax.tree.map(lambda d: eta_mu * d, est.direction)
        if not adapts_sigma:
            return step, state
        sigma = sigma_update(est.stats.moments, state.sigma, eta_sigma(state.params))
        return step, state.replace(sigma=sigma)

    gaussian = "snes's σ update (sigma_learning_rate; pass 0 to keep σ fixed)"
    return build(
        Rule(init, lambda state: state.sigma, estimate, update),
        SNESState,
        diagonal(noise, memory_budget, p, antithetic, gaussian if adapts_sigma else None),
        rank_based=is_rank_shaping(fitness_shaping),  # "log_rank" under a temperature
        track_best=track_best,
    )


def _has_temperature(temperature) -> bool:
    return temperature is not None and not is_zero(temperature)


def utilities(fitness_shaping, temperature) -> shaping_lib.Shaping:
    """The shaping snes ranks with: ``fitness_shaping``, or the DES weights of a temperature
    > 0, which replace the default log-rank utilities (any other shaping with them is an
    error naming both).

    Example:
      >>> utilities("log_rank", 0) is shaping_lib.log_rank_utilities
      True
      >>> utilities("z_score", 30.0)  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      ValueError: temperature, fitness_shaping: a temperature > 0 replaces the log-rank ...
    """
    if not _has_temperature(temperature):
        return shaping_lib.get_shaping(fitness_shaping)
    temperature = check_positive("temperature", temperature)
    if isinstance(fitness_shaping, str) and fitness_shaping == "log_rank":
        return shaping_lib.des_weights(temperature)
    raise ValueError(
        "temperature, fitness_shaping: a temperature > 0 replaces the log-rank utilities with "
        f"the DES weights, so fitness_shaping must stay 'log_rank' (got {fitness_shaping!r}); "
        "give one of them"
    )


def sigma_update(moments: centroid.PopulationMoments, sigma: Params, eta_sigma: float) -> Params:
    """``σ ⊙ exp(η_σ/2 · P m̄ (S_M - S_c)/σ²)``.

    Example (the wider pair carries all the mass, so σ grows):
      >>> import jax.numpy as jnp
      >>> from jaxes import centroid
      >>> d = jnp.array([[1.0], [-1.0], [0.5], [-0.5]])
      >>> m = centroid.moments(d, jnp.array([1.0, 1.0, 0.0, 0.0]), squares=True)
      >>> [round(s, 4) for s in sigma_update(m, jnp.ones(1), 1.0).tolist()]  # exp(0.375)
      [1.455]
    """
    total = moments.total_mass
    return jax.tree.map(
        lambda s, sm, sc: s * jnp.exp(0.5 * eta_sigma * total * (sm - sc) / jnp.square(s)),
        sigma,
        centroid.mass_spread(moments),
        centroid.plain_spread(moments),
    )
