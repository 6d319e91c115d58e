"""``gymnax_task``: a gymnax environment and a policy as a ``jaxes.types.Task``.

The task's state is the Brax task's: ``BraxTaskState`` (observation statistics) or, for a
policy with a ``prepare`` step, ``VBNTaskState`` (plus the reference batch).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxes.tasks.brax import running_stats
from jaxes.tasks.brax.policies import Policy
from jaxes.tasks.brax.task import BraxTaskState, VBNTaskState, reference
from jaxes.tasks.gymnax import policies
from jaxes.tasks.gymnax.envs import (
    Actions,
    Observations,
    action_spec,
    load_env,
    observation_spec,
)
from jaxes.tasks.gymnax.rollout import Rollout, act, env_step, flat, prepared, rollout, rollout_info
from jaxes.types import Task


@dataclasses.dataclass(frozen=True)
class GymnaxTask(Task):
    """A ``jaxes.types.Task`` that also exposes its gymnax ``env``, ``env_params``, ``policy``
    and the ``actions``/``observations`` it reads from the spaces."""

    env: Any = None
    env_params: Any = None
    policy: Policy | None = None
    actions: Actions | None = None
    observations: Observations | None = None


def reference_batch(
    setup: Rollout, actions: Actions, key: jax.Array, size: int, steps: int
) -> jax.Array:
    """One flat raw observation from each of ``size`` episodes that hold one action (action 0;
    the middle of a box), at a random one of their first ``steps`` decisions while alive."""
    reset_key, pick_key, step_key = jax.random.split(key, 3)
    obs, states = jax.vmap(setup.env.reset, in_axes=(0, None))(
        jax.random.split(reset_key, size), setup.env_params
    )
    picks = jax.random.randint(pick_key, (size,), 0, steps)
    held = jnp.int32(0) if actions.discrete else jnp.asarray((actions.low + actions.high) / 2)
    step_keys = jax.random.split(step_key, size)
    as_flat = jax.vmap(lambda o: flat(setup, o))

    def step(carry, t):
        obs, state, alive, kept = carry
        kept = jnp.where((alive & (t <= picks))[:, None], as_flat(obs), kept)
        one = lambda k, s: env_step(setup, k, t * setup.action_repeat, s, held)  # noqa: E731
        obs, state, _, term, trunc, _ = jax.vmap(one)(step_keys, state)
        return (obs, state, alive & ~(term | trunc), kept), None

    start = (obs, states, jnp.ones(size, bool), as_flat(obs))
    (_, _, _, kept), _ = jax.lax.scan(step, start, jnp.arange(steps))
    return kept


def _check_counts(**counts) -> None:
    for name, value in counts.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}: expected an int >= 1, got {value!r}")


def gymnax_task(
    env_name: str = "CartPole-v1",
    policy: Policy | nn.Module | str = "mlp",
    hidden_sizes: Sequence[int] | None = None,
    episodes_per_member: int = 1,
    eval_episodes: int = 8,
    action_repeat: int = 1,
    normalize_observations: bool | None = None,
    episode_length: int | None = None,
    reference_size: int = 128,
    chunk_length: int = 50,
) -> GymnaxTask:
    """Plays a population of deterministic policies on a gymnax environment.

    Args:
      env_name: any name from ``gymnax.registered_envs`` (``env_names()``).
      policy: a name from ``policies.POLICIES``: ``"linear"``, ``"mlp"`` (tanh MLP),
        ``"vbn_mlp"``, ``"conv"`` (MinAtar's network: one 3×3 convolution of 16 channels,
        ReLU, dense layers; grid observations only) or ``"vbn_conv"``; a flax module (its
        output: logits for ``Discrete`` actions, [-1, 1] for a ``Box``); or any ``Policy``
        whose ``apply`` returns env actions.
      hidden_sizes: hidden dense widths (``None``: (32, 32), or (128,) for the conv ones).
      episodes_per_member: episodes averaged into each member's fitness. Every member plays
        the same episode keys (common random numbers).
      eval_episodes: episodes ``evaluate_policy`` returns.
      action_repeat: ``K``, env steps each action is held for (frame skip); the decision's
        reward is the sum of its steps' rewards up to the episode's end.
      normalize_observations: feed the policy ``(obs - mean)/std`` from running statistics;
        ``None`` (the default): for vector observations only, not for grids (MinAtar's
        0/1 channels, where a rare object would be scaled up to the clip).
      episode_length: env steps per episode at most; it replaces the env params'
        ``max_steps_in_episode``, so gymnax truncates there (``None``: gymnax's own limit).
      reference_size: observations in the reference batch of a ``"vbn_*"`` policy, collected
        by ``init`` as ``jaxes.tasks.brax.brax_task`` does (one action held, up to 32
        decisions per episode, one observation each while alive).
      chunk_length: policy decisions per ``lax.scan`` chunk between early-exit checks: the
        batch stops at the first chunk's end where every episode is over.

    Returns:
      A ``GymnaxTask``; ``evaluate(key, members, state)`` returns the mean episode return per
      member, each member's observation moments and a ``RolloutInfo``.

    Example:
      >>> import jax
      >>> task = gymnax_task("CartPole-v1", "linear", episode_length=20)
      >>> params, state = task.init_params(jax.random.key(0)), task.init(jax.random.key(1))
      >>> jax.eval_shape(task.evaluate_policy, jax.random.key(2), params, state).shape
      (8,)
    """
    _check_counts(
        episodes_per_member=episodes_per_member,
        eval_episodes=eval_episodes,
        action_repeat=action_repeat,
        reference_size=reference_size,
        chunk_length=chunk_length,
    )
    env, env_params = load_env(env_name)
    actions = action_spec(env_name, env, env_params)
    observations = observation_spec(env_name, env, env_params)
    if episode_length is None:
        episode_length = int(env_params.max_steps_in_episode)
    else:
        _check_counts(episode_length=episode_length)
        env_params = env_params.replace(max_steps_in_episode=episode_length)
    if normalize_observations is None:
        normalize_observations = len(observations.shape) == 1
    policy = policies.build(policy, observations.shape, actions, hidden_sizes)
    decisions = -(-episode_length // action_repeat)
    setup = Rollout(
        env=env,
        env_params=env_params,
        policy=policy,
        observations=observations,
        normalize_observations=bool(normalize_observations),
        episode_length=episode_length,
        action_repeat=action_repeat,
        decisions=decisions,
        chunk=min(chunk_length, decisions),
    )

    def init(key):
        stats = running_stats.init(observations.size)
        if policy.prepare is None:
            return BraxTaskState(stats)
        steps = min(32, setup.decisions)
        return VBNTaskState(stats, reference_batch(setup, actions, key, reference_size, steps))

    def evaluate(key, members, task_state):
        keys = jax.random.split(key, episodes_per_member)
        returns, lengths, terminated, moments, chunks = rollout(
            setup, members, keys, task_state.obs_stats, reference(task_state)
        )
        info = rollout_info(setup, lengths, terminated, chunks)
        return jnp.mean(returns, axis=1), moments, info

    def update(task_state, moments):
        if not setup.normalize_observations:
            return task_state
        return task_state._replace(
            obs_stats=running_stats.merge(task_state.obs_stats, running_stats.total(moments))
        )

    def evaluate_policy(key, params, task_state):
        single = jax.tree.map(lambda x: x[None], params)
        keys = jax.random.split(key, eval_episodes)
        returns, *_ = rollout(setup, single, keys, task_state.obs_stats, reference(task_state))
        return returns[0]

    def act_on(params, obs, task_state):
        stats = task_state.obs_stats
        return act(setup, prepared(setup, params, stats, reference(task_state)), obs, stats)

    return GymnaxTask(
        init=init,
        evaluate=evaluate,
        evaluate_policy=evaluate_policy,
        init_params=policy.init,
        update=update,
        act=act_on,
        env=env,
        env_params=env_params,
        policy=policy,
        actions=actions,
        observations=observations,
    )
