"""LM-MA-ES where CMA-ES cannot run: bbob's sphere (f1) and separable ellipsoid (f2) at
d = 1,000 and 10,000 in float64, with the memory XLA plans for them.

For each run (function, d, budget): `jaxes.lm_ma_es(λ, sigma=2)` with the paper's
λ = m = 4 + ⌊3 ln d⌋ from the origin, `--chunk` generations at a time in one jitted
`lax.scan` (its state donated; ask, the JAX bbob function `jaxes.tasks.bbob.problem(f, d,
1).fn` on the population, tell), until the best member reaches f* + 1e-8 or budget x d
evaluations are spent (default runs: f1 and f2 at d = 1,000 with 3,000 d and 1,000 d; f1 at
d = 10,000 with 20 d; about 5 minutes for both libraries on 2 cores at `c8097a9`). Reported:
the evaluations to each target 10^k (k = 2, 0, -2, ..., -8) that was reached, the best Δf, the
wall time (compile excluded), and `memory_analysis()` of the compiled chunk and of a donated
`tell` alone (`jax.jit(...).lower(...).compile()`: arguments, temporaries, outputs and
aliases in bytes; nothing is run to measure them). Beside it, what `jaxes.cma_es(λ)` says at
`init` at the same d (its d × d matrices against the default `covariance_budget`, 2 GiB).
With `--libraries` (default both), evosax 0.3.2's `LM_MA_ES(λ)`, `std_init` 2, its own m,
runs the same problems, chunks and budgets the same way (its donated `tell` planned with the
population it takes besides the fitness).

Run:
  .venv/bin/python benchmarks/lm_ma_es_large.py                # ~5 min on 2 cores
  .venv/bin/python benchmarks/lm_ma_es_large.py --runs 1@10000:300   # f1, d = 10^4, 300 d
  .venv/bin/python benchmarks/lm_ma_es_large.py --quick        # d = 200, a few seconds
Writes benchmarks/results/lm_ma_es_large.json (or lm_ma_es_large_quick.json).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import _driver as driver
import jax
from _common import machine_info, write_results

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

SIGMA0 = 2.0
TARGETS = (2, 0, -2, -4, -6, -8)  # Δf ≤ 10^k


def parse_args(argv: list[str]):
    parser = driver.parser(__doc__, "d = 200 and a small budget (smoke run)", child=False)
    parser.add_argument(
        "--runs",
        type=driver.comma_list(str),
        default=["1@1000:3000", "2@1000:1000", "1@10000:20"],
        help="FUNCTION@D:BUDGET, the budget in evaluations per d (default %(default)s)",
    )
    parser.add_argument("--chunk", type=int, default=500, help="generations per jitted call")
    parser.add_argument(
        "--libraries",
        nargs="+",
        choices=("jaxes", "evosax"),
        default=["jaxes", "evosax"],
        help="whose LM-MA-ES to run, each on the same problems and budget (default both)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.chunk = ["1@200:300", "2@200:300"], 200
    args.runs = [tuple(int(x) for x in r.replace("@", ":").split(":")) for r in args.runs]
    args.out = args.out or driver.results_path("lm_ma_es_large", args.quick)
    return args


def plan(compiled) -> dict:
    m = compiled.memory_analysis()
    out = {
        "argument_bytes": m.argument_size_in_bytes,
        "temp_bytes": m.temp_size_in_bytes,
        "output_bytes": m.output_size_in_bytes,
        "alias_bytes": m.alias_size_in_bytes,
    }
    out["total_bytes"] = (
        out["argument_bytes"] + out["temp_bytes"] + out["output_bytes"] - out["alias_bytes"]
    )
    return out


def cma_es_at(d: int, lam: int) -> str:
    """What `jaxes.cma_es` says at `init` for d float64 parameters."""
    import jaxes

    try:
        state = jax.eval_shape(lambda: jaxes.cma_es(lam).init(jax.random.key(0), jnp.zeros(d)))
    except ValueError as error:
        return f"refused: {error}"
    size = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state) if hasattr(x, "size"))
    return f"runs: its state alone is {size / 2**20:.0f} MiB"


class Side(NamedTuple):
    """One library's LM-MA-ES: its first state, a generation (`step(state, key, fn) ->
    (state, values)`, `fn` minimised), its `tell` to plan (donated state), and how to read
    its memory size m and σ from a state."""

    state: Any
    step: Callable
    tell: Callable
    memory_size: Callable
    sigma: Callable


def jaxes_side(lam: int, d: int) -> Side:
    import jaxes

    es = jaxes.lm_ma_es(lam, sigma=SIGMA0)
    state = es.init(jax.random.key(0), jnp.zeros(d, jnp.float64))
    # init's key and its best-member recipe's key share one buffer: copy one to donate both.
    state = state.replace(best=state.best._replace(key=jnp.array(state.best.key, copy=True)))

    def step(state, key, fn):
        population, state = es.ask(key, state)
        values = fn(population)
        return es.tell(state, -values)[0], values

    fitness = jax.ShapeDtypeStruct((lam,), jnp.float64)
    tell = jax.jit(es.tell, donate_argnums=0).lower(state, fitness).compile()
    return Side(state, step, tell, lambda s: s.paths.shape[0], lambda s: s.sigma)


def evosax_side(lam: int, d: int) -> Side:
    """evosax 0.3.2's `LM_MA_ES(λ)` (its own m = 4 + ⌊3 ln d⌋), `std_init` = 2: its `tell`
    takes the population as well as the fitness."""
    from evosax.algorithms import LM_MA_ES

    es = LM_MA_ES(lam, jnp.zeros(d, jnp.float64))
    params = es.default_params.replace(std_init=jnp.asarray(SIGMA0, jnp.float64))
    state = es.init(jax.random.key(0), jnp.zeros(d, jnp.float64), params)

    def step(state, key, fn):
        ask_key, tell_key = jax.random.split(key)
        population, state = es.ask(ask_key, state, params)
        values = fn(population)
        return es.tell(tell_key, population, values, state, params)[0], values

    def tell(state, population, values):
        return es.tell(jax.random.key(0), population, values, state, params)

    shapes = [jax.ShapeDtypeStruct(x, jnp.float64) for x in ((lam, d), (lam,))]
    planned = jax.jit(tell, donate_argnums=0).lower(state, *shapes).compile()
    return Side(state, step, planned, lambda s: s.M.shape[0], lambda s: s.std)


SIDES = {"jaxes": jaxes_side, "evosax": evosax_side}


def one_run(library: str, f: int, d: int, budget: int, chunk: int) -> dict:
    from jaxes.tasks import bbob

    problem = bbob.problem(f, d, 1)
    lam = 4 + int(math.floor(3 * math.log(d)))
    f_opt = float(problem.f_opt)
    side = SIDES[library](lam, d)

    def generation(state, key):
        state, values = side.step(state, key, problem.fn)
        return state, jnp.min(values)

    def run(state, key):
        return jax.lax.scan(generation, state, jax.random.split(key, chunk))

    state = side.state
    compiled = jax.jit(run, donate_argnums=0).lower(state, jax.random.key(1)).compile()
    hits: dict[str, int | None] = {str(k): None for k in TARGETS}
    best, evaluations, seconds = math.inf, 0, 0.0
    keys = jax.random.split(jax.random.key(2), budget * d // (lam * chunk) + 1)
    for key in keys:
        if evaluations + lam * chunk > budget * d or best <= 1e-8:
            break
        start = time.perf_counter()
        state, mins = jax.block_until_ready(compiled(state, key))
        seconds += time.perf_counter() - start
        deltas = np.minimum.accumulate(np.minimum(np.asarray(mins) - f_opt, best))
        for k in TARGETS:
            reached = np.nonzero(deltas <= 10.0**k)[0]
            if hits[str(k)] is None and reached.size:
                hits[str(k)] = evaluations + (int(reached[0]) + 1) * lam
        best = float(deltas[-1])
        evaluations += lam * chunk
        print(f"{library} f{f} d={d}: {evaluations} evals, Δf {best:.3g}", file=sys.stderr)
    return {
        "library": library,
        "function": f,
        "d": d,
        "lambda": lam,
        "memory_size": int(side.memory_size(state)),
        "budget": budget * d,
        "evaluations": evaluations,
        "best_delta_f": best,
        "hits": hits,
        "seconds": seconds,
        "us_per_evaluation": seconds / max(evaluations, 1) * 1e6,
        "sigma_final": float(side.sigma(state)),
        "memory_chunk": plan(compiled),
        "memory_tell": plan(side.tell),
        "state_bytes": sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state)),
        "cma_es": cma_es_at(d, lam),
    }


def run(args, argv: list[str]) -> None:
    info = machine_info(argv, ("jax", "jaxlib", "evosax"), jax_backend=True)
    rows = [
        one_run(library, f, d, budget, args.chunk)
        for f, d, budget in args.runs
        for library in args.libraries
    ]
    table = driver.markdown_table(
        "library | function | d | λ = m | evaluations | best Δf | evals to 1e-8 | s | µs/eval | "
        "tell plan MiB | chunk plan MiB | state MiB | cma_es at this d",
        "llrrrrrrrrrrl",
        [
            [
                r["library"],
                f"f{r['function']}",
                str(r["d"]),
                str(r["lambda"]),
                str(r["evaluations"]),
                f"{r['best_delta_f']:.2e}",
                str(r["hits"]["-8"] or "not reached"),
                f"{r['seconds']:.0f}",
                f"{r['us_per_evaluation']:.1f}",
                f"{r['memory_tell']['total_bytes'] / 2**20:.1f}",
                f"{r['memory_chunk']['total_bytes'] / 2**20:.1f}",
                f"{r['state_bytes'] / 2**20:.1f}",
                r["cma_es"].split(";")[0][:90],
            ]
            for r in rows
        ],
    )
    payload = {
        "settings": {
            "sigma0": SIGMA0,
            "runs": [f"f{f}, d = {d}, {budget} * d evaluations" for f, d, budget in args.runs],
            "chunk": args.chunk,
            "float": "float64 (jax_enable_x64)",
            "strategy": "jaxes.lm_ma_es(4 + floor(3 ln d), sigma=2), memory_size default "
            "(4 + floor(3 ln d)), from the origin; bbob instance 1",
            "peer": "evosax 0.3.2 LM_MA_ES(4 + floor(3 ln d)), std_init 2, its own defaults "
            "(m = 4 + floor(3 ln d)), the same problems, chunks and budget",
        },
        "rows": rows,
        "table": table,
    }
    write_results(args.out, info, [], [table], payload)


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, None, run)
