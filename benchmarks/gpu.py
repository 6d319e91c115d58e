"""Accelerator benchmark: hopper at large populations, jaxes vs Brax's ES trainer, one run.

For each population P it measures, after compilation, the seconds per generation and the env
steps simulated per second of
  * jaxes: `jaxes.training.block_runner` over every visible device (`shard_map`), and
  * Brax: `brax.training.agents.es.train` with the same population (P/2 antithetic pairs),
    episode length, network and σ; its time per generation is the difference between a run of
    1 + G generations and a run of 1, divided by G (compilation and evaluations cancel).

Run (GPU):      python benchmarks/gpu.py
Smoke (CPU):    python benchmarks/gpu.py --quick
Writes benchmarks/results/gpu.json (or --out) and prints a table.
"""

from __future__ import annotations

import functools
import json
import platform
import statistics
import sys
import time
import warnings

import _driver as driver
from _children import quiet_import, spawn
from _common import write_json

ENV, EPISODE, HIDDEN, SIGMA, LR = "hopper", 1000, (64, 64), 0.05, 0.01


def quiet():
    warnings.filterwarnings("ignore")  # for the whole child, not only its imports
    return quiet_import("brax.envs")


def jaxes_rate(population: int, backend: str, episode: int, generations: int) -> dict:
    jax = quiet()
    from jaxes import parallel, training
    from jaxes.app.build import build
    from jaxes.app.config import TrainConfig

    config = TrainConfig.make(
        env=ENV,
        backend=backend,
        episode_length=episode,
        population_size=population,
        sigma=SIGMA,
        learning_rate=LR,
        policy="mlp",
        hidden_sizes=HIDDEN,
        eval_every=generations,
        eval_episodes=1,
        checkpoint_every=generations,
    )
    strategy, task = build(config)
    mesh = parallel.make_mesh()
    parallel.check_split(population, mesh.devices.size)
    run = training.block_runner(strategy, task, generations, mesh)
    state = training.place(training.init_state(strategy, task, 0), mesh)
    start = time.perf_counter()
    state, metrics, _ = jax.block_until_ready(run(state, jax.random.key(0)))
    compile_and_first = time.perf_counter() - start
    times, steps = [], []
    for rep in range(3):
        start = time.perf_counter()
        state, metrics, _ = jax.block_until_ready(run(state, jax.random.key(rep + 1)))
        times.append((time.perf_counter() - start) / generations)
        steps.append(int(training.to_host(metrics)["env_steps"].sum()) / generations)
    per_gen = statistics.median(times)
    return {
        "seconds_per_generation": per_gen,
        "env_steps_per_generation": statistics.median(steps),
        "env_steps_per_s": statistics.median(steps) / per_gen,
        "first_block_s_incl_compile": compile_and_first,
        "devices": int(mesh.devices.size),
    }


def brax_rate(population: int, backend: str, episode: int, generations: int) -> dict:
    quiet()
    from brax import envs
    from brax.training.agents.es import networks as es_networks
    from brax.training.agents.es import train as brax_es

    def timed(gens: int) -> float:
        env = envs.get_environment(ENV, backend=backend)
        start = time.perf_counter()
        brax_es.train(
            environment=env,
            num_timesteps=gens * population * episode,
            episode_length=episode,
            population_size=population // 2,
            learning_rate=LR,
            perturbation_std=SIGMA,
            fitness_shaping=brax_es.FitnessShaping.CENTERED_RANK,
            normalize_observations=True,
            num_evals=2,
            num_eval_envs=1,
            network_factory=functools.partial(
                es_networks.make_es_networks, hidden_layer_sizes=HIDDEN
            ),
            seed=0,
        )
        return time.perf_counter() - start

    # Two runs differing only in length: the difference is `generations` generations, with
    # compilation and the two evaluations cancelled out.
    short, long = timed(1), timed(1 + generations)
    if long <= short:  # tiny smoke sizes: the generations vanish in compile-time noise
        return {"error": f"run of {1 + generations} generations was not slower than 1"}
    per_gen = (long - short) / generations
    return {
        "seconds_per_generation": per_gen,
        "env_steps_per_generation": population * episode,
        "env_steps_per_s": population * episode / per_gen,
        "note": "Brax ES steps every episode to its full length (no early exit)",
    }


def run_child(spec: dict) -> dict:
    fn = {"jaxes": jaxes_rate, "brax": brax_rate}[spec.pop("lib")]
    return fn(**spec)


def spawn_rate(spec: dict) -> dict:
    child = spawn(__file__, spec, timeout=3600)
    if child.result is not None:
        return child.result
    return {"error": child.error.strip().splitlines()[-1]}


def parse_args(argv: list[str]):
    parser = driver.parser(__doc__, "tiny CPU smoke run", "gpu")
    parser.add_argument("--backend", default="generalized", help="Brax backend for both")
    args = parser.parse_args(argv)
    args.out = args.out or driver.results_path("gpu")  # --quick too
    return args


def run(args, argv: list[str]) -> None:
    populations = [16, 32] if args.quick else [1024, 4096, 16384]
    episode, generations = (50, 2) if args.quick else (EPISODE, 5)
    rows = []
    for p in populations:
        spec = {
            "population": p,
            "backend": args.backend,
            "episode": episode,
            "generations": generations,
        }
        row = {
            "population": p,
            "jaxes": spawn_rate({"lib": "jaxes", **spec}),
            "brax_es": spawn_rate({"lib": "brax", **spec}),
        }
        j, b = row["jaxes"], row["brax_es"]
        if "error" not in j and "error" not in b:
            row["time_ratio_jaxes_over_brax"] = (
                j["seconds_per_generation"] / b["seconds_per_generation"]
            )
        rows.append(row)
        print(json.dumps(row), flush=True)
    import jax

    result = {
        "command": "python " + " ".join(argv),
        "machine": {"platform": platform.platform(), "devices": [str(d) for d in jax.devices()]},
        "date": time.strftime("%Y-%m-%d"),
        "settings": {"env": ENV, "episode": episode, "hidden": HIDDEN, "sigma": SIGMA, "lr": LR},
        "rows": rows,
    }
    write_json(args.out, result)
    print(f"{'P':>7} {'jaxes s/gen':>12} {'brax s/gen':>12} {'ratio':>7} {'jaxes steps/s':>14}")
    for r in rows:
        j, b = r["jaxes"], r["brax_es"]
        print(
            f"{r['population']:>7} {j.get('seconds_per_generation', float('nan')):>12.4f} "
            f"{b.get('seconds_per_generation', float('nan')):>12.4f} "
            f"{r.get('time_ratio_jaxes_over_brax', float('nan')):>7.2f} "
            f"{j.get('env_steps_per_s', float('nan')):>14,.0f}"
        )


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, run_child, run)
