"""Setting checks and small helpers shared by every strategy factory (internal: the public
API is the factories, their states and ``StrategyInfo``/``EstimateStats``)."""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxes import centroid
from jaxes import noise as noise_lib
from jaxes.checks import check_int, check_positive

Schedule = Callable[[jax.Array], jax.Array]


def check_population_size(population_size, antithetic: bool) -> int:
    """``P`` must be an int >= 2, and even with antithetic pairs."""
    if (
        not isinstance(population_size, numbers.Integral)
        or isinstance(population_size, bool)
        or population_size < 2
    ):
        raise ValueError(f"population_size: expected an int >= 2, got {population_size!r}")
    if antithetic and population_size % 2:
        raise ValueError(
            f"population_size: antithetic pairs need an even population, got {population_size}; "
            f"use {population_size - 1} or {population_size + 1}, or antithetic=False"
        )
    return int(population_size)


def sigma_schedule(sigma, sigma_floor: float = 0.0) -> Schedule:
    """σ as a function of the generation: a constant > 0 or an optax schedule, floored.

    Example:
      >>> import optax
      >>> s = sigma_schedule(optax.exponential_decay(0.1, 1, 0.5), sigma_floor=0.02)
      >>> [round(float(s(t)), 3) for t in (0, 1, 5)]
      [0.1, 0.05, 0.02]
    """
    floor = check_positive("sigma_floor", sigma_floor, allow_zero=True)
    if callable(sigma):
        return lambda generation: jnp.maximum(jnp.asarray(sigma(generation), jnp.float32), floor)
    value = max(check_positive("sigma", sigma), floor)
    return lambda generation: jnp.float32(value)


def check_batch_size(batch_size) -> int | None:
    """``None`` or an int >= 1."""
    return None if batch_size is None else check_int("noise_batch_size", batch_size, 1)


NOISE_SOURCES = ("gaussian", "table")


def make_perturbations(
    noise: str, noise_table_size: int, population_size: int, antithetic: bool, batch_size
) -> noise_lib.Perturbations:
    """Builds the static perturbation recipe from a strategy's settings."""
    if noise == "gaussian":
        source = noise_lib.gaussian()
    elif noise == "table":
        source = noise_lib.noise_table(noise_table_size)
    else:
        raise ValueError(f"noise: unknown source {noise!r}; allowed: {list(NOISE_SOURCES)}")
    return noise_lib.Perturbations(
        source=source,
        population_size=population_size,
        antithetic=bool(antithetic),
        batch_size=check_batch_size(batch_size),
    )


def check_fitness(fitness, population_size: int) -> jax.Array:
    """Fitness must be a floating array of shape ``(P,)``; checked at trace time."""
    shape = jnp.shape(fitness)
    if shape != (population_size,):
        raise ValueError(
            f"fitness: expected shape ({population_size},) (one value per member), got {shape}"
        )
    dtype = jnp.result_type(fitness)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"fitness: expected a floating dtype, got {dtype}; cast it to float32")
    return jnp.asarray(fitness)


