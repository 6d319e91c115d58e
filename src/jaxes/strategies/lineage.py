"""The GA's members (``Mutations``) and its parents kept as seed lists (``SeedLists``, Such et
al. 2017's encoding: a member is the list of seeds that made it).

Member 0 is parent 0, the elite, unmutated; member ``i >= 1`` is parent ``p(i)`` plus one
mutation ``σ ε_i``, with ``p(i)`` and ``ε_i`` pure functions of the ``ask`` key and ``i``
(``jaxes.noise``). The scale is ``(σ, parents)``: the ``T`` parents' parameters (``T`` copies
of θ), or with ``SeedLists`` their ``Lineages``. The state then keeps θ₀ (its ``origin``, the
params ``init`` was given), one ``Records`` row per generation that made children (the
generation's ``ask`` key and σ), and per parent the ``(record, member)`` pairs of the
mutations that made it, oldest first; the elite's copies add none. Parent ``t`` is rebuilt as::

    x ← θ₀;  for each (g, i) of its lineage:  x ← member i of the population of key_g around x

with ``Perturbations.member``, the call that built it (same key, index, σ, dtypes and order),
so a rebuilt parent is the stored one's arithmetic: ``θ₀ + σ_1 ε_1 + σ_2 ε_2 + ...`` summed
left to right, each sum rounded to the members' dtypes as ``ask`` rounded it.

Cost of the seed lists: ``G`` (``SeedLists.generations``) bounds a lineage, so the state holds
``T·G`` pairs and ``G`` records, ``8·T·G + 12·G`` bytes (7.6 kB at ``T = 8``, ``G = 100``),
besides θ₀; rebuilding a parent is up to ``G`` mutations (``G·d`` work, one ``d``-sized
carry), and a population, ``tell`` or chunk of members rebuilds all ``T`` once (``T·G·d``
work per generation at worst, the ``T`` parents in flight while their children are built).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxes import centroid, trees
from jaxes.noise import Perturbations, threefry
from jaxes.strategies import _tell
from jaxes.strategies.samplers import Diagonal, Population

# The word folded into a population's key for its parent draw (never a base index).
_PARENTS = 2**32 - 2


class Lineages(NamedTuple):
    """The ``T`` parents' mutations, oldest first: ``record[t, k]`` (the ``Records`` row of its
    generation) and ``member[t, k]`` (its index there) for ``k < length[t]``; int32,
    ``(T, G)``, ``(T, G)`` and ``(T,)``. Entries at ``k >= length[t]`` are unused."""

    record: jax.Array
    member: jax.Array
    length: jax.Array


class Records(NamedTuple):
    """What rebuilds a generation's mutations: its ``ask`` key (threefry key data,
    ``uint32 (G, 2)``) and σ (``(G,)``, the state's scalar dtype); ``count`` rows are filled."""

    key: jax.Array
    sigma: jax.Array
    count: jax.Array


@dataclasses.dataclass(frozen=True)
class SeedLists:
    """Parents as lineages of at most ``generations`` mutations from θ₀ (a state's ``origin``,
    ``records`` and ``noise_state``)."""

    perturbations: Perturbations
    truncation: int
    generations: int

    def init(self, master, sigma) -> dict:
        """A state's own fields: θ₀ (a copy of ``master``), ``T`` empty lineages (every parent
        is θ₀) and no records (``sigma`` sets σ's dtype)."""
        t, g = self.truncation, self.generations
        pairs = jnp.zeros((t, g), jnp.int32)
        return {
            "origin": jax.tree.map(lambda x: jnp.array(x, copy=True), master),
            "lineages": Lineages(pairs, pairs, jnp.zeros(t, jnp.int32)),
            "records": Records(
                jnp.zeros((g, 2), jnp.uint32), jnp.zeros(g, sigma.dtype), jnp.zeros((), jnp.int32)
            ),
        }

    def parent(self, state, lineages: Lineages, t):
        """Parent ``t`` in the master dtype, rebuilt from θ₀ by its ``length[t]`` mutations."""
        records = state.records

        def mutate(k, x):
            g, i = lineages.record[t, k], lineages.member[t, k]
            child = self.perturbations.member(
                state.noise_state, records.key[g], i, x, records.sigma[g], state.dtypes
            )
            return jax.tree.map(lambda c, a: c.astype(a.dtype), child, x)

        return jax.lax.fori_loop(0, lineages.length[t], mutate, state.origin)

    def parents(self, state, lineages: Lineages):
        """The ``T`` parents (leading axis ``T``), rebuilt one after another."""
        return jax.lax.map(lambda t: self.parent(state, lineages, t), jnp.arange(self.truncation))

    def descend(self, state, parent_index, top) -> Lineages:
        """The lineages of members ``top``: their parent's, plus ``(the next record, i)`` for a
        mutated member ``i >= 1`` (member 0 is a copy; at ``G`` the pair is dropped)."""
        lineages, slot = state.lineages, state.records.count

        def one(i):
            t = parent_index[i]
            at = jnp.where(i > 0, lineages.length[t], self.generations)  # G: dropped
            record = lineages.record[t].at[at].set(slot, mode="drop")
            member = lineages.member[t].at[at].set(i, mode="drop")
            return record, member, lineages.length[t] + (i > 0).astype(jnp.int32)

        return Lineages(*jax.vmap(one)(top))

    def write(self, state, est, sigma, applied):
        """``(θ, state, applied)`` after a ``tell`` (``est``: the next θ and lineages), applied
        only while a record is free: the generation's key and σ fill record ``count``."""
        r = state.records
        applied = applied & (r.count < self.generations)
        key = r.key.at[r.count].set(jax.random.key_data(state.key), mode="drop")
        records = Records(key, r.sigma.at[r.count].set(sigma, mode="drop"), r.count + 1)
        old = (state.params, state.lineages, state.records)
        new = _tell._when(applied, lambda: (est.elite, est.parents, records), old)
        return new[0], state.replace(lineages=new[1], records=new[2]), applied

    def finish(self, told, state, info):
        """A ``core.Rule.finish``: a ``tell`` given a state whose records were full applied
        nothing, and its info says so."""
        return state, info._replace(applied=info.applied & (told.records.count < self.generations))


@dataclasses.dataclass(frozen=True)
class Mutations(Diagonal):
    """Members from ``scale = (σ, parents)``: member 0 is parent 0, member ``i`` is parent
    ``p(i)`` plus ``σ ε_i`` (``Perturbations`` without pairs), rounded to the params' dtypes.
    ``parents``: the ``T`` parents (leaves with a leading axis ``T``), or their ``Lineages``
    with ``seeds``."""

    truncation: int
    seeds: SeedLists | None = None

    def parent_index(self, key) -> jax.Array:
        """``p(i)`` of every member: 0 for the elite, uniform over the ``T`` for the others."""
        words = threefry.bits(threefry.fold_in(key, _PARENTS), (self.population_size,))
        return (words % self.truncation).astype(jnp.int32).at[0].set(0)

    def stored(self, state, scale):
        """``(σ, the T parents' parameters)`` of a scale (seed lists rebuilt)."""
        if self.seeds is None:
            return scale
        return scale[0], self.seeds.parents(state, scale[1])

    def member(self, state, i, scale):
        sigma, parents = scale
        if self.seeds is None:
            parent = jax.tree.map(lambda x: x[self.parent_index(state.key)[i]], parents)
        else:
            parent = self.seeds.parent(state, parents, self.parent_index(state.key)[i])
        child = self.perturbations.member(
            state.noise_state, state.key, i, parent, sigma, state.dtypes
        )
        return jax.tree.map(lambda c, x: jnp.where(i == 0, x.astype(c.dtype), c), child, parent)

    def members(self, state, first, count: int, scale):
        scale, stored = self.stored(state, scale), dataclasses.replace(self, seeds=None)
        return jax.vmap(lambda i: stored.member(state, i, scale))(first + jnp.arange(count))

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
        sigma, parents = self.stored(state, scale)
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
