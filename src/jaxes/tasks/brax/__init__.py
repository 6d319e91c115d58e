"""Brax physics as a fitness source: population in, episode returns out.

Members are ``vmap``-ed, and so are several episodes per member; time runs in ``lax.scan``
chunks inside a ``lax.while_loop`` that stops as soon as every episode in the batch is over,
so a population that falls over early costs only the steps it lived (``info.env_steps``).
Rewards after ``done`` are masked out. A member whose physics turns non-finite gets a NaN
return, which every fitness shaping ranks worst.

Observations are normalised with running statistics kept in the task state. They are frozen
during a generation (every member sees the same normalisation) and then merged with the
moments of every observation an alive episode saw. ``evaluate`` returns those moments per
member (``P × (2·obs + 1)`` floats) and ``update`` sums them in member order, so a population
evaluated in chunks or split over devices gives every device the same statistics.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxes import collectives
from jaxes.tasks.brax import policies, running_stats
from jaxes.tasks.brax.envs import (  # noqa: F401 - re-exported: where users found them
    BACKENDS,
    action_range,
    env_names,
    load_env,
    observation_size,
    supported_backends,
)
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


class RolloutInfo(NamedTuple):
    """What one evaluation cost and saw.

    Attributes:
      env_steps: environment steps simulated (the whole batch, every chunk that ran).
      alive_steps: steps that counted (inside an episode that had not ended); divided by
        ``episodes`` it is the mean episode length.
      episodes: episodes played.
    """

    env_steps: jax.Array
    alive_steps: jax.Array
    episodes: jax.Array


def _reference(task_state):
    return getattr(task_state, "reference", None)


@dataclasses.dataclass(frozen=True)
class BraxTask(Task):
    """A ``jaxes.types.Task`` that also exposes its Brax ``env`` and ``policy``."""

    env: Any = None
    policy: policies.Policy | None = None


class _Carry(NamedTuple):
    env_state: object
    t: jax.Array
    returns: jax.Array
    lengths: jax.Array
    alive: jax.Array
    moments: running_stats.BatchMoments
    chunks: jax.Array


def brax_task(
    env_name: str = "inverted_pendulum",
    backend: str = "spring",
    episode_length: int = 1000,
    policy: policies.Policy | str = "linear",
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
      policy: ``"linear"`` (the CLI's default), ``"mlp"`` (tanh MLP with ``hidden_sizes``), a
        flax module whose
        output lies in [-1, 1] (scaled to the control range by ``policies.from_module``), or
        any ``jaxes.policies.Policy`` (used as it is).
      hidden_sizes: hidden layer widths of the ``"mlp"`` policy.
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
    for name, value in (
        ("episode_length", episode_length),
        ("episodes_per_member", episodes_per_member),
        ("eval_episodes", eval_episodes),
        ("chunk_length", chunk_length),
        ("action_repeat", action_repeat),
        ("reference_size", reference_size),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
    env = load_env(env_name, backend)
    obs_size = observation_size(env)
    if policy == "mlp":
        policy = policies.mlp(obs_size, env.action_size, hidden_sizes, **action_range(env))
    elif policy == "linear":
        policy = policies.linear(obs_size, env.action_size, **action_range(env))
    elif policy == "vbn_mlp":
        policy = policies.vbn_mlp(obs_size, env.action_size, hidden_sizes, **action_range(env))
    elif isinstance(policy, nn.Module):
        policy = policies.from_module(policy, obs_size, env.action_size, **action_range(env))
    elif not isinstance(policy, policies.Policy):
        raise ValueError(
            f"policy: expected 'mlp', 'linear', 'vbn_mlp', a flax Module or a Policy, got "
            f"{policy!r}"
        )
    decisions = -(-episode_length // action_repeat)  # per episode, the last may be cut short
    chunk = min(chunk_length, decisions)

    def init(key):
        stats = running_stats.init(obs_size)
        if policy.prepare is None:
            return BraxTaskState(stats)
        return VBNTaskState(stats, reference_batch(key))

    def reference_batch(key):
        """One observation from each of ``reference_size`` episodes of the initial policy."""
        reset_key, pick_key = jax.random.split(key)
        states = jax.vmap(env.reset)(jax.random.split(reset_key, reference_size))
        steps = min(32, decisions)
        picks = jax.random.randint(pick_key, (reference_size,), 0, steps)
        bounds = action_range(env)
        middle = (jnp.asarray(bounds["action_low"]) + jnp.asarray(bounds["action_high"])) / 2
        actions = jnp.broadcast_to(middle, (reference_size, env.action_size))

        def step(carry, t):
            state, alive, kept = carry
            kept = jnp.where((alive & (t <= picks))[:, None], state.obs, kept)
            nxt = jax.vmap(env.step)(state, actions)
            return (nxt, alive & (nxt.done == 0), kept), None

        start = (states, jnp.ones(reference_size, bool), states.obs)
        (_, _, kept), _ = jax.lax.scan(step, start, jnp.arange(steps))
        return kept

    def init_params(key):
        return policy.init(key)

    def normalized(obs, stats):
        return running_stats.normalize(stats, obs) if normalize_observations else obs

    def ready(params, task_state_stats, reference):
        """``params`` as ``apply`` takes them: prepared on the reference batch if the policy
        needs it (once per member, not per step)."""
        if policy.prepare is None:
            return params
        return policy.prepare(params, normalized(reference, task_state_stats))

    def act_with(params, obs, stats):
        return policy.apply(params, normalized(obs, stats))

    def act(params, obs, task_state: BraxTaskState):
        params = ready(params, task_state.obs_stats, _reference(task_state))
        return act_with(params, obs, task_state.obs_stats)

    def rollout(params, reset_keys, stats, reference=None):
        """Returns, lengths, observation moments and chunk count of a (P, E) batch."""
        num_members = jax.tree.leaves(params)[0].shape[0]
        params = jax.vmap(lambda p: ready(p, stats, reference))(params)
        starts = jax.vmap(env.reset)(reset_keys)
        starts = jax.tree.map(lambda x: jnp.broadcast_to(x, (num_members,) + x.shape), starts)
        shape = (num_members, reset_keys.shape[0])

        def batched(fn):  # members × episodes; the params vary over members only
            return jax.vmap(jax.vmap(fn, in_axes=(None, 0)), in_axes=(0, 0))

        step_batch = batched(
            lambda member_params, state: env.step(state, act_with(member_params, state.obs, stats))
        )
        act_batch = batched(lambda member_params, state: act_with(member_params, state.obs, stats))
        hold_batch = jax.vmap(jax.vmap(env.step))

        def broken(state):
            return ~(jnp.isfinite(state.reward) & jnp.all(jnp.isfinite(state.obs), axis=-1))

        def held(env_state, active, t):
            """``action_repeat`` steps of one decision: the next state, the summed reward
            (NaN if the physics broke), whether the episode ended, and the steps that counted."""
            actions = act_batch(params, env_state)

            def repeat(inner, k):
                state, reward, live, counted = inner
                on = live & (t + k < episode_length)
                nxt = hold_batch(state, actions)
                reward = jnp.where(on, reward + nxt.reward, reward)
                reward = jnp.where(on & broken(nxt), jnp.nan, reward)
                live = live & ~(on & ((nxt.done > 0) | broken(nxt)))
                return (nxt, reward, live, counted + on), None

            start = (env_state, jnp.zeros(shape, jnp.float32), active, jnp.zeros(shape, jnp.int32))
            (nxt, reward, live, counted), _ = jax.lax.scan(repeat, start, jnp.arange(action_repeat))
            return nxt, reward, active & ~live, counted

        def one_step(c: _Carry, _):
            active = c.alive & (c.t < episode_length)
            # Per-member moments (summed over episodes), so any split of the population over
            # devices adds them up in the same order.
            moments = running_stats.add_moments(
                c.moments,
                running_stats.batch_moments(stats, c.env_state.obs, active, axes=(1,)),
            )
            if action_repeat == 1:
                nxt = collectives.varying(step_batch(params, c.env_state))
                bad = broken(nxt)
                returns = c.returns + jnp.where(active, nxt.reward, 0.0)
                returns = jnp.where(active & bad, jnp.nan, returns)
                ended, counted = (nxt.done > 0) | bad, active
            else:
                nxt, reward, ended, counted = held(c.env_state, active, c.t)
                nxt = collectives.varying(nxt)
                returns = c.returns + jnp.where(active, reward, 0.0)
            return c._replace(
                env_state=nxt,
                t=c.t + action_repeat,
                returns=returns,
                lengths=c.lengths + counted,
                alive=c.alive & ~(active & ended),
                moments=moments,
            ), None

        def run_chunk(c: _Carry):
            c, _ = jax.lax.scan(one_step, c, None, length=chunk)
            return c._replace(chunks=c.chunks + 1)

        def keep_going(c: _Carry):
            return (c.t < episode_length) & jnp.any(c.alive)

        carry = _Carry(
            env_state=starts,
            t=jnp.zeros((), jnp.int32),
            returns=jnp.zeros(shape, jnp.float32),
            lengths=jnp.zeros(shape, jnp.int32),
            alive=jnp.ones(shape, bool),
            moments=running_stats.zero_moments(obs_size, (num_members,)),
            chunks=jnp.zeros((), jnp.int32),
        )
        # Under shard_map the carry starts the same on every device and becomes each device's own
        # (its members act): typed varying from the start, so the loop keeps one type.
        out = jax.lax.while_loop(keep_going, run_chunk, collectives.varying(carry))
        return out.returns, out.lengths, out.moments, out.chunks

    def evaluate(key, members, task_state: BraxTaskState):
        reset_keys = jax.random.split(key, episodes_per_member)
        returns, lengths, moments, chunks = rollout(
            members, reset_keys, task_state.obs_stats, _reference(task_state)
        )
        info = RolloutInfo(
            env_steps=chunks * chunk * action_repeat * lengths.size,
            alive_steps=jnp.sum(lengths),
            episodes=jnp.int32(lengths.size),
        )
        return jnp.mean(returns, axis=1), moments, info

    def update(task_state: BraxTaskState, moments):
        if not normalize_observations:
            return task_state
        return task_state._replace(
            obs_stats=running_stats.merge(task_state.obs_stats, running_stats.total(moments))
        )

    def evaluate_policy(key, params, task_state: BraxTaskState):
        single = jax.tree.map(lambda x: x[None], params)
        returns, _, _, _ = rollout(
            single, jax.random.split(key, eval_episodes), task_state.obs_stats,
            _reference(task_state),
        )  # fmt: skip
        return returns[0]

    return BraxTask(
        init=init,
        evaluate=evaluate,
        evaluate_policy=evaluate_policy,
        init_params=init_params,
        update=update,
        act=act,
        env=env,
        policy=policy,
    )
