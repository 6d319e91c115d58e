"""Persistent ES (Vicol, Metz & Sohl-Dickstein 2021): unbiased gradient estimates of an
unrolled computation from its truncations.

A meta-parameter θ drives an inner computation of ``T`` steps (``unroll_length``) that runs
in truncations of ``K`` steps (``truncation_length``), one per generation. Each member is a
particle that keeps its inner state from truncation to truncation: the task carries those
states (``jaxes.tasks.unrolled``: its state stacks one per member, and restarts them after
``T/K`` truncations), the strategy carries the noise. PES draws fresh antithetic noise every
truncation and keeps, per particle, the sum ``ξ_i`` of the displacements ``σε_i`` it had in this
unroll; a truncation's estimate weights those sums::

    g = (1/(Pσ²)) Σ_i (w_i - w̄) ξ_i = (m̄/σ²)(M_ξ - c_ξ)

the centre-of-mass displacement of the points ``θ + ξ_i``, not of the members evaluated
(``c_ξ = θ``: antithetic sums cancel). Since a truncation's loss depends on every
perturbation of the unroll so far, and ``ξ_i`` holds them all, ``E[g]`` is the gradient of that
loss through the whole history (docs/maths.md); summed over an unroll, of the whole unroll's
(Gaussian-smoothed) loss. Truncated ES weights the fresh ``ε_i`` alone, and is biased.

What the strategy core gives and what it lacks: ``Population`` has weighted sums of this
truncation's displacements only, so the estimate reads each member's own displacement through
the sampler it closes over (``samplers.Diagonal.displacement``); the counter and the sums move
in ``Rule.finish``, at every ``tell`` with a pending ``ask``, applied or not, since the task's
inner states moved on either way. Nothing was added to the core for PES (NRES added
``Rule.ask_key``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from jaxes import centroid, shaping
from jaxes.checks import check_positive, check_truncations
from jaxes.noise import NoiseSource
from jaxes.strategies import _tell, settings
from jaxes.strategies.base import EstimateStats
from jaxes.strategies.core import Estimate, Rule, build
from jaxes.strategies.samplers import diagonal
from jaxes.strategies.state import StrategyState, state_dataclass
from jaxes.types import Params, Strategy


@state_dataclass
class PESState(StrategyState):
    """PES's state; its own fields: ``opt_state`` (optax's, on θ), ``noise_sum`` (each
    particle's displacements summed over the truncations told in this unroll: a pytree like the
    params with a leading axis ``P``, float32; zeros at an unroll's start) and ``truncation``
    (the truncations told in this unroll, from 0 to ``T/K - 1``)."""

    strategy = "pes"
    opt_state: optax.OptState
    noise_sum: Params
    truncation: jax.Array


def unroll_settings(name, sigma, optimizer, learning_rate, unroll_length, truncation_length):
    """The settings PES and NRES share, checked: ``(truncations per unroll, σ's
    (scale, initial) pair, optimizer)``. σ is one number: a schedule would change the noise's
    scale inside an unroll, which the estimates' ``1/σ²`` does not follow."""
    if callable(sigma):
        raise ValueError(
            f"sigma: {name} keeps one σ for a whole unroll (its estimate divides the unroll's "
            "summed noise by it), so give a number > 0, not a schedule"
        )
    check_positive("sigma", sigma)
    truncations = check_truncations(unroll_length, truncation_length)
    optimizer = settings.check_optimizer(
        optimizer, lambda: optax.adam(check_positive("learning_rate", learning_rate))
    )
    return truncations, settings.scheduled_sigma(sigma), optimizer


def next_truncation(told, truncations: int):
    """``(truncation, ends)`` after a ``tell`` of ``told``: the counter moved on (modulo
    ``T/K``) where an ``ask`` was pending, and whether this ``tell`` ended the unroll."""
    ends = told.pending & (told.truncation + 1 == truncations)
    moved = jnp.where(told.pending, (told.truncation + 1) % truncations, told.truncation)
    return moved.astype(told.truncation.dtype), ends


def pes(
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
    """Persistent ES: antithetic particles, fresh noise every truncation, and an estimate
    from each particle's noise summed over the unroll so far (the module's docstring).

    Run it on an unrolled task (``jaxes.tasks.unrolled.unrolled_task``) built with the same
    ``unroll_length`` and ``truncation_length``: each generation (``ask``, the task's
    ``evaluate`` and ``update``, ``tell``) is one truncation. Not for ``jaxes train``: its Brax
    and gymnax tasks are episodes, with no inner state carried between generations.

    Args:
      population_size: ``P`` (a static int), even: antithetic pairs ``±ε``.
      sigma: perturbation scale, a number > 0 (constant: the estimate divides the unroll's
        summed noise by σ²).
      optimizer: any optax transformation (on θ), given the estimate as its ascent direction;
        default ``optax.adam(learning_rate)``.
      learning_rate: Adam's step size (a number > 0) when ``optimizer`` is ``None``.
      unroll_length: ``T``, inner steps in a whole unroll.
      truncation_length: ``K``, inner steps per generation; it must divide ``T``.
      fitness_shaping: ``"raw"`` by default, which keeps the estimate unbiased (a rank
        shaping is a nonlinear map of the fitness: its estimate is not the gradient).
      noise: Gaussian sources only (``"auto"``, ``"gaussian"``, ``"table"``): the sums are
        dense, and the unbiasedness is Stein's identity for Gaussian noise.
      memory_budget, track_best: the keywords every strategy shares (``jaxes.strategies``).
        The state holds ``P`` copies of θ's size (``noise_sum``): meant for meta-parameters.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jaxes.tasks.unrolled import step_size_task
      >>> task = step_size_task(8, unroll_length=20, truncation_length=5)
      >>> es = pes(8, sigma=0.1, learning_rate=0.1, unroll_length=20, truncation_length=5)
      >>> state, task_state = es.init(jax.random.key(0), task.init_params(None)), task.init(None)
      >>> for key in jax.random.split(jax.random.key(1), 4):
      ...     population, state = es.ask(key, state)
      ...     fitness, inner, _ = task.evaluate(key, population, task_state)
      ...     task_state = task.update(task_state, inner)
      ...     state, info = es.tell(state, fitness)
      >>> int(state.truncation), float(jnp.abs(state.noise_sum).max())  # an unroll's end
      (0, 0.0)
      >>> bool(state.params[0] > -4.0)  # a longer step lowers the meta-loss
      True
    """
    p = settings.check_population_size(population_size, antithetic=True)
    truncations, (scale, initial_scale), optimizer = unroll_settings(
        "pes", sigma, optimizer, learning_rate, unroll_length, truncation_length
    )
    shape_fitness = shaping.get_shaping(fitness_shaping)
    sampler = diagonal(noise, memory_budget, p, True, "the PES estimate (Stein's identity)")

    def noise_sums(state: PESState):
        """``ξ_i``: each member's displacement in this ``ask`` plus its sum before it."""
        sig = scale(state)
        deltas = jax.vmap(lambda i: sampler.displacement(state, i, sig))(jnp.arange(p))
        return jax.tree.map(lambda s, d: s + d.astype(s.dtype), state.noise_sum, deltas)

    def init(master: Params):
        zeros = jax.tree.map(lambda x: jnp.zeros((p, *x.shape), x.dtype), master)
        own = {"opt_state": optimizer.init(master), "noise_sum": zeros}
        return {**own, "truncation": jnp.zeros((), jnp.int32)}, initial_scale(master)

    def estimate(state: PESState, fitness, population) -> Estimate:
        del population  # its moments are of this truncation's noise alone
        sig = scale(state)
        weights = shape_fitness(fitness)
        mass = centroid.masses(weights)
        moments = centroid.moments(noise_sums(state), mass)
        direction = centroid.displacement_update(moments, sig)
        return Estimate(direction, EstimateStats(weights, mass, moments, sig))

    def update(state: PESState, est: Estimate):
        step, opt_state = _tell.optimizer_step(optimizer, state, est.direction)
        return step, state.replace(opt_state=opt_state)

    def finish(told: PESState, state: PESState, info):
        truncation, ends = next_truncation(told, truncations)
        sums = jax.tree.map(
            lambda new, old: jnp.where(ends, 0, jnp.where(told.pending, new, old)),
            noise_sums(told),
            told.noise_sum,
        )
        return state.replace(noise_sum=sums, truncation=truncation), info

    return build(
        Rule(init, scale, estimate, update, finish=finish),
        PESState,
        sampler,
        rank_based=settings.is_rank_shaping(fitness_shaping),
        track_best=track_best,
    )
