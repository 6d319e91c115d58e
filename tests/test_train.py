"""End-to-end training: learning, checkpoints, and bit-identical resume after SIGKILL."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

import jaxes
from jaxes import training
from jaxes.app import train
from jaxes.app.build import build
from jaxes.app.checks import strategy_default
from jaxes.app.config import TrainConfig
from jaxes.step import generation_step
from jaxes.strategies import STRATEGIES

TINY = dict(
    episode_length=100,
    population_size=8,
    generations=20,
    eval_every=5,
    checkpoint_every=5,
    eval_episodes=2,
    policy="linear",
)
from conftest import TINY_FLAGS  # noqa: E402
from helpers import assert_states_identical  # noqa: E402


def jaxes_cli(*args, **kwargs):
    return subprocess.Popen(
        [sys.executable, "-m", "jaxes", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def final_state(run_dir):
    _, _, _, step, state = train.load_run(run_dir)
    return step, state


@pytest.mark.slow
def test_default_run_learns_inverted_pendulum(tmp_path):
    out = tmp_path / "run"
    with open(os.devnull, "w") as quiet:
        summary = train.train_config(TrainConfig.make(), str(out), stream=quiet)
    assert summary["final_eval_return"] >= 950
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    generations = TrainConfig.make().loop.generations
    assert [x["generation"] for x in lines] == list(range(1, generations + 1))
    # Strict JSON: every line parses without Python's NaN/Infinity extensions.
    for line in (out / "metrics.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda name: pytest.fail(f"non-JSON {name}"))
    assert (out / "learning_curve.png").stat().st_size > 10_000
    assert json.loads((out / "config.json").read_text())["env"] == "inverted_pendulum"


@pytest.fixture(scope="module")
def untrained_return():
    """The default task's noise-free return of the initial policy, before any update."""
    strategy, task = build(TrainConfig.make())
    state = training.init_state(strategy, task, seed=0)
    params = jaxes.centre(state.strategy_state)
    returns = jax.jit(task.evaluate_policy)(jax.random.key(0), params, state.task_state)
    return float(np.mean(returns))


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["pgpe", "snes", "ars", "sep_cma_es", "guided_es"])
def test_every_strategy_learns_inverted_pendulum_with_its_defaults(
    strategy, tmp_path, untrained_return
):
    # The default task (1000-step episodes, P = 32, linear policy), 25 generations: every
    # strategy measured 1000 from generation 15 on, so the last two evaluations (20, 25)
    # come after that.
    config = TrainConfig.make(strategy=strategy, generations=25, checkpoint_every=25)
    with open(os.devnull, "w") as quiet:
        train.train_config(config, str(tmp_path / "run"), stream=quiet, plot=False)
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [x["eval_return"] for x in lines if x.get("eval_return") is not None]
    assert max(evals) >= 950, evals
    # Learned and kept: the last two evaluations, not the best of five (every strategy
    # measured 1000, the episode's maximum, from generation 15 on; the untrained policy about
    # 80, so the task is not solved before training).
    assert np.median(evals[-2:]) >= 950, evals
    assert untrained_return <= 250, untrained_return
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    # Left unset, σ and the step size are the strategy factory's own Python defaults.
    assert saved["sigma"] == strategy_default(strategy, "sigma")
    assert saved["learning_rate"] == strategy_default(strategy, "learning_rate")


@pytest.fixture(scope="session")
def uninterrupted(tiny_run):
    return tiny_run


@pytest.mark.slow
def test_resume_after_sigkill_is_bit_identical(uninterrupted, tmp_path):
    out = tmp_path / "killed"
    proc = jaxes_cli("train", *TINY_FLAGS, "--out", str(out))
    deadline = time.time() + 300
    while not (out / "checkpoints" / "10").exists():
        assert proc.poll() is None and time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    resumed = jaxes_cli("train", "--out", str(out), "--resume")
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    step_a, state_a = final_state(uninterrupted)
    step_b, state_b = final_state(out)
    assert step_a == step_b == 20
    assert_states_identical(state_a, state_b)
    lines = (out / "metrics.jsonl").read_text().splitlines()
    generations = [json.loads(x)["generation"] for x in lines]
    assert generations == list(range(1, 21))


def test_a_shorter_run_extended_by_resume_equals_the_whole_run(uninterrupted, tmp_path):
    out = str(tmp_path / "short")
    config = TrainConfig.make(**TINY)
    with open(os.devnull, "w") as quiet:
        train.train_config(config.replace(generations=10), out, stream=quiet, plot=False)
        train.train_config(config, out, resume=True, stream=quiet, plot=False)
    assert_states_identical(final_state(uninterrupted)[1], final_state(out)[1])


