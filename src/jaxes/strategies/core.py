"""A strategy's maths (``Rule``) and the one ``build`` that makes a ``Strategy`` of it.

A strategy is one file: its state class (``state.StrategyState`` and its own fields), a
factory that checks its settings, and a ``Rule``: four functions, two optional. ``build``
writes the rest the same way for every strategy: ``init``, ``ask``, ``member``, ``members``,
``perturbation``, the best-member rebuild, the evaluation chunk, and ``tell`` (the checks, the
rule's ``estimate``, the applied update, the best member and the info). Members are drawn by a
sampler (``samplers.Diagonal`` or ``samplers.FullSampler``); ``estimate`` reads the population
the last ``ask`` drew through its ``samplers.Population``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp

from jaxes import noise as noise_lib
from jaxes import trees
from jaxes.factored import lowrank as low_rank
from jaxes.strategies import _state, _tell
from jaxes.strategies import state as state_lib
from jaxes.strategies.base import EstimateStats
from jaxes.strategies.samplers import Population
from jaxes.types import Strategy, StrategyTraits


class Estimate(NamedTuple):
    """What a rule's ``estimate`` returns: the ascent ``direction`` (a pytree like the params,
    or flat for a full-covariance rule) and ``stats``. A rule whose ``update`` needs more
    returns its own NamedTuple with these two fields first and its own after them."""

    direction: Any
    stats: EstimateStats


class Rule(NamedTuple):
    """A strategy's maths, closed over its checked settings.

    Attributes:
      init: ``init(master) -> (own, scale)``: the state's own fields (keywords of its class)
        for the master params, and the scale of the first population (the shape and dtype of
        the best-member recipe's scale).
      scale: ``scale(state)``, the scale members are built with (σ, σ per coordinate, or
        ``(σ, A)`` for ``samplers.FullSampler``).
      estimate: ``estimate(state, fitness, population) -> Estimate`` for checked fitness;
        ``population`` is the ``samplers.Population`` the last ``ask`` drew.
      update: ``update(state, estimate) -> (step, state)``: the change of θ (a pytree like the
        params) and the state with its own fields new; it runs only when the update applies.
        ``None`` for a rule whose ``write`` always writes θ (``ga``: its next θ is a member it
        selects, which ``θ + step`` would round).
      finish: ``finish(told, state, info) -> (state, info)``, run at the end of every ``tell``
        with the state it was given and the new one (CMA-ES and xNES: the fitness history and
        the termination criteria), or ``None``.
      write: ``write(state, estimate, applied) -> (params, state, step_norm)``, in place of
        ``update`` when the direction has ``jaxes.factored.lowrank.LowRank`` leaves: θ and the
        own fields written once each, unchanged where not ``applied``, or ``None``.
      ask_key: ``ask_key(state, key) -> key``: the (threefry) key ``ask`` draws its population
        from, given the state ``ask`` was handed and ``ask``'s own key; ``None``: that key
        (NRES keeps one key, so one noise, for every truncation of an unroll).
    """

    init: Callable[[Any], tuple[dict, Any]]
    scale: Callable[[Any], Any]
    estimate: Callable[[Any, jax.Array, Population], Estimate]
    update: Callable[[Any, Any], tuple[Any, Any]] | None
    finish: Callable[[Any, Any, Any], tuple[Any, Any]] | None = None
    write: Callable[[Any, Any, jax.Array], tuple[Any, Any, jax.Array]] | None = None
    ask_key: Callable[[Any, jax.Array], jax.Array] | None = None


class Sampler(Protocol):
    """How a family of strategies draws members from a state (``samplers``)."""

    population_size: int
    antithetic: bool

    def start(self, key: jax.Array, master) -> tuple[Any, jax.Array]: ...
    def population(self, state, scale): ...
    def member(self, state, i, scale): ...
    def members(self, state, first, count: int, scale): ...
    def displacement(self, state, i, scale): ...
    def eval_chunk(self, state, members: int, factored: bool) -> int: ...
    def told(self, state, scale) -> Population: ...


def build(
    rule: Rule, state_type: type, sampler: Sampler, *, rank_based: bool | None, track_best: bool
) -> Strategy:
    """The ``Strategy`` of ``rule`` with states of ``state_type`` (its ``strategy`` names it)
    and members drawn by ``sampler``; ``rank_based``: whether the update sees fitness only
    through ranks (``None``: unknown); ``track_best`` keeps what rebuilds the best member."""
    p, name = sampler.population_size, state_type.strategy

    def init(key: jax.Array, params):
        params = trees.check_params(params)
        master = state_lib.master_params(params)
        own, scale = rule.init(master)
        noise_state, ask_key = sampler.start(key, master)
        shared = state_lib.initial_fields(
            p, noise_state, ask_key, params, master, scale, track_best
        )
        return state_type(**shared, **own)

    def check(state) -> None:
        _state.check_state(state, state_type, name, p)

    def estimate_all(state, fitness):
        check(state)
        fitness = _state.check_fitness(fitness, p)
        return rule.estimate(state, fitness, sampler.told(state, rule.scale(state)))

    def estimate(state, fitness):
        # Public values are dense: a direction kept as factors is for this strategy's tell.
        est = estimate_all(state, fitness)
        return low_rank.dense(est.direction), low_rank.dense(est.stats)

    def tell(state, fitness):
        est = estimate_all(state, fitness)
        leaves = jax.tree.leaves(est.direction, is_leaf=low_rank.is_factored)
        write = None
        factored = any(map(low_rank.is_factored, leaves))
        if rule.write is not None and (rule.update is None or factored):
            write = functools.partial(rule.write, state, est)
        new_state, info = _tell.finish_tell(
            state,
            fitness,
            est.stats.moments,
            est.stats.sigma,
            rule.scale(state),  # the scale the told population was built with
            lambda: rule.update(state, est),
            write,
        )
        if rule.finish is None:
            return new_state, info
        return rule.finish(state, new_state, info)

    return Strategy(
        init=init,
        tell=tell,
        estimate=estimate,
        population_size=p,
        traits=StrategyTraits(name, sampler.antithetic, rank_based),
        **_members(sampler, rule.scale, check, rule.ask_key),
    )


def _members(
    sampler: Sampler, scale_of: Callable, check: Callable, ask_key: Callable | None = None
) -> dict:
    """``ask``, ``member``, ``members``, ``perturbation``, ``best_params`` and ``eval_chunk``:
    the population the state's key and ``scale_of(state)`` describe, whole or in parts, and
    the best member's, from its recipe; ``ask`` keeps the key ``ask_key`` picks (``Rule``)."""
    p = sampler.population_size

    def ask(key, state):
        key = noise_lib.noise_key(key)
        if ask_key is not None:
            key = ask_key(state, key)
        state = state.replace(key=key, pending=jnp.ones((), bool))
        return sampler.population(state, scale_of(state)), state

    def member(state, i):
        check(state)
        i = _state.check_member_index(i, p)
        x = sampler.member(state, jnp.clip(i, 0, p - 1), scale_of(state))
        if isinstance(i, jax.core.Tracer):
            # A scalar 0 or NaN added to every entry: fused into whatever reads the member.
            x = jax.tree.map(lambda v: v + _valid(i, p, 0.0).astype(v.dtype), x)
        return x

    def perturbation(state, i):
        check(state)
        i = _state.check_member_index(i, p)
        delta = sampler.displacement(state, jnp.clip(i, 0, p - 1), scale_of(state))
        return jax.tree.map(lambda x: x * _valid(i, p, 1.0).astype(jnp.float32), delta)

    def best_params(state):
        """The best member seen so far, rebuilt from its recipe, in the params' dtypes (a
        narrow leaf whose member was ``round(θ) + δ`` comes back rounded once more)."""
        best = state.best
        if best.centre is None:
            raise ValueError(
                "best_params: this strategy was built with track_best=False, so it keeps only "
                "the best fitness; build it with track_best=True to rebuild the best member"
            )
        key = jax.random.wrap_key_data(best.key, impl="threefry2x32")
        recipe = state.replace(key=key, params=best.centre)
        return trees.cast_like(sampler.member(recipe, best.index, best.scale), state.dtypes)

    def members(state, first, count: int):
        return sampler.members(state, first, count, scale_of(state))

    def eval_chunk(state, members: int = 0, factored: bool = False) -> int:
        return sampler.eval_chunk(state, members, factored)

    return {
        "ask": ask,
        "member": member,
        "members": members,
        "perturbation": perturbation,
        "best_params": best_params,
        "eval_chunk": eval_chunk,
    }


def _valid(i, p: int, value: float):
    """``value`` for an index in ``[0, P)``, NaN outside: a traced index out of range gives a
    NaN member, which every fitness shaping ranks worst, instead of a member no ``tell``
    would rebuild."""
    return jnp.where((i >= 0) & (i < p), value, jnp.nan)
