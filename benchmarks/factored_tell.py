"""A low-rank `tell` with ClipUp: the population's sum kept as factors (`jaxes.optim.clipup`,
a `TakesFactors`) against the same ClipUp handed the sum multiplied out
(`optax.GradientTransformation(*clipup)`), in one process.

For each case — a stack of `layers` square `d × d` matrices plus a `d` bias, `open_es(P,
noise=jaxes.noise.lowrank(rank), optimizer=...)`, params in `dtype`, `track_best=False` —
both `tell`s are jitted with the state donated, and the script prints XLA's temp bytes per
parameter (`memory_analysis`, compile only) and the median ms of a `tell` (each called 3 times
to warm up, then timed in 5 rounds of `--calls` calls ended by `jax.block_until_ready`; the
two alternate). The ratio is dense ms / factored ms (> 1: the factored tell is faster).

Run:
  .venv/bin/python benchmarks/factored_tell.py --out benchmarks/results/factored_tell.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import optax
from _common import finish_machine_info, machine_info, write_json

import jaxes

CASES = (  # (d, layers, P, rank, dtype)
    (64, 4, 64, 1, "float32"),
    (256, 4, 64, 1, "float32"),
    (256, 4, 256, 1, "bfloat16"),
    (1024, 4, 64, 4, "float32"),
    (1024, 4, 256, 1, "bfloat16"),
    (2048, 2, 256, 1, "bfloat16"),
)


def programs(d: int, layers: int, population: int, rank: int, dtype: str):
    """``{name: (compiled tell, state, fitness)}`` for the factored and the dense tell."""
    params = {f"w{i}": jnp.zeros((d, d), dtype) for i in range(layers)} | {"b": jnp.zeros(d, dtype)}
    clipup = jaxes.optim.clipup(0.01)
    fitness = jax.random.normal(jax.random.key(2), (population,))
    out = {}
    for name, optimizer in (("factored", clipup), ("dense", optax.GradientTransformation(*clipup))):
        es = jaxes.open_es(
            population, 0.01, optimizer=optimizer, noise=jaxes.noise.lowrank(rank), track_best=False
        )
        state = es.ask(jax.random.key(1), es.init(jax.random.key(0), params))[1]
        compiled = jax.jit(es.tell, donate_argnums=0).lower(state, fitness).compile()
        out[name] = (compiled, state, fitness, es)
    return out, sum(x.size for x in jax.tree.leaves(params))


def time_tell(compiled, state, fitness, es, calls: int, rounds: int = 5) -> list[float]:
    """ms per call, one entry per round (a fresh state is asked for before each call)."""
    ask = jax.jit(es.ask, donate_argnums=1)
    key = jax.random.key(3)
    for _ in range(3):
        state = ask(key, compiled(state, fitness)[0])[1]
    times = []
    for _ in range(rounds):
        spent = 0.0
        for _ in range(calls):
            state = jax.block_until_ready(ask(key, state)[1])
            start = time.perf_counter()
            state = jax.block_until_ready(compiled(state, fitness)[0])
            spent += time.perf_counter() - start
        times.append(1e3 * spent / calls)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5, help="tells per timed round")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()
    if args.calls < 1:
        parser.error(f"--calls: expected a count >= 1, got {args.calls}")
    info = machine_info(sys.argv, ("jax", "jaxlib", "optax"), jax_backend=True)
    rows = []
    print(
        "| d | layers | P | rank | dtype | params | temp B/param factored | dense "
        "| ms factored | ms dense | dense / factored |"
    )
    print("|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for d, layers, population, rank, dtype in CASES:
        built, n = programs(d, layers, population, rank, dtype)
        row = {"d": d, "layers": layers, "P": population, "rank": rank, "dtype": dtype, "params": n}
        for name, (compiled, state, fitness, es) in built.items():
            row[f"{name}_temp_bytes_per_param"] = compiled.memory_analysis().temp_size_in_bytes / n
            row[f"{name}_ms"] = time_tell(compiled, state, fitness, es, args.calls)
        ms = {name: statistics.median(row[f"{name}_ms"]) for name in built}
        row["ratio"] = ms["dense"] / ms["factored"]
        rows.append(row)
        print(
            f"| {d} | {layers} | {population} | {rank} | {dtype} | {n:,} "
            f"| {row['factored_temp_bytes_per_param']:.2f} "
            f"| {row['dense_temp_bytes_per_param']:.2f} | {ms['factored']:.2f} "
            f"| {ms['dense']:.2f} | {row['ratio']:.2f} |",
            flush=True,
        )
    finish_machine_info(info, [])
    if args.out:
        write_json(args.out, {"machine": info, "rows": rows})
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
