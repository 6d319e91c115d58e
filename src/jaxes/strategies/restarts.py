"""Restarts for strategies that report ``stop`` (``cma_es``, ``xnes``).

Two ways, for the two places a restart can live:

- ``with_restarts(strategy)``: a ``Strategy`` of fixed ``λ`` that starts its inner strategy
  afresh (from ``initial(key)`` or the first params) whenever a ``tell`` reports ``stop``, and
  keeps the best member over all runs; pure, so it runs inside ``jit`` and ``lax.scan``.
- ``ipop`` and ``bipop``: drivers in Python, since a growing ``λ`` changes every array's shape.
  IPOP (Auger & Hansen 2005) doubles ``λ`` at each restart; BIPOP (Hansen 2009) interleaves
  those large runs with small ones, ``λ_s = ⌊λ0 (λ_l / 2λ0)^{U²}⌋`` and ``σ_s = σ0 · 10^{-2U}``
  (``U`` uniform in [0, 1), ``λ_l`` the last large ``λ``), always running next the regime
  that has spent fewer evaluations. Each ``λ`` compiles ``ask`` and ``tell`` once; the
  fitness is any host function of the population, so COCO's own loop can count and log it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxes.checks import check_int, check_positive
from jaxes.strategies import termination
from jaxes.types import Params, Strategy


class RestartState(NamedTuple):
    """``with_restarts``'s state.

    Attributes:
      inner: the running strategy's state.
      origin: the params every run starts from (without ``initial``).
      key: where the next run's key comes from.
      restarts: how many runs have been started after the first.
      best_fitness: the best fitness over every run.
      best: that member's params (in the params' dtypes).
    """

    inner: Any
    origin: Params
    key: jax.Array
    restarts: jax.Array
    best_fitness: jax.Array
    best: Params


def with_restarts(
    strategy: Strategy, initial: Callable[[jax.Array], Params] | None = None
) -> Strategy:
    """``strategy`` restarted from scratch whenever its ``tell`` reports ``stop``.

    Args:
      strategy: a strategy whose info has ``stop`` (``cma_es``, ``xnes``).
      initial: ``initial(key) -> params`` for each new run (e.g. uniform in a box); ``None``
        starts every run from the params given to ``init``.

    Its info is the inner strategy's, with ``restarts`` (runs so far after the first) and
    ``best_fitness`` over every run; ``best_params`` is the best member over every run.

    Example:
      >>> import jax, jax.numpy as jnp, jaxes
      >>> es = with_restarts(jaxes.cma_es(6, sigma=1.0))
      >>> state = es.init(jax.random.key(0), jnp.ones(2))
      >>> def generation(state, key):
      ...     population, state = es.ask(key, state)
      ...     return es.tell(state, jnp.zeros(6))  # flat fitness: every tell stops
      >>> state, info = jax.lax.scan(generation, state, jax.random.split(jax.random.key(1), 3))
      >>> info.restarts.tolist()
      [1, 2, 3]
    """
    p = strategy.population_size

    def init(key, params):
        run_key, key = jax.random.split(key)
        inner = strategy.init(run_key, params)
        dtype = inner.best_fitness.dtype
        return RestartState(
            inner=inner,
            origin=jax.tree.map(jnp.copy, params),
            key=key,
            restarts=jnp.zeros((), jnp.int32),
            best_fitness=jnp.full((), -jnp.inf, dtype),
            best=jax.tree.map(jnp.copy, params),
        )

    def ask(key, state):
        population, inner = strategy.ask(key, state.inner)
        return population, state._replace(inner=inner)

    def tell(state, fitness):
        fitness = jnp.asarray(fitness)
        ranked = jnp.where(jnp.isfinite(fitness), fitness, -jnp.inf)
        best_i = jnp.argmax(ranked)
        improved = ranked[best_i] > state.best_fitness
        candidate = strategy.member(state.inner, best_i)
        best = jax.tree.map(lambda new, old: jnp.where(improved, new, old), candidate, state.best)
        best_fitness = jnp.where(improved, ranked[best_i], state.best_fitness)
        inner, info = strategy.tell(state.inner, fitness)
        key, run_key, start_key = jax.random.split(state.key, 3)
        start = state.origin if initial is None else initial(start_key)
        fresh = strategy.init(run_key, start)
        inner = jax.tree.map(lambda a, b: jnp.where(info.stop, a, b), fresh, inner)
        restarts = state.restarts + info.stop.astype(jnp.int32)
        new = RestartState(inner, state.origin, key, restarts, best_fitness, best)
        return new, RestartInfo(info, restarts, best_fitness)

    return Strategy(
        init=init,
        ask=ask,
        tell=tell,
        member=lambda state, i: strategy.member(state.inner, i),
        estimate=lambda state, fitness: strategy.estimate(state.inner, fitness),
        population_size=p,
        best_params=lambda state: state.best,
        members=None
        if strategy.members is None
        else lambda state, first, count: strategy.members(state.inner, first, count),
        traits=strategy.traits,
    )


class RestartInfo(NamedTuple):
    """``with_restarts``'s info: the running strategy's, the restarts so far and the best
    fitness over every run."""

    info: Any
    restarts: jax.Array
    best_fitness: jax.Array


class Run(NamedTuple):
    """One run of a restart driver: its ``λ``, ``σ0``, evaluations, best fitness and why it
    ended (a termination criterion, ``"target"`` or ``"budget"``)."""

    population_size: int
    sigma: float
    evaluations: int
    best_fitness: float
    reason: str


class RestartResult(NamedTuple):
    """What ``ipop``/``bipop`` found: the best params and fitness, the evaluations spent and
    every run."""

    best_params: Params
    best_fitness: float
    evaluations: int
    runs: list[Run]


Factory = Callable[[int, float], Strategy]
Evaluate = Callable[[Any], Any]


def run_once(
    factory: Factory,
    evaluate: Evaluate,
    x0: Params,
    sigma: float,
    population_size: int,
    key: jax.Array,
    max_evaluations: int,
    target: float | None = None,
) -> tuple[Params, float, Run]:
    """One run of ``factory(population_size, sigma)`` from ``x0`` until it reports ``stop``,
    reaches ``target`` or would exceed ``max_evaluations``; ``evaluate(population) -> (P,)``
    fitness (maximised) may be any host function."""
    strategy = factory(population_size, sigma)
    ask, tell = jax.jit(strategy.ask), jax.jit(strategy.tell)
    init_key, key = jax.random.split(key)
    state = strategy.init(init_key, x0)
    best_params, best_fitness, evaluations, reason = x0, -np.inf, 0, "budget"
    while evaluations + population_size <= max_evaluations:
        key, ask_key = jax.random.split(key)
        population, state = ask(ask_key, state)
        fitness = np.asarray(evaluate(population), np.float64)
        evaluations += population_size
        i = int(np.argmax(np.where(np.isfinite(fitness), fitness, -np.inf)))
        if fitness[i] > best_fitness:
            best_fitness = float(fitness[i])
            best_params = jax.tree.map(lambda x, i=i: x[i], population)
        state, info = tell(state, jnp.asarray(fitness, state.best_fitness.dtype))
        if target is not None and best_fitness >= target:
            reason = "target"
            break
        if bool(info.stop):
            reason = ",".join(name for name in _criteria(info) if bool(getattr(info, name)))
            break
    run = Run(population_size, float(sigma), evaluations, best_fitness, reason)
    return best_params, best_fitness, run


def _criteria(info) -> list[str]:
    return [name for name in termination.CRITERIA if hasattr(info, name)]


def ipop(
    factory: Factory,
    evaluate: Evaluate,
    x0: Params,
    sigma: float,
    key: jax.Array,
    *,
    max_evaluations: int,
    population_size: int,
    increase: float = 2.0,
    max_restarts: int = 9,
    target: float | None = None,
    initial: Callable[[jax.Array], Params] | None = None,
) -> RestartResult:
    """IPOP: run, and after each stop restart with ``λ`` times ``increase``.

    Args:
      factory: ``factory(population_size, sigma) -> Strategy`` (``jaxes.cma_es`` itself).
      evaluate: ``evaluate(population) -> (P,)`` fitness, maximised (a host function or a
        jitted one).
      x0, sigma: where every run starts, and its ``σ0``.
      key: PRNG key.
      max_evaluations: the whole budget; a run stops before a generation would pass it.
      population_size: ``λ0``.
      increase: the factor ``λ`` grows by (> 1).
      max_restarts: at most this many runs after the first.
      target: stop everything once the best fitness reaches it.
      initial: ``initial(key) -> params``, where each run after the first starts (COCO's
        experiments draw it uniformly in ``[-4, 4]^d``); ``None``: ``x0`` again.
    """
    return _drive(
        factory,
        evaluate,
        x0,
        sigma,
        key,
        max_evaluations,
        population_size,
        increase,
        max_restarts,
        target,
        initial,
        bipop=False,
    )


def bipop(
    factory: Factory,
    evaluate: Evaluate,
    x0: Params,
    sigma: float,
    key: jax.Array,
    *,
    max_evaluations: int,
    population_size: int,
    increase: float = 2.0,
    max_restarts: int = 9,
    target: float | None = None,
    initial: Callable[[jax.Array], Params] | None = None,
) -> RestartResult:
    """BIPOP: IPOP's large runs interleaved with small ones (see the module); the arguments
    are ``ipop``'s, and ``max_restarts`` counts the large runs."""
    return _drive(
        factory,
        evaluate,
        x0,
        sigma,
        key,
        max_evaluations,
        population_size,
        increase,
        max_restarts,
        target,
        initial,
        bipop=True,
    )


