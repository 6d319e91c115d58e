"""A genetic algorithm with seed-encoded mutations (Such et al. 2017, "Deep Neuroevolution:
genetic algorithms are a competitive alternative for training deep neural networks for RL").

The state keeps ``T`` parents, the best ``T`` members of the last generation (truncation
selection), best first. Member 0 is the elite, the best parent, unmutated; member ``i >= 1``
is a parent ``p(i)`` drawn uniformly from the ``T`` plus one mutation ``σ ε_i``. ``p(i)`` and
``ε_i`` are pure functions of the ``ask`` key and ``i`` (``jaxes.noise``), so a child is its
parent and one seed: only the key and the fitness cross devices, and each device rebuilds
the next parents from them. θ (``state.params``) is the elite.

Its update is not a centre-of-mass displacement: the next θ is the best member, chosen by
rank, and the next population is drawn around ``T`` points. ``estimate``'s direction is the
elite's move, ``best - θ``; its masses are 1 for the ``T`` selected members, 0 for the others,
and its moments are of the nominal displacements ``(parent - θ) + σ ε``. Memory: the parents'
parameters, ``T`` float32 copies of θ (``T`` more in the best-member recipe with
``track_best``), not Such et al.'s seed lists, whose rebuild grows with the generations.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxes import centroid, trees
from jaxes.checks import check_int
from jaxes.noise import NoiseSource, threefry
from jaxes.strategies import _tell, settings
from jaxes.strategies.base import EstimateStats
from jaxes.strategies.core import Rule, build
from jaxes.strategies.samplers import Diagonal, Population
from jaxes.strategies.state import StrategyState, state_dataclass
from jaxes.types import Params, Strategy

# The word folded into a population's key for its parent draw (never a base index).
_PARENTS = 2**32 - 2


@state_dataclass
class GAState(StrategyState):
    """The GA's state; its own field is ``parents``, the ``T`` parents (leaves with a leading
    axis ``T``, float32 like θ), best first: ``parents[0]`` is θ, the elite."""

    strategy = "ga"
    parents: Params


class GAEstimate(NamedTuple):
    """The elite's move, its stats and the next parents (the selected members, best first)."""

    direction: Params
    stats: EstimateStats
    parents: Params


@dataclasses.dataclass(frozen=True)
class Mutations(Diagonal):
    """Members from ``scale = (σ, parents)``: member 0 is ``parents[0]``, member ``i`` is
    ``parents[p(i)] + σ ε_i`` (``Perturbations`` without pairs), rounded to the params' dtypes."""

    truncation: int

    def parent_index(self, key) -> jax.Array:
        """``p(i)`` of every member: 0 for the elite, uniform over the ``T`` for the others."""
        words = threefry.bits(threefry.fold_in(key, _PARENTS), (self.population_size,))
        return (words % self.truncation).astype(jnp.int32).at[0].set(0)

    def member(self, state, i, scale):
        sigma, parents = scale
        parent = jax.tree.map(lambda x: x[self.parent_index(state.key)[i]], parents)
        child = self.perturbations.member(
            state.noise_state, state.key, i, parent, sigma, state.dtypes
        )
        return jax.tree.map(lambda c, x: jnp.where(i == 0, x.astype(c.dtype), c), child, parent)

    def members(self, state, first, count: int, scale):
        return jax.vmap(lambda i: self.member(state, i, scale))(first + jnp.arange(count))

    def population(self, state, scale):
        return self.members(state, 0, self.population_size, scale)

    def displacement(self, state, i, scale):
        """Member ``i`` minus ``jaxes.centre(state)``, dense, in float32."""
        x, c = self.member(state, i, scale), trees.cast_like(state.params, state.dtypes)
        return jax.tree.map(
            lambda a, b, t: a.astype(t.dtype) - b.astype(t.dtype), x, c, state.params
        )

    def told(self, state, scale) -> Population:
        """The moments of ``(parents[p(i)] - θ) + σ ε_i``: the mutations' sums rebuilt from the
        noise (``squares`` not offered), the parents' offsets summed by parent."""
        sigma, parents = scale
        p = self.population_size
        chosen = jax.nn.one_hot(self.parent_index(state.key), self.truncation)
        offsets = jax.tree.map(lambda x, t: x - t[None], parents, state.params)
        mutated = (jnp.arange(p) > 0).astype(jnp.float32)

        def moments(mass, squares: bool = False, keep_factors: bool = False):
            rows = jnp.stack([mass, jnp.ones_like(mass)])
            sums, _ = self.perturbations.moments(
                state.noise_state, state.key, state.params, sigma, rows * mutated
            )
            by_parent = rows @ chosen.astype(rows.dtype)

            def total(row):
                w = by_parent[row]
                return jax.tree.map(lambda s, o: s + jnp.tensordot(w, o, 1), sums[row], offsets)

            return centroid.PopulationMoments(jnp.sum(mass), p, total(0), total(1), None, None)

        return Population(p, moments)


