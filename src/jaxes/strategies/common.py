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

from jaxes import centroid, trees
from jaxes import noise as noise_lib
from jaxes import shaping as shaping_lib
from jaxes.checks import check_int, check_positive, is_traced
from jaxes.noise import lowrank
from jaxes.types import Strategy, StrategyTraits

Schedule = Callable[[jax.Array], jax.Array]


# σ's floor for float32 states; a wider dtype's floor is as much finer as its resolution.
DEFAULT_SIGMA_FLOOR = 1e-8


def default_sigma_floor(dtype) -> float:
    """``1e-8`` for float32, scaled by the dtype's resolution (about ``1.9e-17`` for float64),
    so a float64 run can shrink σ as far as its precision allows.

    Example:
      >>> import jax.numpy as jnp
      >>> default_sigma_floor(jnp.float32), f"{default_sigma_floor(jnp.float64):.2g}"
      (1e-08, '1.9e-17')
    """
    ratio = float(np.finfo(dtype).eps) / float(np.finfo(np.float32).eps)
    return DEFAULT_SIGMA_FLOOR * ratio


def check_population_size(population_size, antithetic: bool) -> int:
    """``P`` must be a static int >= 2, and even with antithetic pairs (a pair is ``±ε``;
    strategies that sample independent members, such as snes and sep_cma_es by default,
    take any ``P >= 2``)."""
    p = check_int("population_size", population_size, 2)
    if antithetic and p % 2:
        raise ValueError(
            f"population_size: antithetic pairs need an even population, got {p}; "
            f"use {p - 1} or {p + 1}, or antithetic=False"
        )
    return p


def sigma_schedule(sigma, sigma_floor=None) -> Schedule:
    """σ as a function of the generation (and the state's dtype, float32 by default): a
    constant > 0 (possibly a traced scalar) or an optax schedule, never below ``sigma_floor``
    (> 0, so a schedule that reaches 0, or returns NaN, gives the floor instead of NaN
    parameters; ``None`` is ``default_sigma_floor`` of the dtype).

    Example:
      >>> import optax
      >>> s = sigma_schedule(optax.exponential_decay(0.1, 1, 0.5), sigma_floor=0.02)
      >>> [round(float(s(t)), 3) for t in (0, 1, 5)]
      [0.1, 0.05, 0.02]
      >>> round(float(sigma_schedule(optax.linear_schedule(0.1, 0.0, 10))(20)), 12)  # floor
      1e-08
    """
    floor = None if sigma_floor is None else check_positive("sigma_floor", sigma_floor)

    def floored(value, dtype):
        value = jnp.asarray(value, dtype)
        low = jnp.asarray(default_sigma_floor(dtype) if floor is None else floor, dtype)
        return jnp.where(value > low, value, low)

    if callable(sigma):
        return lambda generation, dtype=jnp.float32: floored(sigma(generation), dtype)
    value = check_positive("sigma", sigma)
    return lambda generation, dtype=jnp.float32: floored(value, dtype)


def init_dtype(params) -> jnp.dtype:
    """The dtype of the strategy scalars of a state ``init`` builds from ``params``."""
    return trees.state_dtype(params)  # dtypes only: init checks the params itself


def scalar_dtype(state) -> jnp.dtype:
    """The dtype of a state's strategy scalars (``trees.state_dtype`` of its params)."""
    return state.best_fitness.dtype


def check_fixed_sigma(sigma, strategy: str) -> None:
    """Strategies that adapt σ themselves cannot also follow a schedule."""
    if callable(sigma):
        raise ValueError(
            f"sigma: {strategy} adapts σ itself, so σ cannot be a schedule; pass its initial "
            "value (a number > 0, or a pytree of them)"
        )


def is_zero(value) -> bool:
    """Whether a setting is a concrete 0 (a traced value might not be, so it is not)."""
    return value is not None and not is_traced(value) and value == 0


def check_batch_size(batch_size) -> int | None:
    """``None`` or an int >= 1."""
    return None if batch_size is None else check_int("noise_batch_size", batch_size, 1)


NOISE_SOURCES = ("auto", "table", "gaussian", "lowrank")


