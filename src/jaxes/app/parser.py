"""The arguments of the ``jaxes`` command: its subcommands, their flags and help.

``TRAIN_FLAGS`` maps each flag of ``jaxes train`` to the ``TrainConfig`` field it sets; a flag
left out is ``None``, so that the env's preset, then ``--config FILE.toml``, fills it. Parse
errors print one line (``jaxes: error: ...``) and exit with status 2, as every CLI error does.
The flags of ``jaxes finetune`` and ``jaxes export`` are ``finetune_command``'s.
"""

from __future__ import annotations

import argparse

from jaxes.app import checks, presets
from jaxes.app.config import FIELDS, UNSET
from jaxes.app.errors import fail
from jaxes.app.finetune_command import finetune_arguments
from jaxes.strategies import STRATEGIES
from jaxes.training import checkpoint

# TrainConfig's own defaults, read without building one (that would load the default env,
# which needs the brax extra, before any command ran).
FIELD_DEFAULTS = {name: UNSET.get(name) for name in FIELDS}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not usage + message
        raise SystemExit(fail(f"{message} (see `{self.prog} --help`)"))


def _default_text(field: str) -> str:
    if field in presets.DEFAULTS:
        return "the env's preset, see below"
    if field == "fitness_shaping":
        return ", ".join(
            f"{name} {checks.strategy_default(name, field)}" for name in checks.takers(field)
        )
    value = FIELD_DEFAULTS[field]
    return "none" if value is None else str(value)


def _strategies(setting: str) -> str:
    return ", ".join(checks.takers(setting))


def _version() -> str:
    from importlib.metadata import version

    return version("jaxes")


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
    ("--env", "env", str, "Brax or gymnax environment, or meta_step_size (see `jaxes envs`)"),
    (
        "--preset",
        "preset",
        str,
        "named settings laid over the env's preset: table3 (Salimans et al.'s Table 3)",
    ),
    (
        "--backend",
        "backend",
        str,
        "physics backend (Brax): generalized, positional, spring or mjx",
    ),
    ("--episode-length", "episode_length", int, "steps per episode"),
    (
        "--strategy",
        "strategy",
        str,
        "evolution strategy: " + ", ".join(n for n in STRATEGIES if n not in checks.UNROLLED),
    ),
    ("--population", "population_size", int, "population size P (even for antithetic pairs)"),
    ("--sigma", "sigma", float, "perturbation scale σ (initial σ where it adapts)"),
    (
        "--learning-rate",
        "learning_rate",
        float,
        f"step size of the mean: {checks.LEARNING_RATE_MEANING}",
    ),
    (
        "--sigma-decay",
        "sigma_decay",
        float,
        f"σ times this factor in (0, 1] every generation ({_strategies('sigma_decay')})",
    ),
    ("--sigma-limit", "sigma_limit", float, "the floor of a decaying σ (with --sigma-decay)"),
    (
        "--learning-rate-decay",
        "learning_rate_decay",
        float,
        "the step size (of Adam, SGD) times this factor in (0, 1] every update "
        f"({_strategies('learning_rate_decay')})",
    ),
    (
        "--learning-rate-limit",
        "learning_rate_limit",
        float,
        "the floor of a decaying step size (with --learning-rate-decay)",
    ),
    (
        "--temperature",
        "temperature",
        float,
        "rank with evosax's DES weights at this temperature > 0 (0: log-rank utilities; "
        f"{_strategies('temperature')})",
    ),
    (
        "--elite-ratio",
        "elite_ratio",
        float,
        "share r of the population recombined (ga: kept as parents), μ = max(1, floor(r·P)) "
        f"({_strategies('elite_ratio')})",
    ),
    (
        "--lineage",
        "lineage",
        int,
        "keep ga's parents as seed lists of at most G >= --generations mutations each "
        "(Such et al.; unset: as parameters)",
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
    (
        "--policy",
        "policy",
        str,
        "linear, mlp or vbn_mlp (virtual batch normalisation); for gymnax grids (MinAtar) "
        "also conv and vbn_conv; meta_step_size: log_step_size",
    ),
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
    (
        "--checkpoint-every",
        "checkpoint_every",
        int,
        f"generations between checkpoints; the newest {checkpoint.KEEP} are kept",
    ),
    (
        "--devices",
        "devices",
        int,
        "devices to split the population over (0: on a CPU one per core, else every device; "
        "1: no split)",
    ),
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


def parser() -> argparse.ArgumentParser:
    """The parser of the ``jaxes`` command and its subcommands.

    Example:
      >>> args = parser().parse_args(["train", "--seeds", "0-2", "--population", "8"])
      >>> args.command, args.seeds, args.population_size, args.sigma
      ('train', [0, 1, 2], 8, None)
    """
    parser = _Parser(
        prog="jaxes",
        description="JAX-native evolution strategies: policies on Brax and gymnax "
        "environments, language models fine-tuned.",
        epilog="Run `jaxes COMMAND --help` for each command's options.",
    )
    parser.add_argument("--version", action="version", version=f"jaxes {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _train_arguments(sub)
    _run_reader_arguments(sub)
    finetune_arguments(sub)
    sub.add_parser(
        "envs",
        help="list the environments: Brax's, then gymnax's, then the meta-problems",
        description="List the environment names `jaxes train --env` accepts: Brax's, then "
        "gymnax's (a family whose extra is not installed is named on stderr), then the "
        "unrolled meta-problems pes and nres train on (meta_step_size).",
    )
    return parser


def _train_arguments(sub) -> None:
    train = sub.add_parser(
        "train",
        help="train a policy with ES",
        description="Train a policy on a Brax or gymnax environment (or the meta-parameters "
        "of an unrolled meta-problem, meta_step_size) with an evolution strategy. Writes "
        "config.json, metrics.jsonl, checkpoints/ and, with the plot extra "
        "(pip install 'jaxes[plot]'), learning_curve.png into --out. Settings come from "
        "the env's preset, then --config FILE.toml, then the flags (each overrides the one "
        "before).",
        epilog="presets (jaxes.app.presets; sigma, learning_rate and l2_coeff are open_es's "
        "(meta_step_size's also pes's and nres's), other strategies use their own):\n"
        + presets.table(),
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
    train.add_argument(
        "--log",
        default=None,
        metavar="TRACKERS",
        help="log to experiment trackers too: tensorboard, wandb, mlflow, csv, or several as "
        "a comma list (W&B offline and MLflow's SQLite store OUT/mlflow.db unless their env "
        "variables say otherwise); --resume continues the run's own unless given",
    )
    _host_arguments(train)


def _host_arguments(train) -> None:
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


def _run_reader_arguments(sub) -> None:
    """``jaxes eval`` and ``jaxes render``, which read a run's checkpointed policy."""
    ev = sub.add_parser(
        "eval",
        help="noise-free evaluation of a run's policy",
        description="Evaluate the newest checkpointed centre policy of a run.",
    )
    ev.add_argument("run_dir", help="a directory written by `jaxes train`")
    ev.add_argument(
        "--episodes", type=int, help="episodes to average (default 16; meta_step_size: 1)"
    )
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
