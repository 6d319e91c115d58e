"""``control_task``: an environment family, a policy and episode settings as a
``jaxes.types.Task``.

The task's state holds the observation statistics (and, for a policy with a ``prepare`` step,
its reference batch); ``rollout.rollout`` plays the episodes. With low-rank noise the task
also evaluates members factored (``evaluate_factored``): the centre's forward pass plus each
member's rank-``r`` term inside every dense and convolutional layer, so no member's weights
are built.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxes.checks import check_int
from jaxes.tasks.control import running_stats
from jaxes.tasks.control.policies import Policy
from jaxes.tasks.control.rollout import (
    Family,
    Rollout,
    factored_act,
    factored_members,
    features,
    observe,
    policy_act,
    prepared,
    reference_batch,
    rollout,
    rollout_info,
)
from jaxes.types import Task


class TaskState(NamedTuple):
    """Observation statistics, merged over every generation's alive steps."""

    obs_stats: running_stats.RunningStats


class VBNTaskState(NamedTuple):
    """``TaskState`` plus the reference batch of observation vectors of a policy with virtual
    batch normalisation (collected once by ``init``, kept in checkpoints). A type of its own,
    so other runs' checkpoints keep their structure."""

    obs_stats: running_stats.RunningStats
    reference: jax.Array


def reference(task_state):
    """The reference batch of a ``VBNTaskState``; ``None`` for a ``TaskState``."""
    return getattr(task_state, "reference", None)


@dataclasses.dataclass(frozen=True)
class ControlTask(Task):
    """A ``jaxes.types.Task`` that also exposes its ``env`` (and gymnax's ``env_params``),
    its ``policy`` and its ``family`` (whose ``observations`` and ``actions`` the policy
    reads and writes)."""

    env: Any = None
    env_params: Any = None
    policy: Policy | None = None
    family: Family | None = None


def check_counts(**counts) -> None:
    """Each count is an int >= 1, or one ``ValueError`` line names it."""
    for name, value in counts.items():
        check_int(name, value, 1)


def control_task(
    family: Family,
    policy: Policy,
    *,
    episode_length: int,
    episodes_per_member: int = 1,
    eval_episodes: int = 8,
    action_repeat: int = 1,
    normalize_observations: bool = True,
    reference_size: int = 128,
    chunk_length: int = 50,
    task_type: type[ControlTask] = ControlTask,
    **fields,
) -> ControlTask:
    """Plays a population of deterministic policies on one environment family.

    The arguments are those of ``jaxes.tasks.brax.brax_task`` and
    ``jaxes.tasks.gymnax.gymnax_task``, which build the ``family`` and the ``policy``;
    ``task_type`` and ``fields`` are the task class they return and its extra fields.

    Returns:
      A task whose ``evaluate(key, members, state)`` returns the mean episode return per
      member (maximised), each member's observation moments and a ``RolloutInfo``, and
      ``update(state, moments)`` merges every member's moments into the statistics.
      Where the policy is a flax module, ``evaluate_factored(key, centre, deltas, state)``
      evaluates members from the centre and their displacements, factored where they are.
    """
    # Longer than 60 lines because the Task's methods are closures over the checked
    # settings and the rollout; split apart, each would take them all as arguments.
    check_counts(
        episode_length=episode_length,
        episodes_per_member=episodes_per_member,
        eval_episodes=eval_episodes,
        action_repeat=action_repeat,
        reference_size=reference_size,
        chunk_length=chunk_length,
    )
    decisions = -(-episode_length // action_repeat)  # per episode, the last may be cut short
    setup = Rollout(
        family=family,
        policy=policy,
        normalize_observations=bool(normalize_observations),
        episode_length=episode_length,
        action_repeat=action_repeat,
        decisions=decisions,
        chunk=min(chunk_length, decisions),
    )
    size = family.observations.size

    def init(key):
        stats = running_stats.init(size)
        if policy.prepare is None:
            return TaskState(stats)
        return VBNTaskState(stats, reference_batch(setup, key, reference_size, min(32, decisions)))

    def played(key, act, members, task_state):
        keys = jax.random.split(key, episodes_per_member)
        returns, lengths, terminated, moments, chunks = rollout(
            setup, act, members, keys, task_state.obs_stats
        )
        return jnp.mean(returns, axis=1), moments, rollout_info(setup, lengths, terminated, chunks)

    def evaluate(key, members, task_state):
        stats, ref = task_state.obs_stats, reference(task_state)
        members = jax.vmap(lambda p: prepared(setup, p, stats, ref))(members)
        return played(key, policy_act(setup), members, task_state)

    def evaluate_factored(key, centre, deltas, task_state):
        stats, ref = task_state.obs_stats, reference(task_state)
        members = factored_members(setup, centre, deltas, stats, ref)
        return played(key, factored_act(setup, centre), members, task_state)

    def update(task_state, moments):
        if not setup.normalize_observations:
            return task_state
        return task_state._replace(
            obs_stats=running_stats.merge(task_state.obs_stats, running_stats.total(moments))
        )

    def evaluation(key, params, task_state):
        stats, ref = task_state.obs_stats, reference(task_state)
        single = jax.tree.map(lambda x: x[None], params)
        single = jax.vmap(lambda p: prepared(setup, p, stats, ref))(single)
        keys = jax.random.split(key, eval_episodes)
        returns, lengths, terminated, _, chunks = rollout(
            setup, policy_act(setup), single, keys, stats
        )
        return returns[0], rollout_info(setup, lengths, terminated, chunks)

    def evaluate_policy(key, params, task_state):
        return evaluation(key, params, task_state)[0]

    # What an evaluation cost (its RolloutInfo) rides on the function that incurs it, so the
    # training loop can count evaluation env steps, and a wrapper that replaces
    # evaluate_policy (dataclasses.replace) drops it instead of reporting another's steps.
    evaluate_policy.with_info = evaluation

    def act(params, obs, task_state):
        stats = task_state.obs_stats
        ready = prepared(setup, params, stats, reference(task_state))
        return policy.apply(ready, observe(setup, features(setup, obs), stats))

    return task_type(
        init=init,
        evaluate=evaluate,
        evaluate_policy=evaluate_policy,
        init_params=policy.init,
        update=update,
        act=act,
        evaluate_factored=evaluate_factored if policy.module is not None else None,
        policy=policy,
        family=family,
        **fields,
    )
