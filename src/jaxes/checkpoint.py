"""Whole-state checkpoints with orbax: save every N generations, restore bit-exactly.

A checkpoint holds the full ``TrainState`` pytree (strategy state with its optimizer state and
keys, task state with observation statistics, the run key and the generation). PRNG keys are
stored as their raw ``uint32`` data and rewrapped on restore. Orbax writes each step to a
temporary folder and renames it when complete, so a run killed mid-save leaves only whole
checkpoints behind.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import jax
import jax.numpy as jnp


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
        self._manager.save(step, args=self._ocp.args.StandardSave(unwrap_keys(state)), force=True)
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
        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
            unwrap_keys(like),
        )
        try:
            raw = self._manager.restore(step, args=self._ocp.args.StandardRestore(abstract))
        except Exception as err:  # orbax raises many types for unreadable files
            raise CheckpointError(
                f"checkpoint {step} in {self.directory} cannot be read ({type(err).__name__}: "
                f"{str(err).splitlines()[0] if str(err) else 'no detail'})"
            ) from err
        return step, rewrap_keys(raw, like)

    def close(self) -> None:
        self._manager.close()
