"""The ``jaxes`` command: train, eval, render and envs.

Errors print one line (``jaxes: error: ...``) and exit with status 2; no traceback, and nothing
already written is touched.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import warnings

from jaxes import train as train_lib
from jaxes.train import TrainConfig

DEFAULTS = TrainConfig()


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not usage + message
        raise SystemExit(_fail(f"{message} (see `{self.prog} --help`)"))


def _default_text(field: str) -> str:
    if field in ("sigma", "learning_rate"):
        k = 0 if field == "sigma" else 1
        return ", ".join(f"{name} {v[k]:g}" for name, v in train_lib.STRATEGY_DEFAULTS.items())
    return str(getattr(DEFAULTS, field))


def _fail(message: str) -> int:
    sys.stderr.write(f"jaxes: error: {message}\n")
    return 2


def _int_list(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"expected positive ints like 32,32, got {text!r}")
    return sizes


# (flag, config field, type, help)
TRAIN_FLAGS = [
    ("--env", "env", str, "Brax environment (see `jaxes envs`)"),
    ("--backend", "backend", str, "physics backend: generalized, positional, spring or mjx"),
    ("--episode-length", "episode_length", int, "steps per episode"),
    ("--strategy", "strategy", str, "evolution strategy: " + ", ".join(train_lib.STRATEGIES)),
    ("--population", "population_size", int, "population size P (even for antithetic pairs)"),
    ("--sigma", "sigma", float, "perturbation scale σ (initial σ where it adapts)"),
    (
        "--learning-rate",
        "learning_rate",
        float,
        f"step size of the mean: {train_lib.LEARNING_RATE_MEANING}",
    ),
    ("--generations", "generations", int, "generations to run (in total, when resuming)"),
    ("--seed", "seed", int, "random seed; the same seed gives the same run"),
    ("--policy", "policy", str, "linear or mlp"),
    ("--hidden-sizes", "hidden_sizes", _int_list, "MLP hidden widths, e.g. 32,32"),
    ("--episodes-per-member", "episodes_per_member", int, "episodes averaged per member"),
    ("--eval-every", "eval_every", int, "generations per fused block and between evaluations"),
    ("--eval-episodes", "eval_episodes", int, "episodes of each noise-free evaluation"),
    ("--checkpoint-every", "checkpoint_every", int, "generations between checkpoints"),
    ("--devices", "devices", int, "devices to split the population over (0: all, all hosts)"),
    (
        "--normalize-observations",
        "normalize_observations",
        argparse.BooleanOptionalAction,
        "feed the policy running-normalised observations (off: ARS V1, on: V2)",
    ),
]


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="jaxes",
        description="JAX-native evolution strategies on Brax physics.",
        epilog="Run `jaxes COMMAND --help` for each command's options.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = sub.add_parser(
        "train",
        help="train a policy with ES",
        description="Train a Brax policy with an evolution strategy. Writes config.json, "
        "metrics.jsonl, checkpoints/ and learning_curve.png into --out.",
    )
    for flag, field, kind, text in TRAIN_FLAGS:
        how = {"action": kind} if kind is argparse.BooleanOptionalAction else {"type": kind}
        train.add_argument(
            flag,
            dest=field,
            default=None,
            help=f"{text} (default: {_default_text(field)})",
            **how,
        )
    train.add_argument(
        "--out",
        default=None,
        help="run directory (default: runs/ENV-DATE-TIME); must be new or empty",
    )
    train.add_argument(
        "--resume", action="store_true", help="continue the run in --out from its newest checkpoint"
    )
    hosts = train.add_argument_group(
        "several hosts",
        "Start one `jaxes train` per process with the same flags and --out; process 0 writes "
        "the run files. Each flag may also come from the environment variable it names.",
    )
    hosts.add_argument(
        "--coordinator-address", help="HOST:PORT of process 0 (env JAXES_COORDINATOR_ADDRESS)"
    )
    hosts.add_argument(
        "--num-processes", type=int, help="number of processes (env JAXES_NUM_PROCESSES)"
    )
    hosts.add_argument(
        "--process-id", type=int, help="this process, 0 .. num-processes - 1 (env JAXES_PROCESS_ID)"
    )
    hosts.add_argument(
        "--coordinator-timeout",
        type=int,
        default=60,
        help="seconds to wait for every process to join (default 60)",
    )

    ev = sub.add_parser(
        "eval",
        help="noise-free evaluation of a run's policy",
        description="Evaluate the newest checkpointed centre policy of a run.",
    )
    ev.add_argument("run_dir", help="a directory written by `jaxes train`")
    ev.add_argument("--episodes", type=int, default=16, help="episodes to average (default 16)")
    ev.add_argument("--seed", type=int, default=0, help="seed for the start states (default 0)")

    render = sub.add_parser(
        "render",
        help="write an HTML replay of a run's policy",
        description="Roll out the newest checkpointed policy once and write "
        "RUN_DIR/replay.html, which any browser opens.",
    )
    render.add_argument("run_dir", help="a directory written by `jaxes train`")
    render.add_argument("--seed", type=int, default=0, help="seed of the start state (default 0)")

    sub.add_parser(
        "envs",
        help="list the Brax environments",
        description="List the environment names `jaxes train --env` accepts.",
    )
    return parser


def _train(args) -> int:
    import jax

    from jaxes import parallel, train

    parallel.initialize_distributed(
        args.coordinator_address, args.num_processes, args.process_id, args.coordinator_timeout
    )
    given = {f: getattr(args, f) for _, f, _, _ in TRAIN_FLAGS if getattr(args, f) is not None}
    if args.resume:
        if args.out is None:
            return _fail("--resume needs --out RUN_DIR, the run to continue")
        train.prepare_run_dir(args.out, resume=True)
        with open(os.path.join(args.out, "config.json")) as f:
            saved = json.load(f)
        for field, value in given.items():
            old = tuple(saved[field]) if field == "hidden_sizes" else saved[field]
            if field != "generations" and value != old:
                return _fail(
                    f"--resume: {field}={value!r} differs from the run's {old!r}; "
                    "only --generations may change"
                )
        config = TrainConfig.from_dict({**saved, **given})
    else:
        config = TrainConfig(**given)
    out = args.out or os.path.join("runs", f"{config.env}-{time.strftime('%Y%m%d-%H%M%S')}")
    summary = train.run(config, out, resume=args.resume)
    if jax.process_index() != 0:
        return 0  # process 0 reports for everyone
    print(
        f"done: noise-free eval return {summary['final_eval_return']:.1f} after "
        f"{summary['generations']} generations ({summary['seconds']} s)."
    )
    print(
        f"files: {summary['run_dir']}/ (config.json, metrics.jsonl, checkpoints/"
        + (", learning_curve.png)" if summary.get("plot") else ")")
    )
    return 0


def _eval(args) -> int:
    import jax
    import numpy as np

    from jaxes import train

    if args.episodes < 1:
        return _fail(f"--episodes: expected an int >= 1, got {args.episodes}")
    config, _, task, step, state = train.load_run(args.run_dir)
    config = dataclasses.replace(config, eval_episodes=args.episodes)
    _, task = train.build(config)
    returns = np.asarray(
        jax.jit(task.evaluate_policy)(
            jax.random.key(args.seed), train.centre_params(state.strategy_state), state.task_state
        )
    )
    print(
        f"{config.env}: generation {step}, return {returns.mean():.2f} ± {returns.std():.2f} "
        f"over {args.episodes} episodes"
    )
    return 0


def _render(args) -> int:
    from jaxes import render, train

    config, _, task, step, state = train.load_run(args.run_dir)
    path = os.path.join(args.run_dir, "replay.html")
    ret, steps = render.write_replay(task, config, state, path, args.seed)
    print(f"wrote {path}: generation {step}, {steps} steps, return {ret:.1f}")
    return 0


def _envs(args) -> int:
    from jaxes.tasks.brax import env_names

    print("\n".join(env_names()))
    return 0


COMMANDS = {"train": _train, "eval": _eval, "render": _render, "envs": _envs}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``jaxes`` command."""
    args = _parser().parse_args(argv)
    import jax

    from jaxes.checkpoint import CheckpointError

    # Compiled programs persist between runs, so a second `jaxes train` skips most compiles.
    jax.config.update(
        "jax_compilation_cache_dir",
        os.environ.get("JAXES_CACHE_DIR", os.path.expanduser("~/.cache/jaxes/xla")),
    )

    warnings.filterwarnings("ignore")  # brax's maintenance notice and friends
    try:
        return COMMANDS[args.command](args)
    except (ValueError, CheckpointError, OSError, ConnectionError) as err:
        return _fail(str(err).splitlines()[0] if str(err) else type(err).__name__)
    except KeyboardInterrupt:
        return _fail("interrupted; continue with `jaxes train --out RUN_DIR --resume`")


if __name__ == "__main__":
    sys.exit(main())
