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
and its moments are of the nominal displacements ``(parent - θ) + σ ε``.

Memory. By default (``GAState``) the parents are parameters: ``T`` float32 copies of θ besides
θ (``T`` more in the best-member recipe with ``track_best``). With ``lineage=G``
(``GASeedState``) they are Such et al.'s seed lists (``jaxes.strategies.lineage``): θ₀, the
params ``init`` was given, plus for each parent the ``(generation, member)`` pairs of the
mutations that made it and per generation its key and σ: two copies of θ (θ₀ and θ) and
``8·T·G + 12·G`` bytes, whatever ``d`` (with ``track_best`` one copy and the pairs more): at
``d = 10⁶``, ``T = 8``, ``G = 100``, 8.0 MB against 36 MB (12 MB against 72 MB). A parent
is rebuilt from θ₀ by the calls that made it, in their order, so the run is the default
one's (bit for bit where XLA rounds the rebuild as it rounded ``ask``). The price is
compute: ``ask`` and ``tell`` each rebuild the ``T`` parents, up to ``T·G`` mutations of ``d``
coordinates, and ``tell`` the elite's (``(2T + 1)·G·d`` work a generation at worst, against
reading ``T·d``); ``member(i)`` alone rebuilds its parent (``G·d``).

At ``G``: a lineage only grows, and θ₀ is shared by the ``T`` parents, so folding full
lineages into it (a ring buffer) would need a θ₀ per parent, the ``T`` copies of θ the seed
lists avoid. So a seed-list GA updates ``G`` times at most: once ``state.records.count`` is
``G`` (each applied ``tell`` fills one record), ``tell`` leaves θ and the parents as they are
and reports ``info.applied`` False (the best member is still tracked). To go on, start again
from the elite, ``ga(...).init(key, state.params)`` (the other parents are lost), or give the
run the ``G`` it needs.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxes import trees
from jaxes.checks import check_int
from jaxes.noise import NoiseSource
from jaxes.strategies import _tell, settings
from jaxes.strategies.base import EstimateStats
from jaxes.strategies.core import Rule, build
from jaxes.strategies.lineage import Lineages, Mutations, Records, SeedLists
from jaxes.strategies.samplers import Population
from jaxes.strategies.state import StrategyState, state_dataclass
from jaxes.types import Params, Strategy


@state_dataclass
class GAState(StrategyState):
    """The GA's state; its own field is ``parents``, the ``T`` parents (leaves with a leading
    axis ``T``, float32 like θ), best first: ``parents[0]`` is θ, the elite."""

    strategy = "ga"
    parents: Params


@state_dataclass
class GASeedState(StrategyState):
    """The state of ``ga(..., lineage=G)``: the parents as seed lists (``lineage.SeedLists``).
    Its own fields: ``origin``, θ₀ (the params ``init`` was given, master dtype);
    ``lineages``, each parent's mutations (``lineage.Lineages``, best first: parent 0 is θ);
    ``records``, each generation's key and σ (``lineage.Records``; ``count`` of ``G``)."""

    strategy = "ga"
    origin: Params
    lineages: Lineages
    records: Records


class GAEstimate(NamedTuple):
    """The elite's move, its stats, the next parents (the selected members, best first: their
    parameters, or their ``Lineages``) and the next θ, the best member."""

    direction: Params
    stats: EstimateStats
    parents: Params | Lineages
    elite: Params


def _truncation(p: int, truncation, elite_ratio) -> int:
    """``T``, checked: ``truncation``, ``⌊r P⌋`` for ``elite_ratio``, or ``P // 8``."""
    if truncation is not None and elite_ratio is not None:
        raise ValueError(
            f"truncation, elite_ratio: give one of them (got {truncation!r} and {elite_ratio!r})"
        )
    t = max(1, p // 8) if truncation is None else check_int("truncation", truncation, 1, p)
    return t if elite_ratio is None else settings.elite_count(p, None, elite_ratio)


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
    lineage: int | None = None,
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
      lineage: ``None`` keeps the parents' parameters (``GAState``: ``T`` copies of θ); an
        int ``G >= 1`` keeps their seed lists instead (``GASeedState``: θ₀ and ``T·G``
        pairs), each ``ask`` and ``tell`` rebuilding them (``T·G·d`` work at most), and
        updates ``G`` times at most (the module's "At G").

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
    t = _truncation(p, truncation, elite_ratio)
    g = None if lineage is None else check_int("lineage", lineage, 1)
    perturbations = settings.make_perturbations(
        settings.NoiseSettings(noise, memory_budget), p, antithetic=False
    )
    if perturbations.source.factors is not None:
        raise ValueError(
            f"noise: ga mutates every parameter densely, got {perturbations.source.name!r}; "
            "use noise='auto', 'table' or 'gaussian'"
        )
    seeds = None if g is None else SeedLists(perturbations, t, g)
    sampler = Mutations(perturbations, t, seeds)
    sigma_of, initial_sigma = settings.scheduled_sigma(sigma, sigma_floor)

    def scale(state):
        return sigma_of(state), state.parents if seeds is None else state.lineages

    def init(master: Params):
        sigma0 = initial_sigma(master)
        if seeds is None:
            parents = jax.tree.map(lambda x: jnp.repeat(x[None], t, axis=0), master)
            return {"parents": parents}, (sigma0, parents)
        own = seeds.init(master, sigma0)
        return own, (sigma0, own["lineages"])

    def estimate(state, fitness, population: Population) -> GAEstimate:
        ranked = jnp.where(jnp.isfinite(fitness), fitness, -jnp.inf)
        top = jnp.argsort(-ranked, stable=True)[:t]  # ties: the lower index, the elite first
        selected = jnp.zeros(p, jnp.float32).at[top].set(1.0)
        moments = population.moments(selected)
        if seeds is None:
            built = jax.vmap(lambda i: sampler.member(state, i, scale(state)))(top)
            parents = jax.tree.map(lambda x, m: x.astype(m.dtype), built, state.params)
            elite = jax.tree.map(lambda x: x[0], parents)
        else:  # the elite alone is built: one parent rebuilt, one mutation
            parents = seeds.descend(state, sampler.parent_index(state.key), top)
            elite = trees.cast_like(sampler.member(state, top[0], scale(state)), state.params)
        direction = jax.tree.map(lambda x, m: x - m, elite, state.params)
        stats = EstimateStats(selected, selected, moments, sigma_of(state))
        return GAEstimate(direction, stats, parents, elite)

    def write(state, est: GAEstimate, applied):
        if seeds is None:
            old = (state.params, state.parents)
            params, parents = _tell._when(applied, lambda: (est.elite, est.parents), old)
            state = state.replace(parents=parents)
        else:  # at G nothing is applied (the docstring's "At G")
            params, state, applied = seeds.write(state, est, sigma_of(state), applied)
        return params, state, jnp.where(applied, trees.tree_norm(est.direction), 0.0)

    return build(
        Rule(init, scale, estimate, None, None if seeds is None else seeds.finish, write),
        GAState if seeds is None else GASeedState,
        sampler,
        rank_based=True,
        track_best=track_best,
    )
