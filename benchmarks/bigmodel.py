"""Big models: `jaxes.step.generation_step` at 100M-1B parameters, memory plan, peak RSS, time.

What it measures, for each model size N and each task:

  plan      XLA's compiled memory plan of one generation at P = 256:
            `jax.jit(step, donate_argnums=0).lower(abstract_state).compile().memory_analysis()`
            with `abstract_state = jax.eval_shape(lambda: init_state(strategy, task, 0))`, so
            nothing of the model's size is allocated. Reported: argument, temp, output and
            alias bytes, their total argument + temp + output - alias (the bytes live at once
            while a generation runs, the donated state counted once) and bytes per parameter.
  run       at P = 16 and P = 64 (`--populations`): the state built by
            `jaxes.training.init_state(strategy, task, 0)`, one warm-up generation, then the
            median of a few timed generations (3 up to 200M parameters, 2 above; `--gens`),
            each ended by `jax.block_until_ready`; the peak resident memory of the process
            (`ru_maxrss`, which includes Python, JAX, the compiled program and `init_state`)
            and the memory plan at that P.

Every (size, task, P) runs in its own child process, so its peak RSS belongs to it alone. A
child the kernel kills (SIGKILL, most likely out of memory) is reported as a row saying so. A
run child first compiles, then compares its plan with the machine's MemAvailable and skips
the run (a row saying so) when the plan does not fit in 90% of it; `--force` runs anyway.

The strategy is jaxes at its defaults (noise table, 64 MiB `memory_budget`, `track_best=True`):
  float32   `jaxes.open_es(P, 0.05)`: Adam(1e-2) (two float32 buffers per parameter).
  bfloat16  `jaxes.open_es(P, 0.05, optimizer=jaxes.optim.clipup(0.01))`: params in bf16, the
            strategy's float32 master copy, ClipUp's single velocity buffer.
  Sizes of 1B and more default to bfloat16, smaller ones to float32; `100M:bf16` or `1B:f32`
  chooses, `--optimizer` overrides the optimizer (`sgd` is `optax.sgd(0.01, momentum=0.9)`).

Tasks (custom `jaxes.types.Task`s, fitness maximised, `FunctionInfo` counting evaluations):
  sumsq     a flat vector of N parameters, starting at 1, fitness -Σ x² (summed in float32).
  mlp       an 8-layer MLP of square weight matrices (width ≈ sqrt(N / 8), a multiple of 64; no
            biases) applied to a fixed batch of 8 N(0, 1) inputs, h <- tanh(h @ W) with
            float32 accumulation (the matmul in the params' dtype); fitness -mean(h²) of the
            output. Weights start N(0, 1/width).

Targets (printed next to the measured numbers): 500M float32, Adam, P = 256: plan <= 24 GiB
(<= 48 bytes per parameter), and the measured peak RSS at P = 64 <= 24 GiB; 1B bf16 (float32
master copy, single-buffer optimizer): plan at P = 256 and measured peak RSS at P = 64 <= 24 GiB.

Run (on a machine with nothing else using its memory):
  .venv/bin/python benchmarks/bigmodel.py                # 100M, 500M, 1B (hours on 2 cores)
  .venv/bin/python benchmarks/bigmodel.py --plan-only    # compile the plans only (minutes)
  .venv/bin/python benchmarks/bigmodel.py --sizes 100M --populations 16
  .venv/bin/python benchmarks/bigmodel.py --quick        # 1M params, f32 and bf16 (< 1 min)
Writes benchmarks/results/bigmodel.json (bigmodel_quick.json with `--quick`, bigmodel_plan.json
with `--plan-only`; or `--out`) and prints tables.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import sys
import time

import _driver as driver
from _children import guarded, spawn_all
from _common import machine_info, write_results

SIGMA = 0.05
ADAM_LEARNING_RATE = 1e-2  # open_es's default learning_rate
STEP_SIZE = 0.01  # ClipUp's step size; SGD's learning rate
MOMENTUM = 0.9  # SGD's (ClipUp's default is also 0.9)
MLP_LAYERS = 8
MLP_BATCH = 8
MLP_WIDTH_MULTIPLE = 64
PLAN_POPULATION = 256
WARMUP_CALLS = 1
MEMORY_HEADROOM = 0.9  # a run is skipped when its plan exceeds this share of MemAvailable
GIB = 2**30
TARGET_GIB = 24.0
TARGET_BYTES_PER_PARAM = 48.0
TASKS = ("sumsq", "mlp")
OPTIMIZERS = ("auto", "adam", "clipup", "sgd")
PRECISIONS = {"f32": "float32", "float32": "float32", "bf16": "bfloat16", "bfloat16": "bfloat16"}
DEFAULT_SIZES = "100M,500M,1B"
QUICK_SIZES = "1M,1M:bf16"


# --------------------------------------------------------------------------------------------
# Configurations.
# --------------------------------------------------------------------------------------------


def parse_size(text: str) -> dict:
    """ "500M" -> {"size": "500M", "n": 500_000_000, "precision": "float32"}; a suffix ":bf16"
    or ":f32" chooses the precision (default: bfloat16 from 1B up, float32 below)."""
    name, _, precision = text.strip().partition(":")
    n = driver.parse_count(name, "100M, 1B, 1M:bf16")
    if precision and precision.lower() not in PRECISIONS:
        raise argparse.ArgumentTypeError(f"size {text!r}: precision must be f32 or bf16")
    precision = PRECISIONS[precision.lower()] if precision else None
    return {"size": name, "n": n, "precision": precision or default_precision(n)}


def default_precision(n: int) -> str:
    return "bfloat16" if n >= 10**9 else "float32"


def optimizer_for(choice: str, precision: str) -> str:
    if choice != "auto":
        return choice
    return "clipup" if precision == "bfloat16" else "adam"


def track_best_for(choice: str, size: dict) -> bool:
    """``auto``: the 1B bf16 model runs lean (no best-member snapshot, 4 bytes/param less), as
    the 24 GiB target for it is stated; every other model keeps the default."""
    if choice != "auto":
        return choice == "on"
    return not (size["precision"] == "bfloat16" and size["n"] >= 1_000_000_000)


def optimizer_label(name: str) -> str:
    return {
        "adam": f"adam({ADAM_LEARNING_RATE:g})",
        "clipup": f"clipup({STEP_SIZE:g})",
        "sgd": f"sgd({STEP_SIZE:g}, momentum={MOMENTUM:g})",
    }[name]


def mlp_width(n: int) -> int:
    """The width of MLP_LAYERS square matrices holding about n parameters."""
    return max(
        MLP_WIDTH_MULTIPLE,
        round(math.sqrt(n / MLP_LAYERS) / MLP_WIDTH_MULTIPLE) * MLP_WIDTH_MULTIPLE,
    )


def num_params(task: str, n: int) -> int:
    return n if task == "sumsq" else MLP_LAYERS * mlp_width(n) ** 2


def default_gens(n: int) -> int:
    return 3 if n <= 200_000_000 else 2


# --------------------------------------------------------------------------------------------
# Child: build the strategy and the task, compile (plan), maybe run.
# --------------------------------------------------------------------------------------------


def progress(spec: dict, message: str) -> None:
    print(f"  [{name_of(spec)}] {message}", file=sys.stderr, flush=True)


def name_of(spec: dict) -> str:
    best = "" if spec.get("track_best", True) else " track_best=False"
    return (
        f"{spec['size']} {spec['task']} {spec['precision']} {spec['optimizer']}{best} P={spec['P']}"
    )


def sum_of_squares_task(n: int, dtype):
    """A flat vector of n parameters from x = 1; fitness -Σ x² in float32."""
    import jax.numpy as jnp

    from jaxes.tasks.functions import FunctionInfo
    from jaxes.types import Task

    def init(key):
        del key

    def evaluate(key, members, task_state):
        del key, task_state
        fitness = -jnp.sum(jnp.square(members.astype(jnp.float32)), axis=-1)
        return fitness, None, FunctionInfo(jnp.int32(fitness.shape[0]))

    def evaluate_policy(key, params, task_state):
        return evaluate(key, params[None], task_state)[0]

    def init_params(key):
        del key
        return jnp.ones((n,), dtype)

    return Task(init, evaluate, evaluate_policy, init_params)


def mlp_task(width: int, dtype):
    """MLP_LAYERS square (width, width) matrices on a fixed batch; fitness -mean(output²)."""
    import jax
    import jax.numpy as jnp

    from jaxes.tasks.functions import FunctionInfo
    from jaxes.types import Task

    names = [f"w{i:02d}" for i in range(MLP_LAYERS)]

    def forward(params):
        h = jax.random.normal(jax.random.key(42), (MLP_BATCH, width), jnp.float32)
        for name in names:
            w = params[name]
            h = jnp.tanh(jnp.dot(h.astype(w.dtype), w, preferred_element_type=jnp.float32))
        return -jnp.mean(jnp.square(h))

    def init(key):
        del key

    def evaluate(key, members, task_state):
        del key, task_state
        fitness = jax.vmap(forward)(members)
        return fitness, None, FunctionInfo(jnp.int32(fitness.shape[0]))

    def evaluate_policy(key, params, task_state):
        del key, task_state
        return forward(params)[None]

    def init_params(key):
        keys = jax.random.split(key, MLP_LAYERS)
        scale = 1.0 / math.sqrt(width)
        return {
            name: (scale * jax.random.normal(k, (width, width), jnp.float32)).astype(dtype)
            for name, k in zip(names, keys, strict=True)
        }

    return Task(init, evaluate, evaluate_policy, init_params)


def build(spec: dict):
    """(strategy, task) for a child's spec."""
    import jax.numpy as jnp
    import optax

    import jaxes
    from jaxes import optim

    dtype = jnp.dtype(spec["precision"])
    optimizer = {
        "adam": None,  # open_es's default: optax.adam(learning_rate=1e-2)
        "clipup": lambda: optim.clipup(STEP_SIZE),
        "sgd": lambda: optax.sgd(STEP_SIZE, momentum=MOMENTUM),
    }[spec["optimizer"]]
    strategy = jaxes.open_es(
        spec["P"],
        SIGMA,
        optimizer=optimizer and optimizer(),
        track_best=spec.get("track_best", True),
    )
    if spec["task"] == "sumsq":
        task = sum_of_squares_task(spec["n"], dtype)
    else:
        task = mlp_task(mlp_width(spec["n"]), dtype)
    return strategy, task


