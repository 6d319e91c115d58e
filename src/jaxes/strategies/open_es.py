"""OpenAI-ES (Salimans et al. 2017), written as a centre-of-mass displacement."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import optax

from jaxes import centroid, trees
from jaxes import shaping as shaping_lib
from jaxes.checks import check_positive
from jaxes.noise import NoiseSource
from jaxes.strategies._settings import (
    NoiseSettings,
    check_optimizer,
    check_population_size,
    is_rank_shaping,
    sigma_schedule,
)
from jaxes.strategies._spec import Estimate, StrategySpec, build
from jaxes.strategies._state import scalar_dtype
from jaxes.strategies._tell import optimizer_step
from jaxes.strategies.base import BestMember, EstimateStats, strategy_state
from jaxes.types import Params, Strategy


@strategy_state
class OpenESState(NamedTuple):
    """OpenAI-ES's state: everything that changes between generations.

    Attributes:
      opt_state: the optax optimizer state (float32, like θ).
    """

    params: Params
    dtypes: Any
    opt_state: optax.OptState
    key: jax.Array
    generation: jax.Array
    noise_state: Any
    pending: jax.Array
    fitness: jax.Array
    best_fitness: jax.Array
    best: BestMember


def open_es(
    population_size: int,
    sigma=0.05,
    optimizer: optax.GradientTransformation | None = None,
    *,
    learning_rate=0.03,
    l2_coeff=0.0,
    antithetic: bool = True,
    fitness_shaping="centered_rank",
    noise: str | NoiseSource = "auto",
    sigma_floor=None,
    memory_budget: int | None = None,
    track_best: bool = True,
) -> Strategy:
    """OpenAI-ES: perturb, rank, and step toward the reward-weighted centre of mass.

    The step direction is ``g = (m̄/σ²)(M - c)`` (``jaxes.centroid``), which equals the classical
    estimator ``(1/(Pσ)) Σ (w_i - w̄) ε_i`` exactly; it is handed to ``optimizer`` as an ascent
    direction, with ``l2_coeff * θ`` subtracted first. Fitness is maximised.

    Numeric settings (``sigma``, ``learning_rate``, ``l2_coeff``, ``sigma_floor``) may be JAX
    scalars, so a run can be ``vmap``-ed over a grid of them; they are checked when concrete.

    Args:
      population_size: ``P`` (a static int); even when ``antithetic``.
      sigma: perturbation scale, a constant > 0 or an optax schedule of the generation.
      optimizer: any optax transformation; defaults to ``optax.adam(learning_rate)``. It runs
        on the float32 master copy of θ, whatever the params' dtype.
      learning_rate: used only when ``optimizer`` is ``None``.
      l2_coeff: L2 penalty coefficient (>= 0) on θ.
      antithetic: sample ``(+ε, -ε)`` pairs; then the plain centroid is exactly θ.
      fitness_shaping: ``"centered_rank"``, ``"z_score"``, ``"raw"`` or a callable.
      noise: where members' noise comes from: a ``jaxes.noise`` source
        (``jaxes.noise.lowrank(rank=4)``: rank-4 products ``A Bᵀ/√r`` for every leaf with two
        or more axes, clamped per leaf to ``min(m, n)``; ``jaxes.noise.noise_table(size)``: a
        table of ``size`` floats; ``jaxes.noise.gaussian()``) or its name: ``"auto"`` (the
        default: ``"gaussian"`` for a population of fewer than ``2**14`` noise values,
        ``"table"`` otherwise; ``jaxes.noise.auto``), ``"table"`` (windows of a noise table
        sized to the problem, ``jaxes.noise.table_size``: about ``3d``, at least ``2**16``,
        at most ``2**24``), ``"gaussian"`` (fresh draws from keys) or ``"lowrank"`` (rank 1).
      sigma_floor: σ never goes below it (> 0), whatever a schedule returns; ``None`` is
        ``1e-8`` for a float32 state, finer for float64 (``default_sigma_floor``).
      memory_budget: bytes of members (evaluation) or rebuilt noise (``tell``) in flight at
        once; ``None`` is 64 MiB and at least one member. It sets how many perturbations
        ``tell`` rebuilds at once.
      track_best: keep what is needed to rebuild the best member seen
        (``strategy.best_params``): a float32 copy of θ, taken when a better member appears.
        False keeps only its fitness.

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
      >>> bool(jnp.sum(state.params["x"] ** 2) < 3.0), bool(info.applied)
      (True, True)
    """
    p = check_population_size(population_size, antithetic)
    sigma_at = sigma_schedule(sigma, sigma_floor)
    l2 = check_positive("l2_coeff", l2_coeff, allow_zero=True)
    optimizer = check_optimizer(
        optimizer, lambda: optax.adam(check_positive("learning_rate", learning_rate))
    )
    shape_fitness = shaping_lib.get_shaping(fitness_shaping)

    def scale(state: OpenESState) -> jax.Array:
        return sigma_at(state.generation, scalar_dtype(state))

    def init(master: Params):
        return {"opt_state": optimizer.init(master)}, sigma_at(0, trees.state_dtype(master))

    def estimate(state: OpenESState, fitness, moments_of) -> Estimate:
        sig = scale(state)
        weights = shape_fitness(fitness)
        mass = centroid.masses(weights)
        moments = moments_of(mass)
        direction = centroid.displacement_update(moments, sig)
        return Estimate(direction, EstimateStats(weights, mass, moments, sig))

    def update(state: OpenESState, est: Estimate):
        ascent = jax.tree.map(lambda g, x: g - l2 * x, est.direction, state.params)
        step, opt_state = optimizer_step(optimizer, state, ascent)
        return step, {"opt_state": opt_state}

    spec = StrategySpec(
        name="open_es",
        state_type=OpenESState,
        population_size=p,
        antithetic=antithetic,
        rank_based=is_rank_shaping(fitness_shaping),
        scale=scale,
        init=init,
        estimate=estimate,
        update=update,
    )
    return build(spec, NoiseSettings(noise, memory_budget), track_best)