def ga(
    population_size: int,
    sigma=0.05,
    truncation: int | None = None,
    *,
    elite_ratio=None,
    noise: str | NoiseSource = "auto",
    sigma_floor=None,
    memory_budget: int | None = None,
    track_best: bool = True,
) -> Strategy:
    """Such et al.'s GA: truncation selection of ``T`` parents, the elite kept unmutated, each
    other child a random parent plus one mutation ``σ ε`` (seed-encoded: ``jaxes.noise``).

    Args:
      population_size: ``P`` >= 2 (no pairs: any ``P``).
      sigma: the mutation power ``σ``, a constant > 0 or an optax schedule of the generation.
      truncation: ``T``, the parents kept, ``1 <= T <= P`` (``None``: ``max(1, P // 8)``).
      elite_ratio: ``T = max(1, ⌊r P⌋)`` for ``r`` in ``(0, 1]`` instead of ``truncation``.
      noise: a dense ``jaxes.noise`` source or its name (``"auto"``, ``"table"``,
        ``"gaussian"``); low-rank mutations are refused.
      sigma_floor, memory_budget, track_best: as in ``jaxes.strategies``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> es = ga(population_size=8, sigma=0.3, truncation=2)
      >>> state = es.init(jax.random.key(0), {"x": jnp.ones(3)})
      >>> population, state = es.ask(jax.random.key(1), state)
      >>> fitness = -jnp.sum(population["x"] ** 2, axis=1)
      >>> state, info = es.tell(state, fitness)
      >>> bool(jnp.all(state.params["x"] == population["x"][jnp.argmax(fitness)]))  # the best
      True
    """
    p = check_int("population_size", population_size, 2)
    if truncation is not None and elite_ratio is not None:
        raise ValueError(
            f"truncation, elite_ratio: give one of them (got {truncation!r} and {elite_ratio!r})"
        )
    t = max(1, p // 8) if truncation is None else check_int("truncation", truncation, 1, p)
    t = t if elite_ratio is None else settings.elite_count(p, None, elite_ratio)
    perturbations = settings.make_perturbations(
        settings.NoiseSettings(noise, memory_budget), p, antithetic=False
    )
    if perturbations.source.factors is not None:
        raise ValueError(
            f"noise: ga mutates every parameter densely, got {perturbations.source.name!r}; "
            "use noise='auto', 'table' or 'gaussian'"
        )
    sampler = Mutations(perturbations, t)
    sigma_of, initial_sigma = settings.scheduled_sigma(sigma, sigma_floor)

    def scale(state):
        return sigma_of(state), state.parents

    def init(master: Params):
        parents = jax.tree.map(lambda x: jnp.repeat(x[None], t, axis=0), master)
        return {"parents": parents}, (initial_sigma(master), parents)

    def estimate(state: GAState, fitness, population: Population) -> GAEstimate:
        ranked = jnp.where(jnp.isfinite(fitness), fitness, -jnp.inf)
        top = jnp.argsort(-ranked, stable=True)[:t]  # ties: the lower index, the elite first
        selected = jnp.zeros(p, jnp.float32).at[top].set(1.0)
        moments = population.moments(selected)
        built = jax.vmap(lambda i: sampler.member(state, i, scale(state)))(top)
        parents = jax.tree.map(lambda x, m: x.astype(m.dtype), built, state.params)
        direction = jax.tree.map(lambda x, m: x[0] - m, parents, state.params)
        stats = EstimateStats(selected, selected, moments, sigma_of(state))
        return GAEstimate(direction, stats, parents)

    def write(state: GAState, est: GAEstimate, applied):
        def new():
            return jax.tree.map(lambda x: x[0], est.parents), est.parents

        params, parents = _tell._when(applied, new, (state.params, state.parents))
        norm = jnp.where(applied, trees.tree_norm(est.direction), 0.0)
        return params, state.replace(parents=parents), norm

    return build(
        Rule(init, scale, estimate, None, write=write),
        GAState,
        sampler,
        rank_based=True,
        track_best=track_best,
    )
