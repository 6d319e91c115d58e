"""Sep-CMA-ES (Ros & Hansen 2008): CMA-ES with a diagonal covariance.

Members are ``x_i = m + σ D ⊙ z_i`` (``D = √C``). Weighted recombination is a centre of
mass: the masses are the recombination weights (log weights of the best ``μ``, summing to
one, zero for the rest), so ``Σ w_i x_i = M`` and the mean moves by ``c_m (M - m)``,
measured from the model (CMA-ES does not subtract the centroid). The rank-μ term of the
covariance update is the mass-weighted spread: ``Σ w_i y_i² = S_M / σ²`` with
``S_M = Σ m_i δ_i² / Σ m_i``. ``tell`` works with the moments of ``y_i = D ⊙ z_i``
(``δ_i / σ``, with σ floored at ``sigma_floor > 0``); they are rebuilt from the keys, and no
population is stored. A generation whose fitness carries no ranking (all equal, or all NaN:
every Brax member falling at the same step) leaves the mean, σ, ``C`` and the paths as they
were, as in every jaxes strategy, instead of letting the mean drift and σ collapse.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxes import centroid, trees
from jaxes import shaping as shaping_lib
from jaxes.checks import check_positive
from jaxes.noise import NoiseSource
from jaxes.strategies import settings
from jaxes.strategies.base import EstimateStats
from jaxes.strategies.cma_constants import (
    Rates,
    effective_mass,
    elite_weights,
    rates,
    stall_indicator,
    step_size,
)
from jaxes.strategies.core import Rule, build
from jaxes.strategies.samplers import Population, diagonal
from jaxes.strategies.settings import (
    check_fixed_sigma,
    check_population_size,
    per_coordinate,
)
from jaxes.strategies.state import StrategyState, state_dataclass
from jaxes.types import Params, Strategy


@state_dataclass
class SepCMAState(StrategyState):
    """Separable CMA-ES's state: everything that changes between generations.

    Attributes:
      sigma: the global step size ``σ``.
      variances: the diagonal ``C`` (a pytree like ``params``).
      path_sigma: the conjugate evolution path ``p_σ``.
      path_c: the evolution path ``p_c``.
    """

    strategy = "sep_cma_es"
    sigma: jax.Array
    variances: Params
    path_sigma: Params
    path_c: Params


class SepCMAEstimate(NamedTuple):
    """sep-CMA-ES's estimate: the recombination displacement, its stats, and the moments of
    ``y_i = δ_i / σ`` (the displacements in units of σ) the update reads."""

    direction: Params
    stats: EstimateStats
    y_moments: centroid.PopulationMoments


@settings.accepts_old_noise_keywords
def sep_cma_es(
    population_size: int,
    sigma=0.05,
    elite_size: int | None = None,
    learning_rate=1.0,
    *,
    elite_ratio=None,
    sigma_floor=None,
    noise: str | NoiseSource = "auto",
    memory_budget: int | None = None,
    track_best: bool = True,
) -> Strategy:
    """Sep-CMA-ES: weighted recombination of the best ``μ`` as a centre of mass, a diagonal
    covariance and cumulative step-size adaptation.

    Args:
      population_size: ``λ = P`` (>= 2). CMA-ES samples independent members (no antithetic
        pairs), so any ``P`` works. Hansen's default is ``4 + ⌊3 ln n⌋``.
      sigma: the initial global step size (> 0).
      elite_size: ``μ``, the members recombined, ``1 <= μ <= P``; ``None`` is ``P // 2``.
      learning_rate: ``c_m`` (> 0); 1 puts the new mean on the centre of mass.
      elite_ratio: ``μ`` as a share ``r`` of the population, ``μ = max(1, ⌊r·P⌋)`` with
        ``0 < r <= 1`` (evosax's setting), in place of ``elite_size``.
      sigma_floor: σ never goes below it (> 0); ``None`` is ``1e-8`` for a float32 state,
        finer for float64 (``default_sigma_floor``).
      noise, memory_budget, track_best:
        as in ``jaxes.strategies``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> es = sep_cma_es(population_size=8, sigma=0.5)
      >>> state = es.init(jax.random.key(0), jnp.ones(3))
      >>> population, state = jax.jit(es.ask)(jax.random.key(1), state)
      >>> state, info = jax.jit(es.tell)(state, -jnp.sum(population**2, axis=1))
      >>> bool(jnp.sum(state.params**2) < 3.0)
      True
    """
    p = check_population_size(population_size, antithetic=False)
    mu = settings.elite_count(p, elite_size, elite_ratio)
    mu = p // 2 if mu is None else mu
    check_fixed_sigma(sigma, "sep_cma_es")
    sigma0 = check_positive("sigma", sigma)
    if sigma_floor is not None:
        check_positive("sigma_floor", sigma_floor)
    c_m = check_positive("learning_rate", learning_rate)
    weights_of = shaping_lib.recombination_weights(mu)

    def init(master: Params):
        own = {
            "sigma": jnp.asarray(sigma0, trees.state_dtype(master)),
            "variances": per_coordinate(1.0, master),
            "path_sigma": per_coordinate(0.0, master),
            "path_c": per_coordinate(0.0, master),
        }
        return own, per_coordinate(sigma0, master)  # σ D with C = I at the start

    def estimate(state: SepCMAState, fitness, population: Population) -> SepCMAEstimate:
        """The recombination displacement ``M - m`` (the mean's step is ``c_m`` times it); the
        update reads the moments of ``y_i = δ_i / σ`` (displacements in units of σ)."""
        weights = weights_of(fitness)
        # The recombination weights are non-negative, zero for the rest: the masses themselves.
        y_moments = centroid.scale_moments(
            population.moments(weights, squares=True), 1.0 / state.sigma
        )
        moments = centroid.scale_moments(y_moments, state.sigma)
        stats = EstimateStats(weights, weights, moments, member_scale(state))
        return SepCMAEstimate(centroid.centre_of_mass(moments), stats, y_moments)

    def update(state: SepCMAState, est: SepCMAEstimate):
        return sep_cma_update(state, est.y_moments, mu, c_m, sigma_floor)

    gaussian = "sep_cma_es's covariance and step-size adaptation"
    return build(
        Rule(init, member_scale, estimate, update),
        SepCMAState,
        diagonal(noise, memory_budget, p, False, gaussian),
        rank_based=True,  # recombination weights by rank
        track_best=track_best,
    )


def member_scale(state: SepCMAState) -> Params:
    """Per-coordinate ``σ D``: member ``i`` is ``m + σ D ⊙ z_i``."""
    return jax.tree.map(lambda c: state.sigma * jnp.sqrt(c), state.variances)


def sep_cma_update(state: SepCMAState, y_moments, mu: int, c_m, sigma_floor):
    """The mean's step and the new ``σ``, ``C`` and paths, from the moments of ``y_i = δ_i/σ``
    (``tell`` runs it only when the fitness carries a ranking)."""
    n = trees.num_params(state.params)
    k = rates(n, effective_mass(elite_weights(mu)), diagonal=True)
    # y_w = (M - m)/σ = Σ w_i y_i.
    y_w = centroid.centre_of_mass(y_moments)
    step = jax.tree.map(lambda y: c_m * state.sigma * y, y_w)
    path_sigma = conjugate_path(state.path_sigma, y_w, state.variances, k)
    ps_norm = trees.tree_norm(path_sigma)
    h_sigma = stall_indicator(ps_norm, state.generation, n, k, state.sigma.dtype)
    path_c = jax.tree.map(
        lambda pc, y: (1 - k.c_c) * pc + h_sigma * math.sqrt(k.c_c * (2 - k.c_c) * k.mu_eff) * y,
        state.path_c,
        y_w,
    )
    # The rank-μ term Σ w_i y_i² is the mass-weighted spread (in units of σ).
    variances = jax.tree.map(
        lambda c, pc, r: (
            (1 - k.c_1 - k.c_mu) * c
            + k.c_1 * (jnp.square(pc) + (1 - h_sigma) * k.c_c * (2 - k.c_c) * c)
            + k.c_mu * r
        ),
        state.variances,
        path_c,
        centroid.mass_spread(y_moments),
    )
    return step, state.replace(
        sigma=step_size(state.sigma, ps_norm, k, sigma_floor),
        variances=variances,
        path_sigma=path_sigma,
        path_c=path_c,
    )


def conjugate_path(path_sigma: Params, y_w: Params, variances: Params, k: Rates):
    """``p_σ``'s next value, from ``z_w = y_w / D`` (0 where a variance is 0)."""
    z_w = jax.tree.map(
        lambda y, c: jnp.where(c > 0, y / jnp.sqrt(jnp.where(c > 0, c, 1.0)), 0.0),
        y_w,
        variances,
    )
    return jax.tree.map(
        lambda ps, z: (1 - k.c_sigma) * ps + math.sqrt(k.c_sigma * (2 - k.c_sigma) * k.mu_eff) * z,
        path_sigma,
        z_w,
    )
