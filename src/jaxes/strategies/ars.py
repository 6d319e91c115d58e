"""Augmented random search (ARS, Mania et al. 2018) as a centre-of-mass step.

ARS plays ``N = P/2`` directions ``δ_j`` as pairs ``θ ± ν δ_j``, keeps the ``b`` directions
whose better side scored highest, and steps
``θ ← θ + α/(b σ_R) Σ_{top b} (r⁺_j - r⁻_j) δ_j`` with ``σ_R`` the standard deviation of
the ``2b`` rewards it kept. Give every member of a kept pair its reward as weight and both
members of a dropped pair the same weight (a dropped pair then cancels out); with masses
``m_i = w_i - min w`` the sum is ``Σ_{top b} (r⁺ - r⁻) δ_j = (P m̄/ν)(M - c)``, so

``θ ← θ + α · P m̄ (M - c) / (b σ_R ν)``.

ARS V1 is this step on raw observations; V2 (and V2-t) adds observation normalisation,
which in jaxes belongs to the task: ``brax_task(..., normalize_observations=True)``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from jaxes import centroid
from jaxes import shaping as shaping_lib
from jaxes.checks import check_int
from jaxes.noise import NoiseSource
from jaxes.strategies import settings
from jaxes.strategies._tell import optimizer_step
from jaxes.strategies.base import EstimateStats
from jaxes.strategies.core import Estimate, Rule, build
from jaxes.strategies.samplers import Population, diagonal
from jaxes.strategies.settings import (
    check_optimizer,
    check_population_size,
    scheduled_sigma,
)
from jaxes.strategies.state import StrategyState, state_dataclass
from jaxes.types import Params, Strategy


@state_dataclass
class ARSState(StrategyState):
    """ARS's state: everything that changes between generations.

    Attributes:
      opt_state: the optax state (plain SGD by default, as in the paper).
    """

    strategy = "ars"
    opt_state: optax.OptState


def top_directions(fitness: jax.Array, top_k: int) -> tuple[jax.Array, jax.Array]:
    """ARS's weights and ``σ_R`` for interleaved pairs ``(+, -, +, -, ...)``, both in units of
    the largest reward's magnitude (the step depends on their ratio only; squared as they come,
    rewards past about 1e19 overflow float32).

    Members of the ``top_k`` pairs whose better side scored highest keep their reward; both
    members of every other pair get the kept rewards' mean (so the pair cancels). Non-finite
    rewards count as the worst finite one.

    Example:
      >>> w, s = top_directions(jnp.array([1.0, 0.0, 5.0, 2.0, 0.5, 0.5]), 2)
      >>> (w * 5).tolist(), round(float(s * 5), 3)
      ([1.0, 0.0, 5.0, 2.0, 2.0, 2.0], 1.871)
    """
    rewards = shaping_lib.raw(fitness)
    unit = jnp.max(jnp.abs(rewards))
    # XLA divides by multiplying with the reciprocal, which flushes to zero past 2^126:
    # rewards that large are brought down by 2^-64 first.
    big = unit > 2.0**64
    rewards = jnp.where(big, rewards * 2.0**-64, rewards)
    unit = jnp.where(big, unit * 2.0**-64, unit)
    pairs = (rewards / jnp.where(unit > 0, unit, 1.0)).reshape(-1, 2)
    score = jnp.max(pairs, axis=1)
    order = jnp.argsort(-score, stable=True)
    kept = jnp.zeros(pairs.shape[0], bool).at[order[:top_k]].set(True)
    kept_rewards = jnp.where(kept[:, None], pairs, 0.0)
    mean = jnp.sum(kept_rewards) / (2 * top_k)
    std = jnp.sqrt(jnp.sum(jnp.where(kept[:, None], jnp.square(pairs - mean), 0.0)) / (2 * top_k))
    weights = jnp.where(kept[:, None], pairs, mean).reshape(-1)
    return weights, std


@settings.accepts_old_noise_keywords
def ars(
    population_size: int,
    sigma=0.05,
    learning_rate=0.03,
    top_k: int | None = None,
    *,
    optimizer: optax.GradientTransformation | None = None,
    sigma_floor=None,
    noise: str | NoiseSource = "auto",
    memory_budget: int | None = None,
    track_best: bool = True,
) -> Strategy:
    """ARS: the best ``b`` of ``P/2`` antithetic directions, reward-scaled by ``1/σ_R``.

    Args:
      population_size: ``P`` = 2 × the number of directions ``N`` (even).
      sigma: the exploration noise ``ν``, a constant > 0 or an optax schedule of the
        generation (floored at ``sigma_floor``).
      learning_rate: the step size ``α`` (> 0, or an optax schedule of the updates applied),
        used when ``optimizer`` is None.
      top_k: ``b``, the directions kept, ``1 <= b <= P/2``; ``None`` keeps all of them
        (ARS V1/V2; ``b < P/2`` is V1-t/V2-t).
      optimizer: any optax transformation; defaults to ``optax.sgd(learning_rate)``.
      sigma_floor, noise, memory_budget, track_best: as in ``jaxes.strategies``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> es = ars(population_size=8, sigma=0.1, learning_rate=0.1, top_k=2)
      >>> state = es.init(jax.random.key(0), jnp.ones(3))
      >>> population, state = jax.jit(es.ask)(jax.random.key(1), state)
      >>> state, info = jax.jit(es.tell)(state, -jnp.sum(population**2, axis=1))
      >>> bool(jnp.sum(state.params**2) < 3.0)
      True
    """
    p = check_population_size(population_size, antithetic=True)
    nu_of, initial_nu = scheduled_sigma(sigma, sigma_floor)
    # ARS keeps b of the P/2 directions.
    b = p // 2 if top_k is None else check_int("top_k", top_k, 1, p // 2)
    optimizer = check_optimizer(
        optimizer, lambda: optax.sgd(settings.check_learning_rate(learning_rate))
    )

    def init(master: Params):
        return {"opt_state": optimizer.init(master)}, initial_nu(master)

    def estimate(state: ARSState, fitness, population: Population) -> Estimate:
        """The ascent direction ``P m̄ (M - c) / (b σ_R ν)`` (the step before ``α``)."""
        nu = nu_of(state)
        weights, reward_std = top_directions(fitness, b)
        mass = centroid.masses(weights)
        moments = population.moments(mass)
        scale = moments.total_mass / (b * jnp.where(reward_std > 0, reward_std, 1.0) * nu)
        direction = jax.tree.map(
            lambda com, c: scale * (com - c),
            centroid.centre_of_mass(moments),
            centroid.plain_centroid(moments),
        )
        return Estimate(direction, EstimateStats(weights, mass, moments, nu))

    def update(state: ARSState, est: Estimate):
        step, opt_state = optimizer_step(optimizer, state, est.direction)
        return step, state.replace(opt_state=opt_state)

    return build(
        Rule(init, nu_of, estimate, update),
        ARSState,
        diagonal(noise, memory_budget, p, True),
        rank_based=False,  # reward differences scaled by their spread
        track_best=track_best,
    )
