"""Noise-Reuse ES (Li, Wu, Vicol et al. 2023): one noise per particle for a whole unroll.

The setting is PES's (``jaxes.strategies.pes``): θ drives an inner computation of ``T``
steps, run in truncations of ``K``, each member a particle whose inner state the task carries
(``jaxes.tasks.unrolled``). NRES draws each particle's antithetic noise ``ε_i`` once, at an
unroll's first truncation, and reuses it for every truncation after it: the particle runs the
whole unroll at ``θ_t + σε_i``. A truncation's estimate is OpenAI-ES's with that noise::

    g = (1/(Pσ²)) Σ_i (w_i - w̄) σε_i = (m̄/σ²)(M - c)

a centre-of-mass displacement of the members evaluated. Since every step of the unroll so far
saw the same ``ε_i``, ``E[g]`` is the gradient of the truncation's loss through the whole
history, as PES's is, with no sums kept (docs/maths.md), whose size grows with the
truncations told.

The noise is kept as its key: ``ask`` keeps the unroll's key (``Rule.ask_key``, the one thing
the strategy core gained for NRES: a core ``ask`` always took its own key) and draws the same
``ε_i`` from it, around the current θ. The counter moves in ``Rule.finish``, at every ``tell``
with a pending ``ask``, applied or not: the task's inner states moved on either way.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from jaxes import centroid, shaping
from jaxes.noise import NoiseSource
from jaxes.strategies import _tell, settings
from jaxes.strategies.base import EstimateStats
from jaxes.strategies.core import Estimate, Rule, build
from jaxes.strategies.pes import next_truncation, unroll_settings
from jaxes.strategies.samplers import Population, diagonal
from jaxes.strategies.state import StrategyState, state_dataclass
from jaxes.types import Params, Strategy


@state_dataclass
class NRESState(StrategyState):
    """NRES's state; its own fields: ``opt_state`` (optax's, on θ) and ``truncation`` (the
    truncations told in this unroll, from 0 to ``T/K - 1``). The particles' noise is the shared
    ``key``'s, kept from the unroll's first ``ask``."""

    strategy = "nres"
    opt_state: optax.OptState
    truncation: jax.Array


def nres(
    population_size: int,
    sigma=0.05,
    optimizer: optax.GradientTransformation | None = None,
    *,
    learning_rate=0.03,
    unroll_length: int = 100,
    truncation_length: int = 10,
    fitness_shaping="raw",
    noise: str | NoiseSource = "auto",
    memory_budget: int | None = None,
    track_best: bool = True,
) -> Strategy:
    """Noise-Reuse ES: antithetic particles that keep their noise for a whole unroll, and
    OpenAI-ES's estimate from it at every truncation (the module's docstring).

    Run it on an unrolled task (``jaxes.tasks.unrolled.unrolled_task``) built with the same
    ``unroll_length`` and ``truncation_length``: each generation (``ask``, the task's
    ``evaluate`` and ``update``, ``tell``) is one truncation. Not for ``jaxes train``: its Brax
    and gymnax tasks are episodes, with no inner state carried between generations.

    Args:
      population_size: ``P`` (a static int), even: antithetic pairs ``±ε``.
      sigma: perturbation scale, a number > 0 (constant: every truncation of an unroll
        perturbs by the same ``σε_i``).
      optimizer: any optax transformation (on θ), given the estimate as its ascent direction;
        default ``optax.adam(learning_rate)``.
      learning_rate: Adam's step size (a number > 0) when ``optimizer`` is ``None``.
      unroll_length: ``T``, inner steps in a whole unroll.
      truncation_length: ``K``, inner steps per generation; it must divide ``T``.
      fitness_shaping: ``"raw"`` by default, which keeps the estimate unbiased (a rank
        shaping is a nonlinear map of the fitness: its estimate is not the gradient).
      noise, memory_budget, track_best: the keywords every strategy shares
        (``jaxes.strategies``).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> es = nres(4, sigma=0.1, unroll_length=4, truncation_length=2)
      >>> state = es.init(jax.random.key(0), jnp.zeros(3))
      >>> first, state = es.ask(jax.random.key(1), state)
      >>> state, _ = es.tell(state, -jnp.sum(first**2, axis=1))
      >>> again, state = es.ask(jax.random.key(2), state)  # same unroll: same noise
      >>> bool(jnp.allclose(again - state.params, first)), int(state.truncation)
      (True, 1)
    """
    p = settings.check_population_size(population_size, antithetic=True)
    truncations, (scale, initial_scale), optimizer = unroll_settings(
        "nres", sigma, optimizer, learning_rate, unroll_length, truncation_length
    )
    shape_fitness = shaping.get_shaping(fitness_shaping)

    def init(master: Params):
        own = {"opt_state": optimizer.init(master), "truncation": jnp.zeros((), jnp.int32)}
        return own, initial_scale(master)

    def ask_key(state: NRESState, key: jax.Array) -> jax.Array:
        return jnp.where(state.truncation == 0, key, state.key)

    def estimate(state: NRESState, fitness, population: Population) -> Estimate:
        sig = scale(state)
        weights = shape_fitness(fitness)
        mass = centroid.masses(weights)
        moments = population.moments(mass)
        direction = centroid.displacement_update(moments, sig)
        return Estimate(direction, EstimateStats(weights, mass, moments, sig))

    def update(state: NRESState, est: Estimate):
        step, opt_state = _tell.optimizer_step(optimizer, state, est.direction)
        return step, state.replace(opt_state=opt_state)

    def finish(told: NRESState, state: NRESState, info):
        return state.replace(truncation=next_truncation(told, truncations)[0]), info

    return build(
        Rule(init, scale, estimate, update, finish=finish, ask_key=ask_key),
        NRESState,
        diagonal(noise, memory_budget, p, True),
        rank_based=settings.is_rank_shaping(fitness_shaping),
        track_best=track_best,
    )
