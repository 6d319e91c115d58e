"""OpenAI-ES (Salimans et al. 2017), written as a centre-of-mass displacement."""

from __future__ import annotations

import jax
import optax

from jaxes import centroid, shaping
from jaxes.checks import check_positive
from jaxes.noise import NoiseSource
from jaxes.strategies import _tell, settings
from jaxes.strategies.base import EstimateStats
from jaxes.strategies.core import Estimate, Rule, build
from jaxes.strategies.samplers import Population, diagonal
from jaxes.strategies.state import StrategyState, state_dataclass
from jaxes.types import Params, Strategy


@state_dataclass
class OpenESState(StrategyState):
    """OpenAI-ES's state; its own field is ``opt_state``, the optax state (float32, like θ)."""

    strategy = "open_es"
    opt_state: optax.OptState


@settings.accepts_old_noise_keywords
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

    The ascent direction is ``g = (m̄/σ²)(M - c)`` (``jaxes.centroid``), exactly the classical
    ``(1/(Pσ)) Σ (w_i - w̄) ε_i``; ``optimizer`` gets ``g - l2_coeff θ``. Fitness is maximised.

    Args:
      population_size: ``P`` (a static int); even when ``antithetic``.
      sigma: perturbation scale, a constant > 0 or an optax schedule of the generation.
      optimizer: any optax transformation (on the float32 master θ); default
        ``optax.adam(learning_rate)``.
      learning_rate: Adam's step size, used only when ``optimizer`` is ``None``: a number > 0
        or an optax schedule of Adam's step count (the updates applied).
      l2_coeff: L2 penalty coefficient (>= 0) on θ.
      antithetic: sample ``(+ε, -ε)`` pairs; then the plain centroid is exactly θ.
      fitness_shaping, noise, sigma_floor, memory_budget, track_best: the keywords every
        strategy shares (``jaxes.strategies``).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> es = open_es(population_size=8, sigma=0.1, learning_rate=0.1)
      >>> state = es.init(jax.random.key(0), {"x": jnp.ones(3)})
      >>> population, state = es.ask(jax.random.key(1), state)
      >>> state, info = es.tell(state, -jnp.sum(population["x"] ** 2, axis=1))
      >>> bool(jnp.sum(state.params["x"] ** 2) < 3.0), bool(info.applied)
      (True, True)
    """
    p = settings.check_population_size(population_size, antithetic)
    l2 = check_positive("l2_coeff", l2_coeff, allow_zero=True)
    optimizer = settings.check_optimizer(
        optimizer, lambda: optax.adam(settings.check_learning_rate(learning_rate))
    )
    shape_fitness = shaping.get_shaping(fitness_shaping)
    scale, initial_scale = settings.scheduled_sigma(sigma, sigma_floor)
    # With no L2 term, a low-rank sum can stay factors for an optimizer that takes them.
    write = _tell.factored_write(optimizer) if settings.is_zero(l2) else None

    def init(master: Params):
        return {"opt_state": optimizer.init(master)}, initial_scale(master)

    def estimate(state: OpenESState, fitness, population: Population) -> Estimate:
        sig = scale(state)
        weights = shape_fitness(fitness)
        mass = centroid.masses(weights)
        moments = population.moments(mass, keep_factors=write is not None)
        direction = centroid.displacement_update(moments, sig)
        return Estimate(direction, EstimateStats(weights, mass, moments, sig))

    def update(state: OpenESState, est: Estimate):
        ascent = jax.tree.map(lambda g, x: g - l2 * x, est.direction, state.params)
        step, opt_state = _tell.optimizer_step(optimizer, state, ascent)
        return step, state.replace(opt_state=opt_state)

    return build(
        Rule(init, scale, estimate, update, write=write),
        OpenESState,
        diagonal(noise, memory_budget, p, antithetic),
        rank_based=settings.is_rank_shaping(fitness_shaping),
        track_best=track_best,
    )
