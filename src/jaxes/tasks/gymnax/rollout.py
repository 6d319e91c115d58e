"""A batch of gymnax episodes (members × episodes) as pure functions of explicit arguments.

``rollout(setup, params, episode_keys, stats)`` plays ``E`` episodes of each of ``P`` members:
time runs in ``lax.scan`` chunks of ``setup.chunk`` policy decisions inside a
``lax.while_loop`` that stops as soon as every episode in the batch is over (or after
``setup.decisions``), so a population that loses early costs only the chunks it lived.
gymnax's ``step`` resets an episode by itself once it is done; every step after an episode's
first ``done`` (``terminated`` or ``truncated``) is masked out, so its return is the sum of the
rewards up to and including that step. Where the loop stops changes no return: env step ``n``
draws its key from ``n`` alone. Episode ``e`` resets from ``split(episode_keys[e])[0]`` and its
``n``-th env step draws ``fold_in(split(episode_keys[e])[1], n)``, the same for every member
(common random numbers).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxes.tasks import episodes
from jaxes.tasks.brax import running_stats
from jaxes.tasks.brax.policies import Policy
from jaxes.tasks.gymnax.envs import Observations, encode


class Rollout(NamedTuple):
    """What every rollout of a task holds fixed (Python values and the env: static).

    Attributes:
      env: a gymnax environment.
      env_params: its params (``max_steps_in_episode`` is the episode length).
      policy: the ``Policy`` every member runs; its ``apply`` returns env actions.
      observations: how an observation is fed to the policy.
      normalize_observations: feed the policy ``(obs - mean)/std`` from the statistics.
      episode_length: env steps per episode at most, whatever ``action_repeat`` is.
      action_repeat: env steps each action is held for (frame skip).
      decisions: policy decisions per episode, ``ceil(episode_length / action_repeat)``.
      chunk: decisions per ``lax.scan`` chunk between early-exit checks.
    """

    env: Any
    env_params: Any
    policy: Policy
    observations: Observations
    normalize_observations: bool
    episode_length: int
    action_repeat: int
    decisions: int
    chunk: int


class Episodes(NamedTuple):
    """The loop's carry: a (P, E) batch of episodes part-way through, before decision ``t``
    (a scalar, as is ``chunks``, the chunks run so far)."""

    t: jax.Array
    chunks: jax.Array
    obs: Any
    env_state: Any
    returns: jax.Array
    lengths: jax.Array
    alive: jax.Array
    terminated: jax.Array
    moments: running_stats.BatchMoments


class RolloutInfo(NamedTuple):
    """What one evaluation cost and saw.

    Attributes:
      env_steps: environment steps simulated (the whole batch, every step of every chunk run).
      alive_steps: steps that counted (before or at an episode's first ``done``).
      episodes: episodes played.
      terminated: episodes that ended by gymnax's ``terminated`` (the others were cut by the
        time limit, gymnax's ``truncated``).
    """

    env_steps: jax.Array
    alive_steps: jax.Array
    episodes: jax.Array
    terminated: jax.Array


def flat(setup: Rollout, obs) -> jax.Array:
    """A raw observation as a float32 vector (the statistics' view of it); leading batch axes
    are kept."""
    x = encode(setup.observations, obs)
    shape = setup.observations.shape
    return x.reshape(x.shape[: x.ndim - len(shape)] + (-1,))


def observe(setup: Rollout, obs, stats: running_stats.RunningStats) -> jax.Array:
    """What the policy sees of a raw observation (or a batch of them): encoded, normalised by
    ``stats`` if the task normalises, in ``setup.observations.shape``."""
    x = flat(setup, obs)
    if setup.normalize_observations:
        x = running_stats.normalize(stats, x)
    return x.reshape(x.shape[:-1] + setup.observations.shape)


def act(setup: Rollout, params, obs, stats: running_stats.RunningStats) -> jax.Array:
    """One member's env action for a raw ``obs`` (or a batch of them: leading axes are kept),
    ``params`` already through ``prepared``."""
    return setup.policy.apply(params, observe(setup, obs, stats))


def prepared(setup: Rollout, params, stats: running_stats.RunningStats, reference):
    """``params`` as ``act`` takes them: prepared on the reference batch (flat raw
    observations, leading axis) if the policy needs it (once per member, not per step)."""
    if setup.policy.prepare is None:
        return params
    x = reference
    if setup.normalize_observations:
        x = running_stats.normalize(stats, x)
    return setup.policy.prepare(params, x.reshape((-1,) + setup.observations.shape))


def env_step(setup: Rollout, step_key: jax.Array, n: jax.Array, state, action):
    """Env step ``n`` of the episode whose step key is ``step_key``."""
    return setup.env.step(jax.random.fold_in(step_key, n), state, action, setup.env_params)


def decision(setup: Rollout, params, stats, step_keys: jax.Array, c: Episodes) -> Episodes:
    """Decision ``c.t`` for every episode still running (``action_repeat`` env steps)."""
    t = c.t
    # A last chunk may run past the episode's length: those decisions count nothing.
    active = c.alive & (t < setup.decisions)
    obs = jax.vmap(jax.vmap(lambda o: flat(setup, o)))(c.obs)
    moments = running_stats.add_moments(
        c.moments, running_stats.batch_moments(stats, obs, active, axes=(1,))
    )
    member_act = jax.vmap(lambda p, o: act(setup, p, o, stats), in_axes=(None, 0))
    actions = jax.vmap(member_act)(params, c.obs)

    def repeat(inner, k):
        obs, state, reward, live, terminated, counted = inner
        n = t * setup.action_repeat + k
        on = live & (n < setup.episode_length)
        one = lambda key, s, a: env_step(setup, key, n, s, a)  # noqa: E731
        # Members × episodes; every member plays the episodes' keys.
        step = jax.vmap(jax.vmap(one), in_axes=(None, 0, 0))
        obs, state, r, term, trunc, _ = step(step_keys, state, actions)
        reward = reward + jnp.where(on, r, 0.0)
        terminated = terminated | (on & term)
        live = live & ~(on & (term | trunc))
        return (obs, state, reward, live, terminated, counted + on), None

    zeros = jnp.zeros(active.shape, jnp.float32)
    start = (c.obs, c.env_state, zeros, active, c.terminated, jnp.zeros(active.shape, jnp.int32))
    (obs, state, reward, live, terminated, counted), _ = jax.lax.scan(
        repeat, start, jnp.arange(setup.action_repeat)
    )
    return c._replace(
        t=t + 1,
        obs=obs,
        env_state=state,
        returns=c.returns + reward,
        lengths=c.lengths + counted,
        alive=live,
        terminated=terminated,
        moments=moments,
    )


def running(setup: Rollout, c: Episodes) -> jax.Array:
    """Whether any episode is still going."""
    return (c.t < setup.decisions) & jnp.any(c.alive)


def rollout(setup: Rollout, params, episode_keys: jax.Array, stats, reference=None):
    """Returns, lengths, terminations, observation moments and chunk count of a (P, E) batch.

    ``params`` holds ``P`` members (a leading axis); every member plays the ``E`` episodes of
    ``episode_keys``. ``reference`` is the batch a policy with a ``prepare`` step is prepared
    on. Moments are summed per member over its episodes.
    """
    num_members = jax.tree.leaves(params)[0].shape[0]
    shape = (num_members, episode_keys.shape[0])
    params = jax.vmap(lambda p: prepared(setup, p, stats, reference))(params)
    reset_keys, step_keys = jnp.moveaxis(jax.vmap(jax.random.split)(episode_keys), 1, 0)
    obs, states = jax.vmap(setup.env.reset, in_axes=(0, None))(reset_keys, setup.env_params)
    obs, states = jax.tree.map(lambda x: jnp.broadcast_to(x, shape[:1] + x.shape), (obs, states))
    carry = Episodes(
        t=jnp.zeros((), jnp.int32),
        chunks=jnp.zeros((), jnp.int32),
        obs=obs,
        env_state=states,
        returns=jnp.zeros(shape, jnp.float32),
        lengths=jnp.zeros(shape, jnp.int32),
        alive=jnp.ones(shape, bool),
        terminated=jnp.zeros(shape, bool),
        moments=running_stats.zero_moments(setup.observations.size, shape[:1]),
    )
    out = episodes.in_chunks(
        functools.partial(decision, setup, params, stats, step_keys),
        functools.partial(running, setup),
        carry,
        setup.chunk,
    )
    return out.returns, out.lengths, out.terminated, out.moments, out.chunks


def rollout_info(
    setup: Rollout, lengths: jax.Array, terminated: jax.Array, chunks: jax.Array
) -> RolloutInfo:
    """What a rollout with these episode ``lengths`` and ``terminated`` flags, stopped after
    ``chunks`` chunks, cost.

    Example:
      >>> import jax.numpy as jnp
      >>> setup = Rollout(None, None, None, None, False, 10, 2, 5, 3)
      >>> lengths, terminated = jnp.array([[7, 10]]), jnp.array([[True, False]])
      >>> [int(x) for x in rollout_info(setup, lengths, terminated, jnp.int32(2))]
      [24, 17, 2, 1]
    """
    return RolloutInfo(
        env_steps=chunks * setup.chunk * setup.action_repeat * lengths.size,
        alive_steps=jnp.sum(lengths),
        episodes=jnp.int32(lengths.size),
        terminated=jnp.sum(terminated.astype(jnp.int32)),
    )
