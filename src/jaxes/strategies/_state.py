"""The checks of what ``tell`` and ``member`` are given (internal); the state they check is
``jaxes.strategies.state``'s."""

from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp
import numpy as np

from jaxes.strategies.state import StrategyState


def check_state(state, state_type: type, strategy: str, population_size: int) -> None:
    """``tell``/``member`` get a state of their own strategy, built for their ``P``."""
    if not isinstance(state, state_type):
        given = type(state)
        source = (
            f"{given.strategy}'s" if issubclass(given, StrategyState) else f"a {given.__name__}"
        )
        raise ValueError(
            f"state: {strategy} was given {source} state; pass the state {strategy}(...).init "
            f"made (a {state_type.__name__})"
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
