"""A batch of Brax episodes (members × episodes) as pure functions of explicit arguments.

``rollout(setup, params, reset_keys, stats)`` plays ``E`` episodes of each of ``P`` members:
time runs in ``lax.scan`` chunks of ``setup.chunk`` decisions inside a ``lax.while_loop`` that
stops as soon as every episode is over. Rewards after ``done`` are masked out; a member whose
physics turns non-finite gets a NaN return. Observation moments are summed per member (over
its episodes), so any split of the population over devices adds them up in the same order.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxes import collectives
from jaxes.tasks import episodes
from jaxes.tasks.brax import running_stats
from jaxes.tasks.brax.policies import Policy


class Rollout(NamedTuple):
    """What every rollout of a task holds fixed (Python values and the env: static).

    Attributes:
      env: a Brax env (``reset(key)``, ``step(state, action)``).
      policy: the ``Policy`` every member runs.
      normalize_observations: feed the policy ``(obs - mean)/std`` from the statistics.
      obs_size: the length of an observation.
      episode_length: env steps per episode, whatever ``action_repeat`` is.
      action_repeat: env steps each action is held for (frame skip).
      chunk: decisions per ``lax.scan`` chunk between early-exit checks.
    """

    env: Any
    policy: Policy
    normalize_observations: bool
    obs_size: int
    episode_length: int
    action_repeat: int
    chunk: int


class Episodes(NamedTuple):
    """The loop's carry: a (P, E) batch of episodes part-way through."""

    env_state: Any
    t: jax.Array
    returns: jax.Array
    lengths: jax.Array
    alive: jax.Array
    moments: running_stats.BatchMoments
    chunks: jax.Array


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


def observe(setup: Rollout, obs: jax.Array, stats: running_stats.RunningStats) -> jax.Array:
    """What the policy sees of ``obs``: normalised by ``stats`` if the task normalises.

    Example:
      >>> import jax.numpy as jnp
      >>> setup = Rollout(None, None, True, 2, 10, 1, 10)
      >>> stats = running_stats.RunningStats(jnp.float32(4), jnp.ones(2), 4 * jnp.ones(2))
      >>> observe(setup, jnp.array([3.0, 1.0]), stats).tolist()
      [2.0, 0.0]
    """
    return running_stats.normalize(stats, obs) if setup.normalize_observations else obs


def act(setup: Rollout, params, obs: jax.Array, stats: running_stats.RunningStats) -> jax.Array:
    """One member's action for ``obs`` (``params`` already through ``prepared``)."""
    return setup.policy.apply(params, observe(setup, obs, stats))


def prepared(setup: Rollout, params, stats: running_stats.RunningStats, reference):
    """``params`` as ``act`` takes them: prepared on the reference batch if the policy needs it
    (once per member, not per step)."""
    if setup.policy.prepare is None:
        return params
    return setup.policy.prepare(params, observe(setup, reference, stats))


def broken(state) -> jax.Array:
    """Where the physics turned non-finite (reward or observation)."""
    return ~(jnp.isfinite(state.reward) & jnp.all(jnp.isfinite(state.obs), axis=-1))


def _members_by_episodes(fn):
    """``fn(member_params, env_state)`` over members × episodes (params vary over members)."""
    return jax.vmap(jax.vmap(fn, in_axes=(None, 0)), in_axes=(0, 0))


def held(setup: Rollout, params, stats, env_state, active: jax.Array, t: jax.Array):
    """``action_repeat`` steps of one decision: the next state, the summed reward (NaN if the
    physics broke), whether the episode ended, and the steps that counted."""
    actions = _members_by_episodes(lambda p, state: act(setup, p, state.obs, stats))(
        params, env_state
    )
    hold = jax.vmap(jax.vmap(setup.env.step))
    shape = active.shape

    def repeat(inner, k):
        state, reward, live, counted = inner
        on = live & (t + k < setup.episode_length)
        nxt = hold(state, actions)
        reward = jnp.where(on, reward + nxt.reward, reward)
        reward = jnp.where(on & broken(nxt), jnp.nan, reward)
        live = live & ~(on & ((nxt.done > 0) | broken(nxt)))
        return (nxt, reward, live, counted + on), None

    start = (env_state, jnp.zeros(shape, jnp.float32), active, jnp.zeros(shape, jnp.int32))
    (nxt, reward, live, counted), _ = jax.lax.scan(repeat, start, jnp.arange(setup.action_repeat))
    return nxt, reward, active & ~live, counted


