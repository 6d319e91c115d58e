"""``jaxes train --env meta_step_size`` (issue 62): pes and nres train from the command line on
an unrolled meta-problem, resume bit-identically, split over devices, and every setting the
meta-problem cannot honour is one line naming it.

The meta-problem is ``jaxes.tasks.unrolled.step_size_task``: the log step size of gradient
descent on a quadratic, from -4, whose meta-loss (minus the evaluation's return) is about 56
there and about 7 at its minimum near -2.0 (tests/test_unrolled.py).
"""

import json
import os

import jax
import numpy as np
import pytest
from helpers import assert_states_identical

from jaxes.app import cli, train
from jaxes.app.build import build
from jaxes.app.checks import ConfigError
from jaxes.app.config import TrainConfig

GENERATIONS = 60


def _train(out, resume=False, **settings):
    config = TrainConfig.make(env="meta_step_size", **settings)
    with open(os.devnull, "w") as quiet:
        return train.train_config(config, str(out), resume=resume, stream=quiet, plot=False)


def _evals(out) -> list[float]:
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [x["eval_return"] for x in lines if x.get("eval_return") is not None]


@pytest.mark.parametrize("strategy", ["pes", "nres"])
def test_pes_and_nres_train_the_step_size_from_the_command_line(strategy, tmp_path):
    config = TrainConfig.make(env="meta_step_size", strategy=strategy)
    es, task = build(config)
    assert es.population_size == 8 and task.member_state is not None
    assert (task.unroll_length, task.truncation_length) == (100, 10)
    start = float(task.evaluate_policy(jax.random.key(0), task.init_params(None), None)[0])
    summary = _train(tmp_path / "run", strategy=strategy, generations=GENERATIONS)
    evals = _evals(tmp_path / "run")
    # Measured: -6.0 (pes) and -5.9 (nres) after 150 generations, from about -56 at log η = -4.
    assert start < -40 and summary["final_eval_return"] > -12, (start, evals)
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (saved["strategy"], saved["env"], saved["backend"]) == (
        strategy,
        "meta_step_size",
        "unrolled",
    )
    assert (saved["sigma"], saved["learning_rate"], saved["l2_coeff"]) == (0.1, 0.1, None)


def test_a_resumed_pes_run_is_the_uninterrupted_run_bit_for_bit(tmp_path):
    whole, split = tmp_path / "whole", tmp_path / "split"
    settings = dict(strategy="pes", eval_every=10, checkpoint_every=10)
    _train(whole, generations=30, **settings)
    _train(split, generations=20, **settings)
    _train(split, resume=True, generations=30, **settings)
    (_, _, _, step_a, a), (_, _, _, step_b, b) = train.load_run(whole), train.load_run(split)
    assert step_a == step_b == 30
    # The task state (each particle's inner state, the truncation count) resumes too.
    assert_states_identical(a, b)
    assert _evals(whole) == _evals(split)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"env": "hopper", "strategy": "nres"}, "^strategy: nres estimates gradients of unrolled"),
        ({"episode_length": 95}, r"^episode_length: .* a multiple of 10 \(got 95\)"),
        ({"action_repeat": 2}, "^action_repeat: meta_step_size runs one unroll per member"),
        ({"eval_episodes": 4}, "^eval_episodes: meta_step_size runs one unroll"),
        ({"episodes_per_member": 2}, "^episodes_per_member: meta_step_size"),
        ({"backend": "spring"}, "^backend: meta_step_size is an unrolled meta-problem"),
        ({"policy": "mlp"}, r"^policy: unknown 'mlp'; allowed: \['log_step_size'\]"),
        ({"normalize_observations": True}, "^normalize_observations: meta_step_size has no obs"),
    ],
)
def test_a_setting_the_meta_problem_cannot_honour_is_refused_naming_it(settings, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig.make(**{"env": "meta_step_size", **settings})


def test_eval_reads_a_meta_problem_run_and_render_refuses_it_in_one_line(tmp_path, capsys):
    out = tmp_path / "run"
    _train(out, strategy="nres", generations=10)
    assert cli.main(["eval", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("meta_step_size: generation 10, return -")
    assert printed.rstrip().endswith("over one unroll of 100 inner steps")
    try:
        code = cli.main(["render", str(out)])
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "render: meta_step_size is unrolled; replays are for Brax runs only" in err
    assert cli.main(["envs"]) == 0
    assert capsys.readouterr().out.split()[-1] == "meta_step_size"


def test_a_meta_problem_run_splits_over_devices_as_on_one(tmp_path):
    """Each device evaluates its own particles' inner states (``Task.member_state``); the run
    on two of the test's four CPU devices ends where the one-device run does."""
    one, two = tmp_path / "one", tmp_path / "two"
    _train(one, strategy="nres", generations=20, eval_every=10, devices=1)
    _train(two, strategy="nres", generations=20, eval_every=10, devices=2)
    (_, _, _, _, a), (_, _, _, _, b) = train.load_run(one), train.load_run(two)
    np.testing.assert_allclose(a.strategy_state.params, b.strategy_state.params, rtol=1e-6)
    np.testing.assert_allclose(a.task_state.inner, b.task_state.inner, rtol=1e-6)
    np.testing.assert_allclose(_evals(one), _evals(two), rtol=1e-5)
