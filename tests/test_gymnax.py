"""gymnax environments as tasks: the rollout against a plain Python loop, termination and
truncation, frame skip, the device split, every registered env tracing, and CartPole learning."""

import subprocess
import sys
import time

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

import jaxes
from jaxes import parallel, training
from jaxes.app import commands, presets
from jaxes.app.build import build
from jaxes.app.config import ConfigError, TrainConfig
from jaxes.step import generation_step
from jaxes.tasks.control import running_stats
from jaxes.tasks.gymnax import envs, gymnax_task

KEY = jax.random.key(7)


def python_returns(task, members, key, episodes, state, action_repeat=1):
    """Each member's mean return from ``env.reset``/``env.step`` in a Python loop, with the
    keys the task documents (episode ``e``: ``reset, steps = split(keys[e])``; env step ``n``
    draws ``fold_in(steps, n)``) and each action computed here from the network's output
    (``hand_action``, not the task's ``act``); and the most decisions any episode took."""
    env, env_params = task.env, task.env_params
    length = int(env_params.max_steps_in_episode)
    stats = state.obs_stats
    apply = jax.jit(task.policy.module.apply)
    out, longest = [], 0
    for i in range(jax.tree.leaves(members)[0].shape[0]):
        params = jax.tree.map(lambda x, i=i: x[i], members)
        returns = []
        for episode_key in jax.random.split(key, episodes):
            reset_key, step_key = jax.random.split(episode_key)
            obs, env_state = env.reset(reset_key, env_params)
            total, n, done, decisions = 0.0, 0, False, 0
            while not done and n < length:
                action = hand_action(task, apply, params, obs, stats)
                decisions += 1
                for _ in range(action_repeat):
                    obs, env_state, reward, term, trunc, _ = env.step(
                        jax.random.fold_in(step_key, n), env_state, action, env_params
                    )
                    total += float(reward)
                    n += 1
                    done = bool(term) or bool(trunc)
                    if done or n >= length:
                        break
            returns.append(total)
            longest = max(longest, decisions)
        out.append(np.mean(returns))
    return np.array(out), longest


def hand_action(task, apply, params, obs, stats):
    """The discrete action of a normalising task: the grid as a vector, ``(x - mean) / std``
    (std floored at 1e-3, clipped to ±10), the network's logits, their argmax."""
    x = np.asarray(obs, np.float32).reshape(-1)
    std = np.maximum(np.sqrt(np.asarray(running_stats.variance(stats))), 1e-3)
    x = np.clip((x - np.asarray(stats.mean)) / std, -10.0, 10.0)
    logits = apply(params, jnp.asarray(x, jnp.float32).reshape(np.shape(obs)))
    return int(np.argmax(np.asarray(logits)))


def with_stats(task, key):
    """``task.init``'s state with observation statistics of a few random observations, so
    normalisation changes the inputs."""
    state = task.init(jax.random.key(1))
    size = state.obs_stats.mean.shape[0]
    x = 2.0 + 3.0 * jax.random.normal(key, (16, size))
    moments = running_stats.batch_moments(state.obs_stats, x, jnp.ones(16))
    return state._replace(obs_stats=running_stats.merge(state.obs_stats, moments))


def perturbed(task, count, scale):
    params = task.init_params(jax.random.key(0))
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(3), len(leaves))
    return jax.tree.unflatten(
        tree,
        [
            x + scale * jax.random.normal(k, (count,) + x.shape)
            for x, k in zip(leaves, keys, strict=True)
        ],
    )


