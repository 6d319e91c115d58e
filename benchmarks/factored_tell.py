"""The factored low-rank `tell` with ClipUp against the same ClipUp handed the sum multiplied out.

A low-rank `tell` with ClipUp: the population's sum kept as factors (`jaxes.optim.clipup`,
a `TakesFactors`) against the same ClipUp handed the sum multiplied out
(`optax.GradientTransformation(*clipup)`), in one process.

For each case — a stack of `layers` square `d × d` matrices plus a `d` bias, `open_es(P,
noise=jaxes.noise.lowrank(rank), optimizer=...)`, params in `dtype`, `track_best=False` —
both `tell`s are jitted with the state donated, and the script prints XLA's temp bytes per
parameter (`memory_analysis`, compile only) and the median ms of a `tell` (each called 3 times
to warm up, then timed in 5 rounds of `--calls` calls ended by `jax.block_until_ready`; the
two alternate). The ratio is dense ms / factored ms (> 1: the factored tell is faster).

Run (writes benchmarks/results/factored_tell.json, or `--out`):
  .venv/bin/python benchmarks/factored_tell.py --out benchmarks/results/factored_tell.json
"""

from __future__ import annotations

import statistics
import sys
import time

import _driver as driver
from _common import machine_info, write_results

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
    import jax
    import jax.numpy as jnp
    import optax

    import jaxes

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
    import jax

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


def parse_args(argv: list[str]):
    parser = driver.parser(__doc__, None, "factored_tell", child=False)
    parser.add_argument("--calls", type=int, default=5, help="tells per timed round")
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error(f"--calls: expected a count >= 1, got {args.calls}")
    args.out = args.out or driver.results_path("factored_tell")
    return args


def measure(case: tuple, calls: int) -> dict:
    """One row: both tells' temp bytes per parameter and ms per call, and the ratio."""
    d, layers, population, rank, dtype = case
    built, n = programs(d, layers, population, rank, dtype)
    row = {"d": d, "layers": layers, "P": population, "rank": rank, "dtype": dtype, "params": n}
    for name, (compiled, state, fitness, es) in built.items():
        row[f"{name}_temp_bytes_per_param"] = compiled.memory_analysis().temp_size_in_bytes / n
        row[f"{name}_ms"] = time_tell(compiled, state, fitness, es, calls)
    ms = medians(row)
    return row | {"ratio": ms["dense"] / ms["factored"]}


def medians(row: dict) -> dict:
    """Each tell's median ms over its rounds."""
    return {name: statistics.median(row[f"{name}_ms"]) for name in ("factored", "dense")}


def cells(row: dict) -> list[str]:
    ms = medians(row)
    return [
        *(str(row[k]) for k in ("d", "layers", "P", "rank", "dtype")),
        f"{row['params']:,}",
        f"{row['factored_temp_bytes_per_param']:.2f}",
        f"{row['dense_temp_bytes_per_param']:.2f}",
        f"{ms['factored']:.2f}",
        f"{ms['dense']:.2f}",
        f"{row['ratio']:.2f}",
    ]


def run(args, argv: list[str]) -> None:
    info = machine_info(argv, ("jax", "jaxlib", "optax"), jax_backend=True)
    rows = []
    for case in CASES:
        rows.append(measure(case, args.calls))
        print(" | ".join(cells(rows[-1])), file=sys.stderr, flush=True)
    table = driver.markdown_table(
        "d | layers | P | rank | dtype | params | temp B/param factored | dense | ms factored "
        "| ms dense | dense / factored",
        "rrrrlrrrrrr",
        [cells(row) for row in rows],
    )
    write_results(args.out, info, [], [table], {"rows": rows}, show_machine=False)


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, None, run)
