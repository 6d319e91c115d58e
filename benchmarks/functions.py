"""Test functions: jaxes against evosax on the same strategies, settings, budget and seeds.

What it measures: for each strategy (OpenES, PGPE, SNES, Sep-CMA-ES, ARS), each function
(sphere, Rosenbrock, Rastrigin, Ackley from `jaxes.tasks.functions`, all minimised, minimum 0)
and each dimension d in {10, 100}, both libraries run the same number of generations from the
same start points with the same seeds. Reported per (function, d, strategy, library):

- the best function value seen (over every member evaluated, tracked by this script the same
  way for both libraries, not read from either library's state) at the end of the budget,
  median over the seeds;
- milliseconds per generation. All seeds run at once: one `jax.jit` per (library, strategy,
  function, d) holds `jax.vmap` over the seeds of `jax.lax.scan` over the generations (ask,
  evaluate, tell, track the best). It is compiled ahead of time (`lower().compile()`, time kept
  as `compile_s`), called once to warm up, then called `--repeats` times, each ended by
  `jax.block_until_ready`; ms/gen = median wall time of those calls / generations. It is the
  time of one generation of the whole vmapped batch of seeds (5 seeds by default), not of
  one seed.

Budget: P = 32 members for d = 10 and P = 64 for d = 100; 500 generations for d = 10 and 1000
for d = 100; seeds 0..4. Seed s gives the start point x0 ~ U[-3, 3]^d (from
`fold_in(key(s), 0)`, the same for both libraries, every strategy and every function) and the
key of the run (`fold_in(key(s), 1)`), split into an init key and one key per generation;
evosax's generation key is split once more into its ask and tell keys.

Fitness sign: jaxes maximises, so its `tell` gets -f(x); evosax minimises, so its `tell` gets
f(x). The best value reported is min f over all members evaluated, for both.

Strategy settings (one value per row; the same for both libraries; evosax 0.3.2,
`evosax.algorithms`; P counts members, i.e. evaluations per generation, in both libraries):

  OpenES     jaxes `open_es(P, sigma=0.1, learning_rate=0.05)`: antithetic pairs,
             centered ranks, optax.adam(0.05).
             evosax `Open_ES(P, x0, use_antithetic_sampling=True, optimizer=optax.adam(0.05),
             std_schedule=optax.constant_schedule(0.1))`, default centered-rank shaping.
             Both: P members = P/2 mirrored pairs; σ is the fixed std of the perturbation.
  PGPE       jaxes `pgpe(P, sigma=0.5, learning_rate=0.05, sigma_learning_rate=0.1,
             sigma_max_change=0.2, max_speed=0.1, momentum=0.9)`.
             evosax `PGPE(P, x0, optimizer=evosax.core.optimizer.clipup(learning_rate=0.05,
             max_velocity=0.1, momentum=0.9))` with `default_params.replace(std_init=0.5,
             std_lr=0.1, std_max_change=0.2)`; default centered-rank shaping.
             Both: P members = P/2 mirrored pairs; σ is the initial per-dimension std.
             evosax's ClipUp normalises the gradient, v <- momentum v + g/|g|, clips |v| to
             max_velocity / learning_rate and steps by learning_rate v, i.e. a step of norm
             <= max_velocity: the ClipUp paper's step size (learning_rate) and
             max_speed. evosax has no ClipUp default tied to the step size; jaxes' max_speed
             is passed explicitly (2 x learning_rate, the ClipUp paper's rule).
  SNES       jaxes `snes(P, sigma=1.0, learning_rate=1.0, sigma_learning_rate=eta)`.
             evosax `SNES(P, x0, optimizer=optax.sgd(1.0))` with
             `default_params.replace(std_init=1.0, lr_std_init=eta)`; default NES utilities
             (`weights_fitness_shaping_fn`: max(0, log(P/2 + 1) - log(rank)), normalised,
             minus 1/P). eta = (3 + ln d) / (5 sqrt(d)), evosax's default (0.335 at d=10,
             0.152 at d=100), passed to both. No mirrored sampling in either; σ is the
             initial per-dimension std; evosax's std update is σ exp(eta/2 · grad).
  Sep-CMA-ES jaxes `sep_cma_es(P, sigma=1.0, elite_size=P // 2)`.
             evosax `Sep_CMA_ES(P, x0)` with `default_params.replace(std_init=1.0)`; its
             `elite_ratio` is 0.5, so P // 2 parents (positive weights only). σ is the
             initial global step size. evosax 0.3.2 takes c_1, c_mu, c_c, c_σ, d_σ from its
             full `CMA_ES` defaults (no (d + 2) / 3 boost of the covariance learning rates
             for the separable model); jaxes uses its own defaults for those.
  ARS        jaxes `ars(P, sigma=0.1, learning_rate=0.05, top_k=P // 4)`: P/2 antithetic
             directions, the best top_k kept (by max(r+, r-)), step lr / (top_k σ_R) Σ (r+ -
             r-) δ (Mania et al. 2018, V1-t).
             evosax `ARS(P, x0, optimizer=optax.sgd(0.05),
             std_schedule=optax.constant_schedule(0.1))`. Its P also counts members (P/2
             mirrored directions; `ARS.num_elites` = int(0.5 * P // 2) = P // 4 directions
             kept, by min(f+, f-) on the minimised f); its step is grad / (top_k σ_R) with
             the raw f, σ_R the std of the 2 top_k kept values, no division by σ. evosax's
             default optimizer is adam(1e-3); plain SGD is passed here to match the paper's
             update. `ARS.default_params.std_init` is unused by evosax (σ comes from
             `std_schedule`).

Verdict: jaxes "beats" evosax when its median best is lower by more than the tolerance,
"matches" when |jaxes - evosax| <= ATOL + RTOL * max(|jaxes|, |evosax|), otherwise "no".

A run that fails is reported as "n/a" and kept in the JSON with its error; the other
library still runs.

Run:
  .venv/bin/python benchmarks/functions.py           # d in {10, 100}, 4 functions, 5 seeds
  .venv/bin/python benchmarks/functions.py --quick   # d=10, 2 functions, 50 gens, 2 seeds
Results are printed as a markdown table and written as JSON to `--out` (default
benchmarks/results/functions.json, or functions_quick.json with `--quick`).
"""

