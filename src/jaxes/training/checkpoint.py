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
import numpy as np

from jaxes.noise import Table
from jaxes.trees import is_key, rewrap_keys, unwrap_keys  # noqa: F401 - their old home

# Checkpoints a run keeps: saving one more deletes the oldest (a resume needs only the newest
# readable one; the ones before it are fallbacks should it be damaged).
KEEP = 3


class CheckpointError(RuntimeError):
    """A checkpoint is missing or cannot be read."""


def _brief(err: Exception, limit: int = 160) -> str:
    """An orbax/tensorstore error in a few words (their messages embed whole JSON specs)."""
    text = str(err).splitlines()[0] if str(err) else "no detail"
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return f"{type(err).__name__}: {text}"


class CheckpointMismatch(CheckpointError):
    """A checkpoint holds a state of another shape than the run's settings give."""


def _path_keys(path) -> list:
    keys = []
    for entry in path:
        for attr in ("name", "key", "idx"):
            if hasattr(entry, attr):
                keys.append(getattr(entry, attr))
                break
    return keys


def _lookup(tree, keys):
    for key in keys:
        if isinstance(tree, dict):
            tree = tree[key] if key in tree else tree[str(key)]
        else:
            tree = tree[key]
    return tree


def describe_mismatch(metadata_tree, like) -> str | None:
    """The first leaf of ``like`` whose shape or dtype the saved tree does not have, in words
    (``None`` when every leaf matches)."""
    for path, leaf in jax.tree_util.tree_leaves_with_path(like):
        name = jax.tree_util.keystr(path)
        try:
            saved = _lookup(metadata_tree, _path_keys(path))
        except (KeyError, IndexError, TypeError):
            return f"{name} is missing from the checkpoint"
        shape = tuple(getattr(saved, "shape", ()) or ())
        if shape != tuple(leaf.shape):
            return f"{name} has shape {shape} in the checkpoint and {tuple(leaf.shape)} here"
        if getattr(saved, "dtype", leaf.dtype) != leaf.dtype:
            return f"{name} has dtype {saved.dtype} in the checkpoint and {leaf.dtype} here"
    return None


def stored_beyond(metadata_tree, like) -> bool:
    """Whether the saved tree holds leaves ``like`` has no place for (fields a state no longer
    keeps: before issue 58 every strategy state stored its ``dtypes`` as arrays)."""
    wanted = {tuple(map(str, _path_keys(p))) for p, _ in jax.tree_util.tree_leaves_with_path(like)}
    stored = jax.tree_util.tree_leaves_with_path(metadata_tree)
    return any(tuple(map(str, _path_keys(p))) not in wanted for p, _ in stored)


def _quiet_orbax():
    """orbax, with absl's logs at ERROR and above, or quieter where the caller set them so
    (the CLI sets CRITICAL: a checkpoint's unreadable metadata file, which orbax reads past,
    must not print its ERROR lines there)."""
    import absl.logging

    absl_logger = logging.getLogger("absl")
    if absl_logger.getEffectiveLevel() < logging.ERROR:
        absl.logging.set_verbosity(absl.logging.ERROR)
        absl_logger.setLevel(logging.ERROR)
    import orbax.checkpoint as ocp

    return ocp


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


def complete_steps(directory: str) -> list[int]:
    """The complete checkpoints under ``directory``, oldest first, without starting orbax:
    orbax writes a step to a temporary name and renames it to the step number when done.

    Example:
      >>> import os, tempfile
      >>> d = tempfile.mkdtemp()
      >>> for name in ("10", "5", "20.orbax-checkpoint-tmp-1"):
      ...     os.mkdir(os.path.join(d, name))
      >>> complete_steps(d), complete_steps(os.path.join(d, "absent"))
      ([5, 10], [])
    """
    if not os.path.isdir(directory):
        return []
    names = os.listdir(directory)
    return sorted(
        int(n) for n in names if n.isdigit() and os.path.isdir(os.path.join(directory, n))
    )


