"""Virtual batch normalisation: statistics from a member's own pass over a fixed reference
batch, kept in the task state and checkpoints."""

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_parallel import GENERATIONS, max_diff, one_device, shard_mapped

import jaxes
from jaxes import training
from jaxes.app.config import ConfigError, TrainConfig
from jaxes.step import generation_step
from jaxes.tasks.brax import brax_task
from jaxes.tasks.control import policies, running_stats
from jaxes.training import checkpoint

TASK = brax_task("inverted_pendulum", "spring", 20, "vbn_mlp", (8, 8), reference_size=16)


def randomised(params, key, scale=0.5):
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(key, len(leaves))
    return treedef.unflatten(
        [x + scale * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)]
    )


def test_statistics_equal_a_numpy_forward_pass_of_the_reference_batch():
    policy = policies.vbn_mlp(3, 1, (5, 4))
    params = randomised(policy.init(jax.random.key(0)), jax.random.key(1))
    reference = jax.random.normal(jax.random.key(2), (16, 3))
    stats = policy.prepare(params, reference)[policies.VBN_STATS]
    p = jax.tree.map(np.asarray, params["params"])
    x = np.asarray(reference, np.float64)
    for i in range(2):
        h = x @ p[f"Dense_{i}"]["kernel"] + p[f"Dense_{i}"]["bias"]
        mean, var = h.mean(0), h.var(0)
        np.testing.assert_allclose(stats[f"mean_{i}"], mean, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(stats[f"var_{i}"], var, rtol=1e-4, atol=1e-5)
        x = np.tanh((h - mean) / np.sqrt(var + 1e-5) * p[f"scale_{i}"] + p[f"offset_{i}"])


def test_a_members_fitness_depends_on_its_params_and_the_reference_only():
    state = TASK.init(jax.random.key(0))
    assert state.reference.shape == (16, 4) and float(jnp.std(state.reference)) > 0
    # Statistics of the reference batch itself, so the normalisation is not the identity.
    moments = running_stats.batch_moments(state.obs_stats, state.reference, jnp.ones(16))
    state = state._replace(obs_stats=running_stats.merge(state.obs_stats, moments))
    base = TASK.init_params(jax.random.key(1))
    members = jax.vmap(lambda k: randomised(base, k))(jax.random.split(jax.random.key(3), 4))
    evaluate = jax.jit(TASK.evaluate)  # batches of two members: one compile
    first_two = jax.tree.map(lambda x: x[:2], members)
    together, seen, _ = evaluate(jax.random.key(4), first_two, state)
    for other in (members_at(members, 3), jax.tree.map(lambda x: 2 * x, members_at(members, 2))):
        batch = jax.tree.map(lambda a, b: jnp.stack([a, b]), other, members_at(members, 1))
        moved, _, _ = evaluate(jax.random.key(4), batch, state)
        np.testing.assert_allclose(moved[1], together[1], rtol=1e-5)
    assert abs(float(together[0] - together[1])) > 0  # the members differ
    # The other half: the same members prepared on another reference batch act otherwise.
    # The return counts the steps the pole stays up, so a small change of the actions shows
    # in the observations seen (another key's batch) before it shows in the return (a
    # shifted batch: measured 20, 8 -> 7, 7).
    other_key = state._replace(reference=TASK.init(jax.random.key(5)).reference)
    _, seen_there, _ = evaluate(jax.random.key(4), first_two, other_key)
    assert max_diff(seen_there.s1, seen.s1) > 1e-2, (seen_there.s1, seen.s1)
    shifted = state._replace(reference=state.reference + 1.0)
    there, _, _ = evaluate(jax.random.key(4), first_two, shifted)
    assert max_diff(there, together) >= 1, (there, together)
    # And the fitness is the episode a plain Python loop over env.step plays.
    for i in range(2):
        ret, steps, obs_sum = python_episode(members_at(members, i), state, jax.random.key(4))
        np.testing.assert_allclose(together[i], ret, rtol=1e-5)
        assert float(seen.count[i]) == steps
        np.testing.assert_allclose(seen.s1[i], obs_sum, rtol=1e-4, atol=1e-4)


def members_at(members, i):
    return jax.tree.map(lambda x: x[i], members)


def python_episode(params, state, key):
    """One member's episode, one env step at a time: the policy prepared once on the
    normalised reference batch, then fed normalised observations until ``done`` or 20 steps.

    Returns the return, the steps played and the sum of the observations acted on (about the
    statistics' mean, as the task's moments are).
    """
    env, policy = TASK.env, TASK.policy
    step = jax.jit(env.step)

    def normalised(x):
        return running_stats.normalize(state.obs_stats, x)

    prepared = policy.prepare(params, normalised(state.reference))
    env_state = jax.jit(env.reset)(jax.random.split(key, 1)[0])  # episodes_per_member = 1
    total, steps, obs_sum = 0.0, 0, np.zeros(4)
    for _ in range(20):
        obs_sum += np.asarray(env_state.obs - state.obs_stats.mean)
        env_state = step(env_state, policy.apply(prepared, normalised(env_state.obs)))
        total, steps = total + float(env_state.reward), steps + 1
        if float(env_state.done) > 0:
            break
    return total, steps, obs_sum


def test_the_reference_batch_is_checkpointed_and_restored(tmp_path):
    strategy = jaxes.open_es(8, 0.1, noise="gaussian")
    state = training.init_state(strategy, TASK, 0)
    ckpt = checkpoint.Checkpointer(str(tmp_path / "checkpoints"))
    ckpt.save(0, state)
    ckpt.close()
    like = training.init_state(strategy, TASK, 1)  # another seed: another reference batch
    assert max_diff(like.task_state.reference, state.task_state.reference) > 0
    ckpt = checkpoint.Checkpointer(str(tmp_path / "checkpoints"), create=False)
    _, restored = ckpt.restore(like, 0)
    ckpt.close()
    assert bool(jnp.array_equal(restored.task_state.reference, state.task_state.reference))


@pytest.mark.parametrize("name", ["open_es", "pgpe", "snes", "ars", "sep_cma_es"])
def test_every_strategy_traces_a_vbn_generation(name):
    strategy = getattr(jaxes, name)(8)
    state = jax.eval_shape(lambda: training.init_state(strategy, TASK, 0))  # traced only
    after, metrics = jax.eval_shape(generation_step(strategy, TASK), state)
    # The new state has the old one's structure, shapes and types: the reference is carried.
    assert jax.tree.structure(after) == jax.tree.structure(state)
    for new, old in zip(jax.tree.leaves(after), jax.tree.leaves(state), strict=True):
        assert (new.shape, new.dtype) == (old.shape, old.dtype)
    assert after.task_state.reference.shape == (16, 4)
    assert after.task_state.obs_stats.mean.shape == (4,)
    assert all(m.shape == () for m in jax.tree.leaves(metrics))
    assert "env_steps" in metrics and "fitness_mean" in metrics


class Recorded(NamedTuple):
    """A task state with the fitness every member got in each of the last generations."""

    inner: Any
    fitness: jax.Array  # (generations, population): the newest last


def recording(task, population_size, generations):
    """``task`` that also keeps the last ``generations`` generations' per-member fitness (in
    member order, as ``update`` sees it after the gather) in its state."""

    def evaluate(key, members, state):
        fitness, moments, info = task.evaluate(key, members, state.inner)
        return fitness, (moments, fitness), info

    def update(state, stats):
        moments, fitness = stats
        history = jnp.roll(state.fitness, -1, axis=0).at[-1].set(fitness)
        return Recorded(task.update(state.inner, moments), history)

    return dataclasses.replace(
        task,
        init=lambda key: Recorded(task.init(key), jnp.zeros((generations, population_size))),
        evaluate=evaluate,
        evaluate_policy=lambda key, params, state: task.evaluate_policy(key, params, state.inner),
        update=update,
    )


def test_vbn_population_splits_over_devices():
    strategy = jaxes.open_es(16, 0.05, learning_rate=0.05, noise="gaussian")
    task = recording(TASK, 16, GENERATIONS)
    single = one_device(task, strategy)
    split = shard_mapped(task, strategy)
    assert max_diff(single.strategy_state.params, split.strategy_state.params) <= 1e-5
    references = single.task_state.inner.reference, split.task_state.inner.reference
    assert bool(jnp.array_equal(*references))
    # In every generation member i played the same episode on one device as on device i // 4
    # of four.
    fitness = np.asarray(single.task_state.fitness)
    np.testing.assert_allclose(np.asarray(split.task_state.fitness), fitness, rtol=1e-5)
    # Members that differ (the first generations fall at different steps), so a mix-up shows.
    assert np.ptp(fitness, axis=1).max() > 0, fitness
    # It trained: the centre moved from where it started.
    start = training.init_state(strategy, task, 0).strategy_state.params
    assert max_diff(single.strategy_state.params, start) > 1e-3


def test_bad_reference_sizes_are_one_line_errors():
    with pytest.raises(ValueError, match=r"^reference_size: expected an int >= 1, got 0"):
        brax_task("inverted_pendulum", "spring", 20, "vbn_mlp", reference_size=0)
    with pytest.raises(ConfigError, match=r"^vbn_reference_size: expected an int >= 1"):
        TrainConfig.make(policy="vbn_mlp", vbn_reference_size=-3)
    with pytest.raises(ValueError, match=r"^hidden_sizes: vbn_mlp needs at least one hidden"):
        policies.vbn_mlp(3, 1, ())
