"""Every Brax env from its preset (and from every named setting that has a row for it), the
stopping rules, and several seeds in one program.

Tracing (``jax.jit(...).lower``) checks that a generation of every env builds without
compiling it: humanoid's XLA compile alone takes minutes on this CPU.
"""

import io
import json
import os

import jax
import numpy as np
import pytest

import jaxes
from jaxes import training
from jaxes.app import config as config_lib
from jaxes.app import presets, train
from jaxes.app.build import build
from jaxes.step import generation_step
from jaxes.strategies import centre
from jaxes.tasks.brax import brax_task
from jaxes.tasks.brax.envs import env_names, supported_backends
from jaxes.tasks.functions import function_task
from jaxes.tasks.gymnax import envs as gymnax_envs


# A named row that sets nothing traces the env's own preset, already traced here.
@pytest.mark.parametrize(
    "env, name",
    [(env, None) for env in env_names()]
    + [(env, name) for name, rows in presets.NAMED.items() for env, row in rows.items() if row],
)
def test_every_env_traces_one_generation_with_its_preset(env, name):
    config = config_lib.TrainConfig.make(env=env, preset=name)
    assert config.env.backend in supported_backends(env)
    for setting, value in presets.preset(env, name=name).items():
        assert config.get(setting) == value, (env, name, setting)
    strategy, task = build(config)
    state = jax.eval_shape(lambda: training.init_state(strategy, task, 0))
    lowered = jax.jit(generation_step(strategy, task)).lower(state)
    _, metrics = lowered.out_info
    assert metrics["env_steps"].shape == () and "fitness_mean" in metrics


def test_named_settings_are_valid_configs_for_every_env_they_name():
    for name, rows in presets.NAMED.items():
        for env, row in rows.items():
            config = config_lib.TrainConfig.make(env=env, preset=name)
            plain = config_lib.TrainConfig.make(env=env)
            assert config.preset == name and config.to_dict()["preset"] == name
            changed = {k for k, v in plain.to_dict().items() if config.to_dict()[k] != v}
            assert changed - {"preset"} <= set(row), (name, env, changed)
            for setting, value in row.items():
                assert config.get(setting) == value, (name, env, setting)


def test_presets_are_valid_configs_and_flags_override_them():
    for env in presets.PRESETS:
        config = config_lib.TrainConfig.make(env=env)
        for name, value in presets.preset(env).items():
            if value is None:  # gymnax's episode_length: the env's own time limit
                assert (name, config.env.backend) == ("episode_length", "gymnax"), (env, name)
                value = gymnax_envs.load_env(env)[1].max_steps_in_episode
            assert config.get(name) == value, (env, name)
    config = config_lib.TrainConfig.make(env="hopper", sigma=0.1, population_size=8)
    assert (config.strategy.sigma, config.strategy.population_size) == (0.1, 8)
    assert config.strategy.learning_rate == presets.preset("hopper")["learning_rate"]
    # Another strategy keeps the env's settings but not open_es's step sizes.
    snes = config_lib.TrainConfig.make(env="hopper", strategy="snes")
    assert snes.strategy.population_size == 32 and snes.strategy.learning_rate == 1.0
    assert snes.strategy.l2_coeff is None


def test_new_settings_reach_the_strategy_and_the_task():
    config = config_lib.TrainConfig.make(
        env="inverted_pendulum", l2_coeff=0.01, fitness_shaping="z_score", noise="gaussian",
        action_repeat=2, population_size=4,
    )  # fmt: skip
    strategy, task = build(config)
    reference = jaxes.open_es(4, l2_coeff=0.01, fitness_shaping="z_score", noise="gaussian")
    params = task.init_params(jax.random.key(0))
    mine = jax.eval_shape(strategy.init, jax.random.key(1), params)
    assert mine.noise_state is None  # gaussian noise keeps no table
    fitness = jax.numpy.arange(4.0)
    state = reference.init(jax.random.key(1), params)
    _, state = reference.ask(jax.random.key(2), state)
    _, ours = strategy.ask(jax.random.key(2), strategy.init(jax.random.key(1), params))
    for a, b in zip(
        jax.tree.leaves(strategy.tell(ours, fitness)[0].params),
        jax.tree.leaves(reference.tell(state, fitness)[0].params),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)
    assert config.to_dict()["action_repeat"] == 2

    # The task repeats each action twice: its evaluation lowers to the program brax_task
    # builds with action_repeat=2 (traced, not compiled; action_repeat=1's differs).
    def lowered(t):
        state = jax.eval_shape(t.init, jax.random.key(0))
        program = jax.jit(t.evaluate_policy).lower(jax.random.key(0), params, state)
        return program.as_text()

    def direct(action_repeat):
        return brax_task(
            config.env.name, config.env.backend, config.env.episode_length, config.env.policy,
            config.env.hidden_sizes, eval_episodes=config.env.eval_episodes,
            action_repeat=action_repeat,
        )  # fmt: skip

    assert lowered(task) == lowered(direct(2))


