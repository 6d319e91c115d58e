"""Control tasks' factored members: each layer kind against the built member, a factored
generation against the built members' (gymnax and Brax, VBN, observation normalisation, bf16
params, the device split), the dense-noise path's bit-identical rebuild for every strategy,
and the gymnax VBN reference batch against a Python loop of reset and step."""

import dataclasses
import logging

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxes
from jaxes import evaluation, factored, parallel, training, trees
from jaxes.factored.lowrank import LowRank
from jaxes.step import generation_step
from jaxes.strategies import STRATEGIES
from jaxes.tasks.control import rollout
from jaxes.tasks.gymnax import gymnax_task


def low_rank_delta(variables, rank=2, seed=2):
    """A displacement of ``variables["params"]``: factored over the last two axes of every
    leaf with two or more, dense for the others."""
    leaves, tree = jax.tree.flatten(variables["params"])
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    out = []
    for x, k in zip(leaves, keys, strict=True):
        ka, kb = jax.random.split(k)
        if x.ndim < 2:
            out.append(jax.random.normal(ka, x.shape))
        else:
            a = jax.random.normal(ka, x.shape[:-1] + (rank,))
            b = jax.random.normal(kb, x.shape[:-2] + (x.shape[-1], rank))
            out.append(LowRank(a, b))
    return jax.tree.unflatten(tree, out)


def factored_against_built(module, x):
    variables = module.init(jax.random.key(1), x)
    delta = low_rank_delta(variables)
    got = jax.jit(lambda v, d: factored.apply(module, v, d, x))(variables, delta)
    built = factored.member(variables["params"], delta)
    want = module.apply({"params": built}, x)
    return np.asarray(got), np.asarray(want)


CONVS = {
    "minatar-unbatched": (nn.Conv(16, (3, 3), padding="SAME"), (10, 10, 4)),
    "two-batch-axes": (nn.Conv(6, (3, 3), padding="SAME"), (2, 3, 8, 8, 4)),
    "strided-valid": (nn.Conv(8, (3, 2), strides=(2, 1), padding="VALID"), (3, 9, 7, 3)),
    "explicit-pads-dilated": (
        nn.Conv(8, (3, 3), padding=((1, 2), (0, 1)), kernel_dilation=(2, 1)),
        (3, 9, 7, 3),
    ),
    "1d-int-padding": (nn.Conv(8, (5,), padding=2), (4, 11, 3)),
    "3d": (nn.Conv(4, (2, 2, 2), padding="SAME", use_bias=False), (2, 5, 6, 4, 3)),
    "dense": (nn.Dense(7), (5, 6)),
}


