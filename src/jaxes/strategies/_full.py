"""The full-covariance family (internal): CMA-ES and xNES.

Their members are ``x_i = m + σ A z_i`` with a ``d × d`` matrix ``A`` (``B D`` for CMA-ES, the
normalised factor for xNES) acting on the *flattened* params, so they cannot share the
per-coordinate noise of ``_spec.Diagonal``. Their sampler, ``FullSampler``, draws ``z_i`` from
the ``ask`` key and the member index (threefry: ``z_i`` drawn alone is bit-identical to its row,
and ``tell`` rebuilds every ``z_i`` instead of storing the population); the product ``A z_i``
rounds as its batch does, so a member built alone (``member``, ``best_params``) can differ from
its row of ``ask``'s population in the last bit. Everything else is ``_spec.build``'s, as for
every strategy.

A ``FullSpec`` gives ``factor(state) -> (σ, A)``, ``estimate(state, fitness, sample)`` with the
rebuilt ``Sample`` (``z`` and ``y = A z``, ``(P, d)``), ``update(state, estimate) -> (step,
changes)`` with a flat step, and ``geometry(state)`` for pycma's termination criteria; ``build``
adds the fitness history and the criteria (every full-covariance state has ``sigma`` and
``history`` fields).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from jaxes import centroid, trees
from jaxes import noise as noise_lib
from jaxes.strategies import _spec, termination
from jaxes.strategies import state as state_lib
from jaxes.strategies._spec import Estimate, StrategySpec
from jaxes.strategies.base import EstimateStats
from jaxes.types import Strategy

# The d × d matrices at the peak of a donated ``tell`` (XLA's memory_analysis at d = 1000:
# the state's C, B and the best member's scale, 3.01 d², and the update's temporaries, 3.05 d²
# for CMA-ES; xNES keeps one fewer), the covariance budget's unit.
MATRICES = 6
DEFAULT_COVARIANCE_BUDGET = 2**31


class Sample(NamedTuple):
    """The population the last ``ask`` drew, rebuilt: ``z`` (``(P, d)``, standard normal) and
    ``y = z Aᵀ`` (the displacements in units of σ: ``x_i = m + σ y_i``)."""

    z: jax.Array
    y: jax.Array


class FullSpec(NamedTuple):
    """A full-covariance strategy: its checked settings closed over by pure functions.

    Attributes:
      name: the factory's name.
      state_type: its state NamedTuple (``base.state_type``).
      population_size: ``λ = P``, checked.
      rank_based: whether the update sees fitness only through ranks.
      init: ``init(d, dtype) -> own fields`` for ``d`` flattened coordinates.
      factor: ``factor(state) -> (σ, A)``: member ``i`` is ``m + σ A z_i``.
      estimate: ``estimate(state, fitness, sample) -> Estimate`` (``stats.moments`` are those
        of the displacements as pytrees; ``build`` offers ``moments_of``).
      update: ``update(state, estimate) -> (flat step, changes)``.
      geometry: ``geometry(state) -> termination.Geometry``, the shape of ``C`` the
        termination criteria read (``build`` keeps the fitness history and reports them).
      sigma0: the initial σ (``tolx`` and ``tolupsigma`` are relative to it).
      covariance_budget: bytes the ``d × d`` matrices may take.
    """

    name: str
    state_type: type
    population_size: int
    rank_based: bool
    init: Callable[[int, Any], dict]
    factor: Callable[[Any], tuple[jax.Array, jax.Array]]
    estimate: Callable[[Any, jax.Array, Sample], Estimate]
    update: Callable[[Any, Estimate], tuple[jax.Array, dict]]
    geometry: Callable[[Any], termination.Geometry]
    sigma0: float
    covariance_budget: int


def flat(params) -> jax.Array:
    """The params as one vector (the master dtype they share)."""
    return ravel_pytree(params)[0]


def unflat(vector: jax.Array, like):
    """``vector`` (``(d,)``) shaped as the pytree ``like``, in ``like``'s dtypes."""
    return ravel_pytree(like)[1](vector)


def check_dimension(d: int, dtype, spec_name: str, budget: int) -> None:
    """The ``d × d`` matrices must fit ``covariance_budget``; say the largest ``d`` that does."""
    itemsize = jnp.dtype(dtype).itemsize
    need = MATRICES * d * d * itemsize
    if need > budget:
        largest = int((budget / (MATRICES * itemsize)) ** 0.5)
        raise ValueError(
            f"params: {spec_name} keeps d × d matrices, and d = {d} needs about "
            f"{need / 2**30:.3g} GiB, above covariance_budget={budget} bytes (the largest d it "
            f"fits in {jnp.dtype(dtype).name} is {largest}); use sep_cma_es or snes (diagonal) "
            f"for this many parameters, or raise covariance_budget"
        )