@pytest.mark.parametrize(
    "env_name, policy, hidden, repeat, length, chunk",
    [
        ("CartPole-v1", "linear", None, 1, 40, 50),
        # 14 decisions in chunks of 4: the last chunk runs past the episode's end.
        ("CartPole-v1", "mlp", (4,), 3, 40, 4),
        # 60 steps: one member scores, two episodes terminate, the others are truncated.
        ("Asterix-MinAtar", "conv", (8,), 1, 60, 7),
    ],
    ids=["cartpole", "cartpole-frame-skip", "asterix-conv"],
)
def test_fitness_equals_a_python_loop(env_name, policy, hidden, repeat, length, chunk):
    task = gymnax_task(
        env_name,
        policy,
        hidden_sizes=hidden,
        episodes_per_member=2,
        action_repeat=repeat,
        episode_length=length,
        chunk_length=chunk,
    )
    members = perturbed(task, 3, 0.5)
    state = with_stats(task, jax.random.key(2))
    fitness, _, info = jax.jit(task.evaluate)(KEY, members, state)
    expected, longest = python_returns(task, members, KEY, 2, state, repeat)
    np.testing.assert_allclose(np.asarray(fitness), expected, rtol=1e-5)
    assert int(info.episodes) == 6
    # The batch stops at the end of the chunk in which its longest episode ended.
    chunk = min(chunk, -(-length // repeat))
    assert int(info.env_steps) == 6 * repeat * chunk * -(-longest // chunk)


def test_termination_ends_episodes_and_the_time_limit_truncates():
    # The zero-initialised policy always pushes left: the pole falls within a few dozen steps.
    task = gymnax_task("CartPole-v1", "linear", episodes_per_member=3, episode_length=200)
    params = jax.tree.map(lambda x: x[None], task.init_params(jax.random.key(0)))
    fitness, _, info = jax.jit(task.evaluate)(KEY, params, task.init(jax.random.key(1)))
    # gymnax resets and keeps paying 1 per step after done: counted, the return would be 200.
    assert 0 < float(fitness[0]) < 50
    assert int(info.terminated) == 3
    assert int(info.alive_steps) == round(3 * float(fitness[0]))  # CartPole pays 1 per step
    # Every episode is over long before 200 steps: the batch stops at the first chunk's end
    # where all are, not at the time limit.
    assert int(info.env_steps) == 3 * 50 < 3 * 200
    # Pendulum never terminates: every episode runs to the limit and is truncated there.
    task = gymnax_task("Pendulum-v1", "linear", episodes_per_member=2, episode_length=20)
    params = jax.tree.map(lambda x: x[None], task.init_params(jax.random.key(0)))
    _, _, info = jax.jit(task.evaluate)(KEY, params, task.init(jax.random.key(1)))
    assert (int(info.terminated), int(info.alive_steps), int(info.env_steps)) == (0, 40, 40)


def test_the_device_split_gives_the_one_device_result():
    strategy = jaxes.open_es(8, 0.1, learning_rate=0.05)
    task = gymnax_task("CartPole-v1", "mlp", hidden_sizes=(4,), episode_length=50)
    state = training.init_state(strategy, task, seed=0)

    def run(step):
        return jax.jit(lambda s: jax.lax.scan(lambda c, _: step(c), s, None, 3))(state)[0]

    one = jax.block_until_ready(run(generation_step(strategy, task)))
    mesh = parallel.make_mesh(2)
    split = jax.block_until_ready(
        jax.jit(
            lambda s: jax.lax.scan(
                lambda c, _: parallel.sharded_step(strategy, task, mesh)(c), s, None, 3
            )[0]
        )(jax.device_put(state, parallel.replicated(mesh)))
    )
    pairs = zip(
        jax.tree.leaves((one.strategy_state.params, one.task_state)),
        jax.tree.leaves((split.strategy_state.params, split.task_state)),
        strict=True,
    )
    for a, b in pairs:
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)
    assert float(one.task_state.obs_stats.count) > 0  # normalisation statistics moved


def test_every_registered_env_traces_a_generation_or_is_refused_in_one_line():
    strategy = jaxes.open_es(4, 0.1)
    refused = {}
    for name in gymnax.registered_envs:
        try:
            task = gymnax_task(name, "mlp", hidden_sizes=(4,), episode_length=3, eval_episodes=1)
        except ValueError as error:
            message = str(error)
            assert name in message and "\n" not in message, message
            refused[name] = message
            continue
        state = jax.eval_shape(lambda t=task: training.init_state(strategy, t, seed=0))
        after, _ = jax.eval_shape(generation_step(strategy, task), state)
        assert jax.tree.structure(after) == jax.tree.structure(state), name
    # Built by downloading MNIST: refused offline (this machine), played where it downloads.
    assert set(refused) <= {"MNISTBandit-bsuite"}, refused


def test_unsupported_spaces_and_policies_are_one_line_errors():
    class TupleActions:
        def action_space(self, params):
            return spaces.Tuple([spaces.Discrete(2), spaces.Discrete(3)])

    with pytest.raises(ValueError, match=r"^Toy-v0: action space Tuple\(.*not supported"):
        envs.action_spec("Toy-v0", TupleActions(), None)
    with pytest.raises(ValueError, match=r"needs \(height, width, channels\) observations"):
        gymnax_task("CartPole-v1", "conv")
    with pytest.raises(ValueError, match=r"^env: 'Pong-v5' is not a gymnax environment"):
        gymnax_task("Pong-v5")


def test_vbn_conv_prepares_on_the_reference_batch():
    task = gymnax_task("Breakout-MinAtar", "vbn_conv", hidden_sizes=(8,), reference_size=8)
    state = jax.eval_shape(task.init, jax.random.key(1))
    assert state.reference.shape == (8, 10 * 10 * 4)
    params = jax.eval_shape(task.init_params, jax.random.key(0))
    assert "vbn_stats" not in params  # measured each generation, never searched
    action = jax.eval_shape(task.act, params, jnp.zeros((10, 10, 4)), state)
    assert action.shape == () and action.dtype == jnp.int32
    # A batch of observations (train.load_policy's act keeps leading axes).
    assert jax.eval_shape(task.act, params, jnp.zeros((5, 10, 10, 4)), state).shape == (5,)
    box = gymnax_task("Pendulum-v1", "mlp", hidden_sizes=(4,))
    params, state = box.init_params(jax.random.key(0)), box.init(jax.random.key(1))
    assert box.act(params, jnp.zeros((5, 3)), state).shape == (5, 1)


def test_cartpole_learns():
    """A learning test (not a timing one): linear policy, P=32, 40 generations."""
    start = time.perf_counter()
    strategy = jaxes.open_es(32, 0.1, learning_rate=0.05)
    task = gymnax_task("CartPole-v1", "linear", eval_episodes=8)
    state = training.init_state(strategy, task, seed=0)
    step = generation_step(strategy, task)
    state = jax.jit(lambda s: jax.lax.scan(lambda c, _: step(c), s, None, 40)[0])(state)
    returns = jax.jit(task.evaluate_policy)(
        jax.random.key(99), state.strategy_state.params, state.task_state
    )
    assert float(jnp.mean(returns)) >= 400, returns
    print(f"cartpole: {float(jnp.mean(returns)):.0f} in {time.perf_counter() - start:.1f} s")


@pytest.mark.parametrize("env", ["CartPole-v1", "Breakout-MinAtar"])
def test_the_cli_config_builds_a_gymnax_run_that_lowers(env):
    config = TrainConfig.make(env=env, population_size=4)
    assert config.env.backend == "gymnax"
    assert config.env.episode_length == int(gymnax.make(env)[1].max_steps_in_episode)
    minatar = env in presets.MINATAR_GAMES
    assert config.env.policy == ("vbn_conv" if minatar else "linear")
    assert config.env.normalize_observations is not minatar
    strategy, task = build(config)
    assert task.env_params.max_steps_in_episode == config.env.episode_length
    state = jax.eval_shape(lambda: training.init_state(strategy, task, config.loop.seed))
    jax.jit(generation_step(strategy, task)).lower(state)  # traced and lowered, not compiled


def test_the_minatar_games_share_one_preset_and_envs_lists_gymnax(capsys):
    settings = [presets.preset(game) for game in presets.MINATAR_GAMES]
    keys = ("population_size", "sigma", "learning_rate", "policy", "hidden_sizes")
    assert all({k: s[k] for k in keys} == {k: settings[0][k] for k in keys} for s in settings)
    assert presets.preset("Catch-bsuite")["backend"] == "gymnax"  # no preset of its own
    commands.envs_command(None)
    names = capsys.readouterr().out.split()
    assert "inverted_pendulum" in names and set(gymnax.registered_envs) <= set(names)


def test_cli_errors_are_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^backend: CartPole-v1 is a gymnax environment"):
        TrainConfig.make(env="CartPole-v1", backend="spring")
    with pytest.raises(ConfigError, match=r"^policy: unknown 'conv'; allowed"):
        TrainConfig.make(env="hopper", policy="conv")
    out = tmp_path / "r"
    cli = [sys.executable, "-m", "jaxes", "train", "--env", "CartPole-v1", "--policy", "conv"]
    proc = subprocess.run([*cli, "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr == (
        "jaxes: error: policy: 'conv' needs (height, width, channels) observations, "
        "got shape (4,)\n"
    )
    assert not out.exists()


def test_the_minatar_preset_is_low_rank_and_old_run_configs_keep_their_settings():
    """The sweep's setting is the MinAtar preset (issue 39), for open_es only; a config.json
    written before noise_rank and vbn_reference_size existed keeps what they meant then."""
    config = TrainConfig.make(env="Breakout-MinAtar")
    assert (config.strategy.noise, config.strategy.noise_rank, config.env.vbn_reference_size) == (
        "lowrank",
        1,
        32,
    )
    assert TrainConfig.make(env="Breakout-MinAtar", strategy="snes").strategy.noise == "table"
    assert TrainConfig.make(env="hopper").strategy.noise == "table"
    old = config.to_dict()
    del old["noise_rank"], old["vbn_reference_size"]
    restored = TrainConfig.from_dict({**old, "noise": "table"})
    assert (restored.strategy.noise_rank, restored.env.vbn_reference_size) == (1, 128)
