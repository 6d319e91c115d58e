"""``jaxes train``: the settings from flags, a TOML file and (resuming) the run's
``config.json``; the run, one seed or several; the result in a few lines."""

from __future__ import annotations

import json
import os

from jaxes.app import config as config_lib
from jaxes.app.config import TrainConfig, read_config
from jaxes.app.errors import fail
from jaxes.app.parser import TRAIN_FLAGS
from jaxes.training import loggers, rundir

# The run directory `jaxes train` writes, for the message of an interrupt.
RUN_DIR: list[str | None] = [None]


def train_command(args) -> int:
    """Runs ``jaxes train`` with the parsed ``args``; returns the exit status."""
    import jax

    from jaxes import parallel
    from jaxes.app import train

    given = {f: getattr(args, f) for _, f, _, _ in TRAIN_FLAGS if getattr(args, f) is not None}
    if args.config is not None:
        given = {**config_lib.read_toml(args.config), **given}
    seeds = args.seeds
    if seeds is not None and "seed" in given:
        return fail("--seed and --seeds: give one of them")
    path = None
    if args.resume:
        if args.out is None:
            return fail("--resume needs --out RUN_DIR, the run to continue")
        seeds, path = rundir.resume_target(args.out, seeds)
    # JAX's runtime is chosen before the config is built: building a gymnax env's config loads
    # the env, which starts JAX, after which neither choice can be made.
    distributed = parallel.initialize_distributed(
        args.coordinator_address, args.num_processes, args.process_id, args.coordinator_timeout
    )
    if not distributed:  # several processes: one device each unless XLA_FLAGS says otherwise
        parallel.use_cpu_cores(_devices(given, path))
    if path is not None:
        # Flags repeat or change settings; the runner refuses any change but the stops.
        saved = read_config(path).to_dict()
        config = TrainConfig.from_dict({**saved, **given}, "flags")
    else:
        config = TrainConfig.make(**given, **({"seed": seeds[0]} if seeds else {}))
    out = args.out if args.out is not None else rundir.default_out(config.env.name)
    RUN_DIR[0] = out
    logs = args.log
    if logs is None and args.resume:  # the trackers the run logged to, continued
        logs = loggers.recorded(out if seeds is None else rundir.seed_dir(out, seeds[0]))
    if seeds is None:
        summary = train.train_config(config, out, resume=args.resume, loggers=logs)
    else:
        summary = train.train_config_seeds(config, seeds, out, resume=args.resume, loggers=logs)
    if jax.process_index() == 0:  # process 0 reports for everyone
        _print_result(summary, seeds, out)
    return 0


def _devices(given: dict, saved: str | None) -> int | None:
    """The CPU devices a run asks for, read before anything starts JAX: ``--devices`` (or the
    TOML's), else the resumed run's ``config.json``; ``None`` (one per core) for 0, for none,
    and for a value the config will refuse with its own error."""
    devices = given.get("devices")
    if devices is None and saved is not None:
        try:
            with open(saved) as f:
                devices = json.load(f).get("devices")
        except (OSError, ValueError, AttributeError):  # read_config reports a damaged file
            devices = None
    valid = isinstance(devices, int) and not isinstance(devices, bool) and devices >= 1
    return devices if valid else None


# The runner draws the curves only where matplotlib is installed.
NO_PLOT = "; no learning curve without the 'plot' extra: pip install 'jaxes[plot]'"


def _print_result(summary: dict, seeds: list[int] | None, out: str) -> None:
    if seeds is None:
        print(f"done: {_result_text(summary)} ({summary['seconds']} s).")
        files = "config.json, metrics.jsonl, checkpoints/"
        plot = ", learning_curve.png" if summary.get("plot") else NO_PLOT
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
        plot = ", learning_curves.png" if summary.get("plot") else NO_PLOT
    print(f"files: {os.path.abspath(out)}/ ({files}{plot})")


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
