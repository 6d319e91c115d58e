"""Search a random subspace: θ = θ₀ + Π z with z ∈ R^k (Li et al. 2018, "Measuring the
Intrinsic Dimension of Objective Landscapes"), for any strategy.

``subspace(strategy, dim)`` is itself a ``Strategy``: its members are full parameter pytrees,
so tasks, the device split, the runner and checkpoints see nothing new, while the wrapped
strategy's population lives in ``k`` dimensions (its noise, its state, its update). The
smallest ``k`` that reaches (say) 90 % of the full-space result is the landscape's intrinsic
dimension as Li et al. measure it.

The projection ``Π`` (``d × k``) is rebuilt from a key in the state every time it is used,
never stored, in one of two forms:

* ``"dense"``: N(0, 1/d) entries, so each column has norm ≈ 1; ``d·k`` normals per use, for
  small models;
* ``"sparse"``: each of the ``d`` rows has ``nonzeros`` entries ``±√(k/(d·nonzeros))`` at
  random columns (columns of norm ≈ 1 again); ``d·nonzeros`` draws per use and
  ``O(d·nonzeros)`` work, for big ones.

Example:
  >>> import jax, jax.numpy as jnp, jaxes
  >>> es = subspace(jaxes.open_es(8, sigma=0.1), dim=3)
  >>> state = es.init(jax.random.key(0), {"w": jnp.zeros((4, 5)), "b": jnp.ones(5)})
  >>> population, state = es.ask(jax.random.key(1), state)
  >>> population["w"].shape, state.inner.params.shape
  ((8, 4, 5), (3,))
  >>> state, info = es.tell(state, -jnp.sum(population["w"] ** 2, axis=(1, 2)))
  >>> jaxes.centre(state)["b"].shape
  (5,)
"""

from __future__ import annotations

import math
from typing import Any

import flax.struct
import jax
import jax.flatten_util
import jax.numpy as jnp

from jaxes import noise as noise_lib
from jaxes import trees
from jaxes.checks import check_int
from jaxes.types import Params, Strategy

PROJECTIONS = ("dense", "sparse")


@flax.struct.dataclass
class SubspaceState:
    """The wrapped strategy's state over ``z`` plus what maps ``z`` to θ.

    Attributes:
      inner: the wrapped strategy's state (its ``params`` is the centre ``z``).
      origin: θ₀, float32, like the params.
      dtypes: one scalar per leaf in the dtype members are built in.
      projection_key: raw threefry key data (``uint32[2]``) that ``Π`` is rebuilt from.
      projection, nonzeros: the kind of ``Π`` (static: not arrays, not checkpointed).

    ``params`` (θ₀ + Π z of the centre), ``generation`` and ``fitness`` read through, so
    ``jaxes.centre`` and the runner treat this state like any other.
    """

    inner: Any
    origin: Params
    dtypes: Params
    projection_key: jax.Array
    projection: str = flax.struct.field(pytree_node=False, default="dense")
    nonzeros: int = flax.struct.field(pytree_node=False, default=4)

    @property
    def params(self) -> Params:
        return lift(self, self.inner.params)

    @property
    def generation(self):
        return self.inner.generation

    @property
    def fitness(self):
        return self.inner.fitness


def lift(state: SubspaceState, z: jax.Array) -> Params:
    """θ₀ + Π z, in θ₀'s structure and member dtypes."""
    flat, unravel = jax.flatten_util.ravel_pytree(state.origin)
    flat = flat.astype(jnp.float32)
    theta = flat + _project(state.projection, state.nonzeros, state.projection_key, z, flat.size)
    return jax.tree.map(lambda x, t: x.astype(t.dtype), unravel(theta), state.dtypes)


def _project(kind: str, nonzeros: int, key_data, z: jax.Array, d: int) -> jax.Array:
    """``Π z`` (length ``d``) for ``z`` of length ``k``, ``Π`` rebuilt from ``key_data``."""
    k = z.shape[0]
    key = jax.random.wrap_key_data(key_data, impl="threefry2x32")
    if kind == "dense":
        matrix = jax.random.normal(key, (d, k), jnp.float32) / jnp.sqrt(jnp.float32(d))
        return jnp.matmul(matrix, z, precision=jax.lax.Precision.HIGHEST)
    column_key, sign_key = jax.random.split(key)
    columns = jax.random.randint(column_key, (d, nonzeros), 0, k)
    signs = jax.random.rademacher(sign_key, (d, nonzeros), jnp.float32)
    scale = jnp.float32(math.sqrt(k / (d * nonzeros)))
    return scale * jnp.sum(signs * z[columns], axis=1)


