"""``brax_task``: a Brax environment and a policy as a control task.

The family adapter (``family``) is all that is Brax's own: an episode's state is Brax's
``State`` (its observation inside), a step is deterministic, and the physics can turn
non-finite (that member's return is NaN). The rollout, the statistics and the policies are
``jaxes.tasks.control``'s.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxes.tasks.brax.envs import action_range, load_env, observation_size
from jaxes.tasks.control import policies
from jaxes.tasks.control.policies import Policy
from jaxes.tasks.control.rollout import Family
from jaxes.tasks.control.spaces import Observations, box
from jaxes.tasks.control.task import ControlTask, check_counts, control_task

# The policies a Brax task names (its observations are vectors: no conv).
POLICIES = {"linear": policies.linear, "mlp": policies.mlp, "vbn_mlp": policies.vbn_mlp}


def family(env) -> Family:
    """Brax's ``env`` as a ``jaxes.tasks.control`` family.

    Example:
      >>> fam = family(load_env("inverted_pendulum"))
      >>> fam.observations.shape, fam.actions.size, fam.can_break
      ((4,), 1, True)
    """

    def reset(key):
        return env.reset(key), None

    def step(shared, state, action, n):
        del shared, n
        nxt = env.step(state, action)
        return nxt, nxt.reward, nxt.done > 0, jnp.zeros((), bool)

    def reference_starts(key, size):
        reset_key, pick_key = jax.random.split(key)
        states = jax.vmap(env.reset)(jax.random.split(reset_key, size))
        return states, None, pick_key

    bounds = action_range(env)
    return Family(
        reset=reset,
        step=step,
        observation=lambda state: state.obs,
        reference_starts=reference_starts,
        observations=Observations((observation_size(env),)),
        actions=box(env.action_size, bounds["action_low"], bounds["action_high"]),
        can_break=True,
    )


def brax_task(
    env_name: str = "inverted_pendulum",
    backend: str = "spring",
    episode_length: int = 1000,
    policy: Policy | nn.Module | str = "linear",
    hidden_sizes: Sequence[int] = (32, 32),
    episodes_per_member: int = 1,
    eval_episodes: int = 8,
    chunk_length: int = 50,
    normalize_observations: bool = True,
    action_repeat: int = 1,
    reference_size: int = 128,
) -> ControlTask:
    """Rolls out a population of policies on a Brax environment.

    Args:
      env_name: any name from ``brax.envs`` (see ``env_names()``).
      backend: ``"generalized"``, ``"positional"``, ``"spring"`` or ``"mjx"``.
      episode_length: env steps per episode (>= 1), whatever ``action_repeat`` is (as Brax's
        ``EpisodeWrapper`` counts them); episodes also end at ``done``.
      policy: ``"linear"`` (the CLI's default), ``"mlp"`` (tanh MLP with ``hidden_sizes``) or
        ``"vbn_mlp"``; a flax module whose output lies in [-1, 1] (scaled to the control
        range); or any ``jaxes.tasks.control.Policy`` (used as it is).
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
        step (``"vbn_mlp"``): ``init`` plays ``reference_size`` episodes holding the middle
        of the action range (what the zero-initialised output does) for up to 32 decisions
        each and keeps one observation of each, at a random step while it was alive. Each
        member's ``prepare`` sees them (normalised like every observation) once per
        evaluation, before its episodes.

    Returns:
      A ``ControlTask`` (``jaxes.tasks.control.control_task``) with ``env`` set.

    Example:
      >>> import jax
      >>> task = brax_task("inverted_pendulum", episode_length=20)
      >>> params = task.init_params(jax.random.key(0))
      >>> state = task.init(jax.random.key(2))
      >>> jax.eval_shape(task.evaluate_policy, jax.random.key(1), params, state).shape
      (8,)
    """
    counts = dict(episodes_per_member=episodes_per_member, eval_episodes=eval_episodes)
    check_counts(episode_length=episode_length, chunk_length=chunk_length, **counts)
    check_counts(action_repeat=action_repeat, reference_size=reference_size)
    env = load_env(env_name, backend)
    fam = family(env)
    if isinstance(policy, str) and policy in POLICIES:
        args = () if policy == "linear" else (tuple(hidden_sizes),)
        policy = POLICIES[policy](
            fam.observations.size, env.action_size, *args, **action_range(env)
        )
    elif isinstance(policy, str):
        names = ", ".join(repr(name) for name in POLICIES)
        raise ValueError(f"policy: expected {names}, a flax Module or a Policy, got {policy!r}")
    else:
        policy = policies.build(policy, fam.observations, fam.actions)
    return control_task(
        fam,
        policy,
        episode_length=episode_length,
        episodes_per_member=episodes_per_member,
        eval_episodes=eval_episodes,
        action_repeat=action_repeat,
        normalize_observations=normalize_observations,
        reference_size=reference_size,
        chunk_length=chunk_length,
        env=env,
    )
