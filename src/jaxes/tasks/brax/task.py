"""``brax_task``: a Brax environment and a policy as a ``jaxes.types.Task``.

The task's state holds the observation statistics (and, for a policy with a ``prepare`` step,
its reference batch); ``rollout.rollout`` plays the episodes.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxes.tasks.brax import policies, running_stats
from jaxes.tasks.brax.envs import action_range, load_env, observation_size
from jaxes.tasks.brax.rollout import Rollout, act, prepared, rollout, rollout_info
from jaxes.types import Task


class BraxTaskState(NamedTuple):
    """Observation statistics, merged over every generation's alive steps."""

    obs_stats: running_stats.RunningStats


class VBNTaskState(NamedTuple):
    """``BraxTaskState`` plus the reference batch of raw observations of a policy with
    virtual batch normalisation (collected once by ``init``, kept in checkpoints). A type of
    its own, so other runs' checkpoints keep their structure."""

    obs_stats: running_stats.RunningStats
    reference: jax.Array


@dataclasses.dataclass(frozen=True)
class BraxTask(Task):
    """A ``jaxes.types.Task`` that also exposes its Brax ``env`` and ``policy``."""

    env: Any = None
    policy: policies.Policy | None = None


def reference(task_state):
    """The reference batch of a ``VBNTaskState``; ``None`` for a ``BraxTaskState``."""
    return getattr(task_state, "reference", None)


def reference_batch(env, key: jax.Array, size: int, steps: int) -> jax.Array:
    """One observation from each of ``size`` episodes that hold the middle of the action range,
    at a random one of their first ``steps`` decisions while they were alive.

    Example:
      >>> import jax
      >>> env = load_env("inverted_pendulum")
      >>> jax.eval_shape(lambda k: reference_batch(env, k, 16, 8), jax.random.key(0)).shape
      (16, 4)
    """
    reset_key, pick_key = jax.random.split(key)
    states = jax.vmap(env.reset)(jax.random.split(reset_key, size))
    picks = jax.random.randint(pick_key, (size,), 0, steps)
    bounds = action_range(env)
    middle = (jnp.asarray(bounds["action_low"]) + jnp.asarray(bounds["action_high"])) / 2
    actions = jnp.broadcast_to(middle, (size, env.action_size))

    def step(carry, t):
        state, alive, kept = carry
        kept = jnp.where((alive & (t <= picks))[:, None], state.obs, kept)
        nxt = jax.vmap(env.step)(state, actions)
        return (nxt, alive & (nxt.done == 0), kept), None

    start = (states, jnp.ones(size, bool), states.obs)
    (_, _, kept), _ = jax.lax.scan(step, start, jnp.arange(steps))
    return kept


def _check_counts(**counts) -> None:
    for name, value in counts.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}: expected an int >= 1, got {value!r}")


