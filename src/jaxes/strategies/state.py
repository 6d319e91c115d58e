"""The state every strategy shares: ``StrategyState``, whose subclasses add only their own
fields, the best member's recipe (``BestMember``) and the member dtypes (``Dtypes``).

A strategy's state is a ``flax.struct`` dataclass, keyword-only (``state_dataclass``), that
subclasses ``StrategyState``:

  >>> import jax, jax.numpy as jnp, optax
  >>> @state_dataclass
  ... class MyState(StrategyState):
  ...     strategy = "my_es"  # a class attribute, not a field: named in errors
  ...     opt_state: optax.OptState
  >>> own_fields(MyState)
  ('opt_state',)

Its pytree is the shared fields, then its own, each by name (``orbax`` stores and restores
them by name). ``dtypes``, the dtypes members are built in, is static: part of the pytree's
structure, never an array passed through a call.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxes import trees
from jaxes.types import Params


class BestMember(NamedTuple):
    """How to rebuild the best member seen so far, without storing it.

    Attributes:
      key: the ``ask`` key of its population, as raw threefry key data (``uint32[2]``).
      index: its index in that population.
      centre: θ of that population (``None`` with ``track_best=False``).
      scale: the perturbation scale of that population (``None`` with ``track_best=False``).
    """

    key: jax.Array
    index: jax.Array
    centre: object
    scale: object


@dataclasses.dataclass(frozen=True)
class Dtypes:
    """The dtype of each leaf of the params, hashable: a static part of a state.

    ``tree`` is the params' structure with a ``jax.ShapeDtypeStruct`` scalar per leaf, which
    reads like the params wherever only ``.dtype`` is asked.

    Example:
      >>> d = Dtypes.of({"w": jnp.ones(2, jnp.bfloat16), "b": jnp.ones(3)})
      >>> [t.dtype.name for t in jax.tree.leaves(d.tree)], d == Dtypes.of(d.tree)
      (['float32', 'bfloat16'], True)
    """

    treedef: Any
    leaves: tuple[np.dtype, ...]

    @classmethod
    def of(cls, params: Params) -> Dtypes:
        leaves, treedef = jax.tree.flatten(params)
        return cls(treedef, tuple(np.dtype(x.dtype) for x in leaves))

    @functools.cached_property
    def tree(self):
        return jax.tree.unflatten(
            self.treedef, [jax.ShapeDtypeStruct((), dtype) for dtype in self.leaves]
        )


def state_dataclass(cls):
    """``cls`` as a ``flax.struct`` dataclass with keyword-only fields.

    Keyword-only, so a subclass's fields need no defaults after the shared ones. The class and
    the keyword go in one call: flax 0.10 (the declared floor) takes no keywords without the
    class, so ``@struct.dataclass(kw_only=True)`` fails there.
    """
    return struct.dataclass(cls, kw_only=True)


_FIELDS = """
    Attributes:
      params: the mean θ (the master copy: float32, or float64 for float64 params).
      key: the key of the latest ``ask`` (threefry); the noise is rebuilt from it.
      generation: how many ``tell`` calls have updated the state.
      noise_state: the noise table (``None`` where the source keeps none).
      pending: an ``ask`` awaits its ``tell``.
      fitness: the fitness last told (``(P,)``, NaN before any).
      best_fitness: the best member's fitness (``-inf`` before the first ``tell``).
      best: how to rebuild the best member (``strategy.best_params(state)``).
      member_dtypes: ``Dtypes``, static: the dtypes members are built in (the params' own);
        ``dtypes`` reads them as a tree like the params.
"""


@state_dataclass
class StrategyState:
    __doc__ = "The fields every strategy's state shares; a strategy subclasses it.\n" + _FIELDS

    strategy: ClassVar[str] = "a strategy"
    params: Params
    key: jax.Array
    generation: jax.Array
    noise_state: Any
    pending: jax.Array
    fitness: jax.Array
    best_fitness: jax.Array
    best: BestMember
    member_dtypes: Dtypes = struct.field(pytree_node=False)

    @property
    def dtypes(self):
        """The member dtypes as a tree like the params (one dtype-only scalar per leaf)."""
        return self.member_dtypes.tree

    def _replace(self, **changes):
        warnings.warn(
            "state._replace is deprecated (strategy states are flax.struct dataclasses since "
            "issue 58) and goes in the next release; use state.replace(**changes)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.replace(**changes)


_SHARED = frozenset(f.name for f in dataclasses.fields(StrategyState))


def own_fields(state_type: type) -> tuple[str, ...]:
    """The fields a strategy's state adds to ``StrategyState``'s, in order."""
    return tuple(f.name for f in dataclasses.fields(state_type) if f.name not in _SHARED)


def master_params(params):
    """``params`` (checked: ``trees.check_params``) in their master dtype (at least float32),
    always in new buffers: a state never holds the caller's arrays, so donating it (the
    README's loop) never deletes them. (Under ``jit`` the copy is free: the state is a new
    output anyway.)"""
    return jax.tree.map(lambda x: jnp.array(x, trees.master_dtype(x.dtype), copy=True), params)


def initial_fields(
    population_size: int, noise_state, ask_key: jax.Array, params, master, scale, track_best: bool
) -> dict:
    """The shared fields of a new state.

    ``params`` are the checked params and ``master`` their master copy (``master_params``);
    ``ask_key`` is the threefry key (``noise.noise_key``) of the first ``ask``; the best-so-far
    is a recipe (``BestMember``) whose θ and scale (like ``scale``) are zeros until the first
    ``tell``.
    """
    dtype = trees.state_dtype(master)
    return {
        "params": master,
        "member_dtypes": Dtypes.of(params),
        "key": ask_key,
        "generation": jnp.zeros((), jnp.int32),
        "noise_state": noise_state,
        "pending": jnp.zeros((), bool),
        "fitness": jnp.full((population_size,), jnp.nan, dtype),
        "best_fitness": jnp.full((), -jnp.inf, dtype),
        "best": BestMember(
            key=jax.random.key_data(ask_key),
            index=jnp.zeros((), jnp.int32),
            centre=jax.tree.map(jnp.zeros_like, master) if track_best else None,
            scale=jax.tree.map(jnp.zeros_like, scale) if track_best else None,
        ),
    }


def centre(state):
    """θ in the dtypes the params were given in (the master copy is float32).

    Example:
      >>> import jaxes
      >>> state = jaxes.open_es(4).init(jax.random.key(0), jnp.ones(2, jnp.bfloat16))
      >>> state.params.dtype, centre(state).dtype
      (dtype('float32'), dtype(bfloat16))
    """
    return trees.cast_like(state.params, state.dtypes)


def scalar_dtype(state) -> jnp.dtype:
    """The dtype of a state's strategy scalars (``trees.state_dtype`` of its params)."""
    return state.best_fitness.dtype


def is_rounded_state(state) -> bool:
    """Whether some leaf's members are narrower than its float32 master copy."""
    return any(trees.is_rounded(np.dtype(t)) for t in state.member_dtypes.leaves)
