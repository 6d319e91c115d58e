"""Loading gymnax environments and reading the spaces a task plays in.

A task takes the action spaces ``Discrete`` (the policy's argmax) and one-dimensional ``Box``
(the policy's [-1, 1] output scaled to the box), and the observation spaces ``Box`` (any
shape, cast to float32) and ``Discrete`` (one-hot). Anything else is refused with one
``ValueError`` line naming the environment and the space.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jaxes.extras import require
from jaxes.tasks.control.spaces import Actions, Observations

gymnax = require("gymnax", "gymnax", "gymnax environments")
spaces = require("gymnax.environments.spaces", "gymnax", "gymnax environments")


def env_names() -> list[str]:
    """Every environment gymnax has registered (``gymnax.registered_envs``).

    Example:
      >>> "CartPole-v1" in env_names() and "Breakout-MinAtar" in env_names()
      True
    """
    return list(gymnax.registered_envs)


def load_env(env_name: str) -> tuple[Any, Any]:
    """``(env, env_params)`` from ``gymnax.make``; a failure is one ``ValueError`` line.

    Example:
      >>> env, params = load_env("CartPole-v1")
      >>> int(params.max_steps_in_episode)
      500
      >>> load_env("Pong-v5")
      Traceback (most recent call last):
      ...
      ValueError: env: 'Pong-v5' is not a gymnax environment (see jaxes.tasks.gymnax.env_names())
    """
    if env_name not in gymnax.registered_envs:
        raise ValueError(
            f"env: {env_name!r} is not a gymnax environment (see jaxes.tasks.gymnax.env_names())"
        )
    try:
        return gymnax.make(env_name)
    except Exception as error:  # e.g. MNISTBandit-bsuite downloads MNIST when it is built
        message = str(error).splitlines()[0] if str(error) else ""
        raise ValueError(
            f"{env_name}: gymnax could not build it ({type(error).__name__}: {message})"
        ) from error


def action_spec(env_name: str, env, env_params) -> Actions:
    """The ``Actions`` of a ``Discrete`` or one-dimensional ``Box`` action space.

    Example:
      >>> action_spec("CartPole-v1", *load_env("CartPole-v1"))
      Actions(discrete=True, size=2, low=None, high=None)
      >>> spec = action_spec("Pendulum-v1", *load_env("Pendulum-v1"))
      >>> spec.size, spec.low.tolist(), spec.high.tolist()
      (1, [-2.0], [2.0])
    """
    space = env.action_space(env_params)
    if isinstance(space, spaces.Discrete):
        return Actions(True, int(space.n))
    if isinstance(space, spaces.Box) and len(space.shape) <= 1:
        size = int(np.prod(space.shape, dtype=np.int64))
        low = np.broadcast_to(np.asarray(space.low, np.float32), (size,))
        high = np.broadcast_to(np.asarray(space.high, np.float32), (size,))
        if np.all(np.isfinite(low)) and np.all(np.isfinite(high)):
            return Actions(False, size, low, high)
    raise ValueError(
        f"{env_name}: action space {space!r} is not supported "
        "(jaxes plays Discrete and bounded one-dimensional Box actions)"
    )


def observation_spec(env_name: str, env, env_params) -> Observations:
    """The ``Observations`` of a ``Box`` or ``Discrete`` observation space.

    Example:
      >>> observation_spec("Breakout-MinAtar", *load_env("Breakout-MinAtar"))
      Observations(shape=(10, 10, 4), one_hot=0)
      >>> observation_spec("FrozenLake-misc", *load_env("FrozenLake-misc")).shape
      (16,)
    """
    space = env.observation_space(env_params)
    if isinstance(space, spaces.Box):
        obs, _ = jax.eval_shape(env.reset, jax.random.key(0), env_params)
        return Observations(tuple(int(n) for n in obs.shape))
    if isinstance(space, spaces.Discrete):
        return Observations((int(space.n),), int(space.n))
    raise ValueError(
        f"{env_name}: observation space {space!r} is not supported "
        "(jaxes feeds Box and Discrete observations)"
    )
