"""Where a run's state lives: replicated on a mesh's devices, or copied to the host."""

from __future__ import annotations

import jax
import numpy as np

from jaxes.parallel import replicated
from jaxes.step import TrainState
from jaxes.trees import is_key, rewrap_keys, unwrap_keys


def place(state: TrainState, mesh) -> TrainState:
    """``state`` replicated on every device of ``mesh`` (of every process).

    Example:
      >>> import jaxes
      >>> from jaxes.parallel import make_mesh
      >>> from jaxes.tasks.functions import function_task
      >>> from jaxes.training import init_state
      >>> es, task = jaxes.open_es(population_size=4, sigma=0.1), function_task("sphere", 2)
      >>> ts = place(init_state(es, task, seed=0), make_mesh())
      >>> ts.strategy_state.params.sharding.is_fully_replicated, is_key(ts.key)
      (True, True)
    """
    host = to_host(unwrap_keys(state))
    return jax.jit(lambda data: rewrap_keys(data, state), out_shardings=replicated(mesh))(host)


def to_host(tree):
    """Arrays as this process's local copy (works for arrays replicated across processes).

    PRNG keys stay as they are.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> host = to_host({"x": jnp.ones(2), "key": jax.random.key(0)})
      >>> type(host["x"]).__name__, is_key(host["key"])
      ('ndarray', True)
    """
    return jax.tree.map(
        lambda x: (
            np.asarray(x.addressable_data(0)) if isinstance(x, jax.Array) and not is_key(x) else x
        ),
        tree,
    )