def make_perturbations(
    noise: str,
    noise_table_size: int | None,
    population_size: int,
    antithetic: bool,
    batch_size,
    memory_budget=None,
    noise_rank: int = 1,
    gaussian_term: str | None = None,
) -> noise_lib.Perturbations:
    """Builds the static perturbation recipe from a strategy's settings.

    ``gaussian_term`` names the strategy's term that holds only for Gaussian ``ε`` (a σ or
    covariance update), if it has one switched on: a non-Gaussian source is then refused.
    """
    bases = population_size // 2 if antithetic else population_size
    if noise == "auto" and noise_table_size is None:
        source = noise_lib.auto(None, bases)
    elif noise in ("auto", "table"):  # a table size given is a table asked for
        source = noise_lib.noise_table(noise_table_size, bases)
    elif noise == "gaussian":
        source = noise_lib.gaussian()
    elif noise == "lowrank":
        source = lowrank.lowrank(noise_rank)
    else:
        raise ValueError(f"noise: unknown source {noise!r}; allowed: {list(NOISE_SOURCES)}")
    if gaussian_term is not None and not source.gaussian:
        raise ValueError(
            f"noise: {noise!r} perturbations are not Gaussian, and {gaussian_term} is derived "
            "for Gaussian ones; use noise='auto', 'gaussian' or 'table'"
        )
    return noise_lib.Perturbations(
        source=source,
        population_size=population_size,
        antithetic=bool(antithetic),
        batch_size=check_batch_size(batch_size),
        memory_budget=noise_lib.check_memory_budget(memory_budget),
    )


def check_state(state, state_type: type, strategy: str, population_size: int) -> None:
    """``tell``/``member`` get a state of their own strategy, built for their ``P``."""
    if not isinstance(state, state_type):
        raise ValueError(
            f"state: expected a {state_type.__name__} (from {strategy}(...).init), got "
            f"{type(state).__name__}"
        )
    if jnp.shape(state.fitness) != (population_size,):
        raise ValueError(
            f"state: built for population_size {jnp.shape(state.fitness)[-1]}, but this "
            f"{strategy} has population_size {population_size}"
        )


def check_fitness(fitness, population_size: int) -> jax.Array:
    """Fitness must be a floating array of shape ``(P,)``; checked at trace time."""
    if not isinstance(fitness, jax.Array | np.ndarray):
        try:
            # Python floats keep the default float's precision (float64 under x64).
            fitness = jnp.asarray(fitness, jnp.result_type(float))
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"fitness: expected an array of shape ({population_size},), got "
                f"{type(fitness).__name__} ({err})"
            ) from None
    shape = jnp.shape(fitness)
    if shape != (population_size,):
        raise ValueError(
            f"fitness: expected shape ({population_size},) (one value per member), got {shape}"
        )
    dtype = jnp.result_type(fitness)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(
            f"fitness: expected a floating dtype (bfloat16, float16, float32 or float64), got "
            f"{dtype}; cast it to a float"
        )
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
    ``Σ m_i δ_i²`` and ``Σ δ_i²``), where ``δ_i`` is the displacement member ``i`` had
    (``σ ⊙ s_i ε_{j(i)}``, or ``x_i - θ`` for members rounded to a narrower dtype); ``sigma`` is
    the scale members were built with, a scalar or a pytree like the params. With antithetic
    float32 pairs ``Σ δ_i`` is exactly zero and is not rebuilt.
    """
    like = state.params
    rounded = any(trees.is_rounded(t.dtype) for t in jax.tree.leaves(state.dtypes))
    plain = rounded or not perturbations.antithetic
    both = jnp.stack([mass, jnp.ones_like(mass)])
    sums, square_sums = perturbations.moments(
        state.noise_state,
        state.key,
        like,
        sigma,
        both if plain else mass[None],
        both if squares else None,
        state.dtypes,
    )

    def row(rows, k):
        if rows is None:
            return None
        if k < len(rows):
            return rows[k]
        return jax.tree.map(jnp.zeros_like, rows[0])

    return centroid.PopulationMoments(
        total_mass=jnp.sum(mass),
        count=perturbations.population_size,
        mass_moment=row(sums, 0),
        displacement_sum=row(sums, 1),
        mass_square_moment=row(square_sums, 0),
        square_sum=row(square_sums, 1),
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
    Every field is a scalar: a ``lax.scan`` over generations stacks no parameter-sized array.

    Attributes:
      fitness_mean, fitness_max, fitness_min: over this generation's finite fitness values.
      best_fitness: the best member's fitness seen so far (``strategy.best_params(state)``
        rebuilds it).
      num_finite: how many of this generation's fitness values were finite.
      applied: whether the update was applied. False when the fitness carried no ranking
        (fewer than two distinct finite values: all equal, or all NaN), which leaves every
        strategy's search state as it was, and when ``tell`` had no pending ``ask``.
      update_norm: ``‖θ' - θ‖``, the norm of the step taken (0 when not applied).
      com_displacement_norm: ``‖M - θ‖`` (reward-weighted centre of mass from the model).
      centroid_offset_norm: ``‖c - θ‖`` (plain centroid; 0 with float32 antithetic pairs).
      total_mass: ``Σ m_i``.
      sigma: the mean perturbation scale over coordinates.
    """

    fitness_mean: jax.Array
    fitness_max: jax.Array
    fitness_min: jax.Array
    best_fitness: jax.Array
    num_finite: jax.Array
    applied: jax.Array
    update_norm: jax.Array
    com_displacement_norm: jax.Array
    centroid_offset_norm: jax.Array
    total_mass: jax.Array
    sigma: jax.Array


