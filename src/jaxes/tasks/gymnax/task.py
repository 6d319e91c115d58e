"""``gymnax_task``: a gymnax environment and a policy as a control task.

The family adapter (``family``) is all that is gymnax's own: an episode's state is the
observation and gymnax's state, and every env step draws a key. Episode ``e`` resets from
``split(key_e)[0]`` and its ``n``-th env step draws ``fold_in(split(key_e)[1], n)``, the same
for every member (common random numbers), so where the loop stops changes no return. gymnax's
``step`` resets an episode by itself once it is done; the rollout masks every step after an
episode's first ``done`` (``terminated`` or ``truncated``). The rollout, the statistics and
the policies are ``jaxes.tasks.control``'s.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax

from jaxes.tasks.control import policies
from jaxes.tasks.control.policies import Policy
from jaxes.tasks.control.rollout import Family
from jaxes.tasks.control.task import ControlTask, check_counts, control_task
from jaxes.tasks.gymnax.envs import action_spec, load_env, observation_spec


def family(env, env_params, observations, actions) -> Family:
    """gymnax's ``env`` with ``env_params`` as a ``jaxes.tasks.control`` family.

    Example:
      >>> env, params = load_env("CartPole-v1")
      >>> fam = family(env, params, observation_spec("CartPole-v1", env, params),
      ...              action_spec("CartPole-v1", env, params))
      >>> fam.observations.shape, fam.actions.discrete
      ((4,), True)
    """

    def reset(key):
        reset_key, step_key = jax.random.split(key)
        return env.reset(reset_key, env_params), step_key

    def step(step_key, state, action, n):
        obs, env_state, reward, terminated, truncated, _ = env.step(
            jax.random.fold_in(step_key, n), state[1], action, env_params
        )
        return (obs, env_state), reward, terminated, truncated

    def reference_starts(key, size):
        reset_key, pick_key, step_key = jax.random.split(key, 3)
        states = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(reset_key, size), env_params
        )
        return states, jax.random.split(step_key, size), pick_key

    return Family(
        reset=reset,
        step=step,
        observation=lambda state: state[0],
        reference_starts=reference_starts,
        observations=observations,
        actions=actions,
    )


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
) -> ControlTask:
    """Plays a population of deterministic policies on a gymnax environment.

    Args:
      env_name: any name from ``gymnax.registered_envs`` (``env_names()``).
      policy: a name from ``jaxes.tasks.control.POLICIES``: ``"linear"``, ``"mlp"`` (tanh
        MLP), ``"vbn_mlp"``, ``"conv"`` (MinAtar's network: one 3×3 convolution of 16
        channels, ReLU, dense layers; grid observations only) or ``"vbn_conv"``; a flax module
        (its output: logits for ``Discrete`` actions, [-1, 1] for a ``Box``); or any
        ``Policy`` whose ``apply`` returns env actions.
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
        by ``init`` as ``jaxes.tasks.brax.brax_task`` does (one action held: action 0 or the
        middle of the box, up to 32 decisions per episode, one observation each while alive).
      chunk_length: policy decisions per ``lax.scan`` chunk between early-exit checks: the
        batch stops at the first chunk's end where every episode is over.

    Returns:
      A ``ControlTask`` (``jaxes.tasks.control.control_task``) with ``env`` and
      ``env_params`` set.

    Example:
      >>> import jax
      >>> task = gymnax_task("CartPole-v1", "linear", episode_length=20)
      >>> params, state = task.init_params(jax.random.key(0)), task.init(jax.random.key(1))
      >>> jax.eval_shape(task.evaluate_policy, jax.random.key(2), params, state).shape
      (8,)
    """
    check_counts(
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
        check_counts(episode_length=episode_length)
        env_params = env_params.replace(max_steps_in_episode=episode_length)
    if normalize_observations is None:
        normalize_observations = len(observations.shape) == 1
    return control_task(
        family(env, env_params, observations, actions),
        policies.build(policy, observations, actions, hidden_sizes),
        episode_length=episode_length,
        episodes_per_member=episodes_per_member,
        eval_episodes=eval_episodes,
        action_repeat=action_repeat,
        normalize_observations=normalize_observations,
        reference_size=reference_size,
        chunk_length=chunk_length,
        env=env,
        env_params=env_params,
    )
