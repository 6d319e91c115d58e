"""What a control task's policy reads and writes: its observations and its actions.

A family adapter (``jaxes.tasks.brax``, ``jaxes.tasks.gymnax``) reads both from its
environment; the policies and the rollout need nothing else of it.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class Actions(NamedTuple):
    """What the policy's output becomes.

    Attributes:
      discrete: ``True``: the output is one logit per action and the action its argmax.
      size: the policy's output size (actions, or the box's length).
      low: the box's lower bounds (float32, shape ``(size,)``; ``None`` when discrete).
      high: the box's upper bounds.
    """

    discrete: bool
    size: int
    low: np.ndarray | None = None
    high: np.ndarray | None = None


def box(size: int, low=-1.0, high=1.0) -> Actions:
    """A bounded box of ``size`` actions (bounds broadcast to ``(size,)``, float32).

    Example:
      >>> box(2, -3.0, 3.0).high.tolist()
      [3.0, 3.0]
    """
    low = np.broadcast_to(np.asarray(low, np.float32), (size,))
    high = np.broadcast_to(np.asarray(high, np.float32), (size,))
    return Actions(False, size, low, high)


def held_action(actions: Actions):
    """The action the reference episodes hold: action 0, or the middle of the box."""
    return jnp.int32(0) if actions.discrete else jnp.asarray((actions.low + actions.high) / 2)


class Observations(NamedTuple):
    """How an observation is fed to the policy.

    Attributes:
      shape: the shape the policy sees (a ``Discrete`` observation: ``(n,)``, one-hot).
      one_hot: ``n`` for a ``Discrete`` observation space, else 0.
    """

    shape: tuple[int, ...]
    one_hot: int = 0

    @property
    def size(self) -> int:
        """The length of a flattened observation."""
        return int(np.prod(self.shape, dtype=np.int64))


def encode(spec: Observations, obs: jax.Array) -> jax.Array:
    """An observation (or a batch: leading axes are kept) as the policy's float32 input of
    shape ``spec.shape``.

    Example:
      >>> encode(Observations((3,), 3), jnp.int32(1)).tolist()
      [0.0, 1.0, 0.0]
      >>> encode(Observations((2, 2)), jnp.ones((5, 2, 2), jnp.int32)).shape
      (5, 2, 2)
    """
    if spec.one_hot:
        return jax.nn.one_hot(obs, spec.one_hot, dtype=jnp.float32)
    return jnp.asarray(obs, jnp.float32)
