"""Brax runs from a ``TrainConfig``: train one, load one back, export its policy.

``train_config`` builds the strategy and task a config describes and hands them to the
library's runner (``jaxes.training.run``, for any strategy and task), recording the config as
``config.json``; ``train_config_seeds`` does so for several seeds at once. ``load_run`` and
``load_policy`` read a run directory back (any checkpoint), for evaluation, replays or a
deployed controller.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import jax

from jaxes import training
from jaxes.app.build import build
from jaxes.app.config import TrainConfig, read_config, recorded
from jaxes.step import TrainState
from jaxes.strategies import centre
from jaxes.training import checkpoint, rundir
from jaxes.training.settings import check_seeds
from jaxes.types import Strategy, Task


def train_config(
    config: TrainConfig,
    out: str,
    resume: bool = False,
    stream: TextIO | None = None,
    plot: bool = True,
    progress_fn: Callable[[int, dict], Any] | None = None,
    loggers: str | Sequence[str] | None = None,
) -> dict:
    """Trains as ``config`` says, writing into ``out``; returns ``training.run``'s summary.

    With ``resume=True`` the config must equal the run's ``config.json`` except for
    ``generations``. ``loggers``: experiment trackers, as ``training.run`` takes them.

    Example (skipped in doctests: compiling the Brax rollout takes tens of seconds on CPU):
      >>> import io
      >>> config = TrainConfig.make(episode_length=100, generations=10)
      >>> summary = train_config(config, "runs/pendulum", stream=io.StringIO())  # doctest: +SKIP
      >>> summary["generations"]  # doctest: +SKIP
      10
    """
    strategy, task = build(config)  # every setting is checked before anything is written
    return training.run(
        strategy,
        task,
        out,
        seed=config.loop.seed,
        resume=resume,
        progress_fn=progress_fn,
        stream=stream,
        plot=plot,
        loggers=loggers,
        **_loop_settings(config, rundir.check_out(out)),
    )


def train_config_seeds(
    config: TrainConfig,
    seeds,
    out: str,
    resume: bool = False,
    stream: TextIO | None = None,
    plot: bool = True,
    progress_fn: Callable[[int, dict], Any] | None = None,
    loggers: str | Sequence[str] | None = None,
) -> dict:
    """``train_config`` for every seed in ``seeds`` at once, vmapped in one program; writes
    ``out/seed-S`` per seed (``config`` with ``seed=S``) and returns ``training.run_seeds``'s
    summary (median and spread over the seeds).

    Example (skipped in doctests: compiling the Brax rollout takes tens of seconds on CPU):
      >>> config = TrainConfig.make(generations=10)
      >>> summary = train_config_seeds(config, [0, 1, 2], "runs/p3")  # doctest: +SKIP
      >>> len(summary["runs"]), summary["final_eval_return"]["median"] > 0  # doctest: +SKIP
      (3, True)
    """
    strategy, task = build(config)
    seeds = check_seeds(seeds)  # a list: its first run's config.json is read below
    return training.run_seeds(
        strategy,
        task,
        out,
        seeds=seeds,
        resume=resume,
        progress_fn=progress_fn,
        stream=stream,
        plot=plot,
        loggers=loggers,
        **_loop_settings(config, rundir.seed_dir(rundir.check_out(out), seeds[0])),
    )


def _loop_settings(config: TrainConfig, run_dir: str) -> dict:
    """What ``training.run`` and ``training.run_seeds`` take from a config, besides the seed;
    the settings as the run in ``run_dir`` (a new one, or one to resume) records them."""
    loop = dataclasses.asdict(config.loop)
    del loop["seed"]  # run takes it on its own, run_seeds one per seed
    return {
        **loop,
        "config": recorded(config, os.path.join(run_dir, rundir.CONFIG)),
        "title": f"{config.strategy.name} on {config.env.name} ({config.env.backend}), "
        f"P={config.strategy.population_size}",
    }


def load_run(
    out: str, checkpoint_step: int | None = None
) -> tuple[TrainConfig, Strategy, Task, int, TrainState]:
    """Config, strategy, task, and the state of checkpoint ``checkpoint_step`` (default: the
    newest) of a run directory.

    Example (a run directory as ``run`` starts it, made by hand so that nothing is trained):
      >>> import os, tempfile
      >>> from jaxes.training.checkpoint import Checkpointer
      >>> tmp = tempfile.TemporaryDirectory()
      >>> config = TrainConfig.make(population_size=8, policy="linear")
      >>> with open(os.path.join(tmp.name, "config.json"), "w") as f:
      ...     _ = f.write(config.to_json())
      >>> ckpt = Checkpointer(rundir.checkpoints_of(tmp.name))
      >>> ckpt.save(0, training.init_state(*build(config), config.loop.seed))
      >>> ckpt.close()
      >>> config, strategy, task, step, state = load_run(tmp.name)
      >>> config.env.policy, step, int(state.generation)
      ('linear', 0, 0)
      >>> load_run(tmp.name, checkpoint_step=5)  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      jaxes.training.checkpoint.CheckpointError: checkpoint: no checkpoint 5 in ...; it has [0]
      >>> tmp.cleanup()
    """
    config = read_config(rundir.config_of(out, "run_dir"))
    strategy, task = build(config)
    directory = rundir.checkpoints_of(out)
    steps = checkpoint.complete_steps(directory)
    if checkpoint_step is not None and checkpoint_step not in steps:
        raise checkpoint.CheckpointError(
            f"checkpoint: no checkpoint {checkpoint_step} in {directory}; it has {steps}"
        )
    like = training.init_state(strategy, task, config.loop.seed)
    step, state = checkpoint.restore_run_state(directory, like, checkpoint_step)
    return config, strategy, task, step, state


def load_policy(out: str, checkpoint_step: int | None = None) -> Callable[[jax.Array], jax.Array]:
    """A run's centre policy as a plain jitted ``act(obs) -> action``, its observation
    normalisation included (like Brax's ``make_inference_fn``, with the parameters bound).

    ``obs`` may be one observation or a batch (leading axes are kept).

    Example (skipped in doctests: it needs a trained run):
      >>> import jax.numpy as jnp
      >>> act = load_policy("runs/pendulum")  # doctest: +SKIP
      >>> act(jnp.zeros(4)).shape  # doctest: +SKIP
      (1,)
    """
    _, _, task, _, state = load_run(out, checkpoint_step)
    params, task_state = centre(state.strategy_state), state.task_state

    def act(obs):
        return task.act(params, obs, task_state)

    return jax.jit(act)


# Renamed so that "run" means one thing, the library's runner (``jaxes.training.run``); the
# old names warn until 2027-06-01 and then go.
_RENAMED = {"run": "train_config", "run_seeds": "train_config_seeds"}


def __getattr__(name: str):
    if name in _RENAMED:
        warnings.warn(
            f"jaxes.app.train.{name} is now jaxes.app.train.{_RENAMED[name]}; the old name "
            "goes after 2027-06-01",
            DeprecationWarning,
            stacklevel=2,
        )
        return globals()[_RENAMED[name]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