SPHERE = function_task("sphere", 3)
ES = jaxes.open_es(8, sigma=0.1)


def quiet(**kwargs):
    return {"stream": io.StringIO(), "plot": False, **kwargs}


def lines_of(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(x) for x in f]


def test_timesteps_stop_inside_a_block_and_resume_like_one_run(tmp_path):
    # 8 evaluations a generation: a budget of 20 stops after generation 3, inside the block.
    summary = training.run(
        ES, SPHERE, str(tmp_path / "a"), generations=10, eval_every=5, timesteps=20, **quiet()
    )
    assert summary["stopped"] == "timesteps" and summary["generations"] == 3
    assert [x["total_env_steps"] for x in lines_of(tmp_path / "a")] == [8, 16, 24]
    resumed = training.run(
        ES, SPHERE, str(tmp_path / "a"), generations=10, eval_every=5, timesteps=60,
        resume=True, **quiet(),
    )  # fmt: skip
    straight = training.run(
        ES, SPHERE, str(tmp_path / "b"), generations=10, eval_every=5, timesteps=60, **quiet()
    )
    assert resumed["generations"] == straight["generations"] == 8
    assert [x["generation"] for x in lines_of(tmp_path / "a")] == list(range(1, 9))
    _, _, a = _final(tmp_path / "a")
    _, _, b = _final(tmp_path / "b")
    np.testing.assert_allclose(a, b, rtol=1e-6)


def _final(out):
    from jaxes.training.checkpoint import Checkpointer

    ckpt = Checkpointer(os.path.join(out, "checkpoints"), create=False)
    try:
        step, state = ckpt.restore(training.init_state(ES, SPHERE, 0))
    finally:
        ckpt.close()
    return step, state, np.asarray(centre(state.strategy_state))


def test_target_return_stops_at_the_first_evaluation_that_reaches_it(tmp_path):
    free = training.run(ES, SPHERE, str(tmp_path / "free"), generations=30, eval_every=2, **quiet())
    evals = [x["eval_return"] for x in lines_of(tmp_path / "free") if "eval_return" in x]
    target = evals[len(evals) // 2]
    first = next(i for i, r in enumerate(evals) if r >= target)
    summary = training.run(
        ES, SPHERE, str(tmp_path / "t"), generations=30, eval_every=2, target_return=target,
        **quiet(),
    )  # fmt: skip
    assert free["stopped"] == "generations" and summary["stopped"] == "target_return"
    assert summary["generations"] == 2 * (first + 1)
    assert summary["target_env_steps"] == 8 * summary["generations"]


def test_seeds_in_one_program_match_each_seed_alone_and_resume(tmp_path):
    both = training.run_seeds(
        ES, SPHERE, str(tmp_path / "s"), seeds=[3, 5], generations=4, eval_every=2, **quiet()
    )
    assert both["seeds"] == [3, 5] and len(both["runs"]) == 2
    finals = [r["final_eval_return"] for r in both["runs"]]
    assert both["final_eval_return"]["median"] == pytest.approx(np.median(finals))
    training.run_seeds(
        ES, SPHERE, str(tmp_path / "s"), seeds=[3, 5], generations=8, eval_every=2,
        resume=True, **quiet(),
    )  # fmt: skip
    for seed in (3, 5):
        training.run(
            ES, SPHERE, str(tmp_path / f"alone{seed}"), seed=seed, generations=8, eval_every=2,
            **quiet(),
        )  # fmt: skip
        together = lines_of(tmp_path / "s" / f"seed-{seed}")
        alone = lines_of(tmp_path / f"alone{seed}")
        assert [x["generation"] for x in together] == list(range(1, 9))
        np.testing.assert_allclose(
            [x["eval_return"] for x in together if "eval_return" in x],
            [x["eval_return"] for x in alone if "eval_return" in x],
            rtol=1e-6,
        )
    with open(tmp_path / "s" / "summary.json") as f:
        assert [r["generations"] for r in json.load(f)["runs"]] == [8, 8]


def test_seeds_that_reach_the_target_stop_while_the_others_go_on(tmp_path):
    alone = training.run(ES, SPHERE, str(tmp_path / "a"), seed=1, generations=20, eval_every=2,
                       **quiet())  # fmt: skip
    target = alone["final_eval_return"] - 1e-6
    both = training.run_seeds(
        ES, SPHERE, str(tmp_path / "s"), seeds=[0, 1], generations=20, eval_every=2,
        target_return=target, **quiet(),
    )  # fmt: skip
    stops = {r["seed"]: (r["stopped"], r["generations"]) for r in both["runs"]}
    assert stops[1][0] == "target_return" and stops[1][1] <= 20
    assert all(g % 2 == 0 for _, g in stops.values())
    # Seed 1 stops at its first evaluation that reaches the target; seed 0 goes on to 20.
    evals = [(x["generation"], x["eval_return"]) for x in lines_of(tmp_path / "a")
             if x.get("eval_return") is not None]  # fmt: skip
    assert stops[1][1] == next(g for g, r in evals if r >= target), evals
    assert stops[0] == ("generations", 20), stops


def test_evaluation_env_steps_are_counted_beside_trainings_and_resume(tmp_path):
    """``eval_env_steps`` / ``eval_alive_steps``: every evaluation's simulated and lived env
    steps so far (``total_env_steps`` counts training's alone). CartPole pays 1 a step, so an
    evaluation's alive steps are its episodes times its mean return; a batch of episodes runs
    whole chunks until its longest ends. A run resumed from lines without the columns (written
    before they existed) goes on without them rather than count from zero."""
    from jaxes.tasks.gymnax import gymnax_task

    task = gymnax_task("CartPole-v1", "linear", eval_episodes=3, episode_length=200,
                       chunk_length=20)  # fmt: skip
    settings = dict(seeds=[0, 1], generations=6, eval_every=2, **quiet())
    training.run_seeds(ES, task, str(tmp_path / "s"), **settings)
    for seed in (0, 1):
        lines = lines_of(tmp_path / "s" / f"seed-{seed}")
        counted = [0, 0]
        for line in lines:
            if line.get("eval_return") is not None:
                counted[1] += round(3 * line["eval_return"])
                counted[0] = line["eval_env_steps"]
            assert [line["eval_env_steps"], line["eval_alive_steps"]] == counted
        steps = [x["eval_env_steps"] for x in lines if "eval_return" in x]
        per_eval = np.diff([0, *steps])
        assert all(s % (3 * 20) == 0 and 0 < s <= 3 * 200 for s in per_eval), per_eval
        # total_env_steps is training's alone, as before.
        assert [x["total_env_steps"] for x in lines] == list(
            np.cumsum([x["env_steps"] for x in lines])
        )

    def numbers(run_dir):
        return [{k: v for k, v in x.items() if k != "wall_time_s"} for x in lines_of(run_dir)]

    # Cut at generation 4 and resumed: the counts go on from the kept lines.
    training.run_seeds(ES, task, str(tmp_path / "r"), **(settings | {"generations": 4}))
    training.run_seeds(ES, task, str(tmp_path / "r"), resume=True, **settings)
    assert numbers(tmp_path / "r" / "seed-1") == numbers(tmp_path / "s" / "seed-1")
    # A run whose lines predate the columns: resumed, its new lines have none.
    old = tmp_path / "old"
    training.run(ES, task, str(old), generations=4, eval_every=2, **quiet())
    columns = ("eval_env_steps", "eval_alive_steps")
    stripped = [{k: v for k, v in x.items() if k not in columns} for x in lines_of(old)]
    (old / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in stripped))
    training.run(ES, task, str(old), generations=6, eval_every=2, resume=True, **quiet())
    assert [x["generation"] for x in lines_of(old)] == list(range(1, 7))
    assert not any("eval_env_steps" in x for x in lines_of(old))
    # A task that cannot tell what its evaluation cost (a function) writes no columns.
    training.run(ES, SPHERE, str(tmp_path / "f"), generations=2, eval_every=2, **quiet())
    assert not any("eval_env_steps" in x for x in lines_of(tmp_path / "f"))