def tree_bytes(tree) -> int:
    import jax
    import numpy as np

    total = 0
    for leaf in jax.tree.leaves(tree):
        # A key dtype may have no itemsize: keys are a few bytes, left out.
        with contextlib.suppress(AttributeError, TypeError):
            total += int(np.prod(leaf.shape)) * leaf.dtype.itemsize
    return total


def compile_plan(spec: dict):
    """Compiles one donated generation on the abstract state; returns (compiled, plan dict)."""
    import jax

    from jaxes.step import generation_step
    from jaxes.training import init_state

    strategy, task = build(spec)
    abstract = jax.eval_shape(lambda: init_state(strategy, task, 0))
    params = num_params(spec["task"], spec["n"])
    start = time.perf_counter()
    lowered = jax.jit(generation_step(strategy, task), donate_argnums=0).lower(abstract)
    compiled = lowered.compile()
    compile_s = time.perf_counter() - start
    memory = driver.memory_plan(compiled)
    total = memory["peak_minus_alias_bytes"]
    plan = {
        "params": params,
        **{k: memory[k] for k in ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes")},
        "generated_code_bytes": compiled.memory_analysis().generated_code_size_in_bytes,
        "plan_bytes": total,
        "plan_gib": total / GIB,
        "plan_bytes_per_param": total / params,
        "state_bytes": tree_bytes(abstract),
        "eval_chunk": strategy.eval_chunk(abstract.strategy_state, spec["P"]),
        "compile_s": compile_s,
    }
    return strategy, task, compiled, plan


@guarded
def run_child(spec: dict) -> dict:
    """Compiles the plan of `spec` and, for a "run" spec, runs and times its generations."""
    import jax

    from jaxes.training import init_state

    progress(spec, "compiling")
    strategy, task, compiled, plan = compile_plan(spec)
    progress(spec, f"compiled in {plan['compile_s']:.1f} s; plan {plan['plan_gib']:.2f} GiB")
    result = {"status": "ok", **plan, "peak_rss_after_compile_mib": driver.peak_rss_mib()}
    if spec["kind"] == "plan":
        return result | {"peak_rss_mib": driver.peak_rss_mib()}
    available = driver.mem_available_bytes()
    result["mem_available_at_start_gib"] = available / GIB
    if not spec["force"] and plan["plan_bytes"] > MEMORY_HEADROOM * available:
        why = (
            f"skipped: the plan needs {plan['plan_gib']:.1f} GiB, MemAvailable is "
            f"{available / GIB:.1f} GiB (--force runs anyway)"
        )
        progress(spec, why)
        return result | {"status": "skipped", "error": why}
    start = time.perf_counter()
    state = jax.block_until_ready(init_state(strategy, task, 0))
    result["init_s"] = time.perf_counter() - start
    result["peak_rss_after_init_mib"] = driver.peak_rss_mib()
    progress(
        spec,
        f"init_state in {result['init_s']:.1f} s, peak RSS {driver.peak_rss_mib() / 1024:.2f} GiB",
    )
    for i in range(WARMUP_CALLS):
        start = time.perf_counter()
        state, metrics = jax.block_until_ready(compiled(state))
        progress(spec, f"warm-up {i + 1}/{WARMUP_CALLS}: {time.perf_counter() - start:.1f} s")
    seconds = []
    first_metrics = {k: float(v) for k, v in metrics.items()}
    for i in range(spec["gens"]):
        start = time.perf_counter()
        state, metrics = jax.block_until_ready(compiled(state))
        seconds.append(time.perf_counter() - start)
        progress(spec, f"generation {i + 1}/{spec['gens']}: {seconds[-1]:.1f} s")
    params = plan["params"]
    peak = driver.peak_rss_mib()
    return result | {
        "median_s": statistics.median(seconds),
        "seconds": seconds,
        "peak_rss_mib": peak,
        "peak_rss_gib": peak / 1024,
        "peak_rss_bytes_per_param": peak * 2**20 / params,
        "metrics_first": first_metrics,
        "metrics_last": {k: float(v) for k, v in metrics.items()},
    }


# --------------------------------------------------------------------------------------------
# Parent: spawn the children, tabulate, check the targets, write JSON.
# --------------------------------------------------------------------------------------------


def gib(x: float) -> str:
    return f"{x / GIB:.2f}"


def config_cells(r: dict) -> list[str]:
    best = "" if r.get("track_best", True) else ", track_best=False"
    return [
        r["size"],
        f"{num_params(r['task'], r['n']):,}",
        r["task"],
        r["precision"],
        optimizer_label(r["optimizer"]) + best,
        str(r["P"]),
    ]


PLAN_COLUMNS = (
    "size | params | task | dtype | optimizer | P | argument GiB | temp GiB | output GiB "
    "| alias GiB | plan GiB | plan bytes/param | eval chunk | compile s"
)
RUN_COLUMNS = (
    "size | params | task | dtype | optimizer | P | median s/gen | timed gens "
    "| peak RSS GiB | RSS bytes/param | plan GiB (this P) | fitness mean: first → last"
)


def format_plans(results: list[dict]) -> str:
    return format_kind(results, "plan", PLAN_COLUMNS, "lrlllrrrrrrrrr", plan_cells)


def format_runs(results: list[dict]) -> str:
    return format_kind(results, "run", RUN_COLUMNS, "lrlllrrrrrrl", run_cells)


def format_kind(results: list[dict], kind: str, head: str, align: str, cells) -> str:
    """The table of the rows of one `kind`: their configuration, then `cells(row)`, or what
    went wrong and blanks."""
    rows = []
    for r in results:
        if r["kind"] != kind:
            continue
        if r["status"] != "ok":
            blanks = len(align) - len(config_cells(r)) - 1
            rows.append(config_cells(r) + [f"{r['status']}: {first_line(r)}"] + [None] * blanks)
        else:
            rows.append(config_cells(r) + cells(r))
    return driver.markdown_table(head, align, rows)


def plan_cells(r: dict) -> list[str]:
    memory = [gib(r[f"{k}_bytes"]) for k in ("argument", "temp", "output", "alias")]
    return memory + [
        f"{r['plan_gib']:.2f}",
        f"{r['plan_bytes_per_param']:.1f}",
        str(r["eval_chunk"]),
        f"{r['compile_s']:.1f}",
    ]


def run_cells(r: dict) -> list[str]:
    first, last = r["metrics_first"]["fitness_mean"], r["metrics_last"]["fitness_mean"]
    return [
        f"{r['median_s']:.2f}",
        str(len(r["seconds"])),
        f"{r['peak_rss_gib']:.2f}",
        f"{r['peak_rss_bytes_per_param']:.1f}",
        f"{r['plan_gib']:.2f}",
        f"{first:.6g} → {last:.6g}",
    ]


def first_line(r: dict) -> str:
    """What went wrong, in a few words: the reason of a skip, else what ended the child."""
    error = r.get("error", "").split("\n", 1)[0]
    if r["status"] == "skipped":
        return error.removeprefix("skipped: ")[:120]
    return error.split(": ", 1)[0][:80]


def target_lines(results: list[dict]) -> list[str]:
    """The issue's targets: 500M float32 Adam and 1B bf16 single-buffer, per task."""
    lines = []

    def find(kind, size, precision, optimizers, task, p):
        for r in results:
            if (r["kind"], r["size"], r["precision"], r["task"], r["P"]) == (
                kind,
                size,
                precision,
                task,
                p,
            ) and r["optimizer"] in optimizers:
                return r
        return None

    def check(r, value, needed, what):
        if r is None:
            return None
        if r["status"] != "ok":
            return f"{what}: n/a ({r['status']}) (target <= {needed:g})"
        verdict = "met" if value(r) <= needed else "NOT met"
        return f"{what}: {value(r):.2f} (target <= {needed:g}): {verdict}"

    for task in TASKS:
        for size, precision, optimizers, label in (
            ("500M", "float32", ("adam",), "500M float32 Adam"),
            ("1B", "bfloat16", ("clipup", "sgd"), "1B bf16 single-buffer"),
        ):
            plan = find("plan", size, precision, optimizers, task, PLAN_POPULATION)
            run = find("run", size, precision, optimizers, task, 64)
            candidates = [
                check(plan, lambda r: r["plan_gib"], TARGET_GIB, f"{label} {task} plan P=256 GiB"),
                check(run, lambda r: r["peak_rss_gib"], TARGET_GIB, f"{label} {task} P=64 RSS GiB"),
            ]
            if precision == "float32":
                candidates.insert(
                    1,
                    check(
                        plan,
                        lambda r: r["plan_bytes_per_param"],
                        TARGET_BYTES_PER_PARAM,
                        f"{label} {task} plan P=256 bytes/param",
                    ),
                )
            lines += [line for line in candidates if line is not None]
    return lines


def parse_args(argv: list[str]):
    parser = driver.parser(__doc__, f"sizes {QUICK_SIZES}, 2 generations", "bigmodel", 4 * 3600)
    parser.add_argument(
        "--sizes",
        type=driver.comma_list(parse_size),
        help=f"comma-separated sizes, e.g. 100M,1B,1B:f32 (default {DEFAULT_SIZES}; "
        f"quick: {QUICK_SIZES})",
    )
    parser.add_argument(
        "--populations",
        type=driver.comma_list(int),
        default=[16, 64],
        help="populations of the measured runs (default 16,64)",
    )
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default="auto")
    parser.add_argument(
        "--track-best",
        choices=("auto", "on", "off"),
        default="auto",
        help="open_es(track_best=...): auto is off for >= 1B bf16 only",
    )
    parser.add_argument("--plan-only", action="store_true", help="compile the plans; run nothing")
    parser.add_argument("--gens", type=int, help="timed generations (3 up to 200M, 2 above)")
    parser.add_argument("--force", action="store_true", help="run even when the plan won't fit")
    args = parser.parse_args(argv)
    if args.sizes is None:
        args.sizes = driver.comma_list(parse_size)(QUICK_SIZES if args.quick else DEFAULT_SIZES)
    name = "bigmodel_plan" if args.plan_only and not args.quick else "bigmodel"
    args.out = args.out or driver.results_path(name, args.quick)
    return args


