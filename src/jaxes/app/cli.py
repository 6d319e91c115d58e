"""The ``jaxes`` command: train, eval, render and envs.

Argument parsing, the commands, and the CLI's output policy: errors print one line
(``jaxes: error: ...``) and exit with status 2, no traceback, and nothing already written is
touched; Ctrl-C exits with 130 within moments, also during an XLA compile
(``jaxes.interrupts``).
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import sys
import threading
import time
import warnings

from jaxes.app import config as config_lib
from jaxes.app import interrupts, presets
from jaxes.app.config import TrainConfig, read_config
from jaxes.training import rundir

DEFAULTS = TrainConfig()


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not usage + message
        raise SystemExit(_fail(f"{message} (see `{self.prog} --help`)"))


def _default_text(field: str) -> str:
    if field in presets.DEFAULTS:
        return "the env's preset, see below"
    if field == "fitness_shaping":
        return ", ".join(
            f"{name} {config_lib.strategy_default(name, field)}"
            for name in config_lib.STRATEGIES
            if config_lib.takes(name, field)
        )
    value = getattr(DEFAULTS, field)
    return "none" if value is None else str(value)


def _version() -> str:
    from importlib.metadata import version

    return version("jaxes")


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


def _seeds(text: str) -> list[int]:
    """``0-4`` (both ends included) or ``0,3,7``."""
    try:
        if "-" in text.strip("-") and "," not in text:
            first, last = (int(x) for x in text.split("-"))
            if first > last:
                raise ValueError
            seeds = list(range(first, last + 1))
        else:
            seeds = [int(x) for x in text.split(",") if x.strip()]
        if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a range A-B with 0 <= A <= B, or distinct seeds like 0,3,7; got {text!r}"
        ) from None
    return seeds


# (flag, config field, type, help)
TRAIN_FLAGS = [
    ("--env", "env", str, "Brax environment (see `jaxes envs`)"),
    ("--backend", "backend", str, "physics backend: generalized, positional, spring or mjx"),
    ("--episode-length", "episode_length", int, "steps per episode"),
    ("--strategy", "strategy", str, "evolution strategy: " + ", ".join(config_lib.STRATEGIES)),
    ("--population", "population_size", int, "population size P (even for antithetic pairs)"),
    ("--sigma", "sigma", float, "perturbation scale σ (initial σ where it adapts)"),
    (
        "--learning-rate",
        "learning_rate",
        float,
        f"step size of the mean: {config_lib.LEARNING_RATE_MEANING}",
    ),
    ("--l2-coeff", "l2_coeff", float, "L2 penalty on the parameters (open_es)"),
    (
        "--fitness-shaping",
        "fitness_shaping",
        str,
        "centered_rank, z_score, raw or log_rank (open_es, pgpe, snes)",
    ),
    (
        "--noise",
        "noise",
        str,
        "noise source: table (a noise table sized to the problem), auto, gaussian, or lowrank",
    ),
    ("--noise-rank", "noise_rank", int, "rank r of --noise lowrank perturbations"),
    (
        "--vbn-reference-size",
        "vbn_reference_size",
        int,
        "observations in the reference batch of --policy vbn_mlp",
    ),
    (
        "--subspace-dim",
        "subspace_dim",
        int,
        "search a random K-dimensional subspace of the policy's parameters (intrinsic dimension)",
    ),
    (
        "--subspace-projection",
        "subspace_projection",
        str,
        "the subspace's projection: dense (small policies) or sparse",
    ),
    ("--generations", "generations", int, "generations to run (in total, when resuming)"),
    ("--seed", "seed", int, "random seed; the same seed gives the same run"),
    ("--policy", "policy", str, "linear, mlp or vbn_mlp (virtual batch normalisation)"),
    ("--hidden-sizes", "hidden_sizes", _int_list, "MLP hidden widths, e.g. 32,32"),
    ("--episodes-per-member", "episodes_per_member", int, "episodes averaged per member"),
    (
        "--action-repeat",
        "action_repeat",
        int,
        "frame skip K: each action held for K env steps, rewards summed",
    ),
    ("--timesteps", "timesteps", int, "stop once training has simulated this many env steps"),
    ("--target-return", "target_return", float, "stop at the first evaluation >= this return"),
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


def _checkpoint_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checkpoint",
        type=int,
        default=None,
        help="generation of the checkpoint to load (default: the newest readable one)",
    )
    parser.add_argument(
        "--episode-length",
        type=int,
        default=None,
        help="steps per episode (default: the run's episode_length)",
    )


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="jaxes",
        description="JAX-native evolution strategies on Brax physics.",
        epilog="Run `jaxes COMMAND --help` for each command's options.",
    )
    parser.add_argument("--version", action="version", version=f"jaxes {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = sub.add_parser(
        "train",
        help="train a policy with ES",
        description="Train a Brax policy with an evolution strategy. Writes config.json, "
        "metrics.jsonl, checkpoints/ and learning_curve.png into --out. Settings come from "
        "the env's preset, then --config FILE.toml, then the flags (each overrides the one "
        "before).",
        epilog="presets (jaxes.presets; sigma, learning_rate and l2_coeff are open_es's, "
        "other strategies use their own):\n" + presets.table(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
        "--config",
        default=None,
        metavar="FILE.toml",
        help="settings from a TOML file (any config.json field); flags override it",
    )
    train.add_argument(
        "--seeds",
        type=_seeds,
        default=None,
        help="several runs in one program (vmapped), e.g. 0-4 or 0,3,7: one run directory "
        "per seed under --out, plus summary.json",
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
    _checkpoint_flags(ev)

    render = sub.add_parser(
        "render",
        help="write an HTML replay of a run's policy",
        description="Roll out the newest checkpointed policy once and write "
        "RUN_DIR/replay.html, which any browser opens.",
    )
    render.add_argument("run_dir", help="a directory written by `jaxes train`")
    render.add_argument("--seed", type=int, default=0, help="seed of the start state (default 0)")
    _checkpoint_flags(render)

    sub.add_parser(
        "envs",
        help="list the Brax environments",
        description="List the environment names `jaxes train --env` accepts.",
    )
    return parser


def _train(args) -> int:
    import jax

    from jaxes import parallel
    from jaxes.app import train

    given = {f: getattr(args, f) for _, f, _, _ in TRAIN_FLAGS if getattr(args, f) is not None}
    if args.config is not None:
        given = {**config_lib.read_toml(args.config), **given}
    seeds = args.seeds
    if seeds is not None and "seed" in given:
        return _fail("--seed and --seeds: give one of them")
    if args.resume:
        if args.out is None:
            return _fail("--resume needs --out RUN_DIR, the run to continue")
        held = rundir.seeds_of(args.out)
        if held is not None:
            if seeds is not None and seeds != held:
                return _fail(f"--seeds: {args.out} holds the runs of seeds {held}, not {seeds}")
            seeds = held
        first = args.out if seeds is None else os.path.join(args.out, f"seed-{seeds[0]}")
        path = rundir.config_of(first, "--resume")
        # Flags repeat or change settings; the runner refuses any change but the stops.
        saved = read_config(path).to_dict()
        config = TrainConfig.from_dict({**saved, **given}, "flags")
    else:
        config = TrainConfig(**given, **({"seed": seeds[0]} if seeds else {}))
    out = args.out
    if out is None:
        out = os.path.join("runs", f"{config.env}-{time.strftime('%Y%m%d-%H%M%S')}")
    _RUN_DIR[0] = out
    parallel.initialize_distributed(
        args.coordinator_address, args.num_processes, args.process_id, args.coordinator_timeout
    )
    if seeds is None:
        summary = train.run(config, out, resume=args.resume)
    else:
        summary = train.run_seeds(config, seeds, out, resume=args.resume)
    if jax.process_index() != 0:
        return 0  # process 0 reports for everyone
    if seeds is None:
        print(f"done: {_result_text(summary)} ({summary['seconds']} s).")
        files = "config.json, metrics.jsonl, checkpoints/"
        plot = ", learning_curve.png" if summary.get("plot") else ""
    else:
        final = summary["final_eval_return"]
        median = "n/a" if final["median"] is None else f"{final['median']:.1f}"
        spread = (
            "" if final["median"] is None else f" (min {final['min']:.1f}, max {final['max']:.1f})"
        )
        print(
            f"done: median noise-free eval return {median}{spread} over {len(seeds)} seeds "
            f"({summary['seconds']} s)."
        )
        for run in summary["runs"]:
            print(f"  seed {run['seed']}: {_result_text(run)}")
        files = "seeds.json, summary.json, seed-*/"
        plot = ", learning_curves.png" if summary.get("plot") else ""
    print(f"files: {os.path.abspath(out)}/ ({files}{plot})")
    return 0


def _result_text(summary: dict) -> str:
    ret = summary["final_eval_return"]
    text = (
        f"noise-free eval return {'n/a' if ret is None else f'{ret:.1f}'} after "
        f"{summary['generations']} generations, {summary['total_env_steps']:,} env steps"
    )
    if summary["stopped"] == "target_return":
        text += f"; reached the target return at {summary['target_env_steps']:,} env steps"
    elif summary["stopped"] == "timesteps":
        text += "; stopped at the timesteps budget"
    return text


def _loaded(args):
    """The run's config with eval's overrides, its task, the checkpoint step and state."""
    import dataclasses

    from jaxes.app import config as config_lib
    from jaxes.app import train

    for name in ("episodes", "episode_length"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise config_lib.ConfigError(
                f"--{name.replace('_', '-')}: expected an int >= 1, got {value}"
            )
    config, _, task, step, state = train.load_run(args.run_dir, args.checkpoint)
    changes = {}
    if hasattr(args, "episodes"):
        changes["eval_episodes"] = args.episodes
    if args.episode_length is not None:
        changes["episode_length"] = args.episode_length
    if changes:
        config = dataclasses.replace(config, **changes)
        _, task = config_lib.build(config)
    return config, task, step, state


def _eval(args) -> int:
    import jax
    import numpy as np

    from jaxes.strategies import centre
    from jaxes.training import compilation

    config, task, step, state = _loaded(args)
    inputs = (jax.random.key(args.seed), centre(state.strategy_state), state.task_state)
    # Compiled as training compiles its evaluation.
    evaluate = compilation.compile(jax.jit(task.evaluate_policy).lower(*inputs))
    returns = np.asarray(evaluate(*inputs))
    print(
        f"{config.env}: generation {step}, return {returns.mean():.2f} ± {returns.std():.2f} "
        f"over {config.eval_episodes} episodes of up to {config.episode_length} steps"
    )
    return 0


def _render(args) -> int:
    from jaxes.strategies import centre
    from jaxes.tasks.brax import render

    config, task, step, state = _loaded(args)
    path = os.path.join(args.run_dir, "replay.html")
    params = centre(state.strategy_state)
    ret, steps = render.write_replay(
        task, params, state.task_state, config.episode_length, path, args.seed
    )
    print(f"wrote {path}: generation {step}, {steps} steps, return {ret:.1f}")
    return 0


def _envs(args) -> int:
    from jaxes.tasks.brax import env_names

    print("\n".join(env_names()))
    return 0


COMMANDS = {"train": _train, "eval": _eval, "render": _render, "envs": _envs}
# The run directory `jaxes train` writes, for the interrupt message.
_RUN_DIR: list[str | None] = [None]


def _interrupt_message(signum: int) -> str:
    from jaxes.training.checkpoint import complete_steps

    out = _RUN_DIR[0]
    name = "interrupted" if signum == signal.SIGINT else f"stopped by signal {signum}"
    if out is None:
        return name
    if complete_steps(os.path.join(out, "checkpoints")):
        return f"{name}; continue with `jaxes train --out {out} --resume`"
    if os.path.isfile(os.path.join(out, rundir.CONFIG)):
        return (
            f"{name} before the first checkpoint; run the same command again to start over in {out}"
        )
    return name


def _quiet_libraries() -> None:
    """Keeps library chatter (Brax's maintenance notice, orbax's and absl's logs) off the
    CLI's output: errors reach the user as the one line ``main`` prints."""
    warnings.filterwarnings("ignore")
    logging.getLogger().setLevel(logging.CRITICAL)
    for name in ("absl", "jax", "orbax"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def main(argv: list[str] | None = None) -> int:
    """Runs one ``jaxes`` command and returns its exit status (errors: one line, status 2)."""
    args = _parser().parse_args(argv)
    import jax

    from jaxes.training.checkpoint import CheckpointError

    # Compiled programs persist between runs, so a second `jaxes train` skips most compiles.
    jax.config.update(
        "jax_compilation_cache_dir",
        os.environ.get("JAXES_CACHE_DIR", os.path.expanduser("~/.cache/jaxes/xla")),
    )
    _quiet_libraries()
    try:
        return COMMANDS[args.command](args)
    except (ValueError, CheckpointError, OSError, ConnectionError) as err:
        if isinstance(err, BrokenPipeError):
            raise
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            # Out of space: what failed, where, and that what was written is safe.
            where = f" ({err.filename})" if err.filename else ""
            return _fail(
                f"{err.strerror}{where} while writing the run; files already written are whole, "
                "resume with --resume once it is fixed"
            )
        text = str(err).splitlines()[0] if str(err) else type(err).__name__
        return _fail(text)
    except KeyboardInterrupt:
        return _fail(_interrupt_message(signal.SIGINT))
    except Exception as err:  # noqa: BLE001 - the CLI promises one line, never a traceback
        if os.environ.get("JAXES_DEBUG"):
            raise
        first = str(err).splitlines()[0] if str(err) else ""
        return _fail(
            f"unexpected {type(err).__name__}: {first} (rerun with JAXES_DEBUG=1 for the "
            "traceback, and please report it)"
        )


def entry() -> None:
    """The ``jaxes`` console script: ``main`` with signals handled, ending the process at once
    (no interpreter teardown, whose library finalizers could print after the last line)."""
    interrupts.exit_on_signal(_interrupt_message)
    # Tracebacks that background threads and finalizers (orbax's) print on their own.
    threading.excepthook = lambda _args: None
    sys.unraisablehook = lambda _unraisable: None
    try:
        code = main()
    except BrokenPipeError:
        code = 0  # `jaxes envs | head`: the reader stopped listening, which is not an error
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = 0
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
