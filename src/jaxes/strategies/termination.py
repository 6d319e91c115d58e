"""When a full-covariance run has stopped making progress: pycma's termination criteria.

``tell`` of ``cma_es`` and ``xnes`` reports them in its info (one bool each, and ``stop``, any
of them); nothing stops by itself, so a loop inside ``jit`` or ``lax.scan`` reads them (or
``jaxes.strategies.restarts`` does). The criteria and their defaults follow Hansen's tutorial
(2016, appendix B.3) and pycma's options:

=================  ==========================================================================
``tolfun``         the range of this generation's fitness and of the best fitness over the last
                   ``10 + ⌈30d/λ⌉`` generations are both below ``1e-11``
``tolx``           ``σ · max √C_ii`` and ``σ · max |p_c|`` are both below ``1e-12 · σ0``
``tolupsigma``     ``σ · max D > 1e20 · σ0`` (σ diverged: the problem may be unbounded)
``conditioncov``   the condition number of ``C`` exceeds ``1e14``
``noeffectaxis``   adding ``0.1 σ`` times a principal axis (axis ``g mod d``) leaves m
                   unchanged
``noeffectcoord``  adding ``0.2 σ √C_jj`` to some coordinate leaves that coordinate unchanged
``stagnation``     over the last ``L = min(20000, 120 + ⌈30d/λ⌉)`` generations, the median of the
                   newest 30 % of both the best and the median fitness is no better than that of
                   the oldest 30 %
``flat_fitness``   this generation's fitness carried no ranking (all equal or non-finite)
=================  ==========================================================================
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxes.strategies.base import StrategyInfo, TerminationInfo
from jaxes.strategies.samplers import flat

TOLFUN = 1e-11
TOLX = 1e-12
TOLUPSIGMA = 1e20
TOLCONDITIONCOV = 1e14
MAX_STAGNATION = 20000


# pycma's criteria, one bool scalar each (see the module's table), in ``TerminationInfo``'s
# order; its last two fields are ``stop`` and ``condition``.
CRITERIA = TerminationInfo._fields[:-2]


class History(NamedTuple):
    """The best and median fitness of the newest generations (a ring of length ``L``) and how
    many were recorded."""

    best: jax.Array
    median: jax.Array
    count: jax.Array


def windows(d: int, population_size: int) -> tuple[int, int]:
    """``(H, L)``: the ``tolfun`` window and the stagnation window, in generations.

    Example:
      >>> windows(10, 10)
      (40, 150)
    """
    extra = math.ceil(30 * d / population_size)
    return 10 + extra, min(MAX_STAGNATION, 120 + extra)


def empty_history(length: int, dtype) -> History:
    return History(
        jnp.full((length,), jnp.nan, dtype),
        jnp.full((length,), jnp.nan, dtype),
        jnp.zeros((), jnp.int32),
    )


def record(history: History, fitness: jax.Array, when) -> History:
    """``history`` with this generation's best and median finite fitness, if ``when``."""
    finite = jnp.isfinite(fitness)
    best = jnp.max(jnp.where(finite, fitness, -jnp.inf))
    ordered = jnp.sort(jnp.where(finite, fitness, -jnp.inf))
    median = ordered[(fitness.shape[0] - 1) // 2 + (fitness.shape[0] - 1) % 2]
    slot = history.count % history.best.shape[0]
    dtype = history.best.dtype
    return History(
        jnp.where(when, history.best.at[slot].set(best.astype(dtype)), history.best),
        jnp.where(when, history.median.at[slot].set(median.astype(dtype)), history.median),
        history.count + jnp.asarray(when, jnp.int32),
    )


def _chronological(history: History) -> jax.Array:
    """Both rings (``(2, L)``: best, median) oldest first, meaningful once full."""
    rings = jnp.stack([history.best, history.median])
    return jnp.roll(rings, -(history.count % rings.shape[1]), axis=1)


def _stagnated(history: History, ordered: jax.Array) -> jax.Array:
    """The newest 30 % no better than the oldest 30 %, for both rings; the four windows are
    sorted in one sort (tell is many small kernels on a CPU; fewer is faster)."""
    length = ordered.shape[1]
    k = max(1, math.ceil(0.3 * length))
    windows = jnp.sort(jnp.concatenate([ordered[:, -k:], ordered[:, :k]]), axis=1)
    medians = (windows[:, (k - 1) // 2] + windows[:, k // 2]) / 2
    return (history.count >= length) & jnp.all(medians[:2] <= medians[2:])


def _tolfun(history: History, ordered: jax.Array, fitness: jax.Array, window: int) -> jax.Array:
    recent = ordered[0, ordered.shape[1] - window :]
    finite = jnp.isfinite(fitness)
    spread = jnp.max(jnp.where(finite, fitness, -jnp.inf)) - jnp.min(
        jnp.where(finite, fitness, jnp.inf)
    )
    full = history.count >= window
    return full & (jnp.max(recent) - jnp.min(recent) < TOLFUN) & (spread < TOLFUN)


class Geometry(NamedTuple):
    """The search distribution's shape as the criteria read it (members ``m + σ y`` with
    ``Cov(y) = C``).

    Attributes:
      axes: ``(d, d)``, column ``k`` a principal axis of ``C`` scaled to its length.
      axis_lengths: ``(d,)`` the square roots of ``C``'s eigenvalues.
      variances: ``diag C``.
      path_c: the evolution path ``p_c`` (zeros for a strategy without one).
    """

    axes: jax.Array
    axis_lengths: jax.Array
    variances: jax.Array
    path_c: jax.Array


def check(
    *,
    history: History,
    fitness: jax.Array,
    informative: jax.Array,
    mean: jax.Array,
    sigma: jax.Array,
    sigma0: float,
    axes: jax.Array,
    axis_lengths: jax.Array,
    variances: jax.Array,
    path_c: jax.Array,
    generation: jax.Array,
    tolfun_window: int,
) -> tuple[TerminationInfo, jax.Array]:
    """The criteria for a state whose members are ``m + σ y`` with ``Cov(y) = C``, and the
    condition number of ``C``.

    Args:
      history: best and median fitness of the recent generations (``record``).
      fitness: this generation's fitness (maximised).
      informative: whether it carried a ranking.
      mean: ``m`` (flat).
      sigma: ``σ``; ``sigma0`` the initial σ.
      axes: ``(d, d)``, column ``k`` a principal axis of ``C`` scaled to its length.
      axis_lengths: ``(d,)`` the square roots of ``C``'s eigenvalues.
      variances: ``diag C``.
      path_c: the evolution path ``p_c`` (zeros for a strategy without one).
      generation: the generation count (picks the axis ``noeffectaxis`` tries).
      tolfun_window: ``H`` of ``windows``.
    """
    d = mean.shape[0]
    dtype = mean.dtype
    tolx = TOLX * sigma0
    lengths = jnp.maximum(axis_lengths, 0.0)
    largest, smallest = jnp.max(lengths), jnp.min(lengths)
    condition = jnp.where(
        smallest > 0, (largest / jnp.where(smallest > 0, smallest, 1)) ** 2, jnp.inf
    )
    axis = axes[:, generation % d]
    coord_step = 0.2 * sigma * jnp.sqrt(jnp.maximum(variances, 0.0))
    ordered = _chronological(history)
    flags = dict(
        tolfun=_tolfun(history, ordered, fitness, tolfun_window),
        tolx=(sigma * jnp.max(jnp.sqrt(jnp.maximum(variances, 0.0))) < tolx)
        & (sigma * jnp.max(jnp.abs(path_c)) < tolx),
        tolupsigma=sigma * largest > TOLUPSIGMA * sigma0,
        conditioncov=condition > TOLCONDITIONCOV,
        noeffectaxis=jnp.all(mean == mean + (0.1 * sigma * axis).astype(dtype)),
        noeffectcoord=jnp.any(mean == mean + coord_step.astype(dtype)),
        stagnation=_stagnated(history, ordered),
        flat_fitness=~informative,
    )
    stop = jnp.any(jnp.stack(list(flags.values())))
    return TerminationInfo(**flags, stop=stop, condition=condition), condition


def report(base: StrategyInfo, criteria: TerminationInfo, condition, told) -> StrategyInfo:
    """``base`` with its ``termination`` record: the criteria ``check`` returned (all false for
    a ``tell`` without a pending ``ask``), ``stop`` and the condition number."""
    flags = jnp.stack(list(criteria[: len(CRITERIA)])) & told  # one kernel for eight scalars
    record = TerminationInfo(
        *(flags[i] for i in range(len(CRITERIA))),
        stop=jnp.any(flags),
        condition=condition.astype(base.best_fitness.dtype),
    )
    return base._replace(termination=record)


def finisher(population_size: int, sigma0: float, geometry):
    """The ``core.Rule.finish`` of a full-covariance strategy (``cma_es``, ``xnes``): at the end
    of every ``tell`` it records the fitness history and reports the criteria in the info
    (``TerminationInfo``). ``geometry(state) -> Geometry`` is the shape of ``C`` they read;
    ``tolx`` and ``tolupsigma`` are relative to ``sigma0``."""

    def finish(told, state, info):
        history = record(state.history, state.fitness, info.applied)
        state = state.replace(history=history)
        mean = flat(state.params)
        criteria, condition = check(
            history=state.history,
            fitness=state.fitness,
            informative=info.applied | ~told.pending,  # told.pending: this tell had an ask
            mean=mean,
            sigma=state.sigma,
            sigma0=sigma0,
            **geometry(state)._asdict(),
            generation=state.generation,
            tolfun_window=windows(mean.shape[0], population_size)[0],
        )
        return state, report(info, criteria, condition, told.pending)

    return finish