def decision(setup: Rollout, params, stats, c: Episodes) -> Episodes:
    """One policy decision for every episode still running (``action_repeat`` env steps)."""
    active = c.alive & (c.t < setup.episode_length)
    moments = running_stats.add_moments(
        c.moments,
        running_stats.batch_moments(stats, c.env_state.obs, active, axes=(1,)),
    )
    if setup.action_repeat == 1:

        def step(member_params, state):
            return setup.env.step(state, act(setup, member_params, state.obs, stats))

        nxt = collectives.varying(_members_by_episodes(step)(params, c.env_state))
        bad = broken(nxt)
        returns = c.returns + jnp.where(active, nxt.reward, 0.0)
        returns = jnp.where(active & bad, jnp.nan, returns)
        ended, counted = (nxt.done > 0) | bad, active
    else:
        nxt, reward, ended, counted = held(setup, params, stats, c.env_state, active, c.t)
        nxt = collectives.varying(nxt)
        returns = c.returns + jnp.where(active, reward, 0.0)
    return c._replace(
        env_state=nxt,
        t=c.t + setup.action_repeat,
        returns=returns,
        lengths=c.lengths + counted,
        alive=c.alive & ~(active & ended),
        moments=moments,
    )


def running(setup: Rollout, c: Episodes) -> jax.Array:
    """Whether any episode is still going."""
    return (c.t < setup.episode_length) & jnp.any(c.alive)


def start(setup: Rollout, env_states, shape: tuple[int, int]) -> Episodes:
    """The carry before the first decision, from the batch's start states."""
    return Episodes(
        env_state=env_states,
        t=jnp.zeros((), jnp.int32),
        returns=jnp.zeros(shape, jnp.float32),
        lengths=jnp.zeros(shape, jnp.int32),
        alive=jnp.ones(shape, bool),
        moments=running_stats.zero_moments(setup.obs_size, (shape[0],)),
        chunks=jnp.zeros((), jnp.int32),
    )


def rollout(setup: Rollout, params, reset_keys: jax.Array, stats, reference=None):
    """Returns, lengths, observation moments and chunk count of a (P, E) batch.

    ``params`` holds ``P`` members (a leading axis); every member plays the ``E`` episodes
    that start from ``reset_keys`` (common random numbers). ``reference`` is the batch a
    policy with a ``prepare`` step is prepared on.
    """
    num_members = jax.tree.leaves(params)[0].shape[0]
    params = jax.vmap(lambda p: prepared(setup, p, stats, reference))(params)
    starts = jax.vmap(setup.env.reset)(reset_keys)
    starts = jax.tree.map(lambda x: jnp.broadcast_to(x, (num_members,) + x.shape), starts)
    carry = start(setup, starts, (num_members, reset_keys.shape[0]))
    out = episodes.in_chunks(
        functools.partial(decision, setup, params, stats),
        functools.partial(running, setup),
        carry,
        setup.chunk,
    )
    return out.returns, out.lengths, out.moments, out.chunks


def rollout_info(setup: Rollout, lengths: jax.Array, chunks: jax.Array) -> RolloutInfo:
    """What a rollout with these episode ``lengths`` and ``chunks`` cost.

    Example:
      >>> import jax.numpy as jnp
      >>> setup = Rollout(None, None, True, 4, 100, 2, 10)
      >>> info = rollout_info(setup, jnp.array([[7, 20], [3, 4]]), jnp.int32(1))
      >>> int(info.env_steps), int(info.alive_steps), int(info.episodes)
      (80, 34, 4)
    """
    return RolloutInfo(
        env_steps=chunks * setup.chunk * setup.action_repeat * lengths.size,
        alive_steps=jnp.sum(lengths),
        episodes=jnp.int32(lengths.size),
    )
