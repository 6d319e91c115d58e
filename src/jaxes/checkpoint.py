"""Whole-state checkpoints with orbax: save every N generations, restore bit-exactly.

A checkpoint holds the full ``TrainState`` pytree (strategy state with its optimizer state and
keys, task state with observation statistics, the run key and the generation). PRNG keys are
stored as their raw ``uint32`` data and rewrapped on restore. A noise table (``noise.Table``) is
a pure function of the strategy's init key, so it is not stored: restore takes it from the
freshly initialised state it restores into. Orbax writes each step to a
temporary folder and renames it when complete, so a run killed mid-save leaves only whole
checkpoints behind.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxes.noise import Table


class CheckpointError(RuntimeError):
    """A checkpoint is missing or cannot be read."""


def _quiet_orbax():
    import absl.logging

    absl.logging.set_verbosity(absl.logging.ERROR)
    logging.getLogger("absl").setLevel(logging.ERROR)
    import orbax.checkpoint as ocp

    return ocp


def is_key(x) -> bool:
    """Whether ``x`` is an array of typed PRNG keys.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> is_key(jax.random.key(0)), is_key(jax.random.PRNGKey(0)), is_key(jnp.zeros(2))
      (True, False, False)
    """
    return hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def unwrap_keys(tree):
    """Typed PRNG keys replaced by their raw ``uint32`` data.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> raw = unwrap_keys({"key": jax.random.key(0), "x": jnp.ones(2)})
      >>> raw["key"].dtype, raw["x"].tolist()
      (dtype('uint32'), [1.0, 1.0])
    """
    return jax.tree.map(lambda x: jax.random.key_data(x) if is_key(x) else x, tree)


def rewrap_keys(tree, like):
    """Raw key data turned back into typed keys wherever ``like`` holds keys.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> tree = {"key": jax.random.key(0), "x": jnp.ones(2)}
      >>> raw_data = unwrap_keys(tree)["key"]
      >>> back = rewrap_keys(unwrap_keys(tree), tree)
      >>> is_key(back["key"]), bool(jnp.all(jax.random.key_data(back["key"]) == raw_data))
      (True, True)
    """
    return jax.tree.map(
        lambda x, ref: (
            jax.random.wrap_key_data(x, impl=jax.random.key_impl(ref)) if is_key(ref) else x
        ),
        tree,
        like,
    )


def _is_table(x) -> bool:
    return isinstance(x, Table)


def strip_tables(tree):
    """Noise tables replaced by a scalar placeholder (they are rebuilt, never stored).

    Example:
      >>> import jax.numpy as jnp
      >>> strip_tables({"noise": Table(jnp.zeros(1000)), "x": jnp.ones(2)})["noise"].shape
      ()
    """

    def placeholder(table):
        zero = np.zeros((), np.float32)
        sharding = getattr(table.values, "sharding", None)
        return zero if sharding is None else jax.device_put(zero, sharding)

    return jax.tree.map(lambda x: placeholder(x) if _is_table(x) else x, tree, is_leaf=_is_table)


def restore_tables(tree, like):
    """``tree`` with ``like``'s noise tables put back where ``strip_tables`` left placeholders."""
    leaves, treedef = jax.tree.flatten(like, is_leaf=_is_table)
    restored = treedef.flatten_up_to(tree)
    return treedef.unflatten(
        [ref if _is_table(ref) else x for x, ref in zip(restored, leaves, strict=True)]
    )


class Checkpointer:
    """Saves and restores one run's states under ``directory`` (keeps the newest ``keep``)."""

    def __init__(self, directory: str, keep: int = 3, create: bool = True):
        ocp = _quiet_orbax()
        self._ocp = ocp
        self.directory = os.path.abspath(directory)
        self._manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(
                max_to_keep=keep, create=create, enable_async_checkpointing=False
            ),
        )

    def save(self, step: int, state: Any) -> None:
        """Writes ``state`` as checkpoint ``step`` and waits until it is complete on disk."""
        data = unwrap_keys(strip_tables(state))
        self._manager.save(step, args=self._ocp.args.StandardSave(data), force=True)
        self._manager.wait_until_finished()

    def latest_step(self) -> int | None:
        """The newest complete checkpoint, or ``None``."""
        self._manager.reload()
        return self._manager.latest_step()

    def restore(self, like: Any, step: int | None = None) -> tuple[int, Any]:
        """Restores checkpoint ``step`` (default: newest) into the structure of ``like``."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise CheckpointError(f"no complete checkpoint in {self.directory}")
        # Restoring into ``like``'s shardings puts a replicated state straight onto its mesh.
        stripped = strip_tables(like)
        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
            unwrap_keys(stripped),
        )
        try:
            raw = self._manager.restore(step, args=self._ocp.args.StandardRestore(abstract))
        except Exception as err:  # orbax raises many types for unreadable files
            raise CheckpointError(
                f"checkpoint {step} in {self.directory} cannot be read ({type(err).__name__}: "
                f"{str(err).splitlines()[0] if str(err) else 'no detail'})"
            ) from err
        return step, restore_tables(rewrap_keys(raw, stripped), like)

    def close(self) -> None:
        self._manager.close()