class BestMember(NamedTuple):
    """How to rebuild the best member seen so far, without storing it.

    Attributes:
      key: the ``ask`` key of its population, as raw threefry key data (``uint32[2]``).
      index: its index in that population.
      centre: θ of that population (``None`` with ``track_best=False``).
      scale: the perturbation scale of that population (``None`` with ``track_best=False``).
    """

    key: jax.Array
    index: jax.Array
    centre: object
    scale: object


def common_fields(
    perturbations: noise_lib.Perturbations, key: jax.Array, params, scale, track_best: bool
) -> dict:
    """The state fields every strategy starts with.

    ``params`` becomes the master copy (float32, or float64 for float64 params; ``dtypes``
    keeps one scalar per leaf in the dtype its members are built in); ``key`` is a threefry
    key (``noise.noise_key``) for the first ``ask``; ``pending`` says whether an ``ask``
    awaits its ``tell``; ``fitness`` is the last fitness told (NaN before any); the
    best-so-far is a recipe (``BestMember``) whose θ and scale are zeros until the first
    ``tell``. Every buffer is new (the params are copied), so the state can be donated
    without deleting anything the caller holds.
    """
    params = trees.check_params(params)
    dtypes = jax.tree.map(lambda x: jnp.zeros((), x.dtype), params)
    master = master_params(params)
    dtype = trees.state_dtype(master)
    table_key, ask_key = jax.random.split(noise_lib.noise_key(key))
    p = perturbations.population_size
    return {
        "params": master,
        "dtypes": dtypes,
        "key": ask_key,
        "generation": jnp.zeros((), jnp.int32),
        "noise_state": perturbations.source.init(table_key, master),
        "pending": jnp.zeros((), bool),
        "fitness": jnp.full((p,), jnp.nan, dtype),
        "best_fitness": jnp.full((), -jnp.inf, dtype),
        "best": BestMember(
            key=jax.random.key_data(ask_key),
            index=jnp.zeros((), jnp.int32),
            centre=jax.tree.map(jnp.zeros_like, master) if track_best else None,
            scale=jax.tree.map(jnp.zeros_like, scale) if track_best else None,
        ),
    }


def master_params(params):
    """``params`` checked and in their master dtype (at least float32), always in new buffers:
    a state never holds the caller's arrays, so donating it (the README's loop) never deletes
    them. (Under ``jit`` the copy is free: the state is a new output anyway.)"""
    params = trees.check_params(params)
    return jax.tree.map(lambda x: jnp.array(x, trees.master_dtype(x.dtype), copy=True), params)


def centre(state):
    """θ in the dtypes the params were given in (the master copy is float32).

    Example:
      >>> import jax, jax.numpy as jnp, jaxes
      >>> state = jaxes.open_es(4).init(jax.random.key(0), jnp.ones(2, jnp.bfloat16))
      >>> state.params.dtype, centre(state).dtype
      (dtype('float32'), dtype(bfloat16))
    """
    return jax.tree.map(lambda x, t: x.astype(t.dtype), state.params, state.dtypes)


