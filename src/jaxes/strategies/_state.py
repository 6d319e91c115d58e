"""The state skeleton every strategy shares, and the checks of what ``tell`` and ``member``
are given (internal).

Every strategy state is a NamedTuple ``(params, dtypes, <its own fields>, key, generation,
noise_state, pending, fitness, best_fitness, best)``; ``initial_fields`` builds the shared ones.
"""

from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp
import numpy as np

from jaxes import trees
from jaxes.strategies.base import BestMember


def scalar_dtype(state) -> jnp.dtype:
    """The dtype of a state's strategy scalars (``trees.state_dtype`` of its params)."""
    return state.best_fitness.dtype


def master_params(params):
    """``params`` (checked: ``trees.check_params``) in their master dtype (at least float32),
    always in new buffers: a state never holds the caller's arrays, so donating it (the
    README's loop) never deletes them. (Under ``jit`` the copy is free: the state is a new
    output anyway.)"""
    return jax.tree.map(lambda x: jnp.array(x, trees.master_dtype(x.dtype), copy=True), params)


def initial_fields(
    population_size: int, noise_state, ask_key: jax.Array, params, master, scale, track_best: bool
) -> dict:
    """The state fields every strategy starts with.

    ``params`` are the checked params and ``master`` their master copy (``master_params``);
    ``dtypes`` keeps one scalar per leaf in the dtype its members are built in; ``ask_key`` is
    the threefry key (``noise.noise_key``) of the first ``ask``; ``pending`` says whether an
    ``ask`` awaits its ``tell``; ``fitness`` is the last fitness told (NaN before any); the
    best-so-far is a recipe (``BestMember``) whose θ and scale (like ``scale``) are zeros until
    the first ``tell``.
    """
    dtype = trees.state_dtype(master)
    return {
        "params": master,
        "dtypes": jax.tree.map(lambda x: jnp.zeros((), x.dtype), params),
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


def check_state(state, state_type: type, strategy: str, population_size: int) -> None:
    """``tell``/``member`` get a state of their own strategy, built for their ``P``."""
    if not isinstance(state, state_type):
        raise ValueError(
            f"state: expected a {state_type.__name__} (from {strategy}(...).init), got "
            f"{type(state).__name__}"
        )
    if jnp.shape(state.fitness) != (population_size,):
        raise ValueError(
            f"state: built for population_size {jnp.shape(state.fitness)[-1]}, but this "
            f"{strategy} has population_size {population_size}"
        )


def check_fitness(fitness, population_size: int) -> jax.Array:
    """Fitness must be a floating array of shape ``(P,)``; checked at trace time."""
    if not isinstance(fitness, jax.Array | np.ndarray):
        try:
            # Python floats keep the default float's precision (float64 under x64).
            fitness = jnp.asarray(fitness, jnp.result_type(float))
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"fitness: expected an array of shape ({population_size},), got "
                f"{type(fitness).__name__} ({err})"
            ) from None
    shape = jnp.shape(fitness)
    if shape != (population_size,):
        raise ValueError(
            f"fitness: expected shape ({population_size},) (one value per member), got {shape}"
        )
    dtype = jnp.result_type(fitness)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(
            f"fitness: expected a floating dtype (bfloat16, float16, float32 or float64), got "
            f"{dtype}; cast it to a float"
        )
    return jnp.asarray(fitness)


def check_member_index(i, population_size: int):
    """A concrete index must lie in ``[0, P)``; a traced one is checked by ``member``."""
    if isinstance(i, numbers.Integral) or (
        isinstance(i, np.ndarray | np.generic | jax.Array)
        and not isinstance(i, jax.core.Tracer)
        and np.ndim(i) == 0
    ):
        value = int(i)
        if not 0 <= value < population_size:
            raise ValueError(f"i: expected a member index in [0, {population_size}), got {value}")
        return jnp.int32(value)
    if isinstance(i, jax.core.Tracer) and not jnp.issubdtype(i.dtype, jnp.integer):
        raise ValueError(f"i: expected an integer index, got dtype {i.dtype}")
    if not isinstance(i, jax.core.Tracer):
        raise ValueError(f"i: expected an integer index, got {i!r}")
    return i


def is_rounded_state(state) -> bool:
    """Whether some leaf's members are narrower than its float32 master copy."""
    return any(trees.is_rounded(t.dtype) for t in jax.tree.leaves(state.dtypes))
