"""``jaxes eval``, ``jaxes render`` and ``jaxes envs``: the commands that read a run (its
checkpointed centre policy, evaluated or replayed) or list what ``jaxes train`` accepts."""

from __future__ import annotations

import importlib
import os
import sys


def _loaded(args):
    """The run's config with eval's overrides, its task, the checkpoint step and state."""
    from jaxes.app import config as config_lib
    from jaxes.app import presets, train
    from jaxes.app.build import build

    for name in ("episodes", "episode_length"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise config_lib.ConfigError(
                f"--{name.replace('_', '-')}: expected an int >= 1, got {value}"
            )
    _refuse_finetune_run(args.run_dir, getattr(args, "command", "eval"))
    config, _, task, step, state = train.load_run(args.run_dir, args.checkpoint)
    changes = {}
    if hasattr(args, "episodes"):  # a meta-problem's evaluation is one unroll
        default = 1 if presets.is_unrolled(config.env.name) else 16
        changes["eval_episodes"] = default if args.episodes is None else args.episodes
    if args.episode_length is not None:
        changes["episode_length"] = args.episode_length
    if changes:
        config = config.replace(**changes)
        _, task = build(config)
    return config, task, step, state


def _refuse_finetune_run(run_dir: str, command: str) -> None:
    """A ``jaxes finetune`` run is read by ``jaxes export``, not by the Brax commands."""
    from jaxes.app import config as config_lib
    from jaxes.app.finetune import COMMAND
    from jaxes.training import rundir

    path = os.path.join(run_dir, rundir.CONFIG)
    saved = rundir.read_json(path) if os.path.isfile(path) else None
    if isinstance(saved, dict) and saved.get("command") == COMMAND:
        raise config_lib.ConfigError(
            f"{command}: {run_dir} is a `jaxes finetune` run: its held-out reward is eval_return "
            f"in metrics.jsonl, and `jaxes export {run_dir} --out DIR` writes its model"
        )


def eval_command(args) -> int:
    """``jaxes eval``: the noise-free return of a run's checkpointed centre policy."""
    import jax
    import numpy as np

    from jaxes.app import presets
    from jaxes.strategies import centre
    from jaxes.training import compilation

    config, task, step, state = _loaded(args)
    inputs = (jax.random.key(args.seed), centre(state.strategy_state), state.task_state)
    # Compiled as training compiles its evaluation.
    evaluate = compilation.compile(jax.jit(task.evaluate_policy).lower(*inputs))
    returns = np.asarray(evaluate(*inputs))
    over = f"{config.env.eval_episodes} episodes of up to {config.env.episode_length} steps"
    if presets.is_unrolled(config.env.name):  # a meta-problem has no episodes
        over = f"one unroll of {config.env.episode_length} inner steps"
    print(
        f"{config.env.name}: generation {step}, return {returns.mean():.2f} ± {returns.std():.2f} "
        f"over {over}"
    )
    return 0


def render_command(args) -> int:
    """``jaxes render``: ``RUN_DIR/replay.html``, one episode of a run's policy (Brax)."""
    from jaxes.app import config as config_lib
    from jaxes.app import presets
    from jaxes.strategies import centre
    from jaxes.tasks.brax import render

    config, task, step, state = _loaded(args)
    if presets.is_gymnax(config.env.name) or presets.is_unrolled(config.env.name):
        family = "a gymnax environment" if presets.is_gymnax(config.env.name) else "unrolled"
        raise config_lib.ConfigError(
            f"render: {config.env.name} is {family}; replays are for Brax runs only"
        )
    path = os.path.join(args.run_dir, "replay.html")
    params = centre(state.strategy_state)
    ret, steps = render.write_replay(
        task, params, state.task_state, config.env.episode_length, path, args.seed
    )
    print(f"wrote {path}: generation {step}, {steps} steps, return {ret:.1f}")
    return 0


def envs_command(args) -> int:
    """``jaxes envs``: the Brax environment names, then the gymnax ones, one per line, then the
    unrolled meta-problems; a family whose extra is not installed is one line on stderr naming
    it (an error if both are)."""
    from jaxes.app.presets import UNROLLED_ENVS
    from jaxes.extras import MissingExtra

    names, missing = [], []
    for module in ("jaxes.tasks.brax", "jaxes.tasks.gymnax"):
        try:
            names += importlib.import_module(module).env_names()
        except MissingExtra as err:
            missing.append(str(err))
    if not names:
        raise MissingExtra("; ".join(missing))
    print("\n".join(names + list(UNROLLED_ENVS)))
    for line in missing:
        print(f"jaxes: {line}", file=sys.stderr)
    return 0
