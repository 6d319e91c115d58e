"""Virtual batch normalisation: statistics from a member's own pass over a fixed reference
batch, kept in the task state and checkpoints."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_parallel import max_diff, one_device, shard_mapped

import jaxes
from jaxes import training
from jaxes.app.config import ConfigError, TrainConfig
from jaxes.step import generation_step
from jaxes.tasks.brax import brax_task, policies
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
    base = TASK.init_params(jax.random.key(1))
    members = jax.vmap(lambda k: randomised(base, k))(jax.random.split(jax.random.key(3), 4))
    evaluate = jax.jit(TASK.evaluate)  # batches of two members: one compile
    together, _, _ = evaluate(jax.random.key(4), jax.tree.map(lambda x: x[:2], members), state)
    for other in (members_at(members, 3), jax.tree.map(lambda x: 2 * x, members_at(members, 2))):
        batch = jax.tree.map(lambda a, b: jnp.stack([a, b]), other, members_at(members, 1))
        moved, _, _ = evaluate(jax.random.key(4), batch, state)
        np.testing.assert_allclose(moved[1], together[1], rtol=1e-5)
    assert abs(float(together[0] - together[1])) > 0  # the members differ


def members_at(members, i):
    return jax.tree.map(lambda x: x[i], members)


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
    state = training.init_state(strategy, TASK, 0)
    jax.jit(generation_step(strategy, TASK)).lower(state)  # traced, not compiled


def test_vbn_population_splits_over_devices():
    strategy = jaxes.open_es(16, 0.05, learning_rate=0.05, noise="gaussian")
    single = one_device(TASK, strategy)
    split = shard_mapped(TASK, strategy)
    assert max_diff(single.strategy_state.params, split.strategy_state.params) <= 1e-5
    assert bool(jnp.array_equal(single.task_state.reference, split.task_state.reference))


def test_bad_reference_sizes_are_one_line_errors():
    with pytest.raises(ValueError, match=r"^reference_size: expected an int >= 1, got 0"):
        brax_task("inverted_pendulum", "spring", 20, "vbn_mlp", reference_size=0)
    with pytest.raises(ConfigError, match=r"^vbn_reference_size: expected an int >= 1"):
        TrainConfig(policy="vbn_mlp", vbn_reference_size=-3)
    with pytest.raises(ValueError, match=r"^hidden_sizes: vbn_mlp needs at least one hidden"):
        policies.vbn_mlp(3, 1, ())
