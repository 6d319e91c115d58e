"""Hopper at accelerator scale with ``train.train_config``: the population split over every device.

The full settings (the defaults) are what a hopper run on a GPU or TPU looks like: P = 4096
members of a (64, 64) tanh MLP policy, 1000-step episodes, 300 generations, the population
split evenly over every visible device (``devices=0``; ``parallel.sharded_step`` inside
``train.train_config``). That is up to 4 million environment steps per generation and 1.2 billion in
all, so the full run needs an accelerator (it has not been run yet: no accelerator was
available when this was written). The step sizes are ``the strategies' own defaults``; the full
run is not part of the test suite. ``--quick`` shrinks it to what a CPU finishes quickly (P = 16,
100-step episodes, 6 generations): it only shows that the pipeline runs and what it reports,
not a hopping policy.

The run writes a run directory (``config.json``, ``metrics.jsonl``, ``checkpoints/`` and a
learning curve) into ``--out``, by default a fresh temporary directory, never into the
repository. Continue or inspect it with ``jaxes train --out DIR --resume``,
``jaxes eval DIR``, ``jaxes render DIR``.

Run:
  python examples/brax_hopper.py [--quick] [--out DIR] [--population P] [--generations N]

It ends with ``hopper: eval return R after N generations, S env steps/s after compile``.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import jax

from jaxes import parallel, plotting
from jaxes.app import train
from jaxes.app.config import TrainConfig
from jaxes.strategies import STRATEGIES

# Optional speed-up: reuse compiled programs across runs (the test suite and `make` set this).
if os.environ.get("JAXES_CACHE_DIR"):
    jax.config.update("jax_compilation_cache_dir", os.environ["JAXES_CACHE_DIR"])

FULL = dict(
    population_size=4096,
    episode_length=1000,
    generations=300,
    eval_every=10,
    checkpoint_every=50,
    eval_episodes=16,
)
QUICK = dict(
    population_size=16,
    episode_length=100,
    generations=6,
    eval_every=2,
    checkpoint_every=6,
    eval_episodes=2,
)


def steps_per_second(metrics_path: str) -> float:
    """Training env steps per second over every block but the first (which includes
    compilation); each block's time also covers its noise-free evaluation."""
    lines = plotting.read_metrics(metrics_path)
    # Every line of a block carries the wall time at the block's end.
    first_end = lines[0]["wall_time_s"]
    later = [x for x in lines if x["wall_time_s"] > first_end]
    if not later:
        return float("nan")
    return sum(x["env_steps"] for x in later) / (later[-1]["wall_time_s"] - first_end)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny CPU-sized run")
    parser.add_argument("--out", default=None, help="run directory (default: a new temp dir)")
    parser.add_argument("--population", type=int, default=None)
    parser.add_argument("--generations", type=int, default=None)
    parser.add_argument("--strategy", default="open_es", choices=sorted(STRATEGIES))
    parser.add_argument("--backend", default="spring", help="Brax backend (spring is fastest)")
    parser.add_argument("--devices", type=int, default=0, help="0: every visible device")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    # One CPU device per core for the population split (before JAX starts; XLA_FLAGS wins).
    parallel.use_cpu_cores()

    settings = dict(QUICK if args.quick else FULL)
    if args.population is not None:
        settings["population_size"] = args.population
    if args.generations is not None:
        settings["generations"] = args.generations
    config = TrainConfig.make(
        env="hopper",
        backend=args.backend,
        strategy=args.strategy,
        policy="mlp",
        hidden_sizes=(64, 64),
        seed=args.seed,
        devices=args.devices,
        **settings,
    )
    # A new directory per run: train_config refuses a non-empty one rather than overwrite a run.
    out = args.out or tempfile.mkdtemp(prefix="jaxes-hopper-")
    print(f"{len(jax.devices())} {jax.default_backend()} device(s) visible", flush=True)
    summary = train.train_config(config, out, plot=not args.quick)
    rate = steps_per_second(os.path.join(out, "metrics.jsonl"))
    print(
        f"hopper: eval return {summary['final_eval_return']:.1f} after "
        f"{summary['generations']} generations, {rate:,.0f} env steps/s after compile "
        f"({summary['seconds']:.0f} s in all); run directory {summary['run_dir']}"
    )


if __name__ == "__main__":
    main()