def finite_stats(fitness: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Mean, max and min over the finite fitness values (NaN if none is finite)."""
    finite = jnp.isfinite(fitness)
    count = jnp.sum(finite)
    mean = jnp.where(count > 0, jnp.sum(jnp.where(finite, fitness, 0.0)) / count, jnp.nan)
    fmax = jnp.where(count > 0, jnp.max(jnp.where(finite, fitness, -jnp.inf)), jnp.nan)
    fmin = jnp.where(count > 0, jnp.min(jnp.where(finite, fitness, jnp.inf)), jnp.nan)
    return mean, fmax, fmin


def population_moments(
    perturbations: noise_lib.Perturbations,
    state,
    mass: jax.Array,
    sigma,
    squares: bool = False,
) -> centroid.PopulationMoments:
    """``PopulationMoments`` of the population the last ``ask`` drew (``state.key``), from
    regenerated noise.

    One pass over the noise gives ``Σ m_i δ_i`` and ``Σ δ_i`` (and, with ``squares``,
    ``Σ m_i δ_i²`` and ``Σ δ_i²``), where ``δ_i = σ ⊙ s_i ε_{j(i)}``; ``sigma`` is a scalar
    or a pytree like the params. ``state`` is any strategy state with ``params``, ``key`` and
    ``noise_state``.
    """
    like = state.params
    rows = jnp.stack([mass, jnp.ones_like(mass)])
    sums, square_sums = perturbations.sums_and_squares(
        state.noise_state, state.key, like, rows, rows if squares else None
    )
    sig = noise_lib.broadcast_like(sigma, like)
    scaled = [jax.tree.map(lambda s, g, k=k: g * s[k], sums, sig) for k in (0, 1)]
    if squares:
        sq = [jax.tree.map(lambda s, g, k=k: g * g * s[k], square_sums, sig) for k in (0, 1)]
    else:
        sq = [None, None]
    return centroid.PopulationMoments(
        total_mass=jnp.sum(mass),
        count=perturbations.population_size,
        mass_moment=scaled[0],
        displacement_sum=scaled[1],
        mass_square_moment=sq[0],
        square_sum=sq[1],
    )


class EstimateStats(NamedTuple):
    """What ``estimate`` learnt about the population besides the direction.

    Attributes:
      weights: ``(P,)`` shaped fitness.
      masses: ``(P,)`` non-negative masses (``weights - min(weights)``, or the recombination
        weights themselves for CMA-ES).
      moments: the population's ``centroid.PopulationMoments`` (from regenerated noise).
      sigma: the perturbation scale of this population (scalar or per-coordinate pytree).
    """

    weights: jax.Array
    masses: jax.Array
    moments: centroid.PopulationMoments
    sigma: object


class StrategyInfo(NamedTuple):
    """Per-generation diagnostics every strategy reports (fitness maximised; statistics over
    finite members), so logs and ``metrics.jsonl`` have the same columns for every strategy.

    Attributes:
      fitness_mean, fitness_max, fitness_min: over this generation's finite fitness values.
      best_fitness, best_params: the best member seen so far.
      update_norm: ``‖θ' - θ‖``.
      com_displacement_norm: ``‖M - θ‖`` (reward-weighted centre of mass from the model).
      centroid_offset_norm: ``‖c - θ‖`` (plain centroid; 0 with antithetic pairs).
      total_mass: ``Σ m_i``.
      sigma: the mean perturbation scale over coordinates.
    """

    fitness_mean: jax.Array
    fitness_max: jax.Array
    fitness_min: jax.Array
    best_fitness: jax.Array
    best_params: object
    update_norm: jax.Array
    com_displacement_norm: jax.Array
    centroid_offset_norm: jax.Array
    total_mass: jax.Array
    sigma: jax.Array


def track_best(best_fitness, best_params, fitness, member: Callable[[jax.Array], object]):
    """The best (fitness, params) so far, given this generation's fitness and a way to rebuild
    member ``i`` (non-finite fitness never counts as best)."""
    ranked = jnp.where(jnp.isfinite(fitness), fitness, -jnp.inf)
    best_i = jnp.argmax(ranked)
    improved = ranked[best_i] > best_fitness
    new_fitness = jnp.where(improved, ranked[best_i], best_fitness).astype(jnp.float32)
    new_params = jax.tree.map(
        lambda new, old: jnp.where(improved, new, old), member(best_i), best_params
    )
    return new_fitness, new_params


def strategy_info(fitness, best_fitness, best_params, old_params, new_params, moments, sigma):
    """``StrategyInfo`` for one ``tell``."""
    f_mean, f_max, f_min = finite_stats(fitness)
    sig_leaves = jax.tree.leaves(sigma)
    mean_sigma = sum(jnp.sum(x) for x in sig_leaves) / sum(jnp.size(x) for x in sig_leaves)
    return StrategyInfo(
        fitness_mean=f_mean,
        fitness_max=f_max,
        fitness_min=f_min,
        best_fitness=best_fitness,
        best_params=best_params,
        update_norm=centroid.tree_norm(jax.tree.map(jnp.subtract, new_params, old_params)),
        com_displacement_norm=centroid.tree_norm(centroid.centre_of_mass(moments)),
        centroid_offset_norm=centroid.tree_norm(centroid.plain_centroid(moments)),
        total_mass=moments.total_mass,
        sigma=jnp.asarray(mean_sigma, jnp.float32),
    )


def common_fields(perturbations: noise_lib.Perturbations, key: jax.Array, params) -> dict:
    """The state fields every strategy starts with: ``params`` (checked, strongly typed),
    ``key`` (of the first ``ask``), ``generation``, ``noise_state`` and the best-so-far
    (a copy of the params, so callers may donate the state to ``jit``)."""
    params = noise_lib.check_params(params)
    table_key, ask_key = jax.random.split(key)
    return {
        "params": params,
        "key": ask_key,
        "generation": jnp.zeros((), jnp.int32),
        "noise_state": perturbations.source.init(table_key, params),
        "best_params": jax.tree.map(jnp.copy, params),
        "best_fitness": jnp.full((), -jnp.inf, jnp.float32),
    }


def finish_tell(state, fitness, params, member, moments, info_sigma, **changes):
    """The end of every ``tell``: best-so-far, ``StrategyInfo`` and the next state.

    ``member(state, i)`` rebuilds member ``i`` of the population being told; ``info_sigma`` is
    the σ reported in the info; ``changes`` are the strategy's own new state fields (σ,
    optimizer state, paths, ...).
    """
    best_fitness, best_params = track_best(
        state.best_fitness, state.best_params, fitness, lambda i: member(state, i)
    )
    info = strategy_info(
        fitness, best_fitness, best_params, state.params, params, moments, info_sigma
    )
    new_state = state._replace(
        params=params,
        generation=state.generation + 1,
        best_params=best_params,
        best_fitness=best_fitness,
        **changes,
    )
    return new_state, info


def per_coordinate(value, params):
    """A float32 pytree like ``params`` holding ``value`` (a scalar or such a pytree)."""
    return jax.tree.map(
        lambda v, x: jnp.broadcast_to(jnp.asarray(v, jnp.float32), jnp.shape(x)),
        noise_lib.broadcast_like(value, params),
        params,
    )


def check_sigma(sigma) -> None:
    """A per-coordinate σ: a number > 0, or a pytree whose every entry is > 0."""
    leaves = jax.tree.leaves(sigma)
    if not leaves:
        raise ValueError("sigma: expected a number > 0 or a pytree of them, got an empty pytree")
    if len(leaves) == 1 and isinstance(leaves[0], numbers.Real):
        check_positive("sigma", leaves[0])
        return
    for leaf in leaves:
        values = np.asarray(leaf, np.float64)
        if not (np.all(np.isfinite(values)) and np.all(values > 0)):
            raise ValueError("sigma: every entry must be finite and > 0")


def check_optimizer(optimizer, default: Callable[[], optax.GradientTransformation]):
    """``optimizer``, or ``default()`` when it is ``None``; anything else must be optax's."""
    if optimizer is None:
        return default()
    if not isinstance(optimizer, optax.GradientTransformation):
        raise ValueError(
            f"optimizer: expected an optax.GradientTransformation, got {type(optimizer).__name__}"
        )
    return optimizer


def optimizer_step(optimizer: optax.GradientTransformation, state, ascent):
    """One optax step along the ascent direction (optax minimises, so it gets ``-ascent``);
    returns the new params and optimizer state."""
    descent = jax.tree.map(jnp.negative, ascent)
    updates, opt_state = optimizer.update(descent, state.opt_state, state.params)
    return optax.apply_updates(state.params, updates), opt_state