@pytest.mark.parametrize("name", list(CONVS))
def test_each_layer_kind_factored_equals_the_built_member(name):
    module, shape = CONVS[name]
    x = jax.random.normal(jax.random.key(0), shape)
    got, want = factored_against_built(module, x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    assert np.abs(want).max() > 1.0  # a term that matters


def test_a_conv_the_term_cannot_serve_is_added_dense_with_one_logged_line(caplog):
    class Circular(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.Conv(4, (3, 3), padding="CIRCULAR", name="wrap")(x)
            return nn.Conv(4, (3, 3), feature_group_count=2, name="grouped")(h)

    x = jax.random.normal(jax.random.key(0), (2, 6, 6, 2))
    with caplog.at_level(logging.WARNING, logger="jaxes"):
        got, want = factored_against_built(Circular(), x)
        factored_against_built(Circular(), x)  # traced again: no second line
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    lines = sorted(r.getMessage() for r in caplog.records)
    assert len(lines) == 2, lines
    assert "grouped/kernel" in lines[0] and "feature_group_count=2" in lines[0]
    assert "wrap/kernel" in lines[1] and "padding='CIRCULAR'" in lines[1]


def built_and_factored(task, strategy, dtype=jnp.float32):
    """One generation's (fitness, moments, info) through the generation step's path (factored
    for low-rank noise) and through ``task.evaluate`` on the members built from the same
    displacements."""
    key = jax.random.key(4)
    params = jax.tree.map(lambda x: x.astype(dtype), task.init_params(jax.random.key(1)))
    state = strategy.init(jax.random.key(0), params)
    _, state = strategy.ask(jax.random.key(2), state)
    task_state = task.init(jax.random.key(3))
    # Statistics that normalise: the factored path must read them as the built one does.
    stats = task_state.obs_stats
    size = stats.mean.shape[0]
    task_state = task_state._replace(
        obs_stats=stats._replace(
            count=jnp.float32(10), mean=jnp.linspace(-0.1, 0.1, size), m2=jnp.full(size, 20.0)
        )
    )
    got = jax.jit(lambda s, t: evaluation.evaluate_task(strategy, s, task, key, t))(
        state, task_state
    )
    centre = trees.cast_like(state.params, state.dtypes)
    members = jax.vmap(lambda i: factored.member(centre, strategy.perturbation(state, i)))(
        jnp.arange(strategy.population_size)
    )
    want = jax.jit(task.evaluate)(key, members, task_state)
    return got, want


GYMNAX_CASES = {
    # MinAtar's conv net and its VBN form, without observation normalisation (grids).
    "breakout-conv": ("Breakout-MinAtar", "conv", jnp.float32),
    "breakout-vbn-conv": ("Breakout-MinAtar", "vbn_conv", jnp.float32),
    # Vector observations: normalised, VBN on dense layers, bf16 params, a box action.
    "cartpole-vbn-mlp": ("CartPole-v1", "vbn_mlp", jnp.float32),
    "pendulum-mlp-bf16": ("Pendulum-v1", "mlp", jnp.bfloat16),
}


@pytest.mark.parametrize("case", list(GYMNAX_CASES))
def test_a_factored_generation_equals_the_built_members(case):
    env, policy, dtype = GYMNAX_CASES[case]
    task = gymnax_task(
        env,
        policy,
        hidden_sizes=(16,),
        episode_length=60,
        episodes_per_member=2,
        reference_size=16,
    )
    strategy = jaxes.open_es(8, sigma=0.5, noise=jaxes.noise.lowrank(1))
    (fitness, moments, info), (want, want_moments, want_info) = built_and_factored(
        task, strategy, dtype
    )
    np.testing.assert_allclose(np.asarray(fitness), np.asarray(want), rtol=1e-4, atol=1e-3)
    assert np.ptp(np.asarray(want)) > 0, want  # members that differ, so a mix-up shows
    for a, b in zip(jax.tree.leaves(moments), jax.tree.leaves(want_moments), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-3)
    assert [int(x) for x in info] == [int(x) for x in want_info]


class OwnPolicy(nn.Module):
    """A user's module: a strided conv, a LayerNorm, dense layers; logits for 3 actions."""

    @nn.compact
    def __call__(self, obs):
        batch = obs.shape[:-3]
        h = nn.relu(nn.Conv(8, (2, 2), strides=(2, 2), padding="VALID")(obs))
        h = nn.LayerNorm()(h.reshape(batch + (-1,)))
        return nn.Dense(3)(nn.tanh(nn.Dense(16)(h)))


def test_a_users_flax_module_runs_factored_too():
    task = gymnax_task("Breakout-MinAtar", OwnPolicy(), episode_length=40, episodes_per_member=2)
    strategy = jaxes.open_es(8, sigma=0.5, noise=jaxes.noise.lowrank(2))
    (fitness, _, _), (want, _, _) = built_and_factored(task, strategy)
    np.testing.assert_allclose(np.asarray(fitness), np.asarray(want), rtol=1e-4, atol=1e-3)
    assert np.ptp(np.asarray(want)) > 0, want


def test_a_factored_brax_generation_equals_the_built_members():
    from jaxes.tasks.brax import brax_task

    task = brax_task("inverted_pendulum", episode_length=60, policy="mlp", hidden_sizes=(8,))
    strategy = jaxes.open_es(8, sigma=0.5, noise=jaxes.noise.lowrank(1))
    (fitness, _, info), (want, _, want_info) = built_and_factored(task, strategy)
    np.testing.assert_allclose(np.asarray(fitness), np.asarray(want), rtol=1e-5)
    assert np.ptp(np.asarray(want)) > 0, want
    assert int(info.env_steps) == int(want_info.env_steps)


def test_only_low_rank_noise_takes_the_factored_path():
    """Dense noise builds the members (bit-identical to the centre plus each displacement);
    low-rank noise hands the task the centre and the factors."""
    task = gymnax_task("CartPole-v1", "linear", episode_length=10)
    called = []

    def spy(key, centre, deltas, task_state):
        called.append(
            any(
                isinstance(x, LowRank)
                for x in jax.tree.leaves(deltas, is_leaf=lambda x: isinstance(x, LowRank))
            )
        )
        return task.evaluate_factored(key, centre, deltas, task_state)

    spied = dataclasses.replace(task, evaluate_factored=spy)
    for noise in ("gaussian", "lowrank"):
        strategy = jaxes.open_es(4, 0.1, noise=noise)
        state = strategy.init(jax.random.key(0), task.init_params(jax.random.key(1)))
        jax.eval_shape(
            lambda s, strategy=strategy: evaluation.evaluate_task(
                strategy, s, spied, jax.random.key(2), task.init(jax.random.key(3))
            ),
            state,
        )
    assert called == [True]


# Full-covariance strategies (samplers.FullSampler) offer no displacement for rounded (bf16)
# params: they refuse, naming member() instead.
REFUSE_ROUNDED = ("cma_es", "cr_fm_nes", "guided_es", "lm_ma_es", "ma_es", "xnes")
REBUILDS = [
    (name, dtype)
    for name in sorted(STRATEGIES)
    for dtype in (jnp.float32, jnp.bfloat16)
    if not (name in REFUSE_ROUNDED and dtype == jnp.bfloat16)
]


@pytest.mark.parametrize("name, dtype", REBUILDS)
def test_dense_displacements_rebuild_every_member_bit_identically(name, dtype):
    strategy = STRATEGIES[name](8)
    params = {
        "w": jax.random.normal(jax.random.key(0), (7, 5)).astype(dtype),
        "b": jnp.ones(5, dtype),
    }
    state = strategy.init(jax.random.key(1), params)
    for generation in range(2):
        _, state = strategy.ask(jax.random.key(2 + generation), state)
        centre = trees.cast_like(state.params, state.dtypes)
        for i in range(8):
            member = strategy.member(state, i)
            rebuilt = factored.member(centre, strategy.perturbation(state, i))
            for a, b in zip(jax.tree.leaves(member), jax.tree.leaves(rebuilt), strict=True):
                assert a.dtype == b.dtype and bool(jnp.array_equal(a, b))
        state, _ = strategy.tell(state, -jnp.arange(8.0))


@pytest.mark.parametrize("name", REFUSE_ROUNDED)
def test_full_covariance_strategies_refuse_a_displacement_of_rounded_members(name):
    # The other side of REBUILDS' exclusion: a refusal in one line, never a wrong displacement.
    strategy = STRATEGIES[name](8)
    state = strategy.init(jax.random.key(1), {"w": jnp.ones((7, 5), jnp.bfloat16)})
    _, state = strategy.ask(jax.random.key(2), state)
    with pytest.raises(ValueError, match="^perturbation: members of params narrower than"):
        strategy.perturbation(state, 0)


def test_the_low_rank_population_splits_over_devices():
    strategy = jaxes.open_es(8, 0.1, learning_rate=0.05, noise=jaxes.noise.lowrank(1))
    task = gymnax_task(
        "Breakout-MinAtar", "vbn_conv", hidden_sizes=(8,), episode_length=40, reference_size=8
    )
    state = training.init_state(strategy, task, seed=0)

    def run(step):
        return jax.jit(lambda s: jax.lax.scan(lambda c, _: step(c), s, None, 2))(state)[0]

    one = run(generation_step(strategy, task))
    mesh = parallel.make_mesh(2)
    split = jax.jit(
        lambda s: jax.lax.scan(
            lambda c, _: parallel.sharded_step(strategy, task, mesh)(c), s, None, 2
        )[0]
    )(jax.device_put(state, parallel.replicated(mesh)))
    for a, b in zip(
        jax.tree.leaves(one.strategy_state.params),
        jax.tree.leaves(split.strategy_state.params),
        strict=True,
    ):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    start = training.init_state(strategy, task, seed=0).strategy_state.params
    moved = max(
        float(jnp.max(jnp.abs(a - b)))
        for a, b in zip(
            jax.tree.leaves(one.strategy_state.params), jax.tree.leaves(start), strict=True
        )
    )
    assert moved > 1e-4


def test_the_gymnax_reference_batch_equals_a_python_loop():
    """``init``'s reference batch, step by step with the keys and picks the task documents:
    episode ``i`` resets from ``split(split(key, 3)[0], size)[i]``, holds action 0, draws env
    step ``n`` from ``fold_in(split(split(key, 3)[2], size)[i], n)``, and keeps its
    observation at decision ``randint(split(key, 3)[1], 0, steps)[i]`` or its last alive one."""
    size, steps = 6, 32
    task = gymnax_task("Breakout-MinAtar", "vbn_conv", hidden_sizes=(8,), reference_size=size)
    key = jax.random.key(11)
    reference = np.asarray(task.init(key).reference)
    env, env_params = task.env, task.env_params
    reset_key, pick_key, step_key = jax.random.split(key, 3)
    picks = np.asarray(jax.random.randint(pick_key, (size,), 0, steps))
    step = jax.jit(env.step)
    for i in range(size):
        obs, state = env.reset(jax.random.split(reset_key, size)[i], env_params)
        episode_key = jax.random.split(step_key, size)[i]
        kept, alive = None, True
        for t in range(steps):
            if alive and t <= picks[i]:
                kept = np.asarray(obs, np.float32).reshape(-1)
            obs, state, _, term, trunc, _ = step(
                jax.random.fold_in(episode_key, t), state, 0, env_params
            )
            alive = alive and not (bool(term) or bool(trunc))
        np.testing.assert_array_equal(reference[i], kept)
    assert reference.any(axis=1).all()  # every row sees the board
    assert len({row.tobytes() for row in reference}) > 1  # and the rows differ


def test_factored_members_hold_no_copy_of_a_factored_leaf():
    """The factored members hold no copy of a factored leaf: only the dense leaves (biases)
    and the factors are per member."""
    task = gymnax_task("Breakout-MinAtar", "conv", hidden_sizes=(16,), episode_length=10)
    strategy = jaxes.open_es(8, 0.1, noise=jaxes.noise.lowrank(1))
    state = strategy.init(jax.random.key(0), task.init_params(jax.random.key(1)))
    centre = state.params
    deltas = jax.vmap(lambda i: strategy.perturbation(state, i))(jnp.arange(8))
    setup = rollout.Rollout(task.family, task.policy, False, 10, 1, 10, 10)
    own, delta = jax.eval_shape(
        lambda d: rollout.factored_members(setup, centre, d, None, None), deltas
    )
    assert own["params"]["Conv_0"]["kernel"] is None
    assert own["params"]["Conv_0"]["bias"].shape == (8, 16)
    assert delta["params"]["Dense_0"]["kernel"].a.shape == (8, 1600, 1)