def check_member_index(i, population_size: int):
    """A concrete index must lie in ``[0, P)``; a traced one is checked by ``member``."""
    if isinstance(i, numbers.Integral) or (
        isinstance(i, np.ndarray | np.generic | jax.Array)
        and not isinstance(i, jax.core.Tracer)
        and np.ndim(i) == 0
    ):
        value = int(i)
        if not 0 <= value < population_size:
            raise ValueError(f"i: expected a member index in [0, {population_size}), got {value}")
        return jnp.int32(value)
    if isinstance(i, jax.core.Tracer) and not jnp.issubdtype(i.dtype, jnp.integer):
        raise ValueError(f"i: expected an integer index, got dtype {i.dtype}")
    if not isinstance(i, jax.core.Tracer):
        raise ValueError(f"i: expected an integer index, got {i!r}")
    return i


def build_member(perturbations, noise_state, key, i, params, scale, dtypes):
    """Member ``i``; an index outside ``[0, P)`` (traced) gives a NaN member, which every
    fitness shaping ranks worst, instead of a member no ``tell`` would rebuild."""
    i = check_member_index(i, perturbations.population_size)
    p = perturbations.population_size
    member = perturbations.member(noise_state, key, jnp.clip(i, 0, p - 1), params, scale, dtypes)
    if isinstance(i, jax.core.Tracer):
        # A scalar 0 or NaN added to every entry: fused into whatever reads the member.
        offset = jnp.where((i >= 0) & (i < p), 0.0, jnp.nan)
        member = jax.tree.map(lambda x: x + offset.astype(x.dtype), member)
    return member


def best_params(perturbations, state):
    """The best member seen so far, rebuilt from its recipe (in the params' dtypes)."""
    best = state.best
    if best.centre is None:
        raise ValueError(
            "best_params: this strategy was built with track_best=False, so it keeps only the "
            "best fitness; build it with track_best=True to rebuild the best member"
        )
    key = jax.random.wrap_key_data(best.key, impl="threefry2x32")
    return perturbations.member(
        state.noise_state, key, best.index, best.centre, best.scale, state.dtypes
    )


def informative(fitness: jax.Array) -> jax.Array:
    """At least two distinct finite fitness values: the only case a ranking says anything."""
    finite = jnp.isfinite(fitness)
    high = jnp.max(jnp.where(finite, fitness, -jnp.inf))
    low = jnp.min(jnp.where(finite, fitness, jnp.inf))
    return high > low


def strategy_info(fitness, best_fitness, applied, update_norm, moments, sigma):
    """``StrategyInfo`` for one ``tell``."""
    f_mean, f_max, f_min = finite_stats(fitness)
    positive = moments.total_mass > 0
    safe_total = jnp.where(positive, moments.total_mass, 1.0)
    sig_leaves = jax.tree.leaves(sigma)
    mean_sigma = sum(jnp.sum(x) for x in sig_leaves) / sum(jnp.size(x) for x in sig_leaves)
    return StrategyInfo(
        fitness_mean=f_mean,
        fitness_max=f_max,
        fitness_min=f_min,
        best_fitness=best_fitness,
        num_finite=jnp.sum(jnp.isfinite(fitness)).astype(jnp.int32),
        applied=applied,
        update_norm=update_norm,
        # Norms of the summed moments, scaled after: no parameter-sized M - θ or c - θ is built.
        com_displacement_norm=jnp.where(
            positive, centroid.tree_norm(moments.mass_moment) / safe_total, 0.0
        ),
        centroid_offset_norm=centroid.tree_norm(moments.displacement_sum) / moments.count,
        total_mass=moments.total_mass,
        sigma=jnp.asarray(mean_sigma, best_fitness.dtype),
    )


# Up to this many state entries a select costs less than a branch (on the CPU a cond is a
# runtime call); above it the branch's in-place update pays.
_SELECT_MAX_ENTRIES = 2**16