def _drive(
    factory,
    evaluate,
    x0,
    sigma,
    key,
    max_evaluations,
    population_size,
    increase,
    max_restarts,
    target,
    initial,
    bipop: bool,
) -> RestartResult:
    max_evaluations = check_int("max_evaluations", max_evaluations, 1)
    lam0 = check_int("population_size", population_size, 2)
    sigma = check_positive("sigma", sigma)
    increase = check_positive("increase", increase)
    if increase <= 1:
        raise ValueError(f"increase: expected a number > 1, got {increase!r}")
    max_restarts = check_int("max_restarts", max_restarts, 0)
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())
    best_params, best_fitness, spent, runs = x0, -np.inf, 0, []
    large_runs, large_spent, small_spent, lam_large = 0, 0, 0, lam0
    while spent + lam0 <= max_evaluations and large_runs <= max_restarts:
        small = bipop and large_runs >= 1 and small_spent < large_spent
        if small:
            u = rng.uniform()
            lam = max(2, int(lam0 * (lam_large / (2 * lam0)) ** (u * u)))
            run_sigma = sigma * 10 ** (-2 * rng.uniform())
        else:
            lam = lam_large = int(round(lam0 * increase**large_runs))
            run_sigma = sigma
        key, run_key, start_key = jax.random.split(key, 3)
        start = x0 if not runs or initial is None else initial(start_key)
        params, fitness, run = run_once(
            factory, evaluate, start, run_sigma, lam, run_key, max_evaluations - spent, target
        )
        runs.append(run)
        spent += run.evaluations
        if small:
            small_spent += run.evaluations
        else:
            large_spent += run.evaluations
            large_runs += 1
        if fitness > best_fitness:
            best_params, best_fitness = params, fitness
        if run.reason in ("target", "budget") or run.evaluations == 0:
            break
    return RestartResult(best_params, float(best_fitness), spent, runs)