def plan_specs(args) -> list[dict]:
    """The children to run: every plan (P = 256), then every measured run."""
    configs = [
        size
        | {
            "task": task,
            "optimizer": optimizer_for(args.optimizer, size["precision"]),
            "track_best": track_best_for(args.track_best, size),
        }
        for size in sorted(args.sizes, key=lambda s: s["n"])
        for task in args.tasks
    ]
    specs = [c | {"kind": "plan", "P": PLAN_POPULATION} for c in configs]
    if not args.plan_only:
        specs += [
            c
            | {
                "kind": "run",
                "P": p,
                "gens": args.gens or (2 if args.quick else default_gens(c["n"])),
            }
            for c in configs
            for p in args.populations
        ]
    return [spec | {"force": args.force} for spec in specs]


def child_status(result: dict) -> str:
    if result["status"] != "ok":
        return f"{result['status']}: {first_line(result)}"
    if result["kind"] == "plan":
        return f"plan {result['plan_gib']:.2f} GiB ({result['plan_bytes_per_param']:.1f} B/param)"
    return f"{result['median_s']:.2f} s/gen, peak RSS {result['peak_rss_gib']:.2f} GiB"


def run(args, argv: list[str]) -> None:
    info = machine_info(argv, ("jax", "jaxlib", "optax"), jax_backend=False)
    results = spawn_all(
        __file__,
        plan_specs(args),
        args.timeout,
        describe=lambda spec: f"{spec['kind']} {name_of(spec)}",
        status=child_status,
    )
    plans, runs = format_plans(results), format_runs(results)
    targets = target_lines(results)
    printed = [plans] + ([] if args.plan_only else [runs])
    printed.append("\n".join(targets) or "(the targets concern 500M float32 and 1B bf16 only)")
    settings = {
        "sigma": SIGMA,
        "strategy": "jaxes.open_es(P, 0.05, optimizer=...), defaults otherwise",
        "optimizers": {name: optimizer_label(name) for name in ("adam", "clipup", "sgd")},
        "mlp": {"layers": MLP_LAYERS, "batch": MLP_BATCH, "width_multiple": MLP_WIDTH_MULTIPLE},
        "plan_population": PLAN_POPULATION,
        "warmup_calls": WARMUP_CALLS,
        "memory_headroom": MEMORY_HEADROOM,
    }
    payload = {"settings": settings, "results": results, "plans_table": plans}
    payload |= {"runs_table": runs, "targets": targets}
    warnings = driver.shared_cpu_warnings([r for r in results if r["kind"] == "run"])
    write_results(args.out, info, warnings, printed, payload)


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, run_child, run)
