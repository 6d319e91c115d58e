"""One strategy spec and the one builder that makes a ``Strategy`` of it (internal).

A strategy is its checked settings plus its update rule (``StrategySpec``) and a sampler: how
its members are drawn from the state's key. ``build`` writes the rest the same way for every
strategy: ``init``, ``ask``, ``member``, ``members``, ``perturbation``, the best-member
rebuild, the evaluation chunk, and the ``tell`` wrapper (checks, the strategy's ``estimate``,
the applied update, best member and info). Two samplers exist: ``Diagonal`` here (members
``θ + scale ⊙ s_i ε_{j(i)}`` from a ``jaxes.noise`` recipe: OpenAI-ES, PGPE, SNES, ARS,
sep-CMA-ES) and ``_full.FullSampler`` (``m + σ A z_i`` on the flattened params: CMA-ES, xNES).
Adding a strategy is one file: its state NamedTuple, its maths, and a factory that checks its
settings and returns ``build(StrategySpec(...), NoiseSettings(...), track_best)``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp

from jaxes import low_rank, trees
from jaxes import noise as noise_lib
from jaxes.noise import threefry
from jaxes.strategies import _state, _tell
from jaxes.strategies import state as state_lib
from jaxes.strategies._settings import NoiseSettings, make_perturbations
from jaxes.strategies.base import EstimateStats
from jaxes.types import Strategy, StrategyTraits

# Moments of the population the last ``ask`` drew:
# ``moments_of(masses, squares=False, keep_factors=False)``.
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
      estimate: ``estimate(state, fitness, told) -> Estimate`` for checked ``fitness``;
        ``told`` is the sampler's view of the population the last ``ask`` drew: for
        ``Diagonal``, ``moments_of(masses, squares=False)``, the population's moments rebuilt
        from the noise; for ``_full.FullSampler``, the rebuilt ``Sample``.
      update: ``update(state, estimate) -> (step, changes)``: the change of θ and the new
        values of the strategy's own fields by name; it runs only when the update applies.
      gaussian_term: the switched-on term derived for Gaussian ``ε`` only (non-Gaussian noise
        is then refused), or ``None``.
      finish: ``finish(told, state, info) -> (state, info)``, run at the end of every ``tell``
        with the state it was given (``told``) and the new one (CMA-ES and xNES: the fitness
        history and the termination criteria), or ``None``.
      write: ``write(state, estimate, applied) -> (params, changes, step_norm)``, used in
        place of ``update`` when the direction has ``jaxes.low_rank.LowRank`` leaves: θ and the
        strategy's own fields written once each, unchanged where not ``applied``
        (``_tell.finish_tell``), or ``None``.
    """

    name: str
    state_type: type
    population_size: int
    antithetic: bool
    rank_based: bool | None
    scale: Callable[[Any], Any]
    init: Callable[[Any], tuple[dict, Any]]
    estimate: Callable[[Any, jax.Array, Any], Estimate]
    update: Callable[[Any, Estimate], tuple[Any, dict]]
    gaussian_term: str | None = None
    finish: Callable[[Any, Any, Any], tuple[Any, Any]] | None = None
    write: Callable[[Any, Estimate, jax.Array], tuple[Any, dict, jax.Array]] | None = None


class Sampler(Protocol):
    """How a family of strategies draws members from a state: ``scale`` is what the spec's
    ``scale(state)`` returns, and every member is a pure function of the state, the key and
    its index (``Diagonal``: bit-identical to its row of the population)."""

    population_size: int
    antithetic: bool

    def start(self, key: jax.Array, master) -> tuple[Any, jax.Array]:
        """``(noise_state, key of the first ask)`` from ``init``'s key."""

    def population(self, state, scale): ...

    def member(self, state, i, scale):
        """Member ``i`` (a valid index) in the params' dtypes."""

    def members(self, state, first, count: int, scale): ...

    def displacement(self, state, i, scale):
        """Member ``i``'s displacement from ``jaxes.centre(state)``."""

    def eval_chunk(self, state, members: int, factored: bool) -> int: ...

    def told(self, state, scale):
        """What ``estimate`` reads of the population the last ``ask`` drew."""