def _when(condition, new: Callable, old):
    """``new()`` if ``condition`` else ``old``. For a big state, a ``lax.cond``: the new
    values are computed only in the branch that keeps them, so XLA updates donated buffers in
    place. (A ``where(condition, new, old)`` needs both alive at once, and XLA then copies
    every parameter-sized buffer of the state: 18 copies of θ and Adam's moments at 100M
    params.) For a small one, that ``where``: no branch to run."""

    def taken():
        return jax.tree.map(lambda a, b: jnp.asarray(a, b.dtype), new(), old)

    if sum(jnp.size(x) for x in jax.tree.leaves(old)) <= _SELECT_MAX_ENTRIES:
        return jax.tree.map(lambda a, b: jnp.where(condition, a, b), taken(), old)
    return jax.lax.cond(condition, taken, lambda: old)


def finish_tell(state, fitness, moments, info_sigma, scale, update: Callable[[], tuple]):
    """The end of every ``tell``: best-so-far, ``StrategyInfo`` and the next state.

    ``update()`` returns ``(step, changes)``: the change of θ (a pytree like the params) and
    the strategy's own new state fields (σ, optimizer state, paths, ...) by name. It runs
    only when the update is applied: when the fitness is informative and an ``ask`` was
    pending (a ``tell`` without a pending ``ask`` changes nothing at all). ``scale`` is the
    perturbation scale the told population was built with (kept in the best-member recipe);
    ``info_sigma`` is the σ reported in the info. θ' = θ + step is written elementwise from θ
    and the step inside the applied branch, so XLA updates a donated θ in place.
    """
    fitness = jnp.asarray(fitness)
    pending = state.pending
    applied = pending & informative(fitness)
    ranked = jnp.where(jnp.isfinite(fitness), fitness, -jnp.inf)
    best_i = jnp.argmax(ranked).astype(jnp.int32)
    improved = pending & (ranked[best_i] > state.best_fitness)
    best = state.best
    best = BestMember(
        key=jnp.where(improved, jax.random.key_data(state.key), best.key),
        index=jnp.where(improved, best_i, best.index),
        centre=None if best.centre is None else _when(improved, lambda: state.params, best.centre),
        scale=None if best.scale is None else _when(improved, lambda: scale, best.scale),
    )
    dtype = scalar_dtype(state)
    best_fitness = jnp.where(improved, ranked[best_i], state.best_fitness).astype(dtype)
    names = tuple(jax.eval_shape(lambda: update()[1]))
    old = {name: getattr(state, name) for name in names}

    def applied_update():
        step, changes = update()
        params = jax.tree.map(lambda x, u: (x + u).astype(x.dtype), state.params, step)
        return params, changes, centroid.tree_norm(step).astype(dtype)

    params, changes, update_norm = _when(
        applied, applied_update, (state.params, old, jnp.zeros((), dtype))
    )
    info = strategy_info(fitness, best_fitness, applied, update_norm, moments, info_sigma)
    new_state = state._replace(
        params=params,
        generation=state.generation + pending.astype(jnp.int32),
        pending=jnp.zeros((), bool),
        fitness=jnp.where(pending, fitness.astype(dtype), state.fitness),
        best_fitness=best_fitness,
        best=best,
        **changes,
    )
    return new_state, info


def per_coordinate(value, params, name: str = "sigma"):
    """A pytree like ``params`` (master params: float32 or float64) holding ``value`` (a
    scalar or such a pytree, whose leaves broadcast to the params' shapes) in each leaf's
    dtype; anything else is a ``ValueError`` naming ``name``."""
    single = jax.tree_util.treedef_is_leaf(jax.tree.structure(value))
    if not (single and jnp.ndim(value) == 0):
        if jax.tree.structure(value) != jax.tree.structure(params):
            raise ValueError(
                f"{name}: expected a number or a pytree like the params "
                f"({jax.tree.structure(params)}), got {jax.tree.structure(value)}"
            )
        for (path, v), x in zip(
            jax.tree_util.tree_leaves_with_path(value), jax.tree.leaves(params), strict=True
        ):
            try:
                fits = jnp.broadcast_shapes(jnp.shape(v), jnp.shape(x)) == jnp.shape(x)
            except ValueError:
                fits = False
            if not fits:
                raise ValueError(
                    f"{name}: leaf {jax.tree_util.keystr(path)} has shape {jnp.shape(v)}, which "
                    f"does not broadcast to the params' {jnp.shape(x)}"
                )
    return jax.tree.map(
        lambda v, x: jnp.broadcast_to(jnp.asarray(v, x.dtype), jnp.shape(x)),
        trees.broadcast_like(value, params),
        params,
    )


