"""MA-ES (Beyer & Sendhoff 2017, "Simplify your covariance matrix adaptation evolution
strategy", IEEE TEVC 21(5), fig. 3): CMA-ES without the covariance matrix.

Members are ``x_i = m + σ M z_i`` on the flattened params (``samplers.FullSampler`` with
``A = M``), ``z_i`` from the ``ask`` key and ``i``. No ``C``, no eigendecomposition, no
``p_c``: the path ``s`` of the selected ``z`` drives σ and ``M``, updated multiplicatively,
``M ← M [I + c_1/2 (s sᵀ - I) + c_w/2 (Σ w_i z_i z_iᵀ - I)]``, computed as
``(1 - c_1/2 - c_w/2) M + c_1/2 (M s) sᵀ + c_w/2 Σ w_i y_i z_iᵀ`` (``y_i = M z_i``): O(d² μ),
no ``d × d`` product. The mean's update is a centre-of-mass displacement: the masses are the
recombination weights (summing to one), so ``Σ w_i x_i = M`` and ``m' = m + c_m (M - m)``.

The paper's constants (Hansen's tutorial's rates), for ``μ = ⌊λ/2⌋``: ``w_k ∝ ln(μ + 1/2) -
ln k`` for the best ``μ``, ``c_s = (μ_eff + 2)/(d + μ_eff + 5)``, ``c_1 = 2/((d + 1.3)² +
μ_eff)``, ``c_w = min(1 - c_1, 2 (μ_eff + 1/μ_eff - 2)/((d + 2)² + μ_eff))``, ``d_σ = 1 + c_s
+ 2 max(0, √((μ_eff - 1)/(d + 1)) - 1)``, ``σ ← σ exp(c_s/d_σ (‖s‖/E‖N(0, I)‖ - 1))``, its log
change clipped to ±1 (pycma's guard, as ``cma_es``) and never below ``sigma_floor``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxes import centroid
from jaxes import shaping as shaping_lib
from jaxes.checks import check_positive
from jaxes.strategies import settings
from jaxes.strategies.base import EstimateStats
from jaxes.strategies.cma_constants import Rates, effective_mass, elite_weights, step_size
from jaxes.strategies.core import Rule, build
from jaxes.strategies.samplers import (
    DEFAULT_COVARIANCE_BUDGET,
    FullSampler,
    Population,
    Sample,
    check_dimension,
    unflat,
)
from jaxes.strategies.state import StrategyState, state_dataclass
from jaxes.types import Strategy


@state_dataclass
class MAState(StrategyState):
    """MA-ES's state: everything that changes between generations.

    Attributes:
      sigma: the global step size ``σ``.
      transform: ``M`` (``d × d``, over the flattened params): members are ``m + σ M z``.
      path_sigma: the evolution path ``s`` of the selected ``z`` (flat).
    """

    strategy = "ma_es"
    sigma: jax.Array
    transform: jax.Array
    path_sigma: jax.Array


def ma_rates(d: int, weights) -> Rates:
    """The paper's rates for ``d`` coordinates and recombination ``weights`` (summing to one);
    ``c_c`` is 0: MA-ES has no ``p_c``.

    Example:
      >>> r = ma_rates(10, elite_weights(5))
      >>> round(r.c_sigma, 4), round(r.c_1, 5), round(r.c_mu, 5), round(r.d_sigma, 4)
      (0.2844, 0.01528, 0.02015, 1.2844)
    """
    mu_eff = effective_mass(weights)
    c_sigma = (mu_eff + 2.0) / (d + mu_eff + 5.0)
    d_sigma = 1.0 + c_sigma + 2.0 * max(0.0, math.sqrt((mu_eff - 1.0) / (d + 1.0)) - 1.0)
    c_1 = 2.0 / ((d + 1.3) ** 2 + mu_eff)
    c_w = min(1.0 - c_1, 2.0 * (mu_eff + 1.0 / mu_eff - 2.0) / ((d + 2.0) ** 2 + mu_eff))
    chi_n = math.sqrt(d) * (1.0 - 1.0 / (4.0 * d) + 1.0 / (21.0 * d * d))
    return Rates(mu_eff, c_sigma, d_sigma, 0.0, c_1, c_w, chi_n)


class MAEstimate(NamedTuple):
    """MA-ES's (and LM-MA-ES's) estimate: the recombination displacement and its stats, and
    the rebuilt sample the update reads."""

    direction: object
    stats: EstimateStats
    sample: Sample


def check_settings(strategy: str, population_size, sigma, learning_rate, sigma_floor):
    """``(P, σ0, c_m)``, checked as MA-ES and LM-MA-ES take them (errors name the setting)."""
    p = settings.check_population_size(population_size, antithetic=False)
    settings.check_fixed_sigma(sigma, strategy)
    if sigma_floor is not None:
        check_positive("sigma_floor", sigma_floor)
    return p, check_positive("sigma", sigma), check_positive("learning_rate", learning_rate)


def cumulate(path, rate, mu_eff: float, z_w):
    """An evolution path of the selected ``z``: ``(1 - c) p + √(μ_eff c (2 - c)) Σ w_i z_i``
    (``rate`` a number, or a column of them for a stack of paths)."""
    return (1 - rate) * path + jnp.sqrt(mu_eff * rate * (2 - rate)) * z_w


def recombination(weights_of):
    """The ``estimate`` of MA-ES and LM-MA-ES: the recombination displacement
    ``M - m = σ Σ w_i y_i``, with the recombination weights by rank as the masses, so ``M`` is
    the centre of mass of the best ``μ``; the update reads the rebuilt sample."""

    def estimate(state, fitness, population: Population) -> MAEstimate:
        w = weights_of(fitness).astype(population.sample.z.dtype)
        stats = EstimateStats(w, w, population.moments(w), state.sigma)
        return MAEstimate(centroid.centre_of_mass(stats.moments), stats, population.sample)

    return estimate


def ma_es(
    population_size: int,
    sigma=0.5,
    elite_size: int | None = None,
    learning_rate=1.0,
    *,
    elite_ratio=None,
    sigma_floor=None,
    covariance_budget: int = DEFAULT_COVARIANCE_BUDGET,
    track_best: bool = True,
) -> Strategy:
    """MA-ES with a full transformation matrix ``M`` over the flattened params.

    Args:
      population_size: ``λ = P`` (>= 2); the paper's default is
        ``cma_constants.default_population_size(d) = 4 + ⌊3 ln d⌋``.
      sigma: the initial step size ``σ0`` (> 0).
      elite_size: ``μ``, the members recombined (``1 <= μ <= P``); ``None`` is ``P // 2``.
      learning_rate: ``c_m`` (> 0); 1 (the paper's) puts the new mean on the centre of mass.
      elite_ratio: ``μ = max(1, ⌊r·P⌋)`` for ``0 < r <= 1``, in place of ``elite_size``.
      sigma_floor: σ never goes below it (> 0); ``None``: ``default_sigma_floor`` of the dtype.
      covariance_budget: bytes the ``d × d`` matrices may take, as for ``cma_es``.
      track_best: keep what rebuilds the best member seen (one more ``d × d`` matrix).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> es = ma_es(population_size=8, sigma=0.5)
      >>> state = es.init(jax.random.key(0), jnp.ones(3))
      >>> population, state = jax.jit(es.ask)(jax.random.key(1), state)
      >>> state, info = jax.jit(es.tell)(state, -jnp.sum(population**2, axis=1))
      >>> bool(jnp.sum(state.params**2) < 3.0)
      True
    """
    p, sigma0, c_m = check_settings("ma_es", population_size, sigma, learning_rate, sigma_floor)
    mu = settings.elite_count(p, elite_size, elite_ratio) or p // 2
    weights_of = shaping_lib.recombination_weights(mu)
    budget = int(covariance_budget)

    def init(master):
        d, dtype = check_dimension(master, "ma_es", budget)
        own = {
            "sigma": jnp.asarray(sigma0, dtype),
            "transform": jnp.eye(d, dtype=dtype),
            "path_sigma": jnp.zeros((d,), dtype),
        }
        return own, (own["sigma"], jnp.eye(d, dtype=dtype))

    def scale(state):
        return state.sigma, state.transform

    estimate = recombination(weights_of)

    def update(state, est: MAEstimate):
        sample, w = est.sample, est.stats.weights
        k = ma_rates(sample.z.shape[1], elite_weights(mu))
        step, state = ma_update(state, sample, w, k, c_m, sigma_floor)
        return unflat(step, state.params), state

    return build(
        Rule(init, scale, estimate, update),
        MAState,
        FullSampler(p),
        rank_based=True,  # recombination weights by rank
        track_best=track_best,
    )


def ma_update(state: MAState, sample: Sample, w, k: Rates, c_m, sigma_floor):
    """The mean's (flat) step and the state with the new ``s``, ``M`` and σ (fig. 3, M9-M12)."""
    z_w = w @ sample.z
    step = c_m * state.sigma * (w @ sample.y)
    path = cumulate(state.path_sigma, k.c_sigma, k.mu_eff, z_w)
    m = state.transform
    # M [I + c_1/2 (s sᵀ - I) + c_w/2 (Σ w z zᵀ - I)], with M z_i = y_i.
    transform = (
        (1 - 0.5 * (k.c_1 + k.c_mu)) * m
        + 0.5 * k.c_1 * jnp.outer(m @ path, path)
        + 0.5 * k.c_mu * (sample.y * w[:, None]).T @ sample.z
    )
    sigma = step_size(state.sigma, jnp.linalg.norm(path), k, sigma_floor)
    return step, state.replace(sigma=sigma, transform=transform, path_sigma=path)