from __future__ import annotations

import math
import statistics
import sys
import time

import _driver as driver
from _children import CpuWatch
from _common import machine_info, write_results

STRATEGIES = ["open_es", "pgpe", "snes", "sep_cma_es", "ars"]
FUNCTIONS = ["sphere", "rosenbrock", "rastrigin", "ackley"]
DIMS = [10, 100]
POPULATION = {10: 32, 100: 64}
GENERATIONS = {10: 500, 100: 1000}
SEEDS = 5
X0_HALF_WIDTH = 3.0  # x0 ~ U[-3, 3]^d
RTOL = 0.1  # "matches": within 10% of the larger median ...
ATOL = 1e-6  # ... or within 1e-6 (both runs at the minimum, to float32 precision)
CURVE_POINTS = 10  # best-so-far recorded at this many evenly spaced generations

QUICK = {"dims": [10], "functions": ["sphere", "rastrigin"], "generations": 50, "seeds": 2}


def settings_for(strategy: str, d: int, p: int) -> dict:
    """The shared hyperparameters of `strategy` at dimension d, population p (jaxes' names)."""
    if strategy == "open_es":
        return {"sigma": 0.1, "learning_rate": 0.05}
    if strategy == "pgpe":
        lr = 0.05
        return {
            "sigma": 0.5,
            "learning_rate": lr,
            "sigma_learning_rate": 0.1,
            "sigma_max_change": 0.2,
            "max_speed": 2 * lr,
            "momentum": 0.9,
        }
    if strategy == "snes":
        eta = (3 + math.log(d)) / (5 * math.sqrt(d))
        return {"sigma": 1.0, "learning_rate": 1.0, "sigma_learning_rate": eta}
    if strategy == "sep_cma_es":
        return {"sigma": 1.0, "elite_size": p // 2}
    if strategy == "ars":
        return {"sigma": 0.1, "learning_rate": 0.05, "top_k": p // 4}
    raise ValueError(f"unknown strategy {strategy!r}")


# --------------------------------------------------------------------------------------------
# The two libraries, behind one interface: run_one(key, x0) -> (final best, best-so-far curve).
# --------------------------------------------------------------------------------------------


def jaxes_factory(strategy: str):
    """`jaxes.strategies.<strategy>`."""
    from jaxes import strategies

    return getattr(strategies, strategy)


def make_jaxes_run(strategy: str, fn, p: int, gens: int, s: dict):
    """One seed of jaxes `strategy` on `fn` (jaxes maximises, so it is told -f)."""
    import jax
    import jax.numpy as jnp

    factory = jaxes_factory(strategy)
    es = factory(p, **s)

    def run_one(key, x0):
        init_key, run_key = jax.random.split(key)
        state = es.init(init_key, x0)

        def step(carry, k):
            state, best = carry
            population, state = es.ask(k, state)
            f = jax.vmap(fn)(population)
            state, _ = es.tell(state, -f)
            best = jnp.minimum(best, jnp.min(jnp.where(jnp.isnan(f), jnp.inf, f)))
            return (state, best), best

        carry = (state, jnp.full((), jnp.inf, jnp.float32))
        (_, best), curve = jax.lax.scan(step, carry, jax.random.split(run_key, gens))
        return best, curve

    return run_one


def make_evosax_algorithm(strategy: str, p: int, x0, s: dict):
    """The evosax algorithm and params with the settings `s` (see the module docstring)."""
    import jax.numpy as jnp
    import optax
    from evosax import algorithms as ea
    from evosax.core.optimizer import clipup

    if strategy == "open_es":
        es = ea.Open_ES(
            population_size=p,
            solution=x0,
            use_antithetic_sampling=True,
            optimizer=optax.adam(s["learning_rate"]),
            std_schedule=optax.constant_schedule(s["sigma"]),
        )
        return es, es.default_params
    if strategy == "pgpe":
        es = ea.PGPE(
            population_size=p,
            solution=x0,
            optimizer=clipup(
                learning_rate=s["learning_rate"],
                max_velocity=s["max_speed"],
                momentum=s["momentum"],
            ),
        )
        params = es.default_params.replace(
            std_init=s["sigma"],
            std_lr=s["sigma_learning_rate"],
            std_max_change=s["sigma_max_change"],
        )
        return es, params
    if strategy == "snes":
        es = ea.SNES(population_size=p, solution=x0, optimizer=optax.sgd(s["learning_rate"]))
        params = es.default_params.replace(
            std_init=jnp.asarray(s["sigma"], jnp.float32),
            lr_std_init=jnp.asarray(s["sigma_learning_rate"], jnp.float32),
        )
        return es, params
    if strategy == "sep_cma_es":
        es = ea.Sep_CMA_ES(population_size=p, solution=x0)
        if es.num_elites != s["elite_size"]:
            raise ValueError(f"evosax Sep_CMA_ES keeps {es.num_elites}, not {s['elite_size']}")
        return es, es.default_params.replace(std_init=jnp.asarray(s["sigma"], jnp.float32))
    if strategy == "ars":
        es = ea.ARS(
            population_size=p,
            solution=x0,
            optimizer=optax.sgd(s["learning_rate"]),
            std_schedule=optax.constant_schedule(s["sigma"]),
        )
        if es.num_elites != s["top_k"]:
            raise ValueError(f"evosax ARS keeps {es.num_elites} directions, not {s['top_k']}")
        return es, es.default_params
    raise ValueError(f"unknown strategy {strategy!r}")


def make_evosax_run(strategy: str, fn, p: int, d: int, gens: int, s: dict):
    """One seed of evosax `strategy` on `fn` (evosax minimises, so it is told f)."""
    import jax
    import jax.numpy as jnp

    es, params = make_evosax_algorithm(strategy, p, jnp.zeros(d, jnp.float32), s)

    def run_one(key, x0):
        init_key, run_key = jax.random.split(key)
        state = es.init(init_key, x0, params)

        def step(carry, k):
            state, best = carry
            ask_key, tell_key = jax.random.split(k)
            population, state = es.ask(ask_key, state, params)
            f = jax.vmap(fn)(population)
            state, _ = es.tell(tell_key, population, f, state, params)
            best = jnp.minimum(best, jnp.min(jnp.where(jnp.isnan(f), jnp.inf, f)))
            return (state, best), best

        carry = (state, jnp.full((), jnp.inf, jnp.float32))
        (_, best), curve = jax.lax.scan(step, carry, jax.random.split(run_key, gens))
        return best, curve

    return run_one


# --------------------------------------------------------------------------------------------
# Running and timing one (library, strategy, function, d).
# --------------------------------------------------------------------------------------------


def seed_inputs(seeds: int, d: int):
    """Per seed: the run key and x0 ~ U[-3, 3]^d, identical for both libraries."""
    import jax

    base = [jax.random.key(s) for s in range(seeds)]
    keys = jax.numpy.stack([jax.random.fold_in(k, 1) for k in base])
    x0s = jax.numpy.stack(
        [
            jax.random.uniform(
                jax.random.fold_in(k, 0), (d,), minval=-X0_HALF_WIDTH, maxval=X0_HALF_WIDTH
            )
            for k in base
        ]
    )
    return keys, x0s


def run_case(library: str, strategy: str, function: str, d: int, args) -> dict:
    import jax
    import numpy as np

    from jaxes.tasks.functions import FUNCTIONS as FNS

    p = POPULATION[d]
    gens = args.generations or GENERATIONS[d]
    s = settings_for(strategy, d, p)
    row = {
        "library": library,
        "strategy": strategy,
        "function": function,
        "d": d,
        "P": p,
        "generations": gens,
        "seeds": args.seeds,
        "settings": s,
    }
    try:
        fn = FNS[function]
        if library == "jaxes":
            run_one = make_jaxes_run(strategy, fn, p, gens, s)
        else:
            run_one = make_evosax_run(strategy, fn, p, d, gens, s)
        keys, x0s = seed_inputs(args.seeds, d)
        start = time.perf_counter()
        compiled = jax.jit(jax.vmap(run_one)).lower(keys, x0s).compile()
        compile_s = time.perf_counter() - start
        best, curve = jax.block_until_ready(compiled(keys, x0s))  # warm-up
        seconds, other = [], []
        for _ in range(args.repeats):
            with CpuWatch() as watch:
                best, curve = jax.block_until_ready(compiled(keys, x0s))
            seconds.append(watch.wall)
            other.append(watch.other_cpu_share)
    except Exception as e:  # keep going: report the failure in its row
        first_line = (str(e).strip().splitlines() or [""])[0][:300]
        return row | {"error": f"{type(e).__name__}: {first_line}"}
    best = np.asarray(best, np.float64)
    curve = np.asarray(curve, np.float64)  # (seeds, gens)
    at = sorted({min(gens, round(gens * (i + 1) / CURVE_POINTS)) - 1 for i in range(CURVE_POINTS)})
    return row | {
        "best_per_seed": best.tolist(),
        "median_best": float(np.median(best)),
        "ms_per_gen": 1e3 * statistics.median(seconds) / gens,
        "seconds_per_call": seconds,
        "compile_s": compile_s,
        "other_cpu_share": max(other),
        "curve_generations": [g + 1 for g in at],
        "median_best_curve": np.median(curve[:, at], axis=0).tolist(),
    }


# --------------------------------------------------------------------------------------------
# Reporting.
# --------------------------------------------------------------------------------------------


def verdict(jaxes_best: float, evosax_best: float) -> str:
    if not (math.isfinite(jaxes_best) and math.isfinite(evosax_best)):
        if math.isfinite(jaxes_best):
            return "beats"
        return "matches" if jaxes_best == evosax_best else "no"
    tol = ATOL + RTOL * max(abs(jaxes_best), abs(evosax_best))
    if abs(jaxes_best - evosax_best) <= tol:
        return "matches"
    return "beats" if jaxes_best < evosax_best else "no"


def compare(results: list[dict]) -> list[dict]:
    """One row per (function, d, strategy) pairing the two libraries' results."""
    by_key = {(r["function"], r["d"], r["strategy"], r["library"]): r for r in results}
    rows = []
    for function, d, strategy, library in by_key:
        if library != "evosax":
            continue
        e = by_key[(function, d, strategy, "evosax")]
        j = by_key.get((function, d, strategy, "jaxes"), {})
        row = {"function": function, "d": d, "strategy": strategy}
        row["evosax_median_best"] = e.get("median_best")
        row["jaxes_median_best"] = j.get("median_best")
        row["evosax_ms_per_gen"] = e.get("ms_per_gen")
        row["jaxes_ms_per_gen"] = j.get("ms_per_gen")
        both = bool(j) and "error" not in e and "error" not in j
        row["time_ratio_jaxes_over_evosax"] = j["ms_per_gen"] / e["ms_per_gen"] if both else None
        row["jaxes_matches_or_beats"] = (
            verdict(j["median_best"], e["median_best"]) if both else None
        )
        rows.append(row)
    return rows


COLUMNS = (
    "function | d | strategy | evosax median best | jaxes median best | evosax ms/gen "
    "| jaxes ms/gen | time jaxes/evosax | jaxes matches or beats"
)


def format_table(rows: list[dict], seeds: int) -> str:
    def num(v, spec=".3g"):
        return "n/a" if v is None else format(v, spec)

    cells = [
        [
            r["function"],
            str(r["d"]),
            r["strategy"],
            num(r["evosax_median_best"]),
            num(r["jaxes_median_best"]),
            num(r["evosax_ms_per_gen"], ".3f"),
            num(r["jaxes_ms_per_gen"], ".3f"),
            num(r["time_ratio_jaxes_over_evosax"], ".2f"),
            r["jaxes_matches_or_beats"] or "n/a",
        ]
        for r in rows
    ]
    note = (
        f"median best: median over {seeds} seeds of min f over all members evaluated; "
        f"ms/gen: one generation of all {seeds} seeds at once (vmapped), compile excluded."
    )
    return driver.markdown_table(COLUMNS, "lrlrrrrrl", cells) + "\n\n" + note


def parse_args(argv: list[str]):
    quick = "d=10, sphere and rastrigin, 50 gens, 2 seeds"
    parser = driver.parser(__doc__, quick, "functions", child=False)
    parser.add_argument("--strategies", nargs="+", choices=STRATEGIES, help="subset to run")
    parser.add_argument("--functions", nargs="+", choices=FUNCTIONS, help="subset to run")
    parser.add_argument("--dims", nargs="+", type=int, choices=DIMS, help="subset to run")
    parser.add_argument("--seeds", type=int, help=f"number of seeds (default {SEEDS})")
    parser.add_argument("--generations", type=int, help="override the per-d budget")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per case")
    args = parser.parse_args(argv)
    if args.quick:
        args.dims = args.dims or QUICK["dims"]
        args.functions = args.functions or QUICK["functions"]
        args.generations = args.generations or QUICK["generations"]
        args.seeds = args.seeds or QUICK["seeds"]
    args.strategies = args.strategies or STRATEGIES
    args.functions = args.functions or FUNCTIONS
    args.dims = args.dims or DIMS
    args.seeds = args.seeds or SEEDS
    args.out = args.out or driver.results_path("functions", args.quick)
    return args


def run(args, argv: list[str]) -> None:
    info = machine_info(argv, ("jax", "jaxlib", "evosax", "optax"), jax_backend=True)
    results = []
    for d in args.dims:
        for function in args.functions:
            for strategy in args.strategies:
                for library in ("evosax", "jaxes"):
                    r = run_case(library, strategy, function, d, args)
                    results.append(r)
                    status = r.get("error") or (
                        f"median best {r['median_best']:.3g}, {r['ms_per_gen']:.3f} ms/gen, "
                        f"compile {r['compile_s']:.1f} s"
                    )
                    print(f"{function} d={d} {strategy} {library}: {status}", file=sys.stderr)
    rows = compare(results)
    table = format_table(rows, args.seeds)
    settings = {
        "population": {str(d): POPULATION[d] for d in args.dims},
        "generations": {str(d): args.generations or GENERATIONS[d] for d in args.dims},
        "seeds": list(range(args.seeds)),
        "x0": f"U[-{X0_HALF_WIDTH:g}, {X0_HALF_WIDTH:g}]^d from fold_in(key(seed), 0)",
        "strategies": {
            f"{s} d={d}": settings_for(s, d, POPULATION[d])
            for s in args.strategies
            for d in args.dims
        },
        "timing": f"median of {args.repeats} calls after compile and one warm-up call",
        "verdict_tolerance": {"rtol": RTOL, "atol": ATOL},
    }
    payload = {"settings": settings, "table_rows": rows, "table": table, "results": results}
    write_results(args.out, info, driver.shared_cpu_warnings(results), [table], payload)


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, None, run)
