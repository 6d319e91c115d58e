"""A batch of episodes (members × episodes) as pure functions of explicit arguments.

``rollout(setup, act, members, episode_keys, stats)`` plays ``E`` episodes of each of ``P``
members: time runs in ``lax.scan`` chunks of ``setup.chunk`` policy decisions inside a
``lax.while_loop`` that stops as soon as every episode in the batch is over (or after
``setup.decisions``), so a population that fails early costs only the chunks it lived. Each
decision holds its action for ``action_repeat`` env steps. Every step after an episode's end
(terminated, truncated, or at ``episode_length`` env steps) is masked out, so its return is
the sum of the rewards up to and including that step. Where the physics of a family that can
break turns non-finite, the member's return is NaN, which every fitness shaping ranks worst.
Observation moments are summed per member over its episodes, so any split of the population
over devices adds them up in the same order.

Everything an environment family does differently is its ``Family``: reset, step and
observation of one episode, its spaces, and how the reference episodes start. Every member
plays the same episodes (common random numbers): episode ``e`` starts from ``reset(key_e)``,
and its ``n``-th env step gets ``n``.

A member is whatever ``act(member, obs)`` takes: its params (``policy_act``), or, for
low-rank noise, its displacement from a shared centre (``factored_act``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxes import collectives, factored
from jaxes.factored.lowrank import is_factored
from jaxes.tasks.control import episodes, running_stats
from jaxes.tasks.control.policies import VBN_STATS, Policy
from jaxes.tasks.control.spaces import Actions, Observations, encode, held_action


class Family(NamedTuple):
    """One environment family, as the rollout sees it (Python functions: static).

    Attributes:
      reset: ``reset(key) -> (state, shared)``: one episode's start, and what every member
        playing that episode shares at each step (gymnax's step key; Brax: ``None``).
      step: ``step(shared, state, action, n) -> (state, reward, terminated, truncated)``:
        env step ``n`` of one episode.
      observation: ``observation(state)``, the raw observation.
      reference_starts: ``reference_starts(key, size) -> (states, shared, pick_key)``: the
        starts of the reference episodes and the key that picks one step of each.
      observations: what the policy reads.
      actions: what the policy writes.
      can_break: whether a step can turn non-finite (physics): such a member's return is NaN
        and its episode ends.
    """

    reset: Callable
    step: Callable
    observation: Callable
    reference_starts: Callable
    observations: Observations
    actions: Actions
    can_break: bool = False


class Rollout(NamedTuple):
    """What every rollout of a task holds fixed (Python values and the env: static).

    Attributes:
      family: the environment family.
      policy: the ``Policy`` every member runs.
      normalize_observations: feed the policy ``(obs - mean)/std`` from the statistics.
      episode_length: env steps per episode at most, whatever ``action_repeat`` is.
      action_repeat: env steps each action is held for (frame skip).
      decisions: policy decisions per episode, ``ceil(episode_length / action_repeat)``.
      chunk: decisions per ``lax.scan`` chunk between early-exit checks.
    """

    family: Family
    policy: Policy
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
    state: Any
    returns: jax.Array
    lengths: jax.Array
    alive: jax.Array
    terminated: jax.Array
    moments: running_stats.BatchMoments


class RolloutInfo(NamedTuple):
    """What one evaluation cost and saw.

    Attributes:
      env_steps: environment steps simulated (the whole batch, every step of every chunk run).
      alive_steps: steps that counted (before or at an episode's end); divided by
        ``episodes`` it is the mean episode length.
      episodes: episodes played.
      terminated: episodes that ended by the environment's own end (the others were cut by
        the time limit).
    """

    env_steps: jax.Array
    alive_steps: jax.Array
    episodes: jax.Array
    terminated: jax.Array


def features(setup: Rollout, obs) -> jax.Array:
    """A raw observation as a float32 vector (the statistics' view of it); leading batch axes
    are kept."""
    spec = setup.family.observations
    x = encode(spec, obs)
    return x.reshape(x.shape[: x.ndim - len(spec.shape)] + (-1,))


def observe(setup: Rollout, x: jax.Array, stats: running_stats.RunningStats) -> jax.Array:
    """What the policy sees of observation vectors ``x`` (``features``): normalised by
    ``stats`` if the task normalises, in the policy's input shape.

    Example:
      >>> import jax.numpy as jnp
      >>> family = Family(None, None, None, None, Observations((2,)), None)
      >>> setup = Rollout(family, None, True, 10, 1, 10, 10)
      >>> stats = running_stats.RunningStats(jnp.float32(4), jnp.ones(2), 4 * jnp.ones(2))
      >>> observe(setup, jnp.array([3.0, 1.0]), stats).tolist()
      [2.0, 0.0]
    """
    if setup.normalize_observations:
        x = running_stats.normalize(stats, x)
    return x.reshape(x.shape[:-1] + setup.family.observations.shape)


def policy_act(setup: Rollout) -> Callable:
    """``act(params, x)`` for members given as params (already through ``prepare``)."""
    return setup.policy.apply


def prepared(setup: Rollout, params, stats: running_stats.RunningStats, reference):
    """``params`` as ``policy_act`` takes them: prepared on the reference batch (observation
    vectors, leading axis) if the policy needs it (once per member, not per step)."""
    if setup.policy.prepare is None:
        return params
    return setup.policy.prepare(params, observe(setup, reference, stats))


def factored_act(setup: Rollout, centre) -> Callable:
    """``act((own, delta), x)`` for members given as displacements from ``centre``: ``own``
    holds the member's leaves whose displacement is dense, already added (``None`` where it
    is factored), ``delta`` the factored ones (``None`` elsewhere), which
    ``jaxes.factored.apply`` adds inside the layers."""
    policy = setup.policy

    def act(member, x):
        own, delta = member
        return policy.head(factored.apply(policy.module, _merged(centre, own), delta, x))

    return act


def factored_members(setup: Rollout, centre, deltas, stats, reference):
    """Members ``(own, delta)`` as ``factored_act`` takes them, from the centre and the
    population's displacements (a leading member axis), prepared on the reference batch if
    the policy needs it (its statistics join ``own``)."""

    def one(delta):
        own = jax.tree.map(
            lambda c, d: None if is_factored(d) else factored.member(c, d),
            centre,
            delta,
            is_leaf=is_factored,
        )
        only_factored = jax.tree.map(
            lambda d: d if is_factored(d) else None, delta, is_leaf=is_factored
        )
        if setup.policy.prepare is None:
            return own, only_factored
        x = observe(setup, reference, stats)
        _, vbn = factored.apply(
            setup.policy.module, _merged(centre, own), only_factored, x, mutable=[VBN_STATS]
        )
        return {**own, **vbn}, only_factored

    return jax.vmap(one)(deltas)


def _merged(centre, own):
    """The centre's collections with the member's own leaves in place of its, plus the
    member's own collections (its VBN statistics)."""
    out = dict(own)
    for name, tree in centre.items():
        out[name] = jax.tree.map(
            lambda o, c: c if o is None else o, own[name], tree, is_leaf=lambda x: x is None
        )
    return out


def _members_by_episodes(fn):
    """``fn(member, x)`` over members × episodes (members vary over the first axis)."""
    return jax.vmap(jax.vmap(fn, in_axes=(None, 0)), in_axes=(0, 0))


def broken(reward: jax.Array, x: jax.Array) -> jax.Array:
    """Where a step turned non-finite (reward or observation vector)."""
    return ~(jnp.isfinite(reward) & jnp.all(jnp.isfinite(x), axis=-1))


def decision(setup: Rollout, act, members, stats, shared, c: Episodes) -> Episodes:
    """Decision ``c.t`` for every episode still running (``action_repeat`` env steps)."""
    family, t = setup.family, c.t
    # A last chunk may run past the episode's length: those decisions count nothing.
    active = c.alive & (t < setup.decisions)
    x = features(setup, jax.vmap(jax.vmap(family.observation))(c.state))
    moments = running_stats.add_moments(
        c.moments, running_stats.batch_moments(stats, x, active, axes=(1,))
    )
    actions = _members_by_episodes(lambda m, o: act(m, observe(setup, o, stats)))(members, x)
    # Members × episodes; every member plays the episodes' shared values.
    step = jax.vmap(jax.vmap(family.step, in_axes=(0, 0, 0, None)), in_axes=(None, 0, 0, None))

    def repeat(inner, k):
        state, reward, live, terminated, counted = inner
        n = t * setup.action_repeat + k
        on = live & (n < setup.episode_length)
        state, r, term, trunc = step(shared, state, actions, n)
        state = collectives.varying(state)
        reward = reward + jnp.where(on, r, 0.0)
        ends = term | trunc
        if family.can_break:
            bad = broken(r, features(setup, jax.vmap(jax.vmap(family.observation))(state)))
            reward = jnp.where(on & bad, jnp.nan, reward)
            ends = ends | bad
        terminated = terminated | (on & term)
        live = live & ~(on & ends)
        return (state, reward, live, terminated, counted + on), None

    zeros = jnp.zeros(active.shape, jnp.float32)
    start = (c.state, zeros, active, c.terminated, jnp.zeros(active.shape, jnp.int32))
    if setup.action_repeat == 1:
        (state, reward, live, terminated, counted), _ = repeat(start, 0)
    else:
        (state, reward, live, terminated, counted), _ = jax.lax.scan(
            repeat, start, jnp.arange(setup.action_repeat)
        )
    return c._replace(
        t=t + 1,
        state=state,
        returns=c.returns + reward,
        lengths=c.lengths + counted,
        alive=live,
        terminated=terminated,
        moments=moments,
    )


def running(setup: Rollout, c: Episodes) -> jax.Array:
    """Whether any episode is still going."""
    return (c.t < setup.decisions) & jnp.any(c.alive)


def rollout(setup: Rollout, act, members, episode_keys: jax.Array, stats):
    """Returns, lengths, terminations, observation moments and chunk count of a (P, E) batch.

    ``members`` holds ``P`` members as ``act`` takes them (a leading axis; already through
    ``prepared``); every member plays the ``E`` episodes of ``episode_keys``.
    """
    num_members = jax.tree.leaves(members)[0].shape[0]
    shape = (num_members, episode_keys.shape[0])
    states, shared = jax.vmap(setup.family.reset)(episode_keys)
    states = jax.tree.map(lambda x: jnp.broadcast_to(x, shape[:1] + x.shape), states)
    carry = Episodes(
        t=jnp.zeros((), jnp.int32),
        chunks=jnp.zeros((), jnp.int32),
        state=states,
        returns=jnp.zeros(shape, jnp.float32),
        lengths=jnp.zeros(shape, jnp.int32),
        alive=jnp.ones(shape, bool),
        terminated=jnp.zeros(shape, bool),
        moments=running_stats.zero_moments(setup.family.observations.size, shape[:1]),
    )
    out = episodes.in_chunks(
        functools.partial(decision, setup, act, members, stats, shared),
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
      >>> setup = Rollout(None, None, False, 10, 2, 5, 3)
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


def reference_batch(setup: Rollout, key: jax.Array, size: int, steps: int) -> jax.Array:
    """One observation vector from each of ``size`` episodes that hold one action (action 0;
    the middle of a box), at a random one of their first ``steps`` decisions while alive."""
    family = setup.family
    states, shared, pick_key = family.reference_starts(key, size)
    picks = jax.random.randint(pick_key, (size,), 0, steps)
    held = held_action(family.actions)
    observed = jax.vmap(lambda s: features(setup, family.observation(s)))
    one = jax.vmap(family.step, in_axes=(0, 0, None, None))

    def step(carry, t):
        state, alive, kept = carry
        kept = jnp.where((alive & (t <= picks))[:, None], observed(state), kept)
        state, _, term, trunc = one(shared, state, held, t * setup.action_repeat)
        return (state, alive & ~(term | trunc), kept), None

    start = (states, jnp.ones(size, bool), observed(states))
    (_, _, kept), _ = jax.lax.scan(step, start, jnp.arange(steps))
    return kept
