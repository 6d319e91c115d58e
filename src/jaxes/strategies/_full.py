"""The builder of full-covariance strategies (internal): CMA-ES and xNES.

Their members are ``x_i = m + σ A z_i`` with a ``d × d`` matrix ``A`` (``B D`` for CMA-ES, the
normalised factor for xNES) acting on the *flattened* params, so they cannot share the
per-coordinate noise of ``_spec``. What they do share is written once here: ``z_i`` drawn from
the ``ask`` key and the member index (threefry, so a member built alone is bit-identical to its
row of the population and ``tell`` rebuilds every ``z_i`` instead of storing the population),
the state's shared fields, the checks, the best-member recipe and the end of ``tell``.

A spec gives ``factor(state) -> (σ, A)``, ``estimate(state, fitness, sample)`` with the rebuilt
``Sample`` (``z`` and ``y = A z``, ``(P, d)``), ``update(state, estimate) -> (step, changes)``
with a flat step, and ``geometry(state)`` for pycma's termination criteria; ``build`` does the
rest, the fitness history and the criteria included (every full-covariance state has
``sigma`` and ``history`` fields).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from jaxes import centroid, trees
from jaxes import noise as noise_lib
from jaxes.strategies import _state, _tell, termination
from jaxes.strategies._spec import Estimate
from jaxes.strategies.base import BestMember, EstimateStats
from jaxes.types import Strategy, StrategyTraits

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
    """``z_i``: drawn from the ``ask`` key and the index alone (threefry)."""
    return jax.random.normal(jax.random.fold_in(key, i), (d,), dtype)


def build(spec: FullSpec, track_best: bool) -> Strategy:
    """The ``Strategy`` of ``spec``: ``init``, ``ask``, ``member(s)``, ``perturbation``,
    ``estimate``, ``tell`` and ``best_params``, all on the flattened params."""
    p = spec.population_size

    def init(key: jax.Array, params):
        params = trees.check_params(params)
        master = _state.master_params(params)
        theta = flat(master)
        d = theta.shape[0]
        check_dimension(d, theta.dtype, spec.name, spec.covariance_budget)
        dtype = trees.state_dtype(master)
        ask_key = noise_lib.noise_key(key)
        own = spec.init(d, theta.dtype)
        own["history"] = termination.empty_history(termination.windows(d, p)[1], theta.dtype)
        return spec.state_type(
            params=master,
            dtypes=jax.tree.map(lambda x: jnp.zeros((), x.dtype), params),
            **own,
            key=ask_key,
            generation=jnp.zeros((), jnp.int32),
            noise_state=None,
            pending=jnp.zeros((), bool),
            fitness=jnp.full((p,), jnp.nan, dtype),
            best_fitness=jnp.full((), -jnp.inf, dtype),
            best=BestMember(
                key=jax.random.key_data(ask_key),
                index=jnp.zeros((), jnp.int32),
                centre=jax.tree.map(jnp.zeros_like, master) if track_best else None,
                scale=jnp.zeros((d, d), theta.dtype) if track_best else None,
            ),
        )

    def check(state) -> None:
        _state.check_state(state, spec.state_type, spec.name, p)

    def displacement(state, i) -> jax.Array:
        """``σ A z_i`` (flat, master dtype)."""
        sigma, a = spec.factor(state)
        theta = flat(state.params)
        z = standard_normal(state.key, i, theta.shape[0], theta.dtype)
        return sigma * (a @ z)

    def build_member(state, i):
        x = flat(state.params) + displacement(state, i)
        return _state_dtypes(unflat(x, state.params), state.dtypes)

    def ask(key, state):
        state = state._replace(key=noise_lib.noise_key(key), pending=jnp.ones((), bool))
        return jax.vmap(lambda i: build_member(state, i))(jnp.arange(p)), state

    def member(state, i):
        check(state)
        i = _state.check_member_index(i, p)
        x = build_member(state, jnp.clip(i, 0, p - 1))
        if isinstance(i, jax.core.Tracer):
            offset = jnp.where((i >= 0) & (i < p), 0.0, jnp.nan)
            x = jax.tree.map(lambda v: v + offset.astype(v.dtype), x)
        return x

    def members(state, first, count: int):
        return jax.vmap(lambda i: build_member(state, i))(first + jnp.arange(count))

    def perturbation(state, i):
        check(state)
        if _state.is_rounded_state(state):
            raise ValueError(
                "perturbation: members of params narrower than float32 are rounded, so their "
                "displacement is not σAz; build them with member() instead"
            )
        i = _state.check_member_index(i, p)
        delta = displacement(state, jnp.clip(i, 0, p - 1))
        valid = jnp.where((i >= 0) & (i < p), 1.0, jnp.nan).astype(delta.dtype)
        return unflat(delta * valid, state.params)

    def sample(state) -> Sample:
        """Every ``z_i`` and ``y_i`` of the last ``ask``, from its key. Members rounded to a
        narrower dtype are read back (``y_i = (x_i - m)/σ``, ``z_i = A⁻¹ y_i``), so the update
        sees the members that were evaluated."""
        sigma, a = spec.factor(state)
        theta = flat(state.params)
        if _state.is_rounded_state(state):
            rounded = jax.vmap(lambda i: flat(_master_dtypes(build_member(state, i), state)))
            y = (rounded(jnp.arange(p)) - theta) / sigma
            return Sample(jnp.linalg.solve(a, y.T).T, y)
        z = jax.vmap(lambda i: standard_normal(state.key, i, theta.shape[0], theta.dtype))(
            jnp.arange(p)
        )
        return Sample(z, z @ a.T)

    def estimate_all(state, fitness) -> Estimate:
        check(state)
        fitness = _state.check_fitness(fitness, p)
        return spec.estimate(state, fitness, sample(state))

    def estimate(state, fitness):
        direction, stats, _ = estimate_all(state, fitness)
        return direction, stats

    def tell(state, fitness):
        est = estimate_all(state, fitness)
        sigma, a = spec.factor(state)

        def update():
            step, changes = spec.update(state, est)
            return unflat(step, state.params), changes

        new_state, info = _tell.finish_tell(
            state, fitness, est.stats.moments, sigma, sigma * a, update
        )
        history = termination.record(new_state.history, new_state.fitness, info.applied)
        new_state = new_state._replace(history=history)
        return new_state, termination_info(new_state, info, state.pending)

    def termination_info(state, base, told) -> termination.TerminationInfo:
        """``base`` and pycma's criteria (``told``: whether this ``tell`` had an ``ask``)."""
        mean = flat(state.params)
        criteria, condition = termination.check(
            history=state.history,
            fitness=state.fitness,
            informative=base.applied | ~told,
            mean=mean,
            sigma=state.sigma,
            sigma0=spec.sigma0,
            **spec.geometry(state)._asdict(),
            generation=state.generation,
            tolfun_window=termination.windows(mean.shape[0], p)[0],
        )
        return termination.report(base, criteria, condition, told)

    def best_params(state):
        best = state.best
        if best.centre is None:
            raise ValueError(
                "best_params: this strategy was built with track_best=False, so it keeps only "
                "the best fitness; build it with track_best=True to rebuild the best member"
            )
        key = jax.random.wrap_key_data(best.key, impl="threefry2x32")
        theta = flat(best.centre)
        x = theta + best.scale @ standard_normal(key, best.index, theta.shape[0], theta.dtype)
        return _state_dtypes(unflat(x, best.centre), state.dtypes)

    return Strategy(
        init=init,
        ask=ask,
        tell=tell,
        member=member,
        estimate=estimate,
        population_size=p,
        best_params=best_params,
        members=members,
        perturbation=perturbation,
        traits=StrategyTraits(spec.name, False, spec.rank_based),
    )


def _state_dtypes(params, dtypes):
    return jax.tree.map(lambda x, t: x.astype(t.dtype), params, dtypes)


def _master_dtypes(params, state):
    return jax.tree.map(lambda x, t: x.astype(t.dtype), params, state.params)


def population_stats(state, sample: Sample, weights, masses, sigma) -> EstimateStats:
    """``EstimateStats`` with the moments of the displacements ``δ_i = σ y_i`` as pytrees."""
    deltas = jax.vmap(lambda y: unflat(sigma * y, state.params))(sample.y)
    return EstimateStats(weights, masses, centroid.moments(deltas, masses), sigma)
