"""What every ``tell`` shares (internal): the population's moments from regenerated noise, the
optimizer step, and the end of ``tell`` (best member, ``StrategyInfo``, the applied update)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxes import trees
from jaxes.factored import lowrank as low_rank
from jaxes.factored import ordering
from jaxes.optim import takes_factors
from jaxes.strategies.base import BestMember, StrategyInfo
from jaxes.strategies.state import own_fields, scalar_dtype


def optimizer_step(optimizer: optax.GradientTransformation, state, ascent):
    """One optax step along the ascent direction (optax minimises, so it gets ``-ascent``) on
    the float32 master params; returns the step of θ and the new optimizer state."""
    descent = jax.tree.map(jnp.negative, ascent)
    return optimizer.update(descent, state.opt_state, state.params)


def factored_write(optimizer: optax.GradientTransformation):
    """A ``core.Rule.write`` for an optimizer that ``jaxes.optim.takes_factors`` (``None`` for
    any other): the optimizer's step from a direction with ``LowRank`` leaves, written in
    place (``TakesFactors.apply``), its state kept in the state's ``opt_state``."""
    if not takes_factors(optimizer):
        return None

    def write(state, est, applied):
        descent = low_rank.map_linear(jnp.negative, est.direction)
        params, opt_state, norm = optimizer.apply(descent, state.opt_state, state.params, applied)
        return params, state.replace(opt_state=opt_state), norm

    return write


class FitnessSummary(NamedTuple):
    """What ``tell`` reads off a population's fitness: over the finite values their number,
    mean, max and min (NaN if none is finite), and the best member (the first of the highest;
    member 0 if none is finite); ``pending``: the flag it was given, read in the same kernel
    (``None`` if none was)."""

    count: jax.Array
    mean: jax.Array
    max: jax.Array
    min: jax.Array
    best_index: jax.Array
    pending: jax.Array | None = None

    @property
    def informative(self) -> jax.Array:
        """At least two distinct finite values: the only case a ranking says anything."""
        return self.max > self.min


def _summary_step(x, y):
    (c1, v1, i1, l1, p1), (c2, v2, i2, l2, p2) = x, y
    first = (v1 > v2) | ((v1 == v2) & (i1 < i2))
    best = jnp.where(first, v1, v2), jnp.where(first, i1, i2)
    return c1 + c2, *best, jnp.minimum(l1, l2), jnp.minimum(p1, p2)


def fitness_summary(fitness: jax.Array, pending: jax.Array | None = None) -> FitnessSummary:
    """``FitnessSummary`` of ``fitness`` (and the flag ``pending``, passed through).

    The count, max (with its index) and min are one variadic reduction, not four: at a small
    population each reduction is its own kernel and its launch costs more than its work. The
    sum stays ``jnp.sum``, whose pairwise order keeps the mean accurate at any P. ``pending``
    is read inside that reduction, so every later kernel reads the reduction's copy of it, not
    the state's: the one kernel that reads the state's flag runs before ``tell`` writes it
    (``finish_tell``).
    """
    finite = jnp.isfinite(fitness)
    ranked = jnp.where(finite, fitness, -jnp.inf)
    index = jnp.arange(fitness.shape[0], dtype=jnp.int32)
    flag = jnp.ones((), bool) if pending is None else pending
    operands = (
        finite.astype(jnp.int32),
        ranked,
        index,
        jnp.where(finite, fitness, jnp.inf),
        jnp.broadcast_to(flag.astype(jnp.int32), fitness.shape),
    )
    inf = jnp.asarray(jnp.inf, ranked.dtype)
    init = (jnp.int32(0), -inf, jnp.int32(0), inf, jnp.int32(1))
    count, high, best, low, read = jax.lax.reduce(operands, init, _summary_step, (0,))
    some = count > 0
    total = jnp.sum(jnp.where(finite, fitness, 0.0))
    return FitnessSummary(
        count=count,
        mean=jnp.where(some, total / jnp.where(some, count, 1), jnp.nan),
        max=jnp.where(some, high, jnp.nan),
        min=jnp.where(some, low, jnp.nan),
        best_index=best,
        pending=None if pending is None else read > 0,
    )


def strategy_info(summary, best_fitness, applied, update_norm, moments, sigma) -> StrategyInfo:
    """``StrategyInfo`` for one ``tell`` (``summary``: its ``FitnessSummary``)."""
    positive = moments.total_mass > 0
    safe_total = jnp.where(positive, moments.total_mass, 1.0)
    sig_leaves = jax.tree.leaves(sigma)
    mean_sigma = sum(jnp.sum(x) for x in sig_leaves) / sum(jnp.size(x) for x in sig_leaves)
    # Computed after the fitness summary (a data dependency XLA keeps, always true): alone it
    # is one more kernel ready at the program's start, which XLA:CPU hands to another thread,
    # a hand-off dearer than the kernel (benchmarks/regimes.py --parts --pops 64, snes d = 10).
    mean_sigma = jnp.where(summary.count >= 0, mean_sigma, 0.0)
    return StrategyInfo(
        fitness_mean=summary.mean,
        fitness_max=summary.max,
        fitness_min=summary.min,
        best_fitness=best_fitness,
        num_finite=summary.count,
        applied=applied,
        update_norm=update_norm,
        # Norms of the summed moments, scaled after: no parameter-sized M - θ or c - θ is built.
        com_displacement_norm=jnp.where(
            positive, trees.tree_norm(moments.mass_moment) / safe_total, 0.0
        ),
        centroid_offset_norm=trees.tree_norm(moments.displacement_sum) / moments.count,
        total_mass=moments.total_mass,
        sigma=jnp.asarray(mean_sigma, best_fitness.dtype),
    )


