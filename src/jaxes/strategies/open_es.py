"""OpenAI-ES (Salimans et al. 2017), written as a centre-of-mass displacement."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxes import centroid
from jaxes import noise as noise_lib
from jaxes import shaping as shaping_lib
from jaxes.strategies import common
from jaxes.types import Params, Strategy


class OpenESState(NamedTuple):
    """Everything that changes between generations.

    Attributes:
      params: the model θ.
      opt_state: the optax optimizer state.
      key: the key of the latest ``ask``; every perturbation is rebuilt from it.
      generation: how many ``tell`` calls have happened.
      noise_state: the noise table (``None`` for Gaussian noise).
      best_params: the best member seen so far.
      best_fitness: its fitness (``-inf`` before the first ``tell``).
    """

    params: Params
    opt_state: optax.OptState
    key: jax.Array
    generation: jax.Array
    noise_state: noise_lib.NoiseState
    best_params: Params
    best_fitness: jax.Array


OpenESInfo = common.StrategyInfo  # the same diagnostics as every strategy


EstimateStats = common.EstimateStats


def open_es(
    population_size: int,
    sigma=0.05,
    optimizer: optax.GradientTransformation | None = None,
    *,
    learning_rate: float = 1e-2,
    l2_coeff: float = 0.0,
    antithetic: bool = True,
    fitness_shaping="centered_rank",
    noise: str = "gaussian",
    noise_table_size: int = 2**24,
    sigma_floor: float = 0.0,
    noise_batch_size: int | None = None,
) -> Strategy:
    """OpenAI-ES: perturb, rank, and step toward the reward-weighted centre of mass.

    The step direction is ``g = (m̄/σ²)(M - c)`` (``jaxes.centroid``), which equals the classical
    estimator ``(1/(Pσ)) Σ (w_i - w̄) ε_i`` exactly; it is handed to ``optimizer`` as an ascent
    direction, with ``l2_coeff * θ`` subtracted first. Fitness is maximised.

    Args:
      population_size: ``P``; even when ``antithetic``.
      sigma: perturbation scale, a constant > 0 or an optax schedule of the generation.
      optimizer: any optax transformation; defaults to ``optax.adam(learning_rate)``.
      learning_rate: used only when ``optimizer`` is ``None``.
      l2_coeff: L2 penalty coefficient (>= 0) on θ.
      antithetic: sample ``(+ε, -ε)`` pairs; then the plain centroid is exactly θ.
      fitness_shaping: ``"centered_rank"``, ``"z_score"``, ``"raw"`` or a callable.
      noise: ``"gaussian"`` (drawn from keys) or ``"table"`` (windows of a shared table).
      noise_table_size: floats in the table when ``noise="table"``.
      sigma_floor: lower bound applied to a scheduled σ.
      noise_batch_size: perturbations ``tell`` rebuilds at once (``None``: all; smaller saves
        memory for big models).

    Returns:
      A ``Strategy``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> es = open_es(population_size=8, sigma=0.1, learning_rate=0.1)
      >>> state = es.init(jax.random.key(0), {"x": jnp.ones(3)})
      >>> population, state = es.ask(jax.random.key(1), state)
      >>> population["x"].shape
      (8, 3)
      >>> fitness = -jnp.sum(population["x"] ** 2, axis=1)
      >>> state, info = es.tell(state, fitness)
      >>> bool(jnp.all(state.params["x"] < 1.0))
      True
    """
    p = common.check_population_size(population_size, antithetic)
    sigma_at = common.sigma_schedule(sigma, sigma_floor)
    l2 = common.check_positive("l2_coeff", l2_coeff, allow_zero=True)
    optimizer = common.check_optimizer(
        optimizer, lambda: optax.adam(common.check_positive("learning_rate", learning_rate))
    )
    shape_fitness = shaping_lib.get_shaping(fitness_shaping)
    perturbations = common.make_perturbations(
        noise, noise_table_size, p, antithetic, noise_batch_size
    )

    def init(key: jax.Array, params: Params) -> OpenESState:
        fields = common.common_fields(perturbations, key, params)
        return OpenESState(opt_state=optimizer.init(fields["params"]), **fields)

    def ask(key: jax.Array, state: OpenESState):
        state = state._replace(key=key)
        sig = sigma_at(state.generation)
        population = perturbations.population(state.noise_state, key, state.params, sig)
        return population, state

    def member(state: OpenESState, i) -> Params:
        sig = sigma_at(state.generation)
        return perturbations.member(state.noise_state, state.key, i, state.params, sig)

    def estimate(state: OpenESState, fitness):
        fitness = common.check_fitness(fitness, p)
        sig = sigma_at(state.generation)
        weights = shape_fitness(fitness)
        mass = centroid.masses(weights)
        moments = common.population_moments(perturbations, state, mass, sig)
        direction = centroid.displacement_update(moments, sig)
        return direction, common.EstimateStats(weights, mass, moments, sig)

    def tell(state: OpenESState, fitness):
        direction, stats = estimate(state, fitness)
        ascent = jax.tree.map(lambda g, x: g - l2 * x.astype(jnp.float32), direction, state.params)
        params, opt_state = common.optimizer_step(optimizer, state, ascent)
        return common.finish_tell(
            state, fitness, params, member, stats.moments, stats.sigma, opt_state=opt_state
        )

    return Strategy(
        init=init, ask=ask, tell=tell, member=member, estimate=estimate, population_size=p
    )