def test_a_second_run_with_the_same_seed_writes_the_same_metrics(uninterrupted, tmp_path):
    """What reproducibility pins on one machine (docs/training.md, "Reproducibility"): the
    same seed, settings and versions give the same numbers, line for line; only the wall
    clock differs. The first run went through the CLI in its own process, this one in-process."""
    out = tmp_path / "again"
    with open(os.devnull, "w") as quiet:
        train.train_config(TrainConfig.make(**TINY), str(out), stream=quiet, plot=False)

    def numbers(run_dir):
        lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in line.items() if k != "wall_time_s"} for line in lines]

    first, second = numbers(uninterrupted), numbers(out)
    assert len(first) == 20 and any(line.get("eval_return") is not None for line in first)
    assert second == first
    assert_states_identical(final_state(uninterrupted)[1], final_state(out)[1])


def test_generation_step_composes_with_scan():
    strategy, task = build(TrainConfig.make(**TINY))
    state = training.init_state(strategy, task, seed=0)
    step = jax.jit(generation_step(strategy, task))
    looped = state
    for _ in range(3):
        looped, _ = step(looped)
    scanned, metrics = jax.jit(
        lambda s: jax.lax.scan(lambda c, _: generation_step(strategy, task)(c), s, None, 3)
    )(state)
    assert int(scanned.generation) == 3 and metrics["env_steps"].shape == (3,)
    np.testing.assert_allclose(
        scanned.strategy_state.params["params"]["Dense_0"]["kernel"],
        looped.strategy_state.params["params"]["Dense_0"]["kernel"],
        atol=1e-6,
    )


@pytest.mark.parametrize("name", ["cma_es", "xnes"])
def test_the_full_covariance_strategies_build_and_trace_a_brax_generation(name):
    """``--strategy cma_es|xnes``: the config passes them only what they take, and a generation
    of the policy (its d × d covariance included) traces."""
    config = TrainConfig.make(**{**TINY, "strategy": name})
    strategy, task = build(config)
    assert strategy.traits.name == name
    state = jax.eval_shape(lambda: training.init_state(strategy, task, seed=0))
    after, metrics = jax.eval_shape(generation_step(strategy, task), state)
    d = sum(x.size for x in jax.tree.leaves(state.strategy_state.params))
    assert after.strategy_state.sigma.shape == () and "fitness_mean" in metrics
    own = after.strategy_state
    matrix = own.covariance if name == "cma_es" else own.shape
    assert matrix.shape == (d, d)


def test_cr_fm_nes_builds_and_traces_a_brax_generation_with_an_o_of_d_state():
    """``--strategy cr_fm_nes``: σ, D, v and the paths are scalars or d-vectors."""
    config = TrainConfig.make(**{**TINY, "strategy": "cr_fm_nes"})
    strategy, task = build(config)
    assert strategy.traits.name == "cr_fm_nes" and strategy.traits.antithetic
    state = jax.eval_shape(lambda: training.init_state(strategy, task, seed=0))
    after, metrics = jax.eval_shape(generation_step(strategy, task), state)
    d = sum(x.size for x in jax.tree.leaves(state.strategy_state.params))
    own = after.strategy_state
    assert own.sigma.shape == () and own.v.shape == own.diagonal.shape == (d,)
    assert "fitness_mean" in metrics


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"checkpoint_every": 7}, r"checkpoint_every: must be a multiple of eval_every \(5\)"),
        (
            {"strategy": "cma"},
            re.escape(f"strategy: unknown 'cma'; allowed: {sorted(STRATEGIES)}"),
        ),
        ({"generations": 0}, r"generations: expected an int >= 1, got 0"),
    ],
)
def test_bad_config(changes, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig.make(**{**TINY, **changes})


def test_a_preset_checkpoint_cadence_follows_the_eval_every_a_user_chose():
    # halfcheetah's preset checkpoints every 10; a user's --eval-every 4 rounds it up to 12
    # instead of failing on a setting the user never gave. An explicit one is still checked.
    assert TrainConfig.make(env="halfcheetah", eval_every=4).loop.checkpoint_every == 12
    assert TrainConfig.make(env="halfcheetah", eval_every=5).loop.checkpoint_every == 10
    with pytest.raises(ValueError, match=r"checkpoint_every: must be a multiple of eval_every"):
        TrainConfig.make(env="halfcheetah", eval_every=4, checkpoint_every=10)


def test_the_old_names_of_the_config_entry_warn_and_still_work():
    # "run" is the library's runner (jaxes.training.run); a config's entry is train_config.
    for old, new in (("run", train.train_config), ("run_seeds", train.train_config_seeds)):
        with pytest.warns(DeprecationWarning, match=f"train.{old} is now"):
            assert getattr(train, old) is new
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        train.nonsense  # noqa: B018