def build(spec: StrategySpec, sampler: Sampler | NoiseSettings, track_best: bool) -> Strategy:
    """The ``Strategy`` of ``spec`` with members drawn by ``sampler``, or by ``Diagonal`` with
    a per-coordinate strategy's ``NoiseSettings``; ``track_best`` keeps what is needed to
    rebuild the best member seen."""
    p = spec.population_size
    if isinstance(sampler, NoiseSettings):
        sampler = Diagonal(make_perturbations(sampler, p, spec.antithetic, spec.gaussian_term))
    scale_of = spec.scale

    def init(key: jax.Array, params):
        params = trees.check_params(params)
        master = state_lib.master_params(params)
        own, scale = spec.init(master)
        noise_state, ask_key = sampler.start(key, master)
        fields = state_lib.initial_fields(
            p, noise_state, ask_key, params, master, scale, track_best
        )
        return spec.state_type(**own, **fields)

    def check(state) -> None:
        _state.check_state(state, spec.state_type, spec.name, p)

    def estimate_all(state, fitness) -> Estimate:
        check(state)
        fitness = _state.check_fitness(fitness, p)
        return spec.estimate(state, fitness, sampler.told(state, scale_of(state)))

    def estimate(state, fitness):
        # Public values are dense: a direction kept as factors is for this strategy's tell.
        direction, stats, _ = estimate_all(state, fitness)
        return low_rank.dense(direction), low_rank.dense(stats)

    def tell(state, fitness):
        est = estimate_all(state, fitness)
        leaves = jax.tree.leaves(est.direction, is_leaf=low_rank.is_factored)
        write = None
        if spec.write is not None and any(map(low_rank.is_factored, leaves)):
            write = functools.partial(spec.write, state, est)
        new_state, info = _tell.finish_tell(
            state,
            fitness,
            est.stats.moments,
            est.stats.sigma,
            scale_of(state),  # the scale the told population was built with
            lambda: spec.update(state, est),
            write,
        )
        if spec.finish is None:
            return new_state, info
        return spec.finish(state, new_state, info)

    return Strategy(
        init=init,
        tell=tell,
        estimate=estimate,
        population_size=p,
        traits=StrategyTraits(spec.name, sampler.antithetic, spec.rank_based),
        **_members(sampler, scale_of, check),
    )


def _members(sampler: Sampler, scale_of: Callable, check: Callable) -> dict:
    """``ask``, ``member``, ``members``, ``perturbation``, ``best_params`` and ``eval_chunk``:
    the population the state's key and ``scale_of(state)`` describe, whole or in parts, and
    the best member's, from its recipe."""
    p = sampler.population_size

    def ask(key, state):
        state = state.replace(key=noise_lib.noise_key(key), pending=jnp.ones((), bool))
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


@dataclasses.dataclass(frozen=True)
class Diagonal:
    """The per-coordinate family: member ``i`` is ``θ + scale ⊙ s_i ε_{j(i)}`` with ``ε`` from a
    ``jaxes.noise`` recipe (``Perturbations``); ``scale`` is σ, or a σ per coordinate."""

    perturbations: noise_lib.Perturbations

    @property
    def population_size(self) -> int:
        return self.perturbations.population_size

    @property
    def antithetic(self) -> bool:
        return self.perturbations.antithetic

    def start(self, key, master):
        table_key, ask_key = threefry.split(noise_lib.noise_key(key))
        return self.perturbations.source.init(table_key, master), ask_key

    def population(self, state, scale):
        return self.perturbations.population(
            state.noise_state, state.key, state.params, scale, state.dtypes
        )

    def member(self, state, i, scale):
        return self.perturbations.member(
            state.noise_state, state.key, i, state.params, scale, state.dtypes
        )

    def members(self, state, first, count: int, scale):
        return self.perturbations.members(
            state.noise_state, state.key, first, count, state.params, scale, state.dtypes
        )

    def displacement(self, state, i, scale):
        """Factored where the noise is; for a rounded member, the displacement it really had
        from the rounded centre."""
        return self.perturbations.displacement(
            state.noise_state, state.key, i, state.params, scale, state.dtypes
        )

    def eval_chunk(self, state, members: int, factored: bool) -> int:
        return self.perturbations.eval_chunk(state.params, state.dtypes, members, factored)

    def told(self, state, scale) -> MomentsOf:
        def moments_of(masses, squares: bool = False, keep_factors: bool = False):
            return _tell.population_moments(
                self.perturbations, state, masses, scale, squares, keep_factors
            )

        return moments_of