def brax_task(
    env_name: str = "inverted_pendulum",
    backend: str = "spring",
    episode_length: int = 1000,
    policy: policies.Policy | nn.Module | str = "linear",
    hidden_sizes: tuple[int, ...] = (32, 32),
    episodes_per_member: int = 1,
    eval_episodes: int = 8,
    chunk_length: int = 50,
    normalize_observations: bool = True,
    action_repeat: int = 1,
    reference_size: int = 128,
) -> BraxTask:
    """Rolls out a population of policies on a Brax environment.

    Args:
      env_name: any name from ``brax.envs`` (see ``env_names()``).
      backend: ``"generalized"``, ``"positional"``, ``"spring"`` or ``"mjx"``.
      episode_length: env steps per episode (>= 1), whatever ``action_repeat`` is (as Brax's
        ``EpisodeWrapper`` counts them); episodes also end at ``done``.
      policy: a name from ``policies.POLICIES``: ``"linear"`` (the CLI's default), ``"mlp"``
        (tanh MLP with ``hidden_sizes``) or ``"vbn_mlp"``; a flax module whose output lies in
        [-1, 1] (scaled to the control range by ``policies.from_module``); or any
        ``jaxes.policies.Policy`` (used as it is).
      hidden_sizes: hidden layer widths of the ``"mlp"`` and ``"vbn_mlp"`` policies.
      episodes_per_member: episodes averaged into each member's fitness. Every member plays
        the same start states (common random numbers), so ranks compare like with like.
      eval_episodes: episodes ``evaluate_policy`` averages over.
      chunk_length: policy decisions per ``lax.scan`` chunk between early-exit checks.
      normalize_observations: feed the policy ``(obs - mean)/std`` from running statistics.
      action_repeat: ``K``, env steps each action is held for (frame skip); the decision's
        reward is the sum of its steps' rewards, and steps after the episode ended (at
        ``done`` or ``episode_length``) count for nothing. ``K = 1`` is one step per action.
      reference_size: observations in the reference batch of a policy with a ``prepare``
        step (``"vbn_mlp"``): ``init`` plays ``reference_size`` episodes of the initial policy
        (whose zero-initialised output is the middle of the action range) for up to 32
        decisions each and keeps one observation of each, at a random step while it was
        alive. Each member's ``prepare`` sees them (normalised like every observation) once
        per evaluation, before its episodes.

    Returns:
      A ``Task``; ``evaluate(key, members, state)`` returns the mean episode return per
      member (maximised), each member's observation moments and a ``RolloutInfo``;
      ``update(state, moments)`` merges every member's moments into the statistics.

    Example:
      >>> import jax
      >>> task = brax_task("inverted_pendulum", episode_length=20)
      >>> params = task.init_params(jax.random.key(0))
      >>> state = task.init(jax.random.key(2))
      >>> jax.eval_shape(task.evaluate_policy, jax.random.key(1), params, state).shape
      (8,)
    """
    _check_counts(
        episode_length=episode_length,
        episodes_per_member=episodes_per_member,
        eval_episodes=eval_episodes,
        chunk_length=chunk_length,
        action_repeat=action_repeat,
        reference_size=reference_size,
    )
    env = load_env(env_name, backend)
    obs_size = observation_size(env)
    policy = policies.build(policy, obs_size, env.action_size, hidden_sizes, **action_range(env))
    decisions = -(-episode_length // action_repeat)  # per episode, the last may be cut short
    setup = Rollout(
        env=env,
        policy=policy,
        normalize_observations=normalize_observations,
        obs_size=obs_size,
        episode_length=episode_length,
        action_repeat=action_repeat,
        chunk=min(chunk_length, decisions),
    )

    def init(key):
        stats = running_stats.init(obs_size)
        if policy.prepare is None:
            return BraxTaskState(stats)
        return VBNTaskState(stats, reference_batch(env, key, reference_size, min(32, decisions)))

    def evaluate(key, members, task_state: BraxTaskState):
        reset_keys = jax.random.split(key, episodes_per_member)
        returns, lengths, moments, chunks = rollout(
            setup, members, reset_keys, task_state.obs_stats, reference(task_state)
        )
        info = rollout_info(setup, lengths, chunks)
        return jnp.mean(returns, axis=1), moments, info

    def update(task_state: BraxTaskState, moments):
        if not normalize_observations:
            return task_state
        return task_state._replace(
            obs_stats=running_stats.merge(task_state.obs_stats, running_stats.total(moments))
        )

    def evaluate_policy(key, params, task_state: BraxTaskState):
        single = jax.tree.map(lambda x: x[None], params)
        keys = jax.random.split(key, eval_episodes)
        returns, _, _, _ = rollout(setup, single, keys, task_state.obs_stats, reference(task_state))
        return returns[0]

    def act_on(params, obs, task_state: BraxTaskState):
        stats = task_state.obs_stats
        return act(setup, prepared(setup, params, stats, reference(task_state)), obs, stats)

    return BraxTask(
        init=init,
        evaluate=evaluate,
        evaluate_policy=evaluate_policy,
        init_params=policy.init,
        update=update,
        act=act_on,
        env=env,
        policy=policy,
    )
