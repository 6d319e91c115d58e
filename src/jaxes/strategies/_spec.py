"""One strategy spec and the builder that makes a ``Strategy`` of it (internal).

A strategy is its checked settings plus its update rule (``StrategySpec``); ``build`` writes
the rest the same way for every strategy: ``init``, ``ask``, ``member``, ``members``,
``perturbation``, the best-member rebuild, the evaluation chunk, and the ``tell`` wrapper
(checks, the strategy's ``estimate``, the applied update, best member and info). Adding a
strategy is one file: its state NamedTuple, its maths, and a factory that checks its
settings and returns ``build(StrategySpec(...), noise, track_best)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxes import noise as noise_lib
from jaxes import trees
from jaxes.strategies import _state, _tell
from jaxes.strategies._settings import NoiseSettings, make_perturbations
from jaxes.strategies.base import EstimateStats
from jaxes.types import Strategy, StrategyTraits

# Moments of the population the last ``ask`` drew: ``moments_of(masses, squares=False)``.
MomentsOf = Callable[..., Any]


class Estimate(NamedTuple):
    """What a spec's ``estimate`` returns: the public ``(direction, stats)`` and ``aux``,
    anything else its ``update`` reads (sep-CMA-ES: the moments in units of σ), or ``None``."""

    direction: Any
    stats: EstimateStats
    aux: Any = None


class StrategySpec(NamedTuple):
    """A strategy: its checked settings closed over by a few pure functions.

    Attributes:
      name: the factory's name (in traits and error messages).
      state_type: its state NamedTuple: ``(params, dtypes, <own fields>, key, generation,
        noise_state, pending, fitness, best_fitness, best)``.
      population_size: ``P``, checked.
      antithetic: whether members come in ``±ε`` pairs.
      rank_based: whether the update sees fitness only through ranks (``None``: unknown).
      scale: ``scale(state)``, the scale members are built with (σ, σ per coordinate, or
        σ·√C): member ``i`` is ``θ + scale ⊙ s_i ε_{j(i)}``.
      init: ``init(master) -> (own_fields, scale)``: the strategy's own state fields for the
        master params, and the scale of the first population (its shape and dtype are those
        of the best-member recipe's scale).
      estimate: ``estimate(state, fitness, moments_of) -> Estimate`` for checked ``fitness``;
        ``moments_of(masses, squares=False)`` gives the population's moments, rebuilt from
        the noise.
      update: ``update(state, estimate) -> (step, changes)``: the change of θ and the new
        values of the strategy's own fields by name; it runs only when the update applies.
      gaussian_term: the switched-on term derived for Gaussian ``ε`` only (non-Gaussian noise
        is then refused), or ``None``.
    """

    name: str
    state_type: type
    population_size: int
    antithetic: bool
    rank_based: bool | None
    scale: Callable[[Any], Any]
    init: Callable[[Any], tuple[dict, Any]]
    estimate: Callable[[Any, jax.Array, MomentsOf], Estimate]
    update: Callable[[Any, Estimate], tuple[Any, dict]]
    gaussian_term: str | None = None


def build(spec: StrategySpec, noise: NoiseSettings, track_best: bool) -> Strategy:
    """The ``Strategy`` of ``spec``, with members drawn as ``noise`` says; ``track_best`` keeps
    what is needed to rebuild the best member seen."""
    p = spec.population_size
    perturbations = make_perturbations(noise, p, spec.antithetic, spec.gaussian_term)

    def init(key: jax.Array, params):
        params = trees.check_params(params)
        master = _state.master_params(params)
        own, scale = spec.init(master)
        fields = _state.initial_fields(perturbations, key, params, master, scale, track_best)
        return spec.state_type(**own, **fields)

    def check(state) -> None:
        _state.check_state(state, spec.state_type, spec.name, p)

    def estimate_all(state, fitness) -> Estimate:
        check(state)
        fitness = _state.check_fitness(fitness, p)

        def moments_of(masses, squares: bool = False):
            return _tell.population_moments(
                perturbations, state, masses, spec.scale(state), squares
            )

        return spec.estimate(state, fitness, moments_of)

    def estimate(state, fitness):
        direction, stats, _ = estimate_all(state, fitness)
        return direction, stats

    def tell(state, fitness):
        est = estimate_all(state, fitness)
        sigma = est.stats.sigma  # the scale the told population was built with
        return _tell.finish_tell(
            state, fitness, est.stats.moments, sigma, sigma, lambda: spec.update(state, est)
        )

    members = _members(perturbations, spec, check)
    return Strategy(
        init=init,
        tell=tell,
        estimate=estimate,
        population_size=p,
        best_params=lambda state: _state.best_params(perturbations, state),
        traits=StrategyTraits(spec.name, perturbations.antithetic, spec.rank_based),
        **members,
    )


def _members(perturbations: noise_lib.Perturbations, spec: StrategySpec, check) -> dict:
    """``ask``, ``member``, ``members``, ``perturbation`` and ``eval_chunk``: the population
    the state's key and ``spec.scale`` describe, whole or in parts."""
    scale_of = spec.scale

    def ask(key, state):
        state = state._replace(key=noise_lib.noise_key(key), pending=jnp.ones((), bool))
        population = perturbations.population(
            state.noise_state, state.key, state.params, scale_of(state), state.dtypes
        )
        return population, state

    def member(state, i):
        check(state)
        return _member(perturbations, state, i, scale_of(state))

    def members(state, first, count: int):
        return perturbations.members(
            state.noise_state, state.key, first, count, state.params, scale_of(state), state.dtypes
        )

    def perturbation(state, i):
        check(state)
        return _perturbation(perturbations, state, i, scale_of)

    def eval_chunk(state, members: int = 0, factored: bool = False) -> int:
        return perturbations.eval_chunk(state.params, state.dtypes, members, factored)

    return {
        "ask": ask,
        "member": member,
        "members": members,
        "perturbation": perturbation,
        "eval_chunk": eval_chunk,
    }


def _member(perturbations: noise_lib.Perturbations, state, i, scale):
    """Member ``i``; an index outside ``[0, P)`` (traced) gives a NaN member, which every
    fitness shaping ranks worst, instead of a member no ``tell`` would rebuild."""
    p = perturbations.population_size
    i = _state.check_member_index(i, p)
    x = perturbations.member(
        state.noise_state, state.key, jnp.clip(i, 0, p - 1), state.params, scale, state.dtypes
    )
    if isinstance(i, jax.core.Tracer):
        # A scalar 0 or NaN added to every entry: fused into whatever reads the member.
        offset = jnp.where((i >= 0) & (i < p), 0.0, jnp.nan)
        x = jax.tree.map(lambda v: v + offset.astype(v.dtype), x)
    return x


def _perturbation(perturbations: noise_lib.Perturbations, state, i, scale_of):
    """Member ``i``'s displacement from ``jaxes.centre(state)`` (NaN for a traced index outside
    ``[0, P)``, as ``member``): factored where the noise is, and for a rounded member the
    displacement it really had from the rounded centre."""
    p = perturbations.population_size
    i = _state.check_member_index(i, p)
    valid = jnp.where((i >= 0) & (i < p), 1.0, jnp.nan).astype(jnp.float32)
    delta = perturbations.displacement(
        state.noise_state,
        state.key,
        jnp.clip(i, 0, p - 1),
        state.params,
        scale_of(state),
        state.dtypes,
    )
    return jax.tree.map(lambda x: x * valid, delta)