def test_brax_seeds_match_the_single_run_of_the_same_seed(tiny_run, tmp_path):
    """The CLI's tiny run (seed 0) against the same settings trained with seeds 0 and 1."""
    config = config_lib.read_config(os.path.join(tiny_run, "config.json"))
    train.train_config_seeds(config, [0, 1], str(tmp_path / "s"), stream=io.StringIO(), plot=False)
    _, _, _, _, alone = train.load_run(str(tiny_run))
    _, _, _, step, together = train.load_run(str(tmp_path / "s" / "seed-0"))
    assert step == config.loop.generations
    np.testing.assert_allclose(
        np.concatenate([np.ravel(x) for x in jax.tree.leaves(centre(together.strategy_state))]),
        np.concatenate([np.ravel(x) for x in jax.tree.leaves(centre(alone.strategy_state))]),
        atol=1e-6,
    )


@pytest.mark.parametrize("env", ["fast", "swimmer"])
def test_envs_that_needed_help_train_a_generation(env, tmp_path):
    """fast has no physical system (no control range); swimmer's fluid model needed the
    ``jnp.clip`` fix. Both run a real generation from their preset."""
    config = config_lib.TrainConfig.make(
        env=env, episode_length=10, population_size=4, generations=1, eval_every=1,
        checkpoint_every=1, eval_episodes=1,
    )  # fmt: skip
    summary = train.train_config(config, str(tmp_path / env), stream=io.StringIO(), plot=False)
    assert summary["total_env_steps"] == 4 * 10 and np.isfinite(summary["final_eval_return"])


def test_loading_an_env_leaves_no_mujoco_log_behind(tmp_path, monkeypatch):
    from jaxes.tasks.brax.envs import load_env

    monkeypatch.chdir(tmp_path)
    load_env("halfcheetah")  # its model uses an attribute MuJoCo warns about
    assert os.listdir(tmp_path) == []


def test_the_docs_print_the_preset_table():
    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "training.md")) as f:
        assert presets.table() in f.read()