class Checkpointer:
    """Saves and restores one run's states under ``directory`` (keeps the newest ``keep``)."""

    def __init__(self, directory: str, keep: int = KEEP, create: bool = True):
        ocp = _quiet_orbax()
        self._ocp = ocp
        self.directory = os.path.abspath(directory)
        # The handler named up front: a manager that has not saved yet otherwise reads no
        # checkpoint's metadata (``item_metadata`` is ``None``), so a resume could not name
        # what does not fit, nor tell whether a partial restore is needed.
        self._manager = ocp.CheckpointManager(
            self.directory,
            item_handlers=ocp.PyTreeCheckpointHandler(),
            options=ocp.CheckpointManagerOptions(
                max_to_keep=keep, create=create, enable_async_checkpointing=False
            ),
        )

    def save(self, step: int, state: Any) -> None:
        """Writes ``state`` as checkpoint ``step`` and waits until it is complete on disk."""
        data = unwrap_keys(strip_tables(state))
        # PyTree's handler (the one StandardSave wraps, the same files) for saves and restores
        # alike: a manager serves one handler per item, and restore needs its partial mode.
        self._manager.save(step, args=self._ocp.args.PyTreeSave(data), force=True)
        self._manager.wait_until_finished()

    def latest_step(self) -> int | None:
        """The newest complete checkpoint, or ``None``."""
        self._manager.reload()
        return self._manager.latest_step()

    def steps(self) -> list[int]:
        """Every complete checkpoint, oldest first."""
        self._manager.reload()
        return sorted(self._manager.all_steps())

    def restore_newest_readable(self, like: Any) -> tuple[int, Any, list[tuple[int, str]]]:
        """The newest checkpoint that can be read, and ``(step, why)`` for each newer one.

        A damaged newest checkpoint (a truncated or missing file) falls back to the one
        before it; a state of another shape never does (every checkpoint of the run has it).
        """
        steps = self.steps()
        if not steps:
            raise CheckpointError(f"no complete checkpoint in {self.directory}")
        skipped = []
        for step in reversed(steps):
            try:
                restored = self.restore(like, step)
            except CheckpointMismatch:
                raise
            except CheckpointError as err:
                skipped.append((step, str(err)))
                continue
            return restored[0], restored[1], skipped
        raise CheckpointError(
            f"no checkpoint in {self.directory} can be read (tried {steps[::-1]}); the newest: "
            f"{skipped[0][1]}"
        )

    def set_aside(self, step: int) -> str:
        """Renames checkpoint ``step`` out of the run (kept for inspection, never deleted), so
        that the run can write that step again; returns the new path."""
        source = os.path.join(self.directory, str(step))
        target, n = source + ".damaged", 1
        while os.path.exists(target):
            n += 1
            target = f"{source}.damaged-{n}"
        os.rename(source, target)
        self._manager.reload()
        return target

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
            metadata = self._manager.item_metadata(step)
        except Exception as err:  # orbax raises many types for unreadable files
            raise CheckpointError(
                f"checkpoint {step} in {self.directory} cannot be read ({_brief(err)})"
            ) from err
        tree = getattr(metadata, "tree", metadata)
        if tree is not None:
            mismatch = describe_mismatch(tree, abstract)
            if mismatch:
                raise CheckpointMismatch(
                    f"checkpoint {step} in {self.directory} does not fit this run's settings: "
                    f"{mismatch} (was config.json edited?)"
                )
        try:
            # Only what ``like`` has, by name, where the checkpoint holds more (fields a state no
            # longer keeps); ``describe_mismatch`` has already named any it lacks. Partial
            # restores only then: orbax 0.11 (the floor) matches their targets by ``keystr``
            # (``'.params'``) against the stored names, so finds no dataclass field.
            args = self._ocp.args.PyTreeRestore(
                item=abstract,
                partial_restore=tree is not None and stored_beyond(tree, abstract),
                restore_args=self._ocp.checkpoint_utils.construct_restore_args(abstract),
            )
            raw = self._manager.restore(step, args=args)
        except Exception as err:  # orbax raises many types for unreadable files
            raise CheckpointError(
                f"checkpoint {step} in {self.directory} cannot be read ({_brief(err)})"
            ) from err
        return step, restore_tables(rewrap_keys(raw, stripped), like)

    def close(self) -> None:
        self._manager.close()


def restore_run_state(directory: str, like: Any, step: int | None = None) -> tuple[int, Any]:
    """``(step, state)`` of the checkpoints in ``directory``: checkpoint ``step``, or the
    newest readable one (``None``), restored like ``like`` (the run's initial state).

    Example:
      >>> import tempfile, jax.numpy as jnp
      >>> folder = tempfile.mkdtemp()
      >>> ckpt = Checkpointer(folder)
      >>> ckpt.save(3, {"w": jnp.ones(2)}); ckpt.close()
      >>> restore_run_state(folder, {"w": jnp.zeros(2)})[0]
      3
    """
    ckpt = Checkpointer(directory, create=False)
    try:
        if step is None:
            step, state, _ = ckpt.restore_newest_readable(like)
        else:
            step, state = ckpt.restore(like, step)
    finally:
        ckpt.close()
    return step, state