# Up to this many state entries a select costs less than a branch (on the CPU a cond is a
# runtime call); above it the branch's in-place update pays.
_SELECT_MAX_ENTRIES = 2**16


def _small(tree) -> bool:
    return sum(jnp.size(x) for x in jax.tree.leaves(tree)) <= _SELECT_MAX_ENTRIES


def _when(condition, new: Callable, old):
    """``new()`` if ``condition`` else ``old``. For a big state, a ``lax.cond``: the new
    values are computed only in the branch that keeps them, so XLA updates donated buffers in
    place. (A ``where(condition, new, old)`` needs both alive at once, and XLA then copies
    every parameter-sized buffer of the state: 18 copies of θ and Adam's moments at 100M
    params.) For a small one, that ``where``: no branch to run."""

    def taken():
        return jax.tree.map(lambda a, b: jnp.asarray(a, b.dtype), new(), old)

    if _small(old):
        return jax.tree.map(lambda a, b: jnp.where(condition, a, b), taken(), old)
    return jax.lax.cond(condition, taken, lambda: old)


def _best_member(state, best_i, improved, scale) -> BestMember:
    """The best-member recipe after this ``tell``: this population's when it ``improved``."""
    best = state.best
    return BestMember(
        key=jnp.where(improved, jax.random.key_data(state.key), best.key),
        index=jnp.where(improved, best_i, best.index),
        centre=None if best.centre is None else _when(improved, lambda: state.params, best.centre),
        scale=None if best.scale is None else _when(improved, lambda: scale, best.scale),
    )


def finish_tell(
    state, fitness, moments, info_sigma, scale, update: Callable[[], tuple], write=None
):
    """The end of every ``tell``: best-so-far, ``StrategyInfo`` and the next state.

    ``update()`` returns ``(step, state)``: the change of θ (a pytree like the params) and the
    state with the strategy's own fields (σ, optimizer state, paths, ...) new. It runs
    only when the update is applied: when the fitness is informative and an ``ask`` was
    pending (a ``tell`` without a pending ``ask`` changes nothing at all). ``scale`` is the
    perturbation scale the told population was built with (kept in the best-member recipe);
    ``info_sigma`` is the σ reported in the info. θ' = θ + step is written elementwise from θ
    and the step inside the applied branch, so XLA updates a donated θ in place.

    ``write``, where given, replaces ``update``: ``write(applied) -> (params, state,
    step_norm)`` writes θ and the strategy's own fields itself, each once, the new values
    where ``applied`` and the old ones elsewhere (a step from factors,
    ``jaxes.optim.TakesFactors``: no branch, whose operands XLA would copy).
    """
    fitness = jnp.asarray(fitness)
    summary = fitness_summary(fitness, state.pending)
    pending = summary.pending
    applied = pending & summary.informative
    improved = pending & (summary.max > state.best_fitness)
    best = _best_member(state, summary.best_index, improved, scale)
    dtype = scalar_dtype(state)
    best_fitness = jnp.where(improved, summary.max, state.best_fitness).astype(dtype)

    own = own_fields(type(state))

    def applied_update():
        step, updated = update()
        params = jax.tree.map(lambda x, u: (x + u).astype(x.dtype), state.params, step)
        changes = {name: getattr(updated, name) for name in own}
        return params, changes, trees.tree_norm(step).astype(dtype)

    if write is None:
        old = {name: getattr(state, name) for name in own}
        zero = jnp.zeros((), dtype)
        params, changes, update_norm = _when(applied, applied_update, (state.params, old, zero))
    else:
        params, written, update_norm = write(applied)
        changes = {name: getattr(written, name) for name in own}
        update_norm = update_norm.astype(dtype)
    info = strategy_info(summary, best_fitness, applied, update_norm, moments, info_sigma)
    written = dict(
        params=params,
        generation=state.generation + pending.astype(jnp.int32),
        pending=jnp.zeros((), bool),
        fitness=jnp.where(pending, fitness.astype(dtype), state.fitness),
        best_fitness=best_fitness,
        **changes,
    )
    if _small(written):
        # Donated, each field is written back into its own buffer, and the best-member
        # recipe and the info's σ and update norm read the old values (θ, the best fitness,
        # σ); where nothing orders those reads before the writes, XLA copies the old values
        # first, and in a small tell those copies (each one more kernel ready at the start,
        # for XLA:CPU to hand to another thread) cost more than the rest of it
        # (benchmarks/regimes.py --parts). So the writes wait for them (``ordering.after``,
        # bit for bit). Not for the moments' norms, which read no state field: waiting for
        # them changed how XLA fuses the moments, and a device's tell inside shard_map then
        # rounded apart from one device's (examples/shard_map_loop.py). A big state is written
        # in place inside ``_when``'s branch, where waiting would cost a θ-sized buffer.
        written = ordering.after(written, (best, info.sigma, info.update_norm))
    return state.replace(best=best, **written), info