def standard_normal(key: jax.Array, i, d: int, dtype) -> jax.Array:
    """``z_i``: drawn from the ``ask`` key and the index alone (threefry).

    ``jax.random`` itself, not ``noise.threefry``: with the draw written out, XLA:CPU schedules
    the best member's ``d × d`` copy after the update and a donated ``tell`` peaks one matrix
    higher (cma_es at d = 400: 7.08 d² floats against 6.11, tests/test_cma_es.py)."""
    return jax.random.normal(jax.random.fold_in(key, i), (d,), dtype)


def build(spec: FullSpec, track_best: bool) -> Strategy:
    """The ``Strategy`` of ``spec``: ``_spec.build`` with the ``FullSampler``, the flat step
    shaped as the params, and pycma's termination criteria reported by every ``tell``."""
    p = spec.population_size

    def init(master):
        theta = flat(master)
        d = theta.shape[0]
        check_dimension(d, theta.dtype, spec.name, spec.covariance_budget)
        own = spec.init(d, theta.dtype)
        own["history"] = termination.empty_history(termination.windows(d, p)[1], theta.dtype)
        return own, (own["sigma"], jnp.eye(d, dtype=theta.dtype))

    def update(state, est: Estimate):
        step, changes = spec.update(state, est)
        return unflat(step, state.params), changes

    def finish(told, state, info):
        """The fitness history and pycma's criteria (``told.pending``: this ``tell`` had an
        ``ask``)."""
        history = termination.record(state.history, state.fitness, info.applied)
        state = state.replace(history=history)
        mean = flat(state.params)
        criteria, condition = termination.check(
            history=state.history,
            fitness=state.fitness,
            informative=info.applied | ~told.pending,
            mean=mean,
            sigma=state.sigma,
            sigma0=spec.sigma0,
            **spec.geometry(state)._asdict(),
            generation=state.generation,
            tolfun_window=termination.windows(mean.shape[0], p)[0],
        )
        return state, termination.report(info, criteria, condition, told.pending)

    strategy_spec = StrategySpec(
        name=spec.name,
        state_type=spec.state_type,
        population_size=p,
        antithetic=False,
        rank_based=spec.rank_based,
        scale=spec.factor,
        init=init,
        estimate=spec.estimate,
        update=update,
        finish=finish,
    )
    return _spec.build(strategy_spec, FullSampler(p), track_best)


@dataclasses.dataclass(frozen=True)
class FullSampler:
    """Members ``m + σ A z_i`` on the flattened params, for ``scale = (σ, A)``: ``z_i`` from the
    ``ask`` key and the index alone, so ``tell`` rebuilds every ``z_i`` (``told``)."""

    population_size: int
    antithetic: bool = False

    def start(self, key, master):
        return None, noise_lib.noise_key(key)

    def displacement(self, state, i, scale) -> jax.Array:
        """``σ A z_i`` shaped as the params (master dtype). Refused for members rounded to a
        narrower dtype: their displacement is not ``σ A z_i``."""
        if state_lib.is_rounded_state(state):
            raise ValueError(
                "perturbation: members of params narrower than float32 are rounded, so their "
                "displacement is not σAz; build them with member() instead"
            )
        return unflat(self._flat_displacement(state, i, scale), state.params)

    def _flat_displacement(self, state, i, scale) -> jax.Array:
        sigma, a = scale
        theta = flat(state.params)
        return sigma * (a @ standard_normal(state.key, i, theta.shape[0], theta.dtype))

    def member(self, state, i, scale):
        x = flat(state.params) + self._flat_displacement(state, i, scale)
        return trees.cast_like(unflat(x, state.params), state.dtypes)

    def members(self, state, first, count: int, scale):
        return jax.vmap(lambda i: self.member(state, i, scale))(first + jnp.arange(count))

    def population(self, state, scale):
        return self.members(state, 0, self.population_size, scale)

    def eval_chunk(self, state, members: int, factored: bool) -> int:
        return members or self.population_size  # no memory budget: all at once

    def told(self, state, scale) -> Sample:
        """Every ``z_i`` and ``y_i`` of the last ``ask``, from its key. Members rounded to a
        narrower dtype are read back (``y_i = (x_i - m)/σ``, ``z_i = A⁻¹ y_i``), so the update
        sees the members that were evaluated."""
        sigma, a = scale
        theta = flat(state.params)
        index = jnp.arange(self.population_size)
        if state_lib.is_rounded_state(state):

            def evaluated(i):
                return flat(trees.cast_like(self.member(state, i, scale), state.params))

            y = (jax.vmap(evaluated)(index) - theta) / sigma
            return Sample(jnp.linalg.solve(a, y.T).T, y)
        z = jax.vmap(lambda i: standard_normal(state.key, i, theta.shape[0], theta.dtype))(index)
        return Sample(z, z @ a.T)


def population_stats(state, sample: Sample, weights, masses, sigma) -> EstimateStats:
    """``EstimateStats`` with the moments of the displacements ``δ_i = σ y_i`` as pytrees."""
    deltas = jax.vmap(lambda y: unflat(sigma * y, state.params))(sample.y)
    return EstimateStats(weights, masses, centroid.moments(deltas, masses), sigma)
