"""Perturbations rebuilt from keys, never stored.

Member ``i`` of a population is ``θ + s_i σ ε_{j(i)}``, rounded to each leaf's own dtype. Each
base perturbation ``ε_j`` is a pure function of ``(noise_state, fold_in(key, j))``, so ``ask``,
``member`` and ``tell`` on any device or host rebuild exactly the same numbers from the same key
(Salimans et al. 2017): only fitness values ever need to travel.

The package, one job a module:
  * ``keys``: ``noise_key`` (any key to one threefry key) and ``base_key``;
  * ``threefry``: ``jax.random``'s threefry draws with the hash written out (one fused kernel
    on the CPU, where JAX runs a rolled loop), bit for bit the same numbers;
  * ``sources``: where ``ε_j`` comes from (``NoiseSource``; ``auto``, ``noise_table``,
    ``gaussian``, ``gaussian_together``; the table's size and layout; ``NOISE_SOURCES``);
  * ``lowrank(rank)``, rank-``r`` perturbations kept as factors, and ``LowRank``, one leaf's
    factors, are ``jaxes.factored``'s (``jaxes.factored.noise``, ``jaxes.factored.lowrank``);
  * ``budget``: how many members or bases a ``memory_budget`` holds at once;
  * ``perturbations``: ``Perturbations``, the recipe from ``(noise_state, key, i)`` to member
    ``i``, and ``perturb``;
  * ``moments``: the population's weighted sums of displacements, a chunk at a time.

Example:
  >>> import jax, jax.numpy as jnp
  >>> pert = Perturbations(auto(bases=2), population_size=4)
  >>> params = jnp.zeros(3)
  >>> state = pert.source.init(jax.random.key(0), params)
  >>> pop = pert.population(state, jax.random.key(1), params, 0.1)
  >>> pop.shape, bool(jnp.all(pop[0] == -pop[1]))
  ((4, 3), True)
"""

from jaxes.factored.lowrank import LowRank
from jaxes.factored.noise import lowrank
from jaxes.noise.budget import (
    DEFAULT_MEMORY_BUDGET,
    check_memory_budget,
    largest_divisor_at_most,
    member_bytes,
)
from jaxes.noise.keys import base_key, noise_key
from jaxes.noise.perturbations import Perturbations, perturb
from jaxes.noise.sources import (
    AUTO_GAUSSIAN_VALUES,
    MAX_TABLE_SIZE,
    MIN_EXPLICIT_BLOCK,
    MIN_TABLE_WINDOWS,
    NOISE_SOURCES,
    NoiseSource,
    NoiseState,
    Table,
    auto,
    gaussian,
    gaussian_together,
    noise_table,
    table_layout,
    table_size,
)

__all__ = [
    "AUTO_GAUSSIAN_VALUES",
    "DEFAULT_MEMORY_BUDGET",
    "LowRank",
    "MAX_TABLE_SIZE",
    "MIN_EXPLICIT_BLOCK",
    "MIN_TABLE_WINDOWS",
    "NOISE_SOURCES",
    "NoiseSource",
    "NoiseState",
    "Perturbations",
    "Table",
    "auto",
    "base_key",
    "check_memory_budget",
    "gaussian",
    "gaussian_together",
    "largest_divisor_at_most",
    "lowrank",
    "member_bytes",
    "noise_key",
    "noise_table",
    "perturb",
    "table_layout",
    "table_size",
]