def check_sigma(sigma) -> None:
    """A per-coordinate σ: a number > 0 (possibly traced), or a pytree whose every entry is a
    finite number > 0."""
    leaves = jax.tree.leaves(sigma)
    if not leaves:
        raise ValueError("sigma: expected a number > 0 or a pytree of them, got an empty pytree")
    if len(leaves) == 1 and jnp.ndim(leaves[0]) == 0 and not isinstance(leaves[0], str):
        check_positive("sigma", leaves[0])
        return
    for leaf in leaves:
        if isinstance(leaf, str | bytes) or not (
            isinstance(leaf, numbers.Real | np.ndarray | jax.Array)
            and jnp.issubdtype(jnp.result_type(leaf), jnp.number)
        ):
            raise ValueError(f"sigma: expected numbers > 0, got {leaf!r}")
        if isinstance(leaf, jax.core.Tracer):
            continue
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
    """One optax step along the ascent direction (optax minimises, so it gets ``-ascent``) on
    the float32 master params; returns the step of θ and the new optimizer state."""
    descent = jax.tree.map(jnp.negative, ascent)
    return optimizer.update(descent, state.opt_state, state.params)


def make_strategy(
    perturbations,
    state_type: type,
    strategy: str,
    scale_of: Callable,
    init,
    tell,
    estimate,
    rank_based: bool | None,
) -> Strategy:
    """The ``Strategy`` tuple: a strategy's own ``init``, ``tell`` and ``estimate``, plus what
    every strategy shares, built from ``scale_of(state)`` (the scale members are built with:
    σ, σ per coordinate, or σ·√C for CMA): ``ask``, ``member``, ``members``, the best-member
    rebuild, the evaluation chunk size and the traits."""
    p = perturbations.population_size

    def ask(key, state):
        state = state._replace(key=noise_lib.noise_key(key), pending=jnp.ones((), bool))
        population = perturbations.population(
            state.noise_state, state.key, state.params, scale_of(state), state.dtypes
        )
        return population, state

    def member(state, i):
        check_state(state, state_type, strategy, p)
        return build_member(
            perturbations,
            state.noise_state,
            state.key,
            i,
            state.params,
            scale_of(state),
            state.dtypes,
        )

    def members(state, first, count: int):
        return perturbations.members(
            state.noise_state, state.key, first, count, state.params, scale_of(state), state.dtypes
        )

    def perturbation(state, i):
        check_state(state, state_type, strategy, p)
        if any(trees.is_rounded(t.dtype) for t in jax.tree.leaves(state.dtypes)):
            raise ValueError(
                "perturbation: members of params narrower than float32 are rounded, so their "
                "displacement is not σε; build them with member() instead"
            )
        i = check_member_index(i, p)
        valid = jnp.where((i >= 0) & (i < p), 1.0, jnp.nan).astype(jnp.float32)
        delta = perturbations.displacement(
            state.noise_state, state.key, jnp.clip(i, 0, p - 1), state.params, scale_of(state)
        )
        # An index outside [0, P) (traced) gives NaN, as member() does.
        return jax.tree.map(lambda x: x * valid, delta)

    def best(state):
        return best_params(perturbations, state)

    def eval_chunk(state, members: int = 0) -> int:
        return perturbations.eval_chunk(state.params, state.dtypes, members)

    return Strategy(
        init=init,
        ask=ask,
        tell=tell,
        member=member,
        estimate=estimate,
        population_size=p,
        best_params=best,
        eval_chunk=eval_chunk,
        members=members,
        perturbation=perturbation,
        traits=StrategyTraits(strategy, perturbations.antithetic, rank_based),
    )


def is_rank_shaping(fitness_shaping) -> bool | None:
    """Whether a ``fitness_shaping`` setting depends on fitness only through ranks (``None``
    for a callable, which jaxes cannot inspect).

    Example:
      >>> is_rank_shaping("centered_rank"), is_rank_shaping("z_score"), is_rank_shaping(abs)
      (True, False, None)
    """
    if callable(fitness_shaping):
        return None
    return fitness_shaping in shaping_lib.RANK_SHAPINGS