def subspace(
    strategy: Strategy,
    dim: int,
    projection: str = "dense",
    *,
    nonzeros: int = 4,
    memory_budget: int | None = None,
) -> Strategy:
    """``strategy`` searching θ = θ₀ + Π z over ``z ∈ R^dim``.

    Args:
      strategy: any jaxes strategy; it sees ``z`` (a vector of ``dim`` floats, starting at 0).
      dim: ``k``, the subspace dimension: an int in ``[1, d]`` (``d`` the parameter count,
        checked at ``init``).
      projection: ``"dense"`` or ``"sparse"`` (see the module docstring).
      nonzeros: entries per row of a ``"sparse"`` ``Π`` (>= 1).
      memory_budget: bytes of full members evaluated at once (``None``: 64 MiB, at least one).

    Returns:
      A ``Strategy`` whose members, centre (``jaxes.centre``) and best member are full
      parameter pytrees (θ₀'s structure and dtypes), and whose state is a ``SubspaceState``.
    """
    # Longer than 60 lines because the Strategy's methods are closures over the checked
    # settings and the projection; split apart, each would take them all as arguments.
    dim = check_int("dim", dim, 1)
    if projection not in PROJECTIONS:
        raise ValueError(f"projection: unknown {projection!r}; allowed: {list(PROJECTIONS)}")
    nonzeros = check_int("nonzeros", nonzeros, 1)
    budget = noise_lib.check_memory_budget(memory_budget)
    budget = noise_lib.DEFAULT_MEMORY_BUDGET if budget is None else budget

    def init(key, params) -> SubspaceState:
        params = trees.check_params(params)
        d = trees.num_params(params)
        if dim > d:
            raise ValueError(
                f"dim: the subspace cannot have more dimensions ({dim}) than the parameters "
                f"({d}); use dim in [1, {d}]"
            )
        projection_key, inner_key = jax.random.split(noise_lib.noise_key(key))
        return SubspaceState(
            inner=strategy.init(inner_key, jnp.zeros((dim,), jnp.float32)),
            origin=jax.tree.map(lambda x: x.astype(trees.master_dtype(x.dtype)), params),
            dtypes=jax.tree.map(lambda x: jnp.zeros((), x.dtype), params),
            projection_key=jax.random.key_data(projection_key),
            projection=projection,
            nonzeros=nonzeros,
        )

    def ask(key, state: SubspaceState):
        _, inner = strategy.ask(key, state.inner)
        state = state.replace(inner=inner)
        # Built as member() builds them, so a member rebuilt alone matches its row.
        indices = jnp.arange(strategy.population_size)
        return jax.vmap(lambda i: member(state, i))(indices), state

    def tell(state: SubspaceState, fitness):
        inner, info = strategy.tell(state.inner, fitness)
        return state.replace(inner=inner), info

    def member(state: SubspaceState, i):
        return lift(state, strategy.member(state.inner, i))

    def estimate(state: SubspaceState, fitness):
        return strategy.estimate(state.inner, fitness)

    def best_params(state: SubspaceState):
        return lift(state, strategy.best_params(state.inner))

    def eval_chunk(state: SubspaceState, members: int = 0) -> int:
        per_member = noise_lib.member_bytes(state.origin, state.dtypes)
        count = members or strategy.population_size
        return noise_lib.largest_divisor_at_most(count, max(1, budget // per_member))

    # The traits (the name included) stay the wrapped strategy's: a run's config.json names the
    # strategy that searches, and records the subspace apart (``TrainConfig.subspace_dim``).
    return Strategy(
        init=init,
        ask=ask,
        tell=tell,
        member=member,
        estimate=estimate,
        population_size=strategy.population_size,
        best_params=None if strategy.best_params is None else best_params,
        eval_chunk=eval_chunk,
        traits=strategy.traits,
    )
