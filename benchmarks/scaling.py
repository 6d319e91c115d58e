"""Scaling: env steps/s and seconds per generation against the number of workers on a CPU.

Workers are counted two ways, 1 ... cores each:

  devices    one process with n CPU devices (`jaxes train --devices n`, which sets XLA_FLAGS'
             `--xla_force_host_platform_device_count=n` before JAX starts:
             `jaxes.parallel.use_cpu_cores`); n = 1 is `--devices 1`, XLA's single CPU device
             (not pinned: its intra-op threads may use every core), so the speedup at n = cores
             is what `jaxes train`'s default (one device per core, issue 29) gives over it;
  processes  n processes on `jax.distributed` (`--coordinator-address 127.0.0.1:PORT
             --num-processes n --process-id i`), process i pinned to core i with `taskset -c i`,
             one CPU device each; n = 1 is one process pinned to core 0 (`--devices 1`).

Tasks:

  hopper     `jaxes train --env hopper` (the env's preset: spring, 1000-step episodes, linear
             policy, open_es; `--population P` for P in {32, 64}), `--generations G`; the
             steady-state rate is read from the run's metrics.jsonl: env steps over wall seconds
             between generation `STEADY_FROM` and the last (compilation and the first blocks
             excluded), as issue 29 measured it;
  sphere     a 10M-parameter function task (`jaxes.tasks.functions.function_task("sphere",
             10_000_000)`, `jaxes.open_es(P, 0.05)` at its defaults, P = 32) through
             `jaxes.training.run`, `devices` or `jax.distributed` as above; seconds per
             generation from metrics.jsonl the same way.

Speedup is against n = 1 of the same way (the same task and P), parallel efficiency is
speedup / n. Bytes per generation: the collectives of the sharded generation step
(`jax.jit(parallel.sharded_step(strategy, task, mesh)).lower(state).compile().as_text()`, a
mesh of `cores` CPU devices in one process), each with its operand bytes (what one device
sends) and result bytes (what it receives); a program spread over processes has the same
collectives. Every run is fresh processes with a fresh, empty persistent compilation cache.

Run:
  .venv/bin/python benchmarks/scaling.py           # hopper P=32, 64; sphere 10M (~15 min, 2 cores)
  .venv/bin/python benchmarks/scaling.py --quick   # hopper P=32, 30 generations, sphere 1M
Results: benchmarks/results/scaling.json (scaling_quick.json with --quick) and the figure
docs/scaling.png (not with --quick). No GPU rows: on a GPU, workers are GPUs (`--devices`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _driver as driver
from _children import CpuWatch, quiet_import, spawn
from _common import REPO, machine_info, write_results

JAXES = str(REPO / ".venv" / "bin" / "jaxes")
FIGURE = REPO / "docs" / "scaling.png"
HOPPER_GENERATIONS = {32: 120, 64: 80}  # about a minute each on one core
FUNCTION, FUNCTION_DIM, FUNCTION_P, FUNCTION_GENERATIONS = "sphere", 10_000_000, 32, 40
STEADY_FROM = 20  # the steady state: from this generation to the last
QUICK = {"hopper": {32: 30}, "dim": 1_000_000, "function_generations": 20, "steady_from": 10}
TARGET_DEFAULT = 1.9  # hopper, `jaxes train` default against --devices 1, at 2 cores
TARGET_PROCESSES = 0.85  # efficiency from 1 to 2 processes
DTYPE_BYTES = {
    "f64": 8,
    "s64": 8,
    "u64": 8,
    "f32": 4,
    "s32": 4,
    "u32": 4,
    "bf16": 2,
    "f16": 2,
    "s16": 2,
    "u16": 2,
    "s8": 1,
    "u8": 1,
    "pred": 1,
}


# --------------------------------------------------------------------------------------------
# Children.
# --------------------------------------------------------------------------------------------


def function_child(spec: dict) -> dict:
    """One process of a sphere run: its devices (or its place in `jax.distributed`), then
    `training.run` into the shared run directory."""
    import io

    from jaxes import parallel

    processes = spec["processes"]
    if processes > 1:
        parallel.initialize_distributed(spec["address"], processes, spec["process_id"], 120)
    else:
        parallel.use_cpu_cores(spec["devices"])
    jax = quiet_import("jaxes")
    import jaxes
    from jaxes import training
    from jaxes.tasks.functions import function_task

    strategy = jaxes.open_es(spec["population"], 0.05)
    task = function_task(FUNCTION, spec["dim"])
    summary = training.run(
        strategy,
        task,
        spec["out"],
        generations=spec["generations"],
        eval_every=5,
        checkpoint_every=spec["generations"],
        devices=0 if processes > 1 else spec["devices"],
        stream=io.StringIO(),
        plot=False,
    )
    return {"devices_seen": jax.device_count(), "compile_s": summary.get("compile_seconds")}


def collectives(hlo: str) -> list[dict]:
    """Every cross-device collective of compiled HLO text: op, operand and result shapes and
    bytes, and the computation it sits in (a loop body would run it more than once). Compiled
    HLO names its operands without their types, so each is looked up where it is defined."""
    ops = "all-gather|all-reduce|collective-permute|all-to-all|reduce-scatter"
    define = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=\s*(\(.*?\)|\S+)\s+([\w\-]+)\((.*?)\)")
    types = dict(re.findall(r"([\w.\-]+): ([a-z]+\d*\[[0-9,]*\])", hlo))  # parameters
    lines = hlo.splitlines()
    for line in lines:
        match = define.match(line)
        if match:
            types[match.group(1)] = match.group(2)
    found, computation = [], None
    for line in lines:
        head = re.match(r"^(?:ENTRY\s+)?%([\w.\-]+)\s.*\{\s*$", line)
        if head:
            computation = head.group(1)
        match = define.match(line)
        if not match or not re.fullmatch(f"({ops})(-start)?", match.group(3)):
            continue
        _, result, op, operands = match.groups()
        names = re.findall(r"%([\w.\-]+)", operands)
        shapes = [s for n in names for s in _shapes(types.get(n, ""))]
        results = _shapes(result)
        found.append(
            {
                "op": op,
                "computation": computation,
                "operands": [f"{t}[{d}]" for t, d in shapes],
                "result": [f"{t}[{d}]" for t, d in results],
                "operand_bytes": sum(_bytes(t, d) for t, d in shapes),
                "result_bytes": sum(_bytes(t, d) for t, d in results),
            }
        )
    return found


def _shapes(text: str) -> list[tuple[str, str]]:
    return re.findall(r"\b([a-z]+\d*)\[([0-9,]*)\]", text)


def _bytes(dtype: str, dims: str) -> int:
    count = 1
    for d in dims.split(","):
        count *= int(d) if d else 1
    return count * DTYPE_BYTES.get(dtype, 4)


def hlo_child(spec: dict) -> dict:
    """The collectives of one sharded generation step over `devices` CPU devices, for each
    task of `spec["tasks"]`."""
    from jaxes import parallel

    parallel.use_cpu_cores(spec["devices"])
    jax = quiet_import("brax.envs", "jaxes.app.train")
    import jaxes
    from jaxes import training
    from jaxes.app.build import build
    from jaxes.app.config import TrainConfig
    from jaxes.tasks.functions import function_task

    mesh = parallel.make_mesh(spec["devices"])
    rows = []
    for name, population, dim in spec["tasks"]:
        if name == "hopper":
            strategy, task = build(TrainConfig.make(env="hopper", population_size=population))
        else:
            strategy, task = jaxes.open_es(population, 0.05), function_task(name, dim)
        state = training.place(training.init_state(strategy, task, 0), mesh)
        params = sum(x.size for x in jax.tree.leaves(state.strategy_state.params))
        compiled = jax.jit(parallel.sharded_step(strategy, task, mesh)).lower(state).compile()
        found = collectives(compiled.as_text())
        rows.append(
            {
                "task": name,
                "population": population,
                "parameters": int(params),
                "devices": spec["devices"],
                "collectives": found,
                "operand_bytes": sum(c["operand_bytes"] for c in found),
                "result_bytes": sum(c["result_bytes"] for c in found),
                "parameter_bytes": int(params) * 4,
            }
        )
        del state, compiled
    return {"rows": rows}


def run_child(spec: dict) -> dict:
    kind = spec.pop("kind")
    return {"function": function_child, "hlo": hlo_child}[kind](spec)


# --------------------------------------------------------------------------------------------
# Parent: launch the runs (a run is one or more processes started together), read metrics.
# --------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_argvs(task: dict, way: str, n: int, out: str) -> list[list[str]]:
    """The command line of each process of one run."""
    if way == "processes" and n > 1:
        address = f"127.0.0.1:{free_port()}"
        places = [{"processes": n, "process_id": i, "address": address} for i in range(n)]
    else:
        places = [{"processes": 1, "process_id": 0}]
    argvs = []
    for place in places:
        pin = ["taskset", "-c", str(place["process_id"])] if way == "processes" else []
        devices = n if way == "devices" else 1
        if task["name"] == "hopper":
            cmd = [
                JAXES,
                "train",
                "--env",
                "hopper",
                "--population",
                str(task["population"]),
                "--generations",
                str(task["generations"]),
                "--out",
                out,
            ]
            if place["processes"] > 1:
                cmd += [
                    "--coordinator-address",
                    place["address"],
                    "--num-processes",
                    str(n),
                    "--process-id",
                    str(place["process_id"]),
                ]
            elif not (way == "devices" and n == (os.cpu_count() or 1)):
                cmd += ["--devices", str(devices)]  # n = cores: the default, no flag
        else:
            spec = {
                "kind": "function",
                "population": task["population"],
                "dim": task["dim"],
                "generations": task["generations"],
                "out": out,
                "devices": devices,
                **place,
            }
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
        argvs.append(pin + cmd)
    return argvs


def launch(argvs: list[list[str]], env: dict, timeout: float) -> tuple[float, float, list[str]]:
    """Starts every process of a run at once; their wall seconds (start to the last exit), the
    CPU share other processes took, and each one's failure (empty when all exited 0)."""
    with CpuWatch(__import__("resource").RUSAGE_CHILDREN) as watch:
        procs = [
            subprocess.Popen(
                a, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
            )
            for a in argvs
        ]
        errors = []
        deadline = time.monotonic() + timeout
        for p in procs:
            try:
                output, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                output, _ = p.communicate()
                errors.append(f"timeout after {timeout:g} s: {output[-1500:]}")
                continue
            if p.returncode != 0:
                errors.append(f"exit {p.returncode}: {output[-1500:]}")
    return watch.wall, watch.other_cpu_share, errors


def steady_state(metrics_path: Path, steady_from: int) -> dict:
    """Env steps/s and seconds per generation between generation `steady_from` and the last,
    from metrics.jsonl's cumulative `wall_time_s` and `total_env_steps`."""
    lines = [json.loads(x) for x in metrics_path.read_text().splitlines() if x.strip()]
    first = next(x for x in lines if x["generation"] >= steady_from)
    last = lines[-1]
    seconds = last["wall_time_s"] - first["wall_time_s"]
    generations = last["generation"] - first["generation"]
    steps = last.get("total_env_steps", 0) - first.get("total_env_steps", 0)
    return {
        "from_generation": first["generation"],
        "to_generation": last["generation"],
        "steady_seconds": round(seconds, 3),
        "seconds_per_generation": seconds / generations,
        "env_steps_per_s": steps / seconds if steps else None,
        "total_wall_time_s": last["wall_time_s"],
        "first_generation_wall_s": lines[0]["wall_time_s"],
    }


def measure(
    task: dict, way: str, n: int, steady_from: int, timeout: float, env_extra: dict | None = None
) -> dict:
    """One run, fresh processes and an empty compile cache; `env_extra` is laid over their
    environment (which keeps none of this process's XLA_FLAGS, JAX_PLATFORMS or PJRT_NPROC)."""
    base = tempfile.mkdtemp(prefix="jaxes-scaling-")
    try:
        out = os.path.join(base, "run")
        drop = ("XLA_FLAGS", "JAX_PLATFORMS", "PJRT_NPROC")
        env = {k: v for k, v in os.environ.items() if k not in drop} | (env_extra or {})
        env["JAXES_CACHE_DIR"] = os.path.join(base, "xla-cache")  # cold cache, each run its own
        env["JAX_PLATFORMS"] = "cpu"
        argvs = process_argvs(task, way, n, out)
        wall, others, errors = launch(argvs, env, timeout)
        row = {
            "task": task["name"],
            "population": task["population"],
            "way": way,
            "workers": n,
            "command": " & ".join(
                " ".join(a[:12]) + (" ..." if len(a) > 12 else "") for a in argvs
            ),
            "wall_s": round(wall, 2),
            "other_cpu_share": round(others, 3),
        }
        if task["name"] != "hopper":
            row["dim"] = task["dim"]
        if errors:
            return row | {"status": "error", "errors": errors}
        steady = steady_state(Path(out) / "metrics.jsonl", steady_from)
        if task["name"] != "hopper":  # a function task counts evaluations, not env steps
            steady["evaluations_per_s"] = steady.pop("env_steps_per_s")
        return row | {"status": "ok"} | steady
    finally:
        shutil.rmtree(base, ignore_errors=True)


def add_speedups(rows: list[dict]) -> None:
    """Speedup over n = 1 of the same task, P and way, and efficiency = speedup / n."""
    for row in rows:
        base = next(
            (
                r
                for r in rows
                if r["workers"] == 1
                and r["status"] == "ok"
                and (r["task"], r["population"], r["way"])
                == (row["task"], row["population"], row["way"])
            ),
            None,
        )
        if row["status"] != "ok" or base is None:
            row["speedup"] = row["efficiency"] = None
            continue
        row["speedup"] = base["seconds_per_generation"] / row["seconds_per_generation"]
        row["efficiency"] = row["speedup"] / row["workers"]


def verdicts(rows: list[dict], cores: int) -> list[dict]:
    out = []
    for p in sorted({r["population"] for r in rows if r["task"] == "hopper"}):
        top = next(
            (
                r
                for r in rows
                if r["task"] == "hopper"
                and r["population"] == p
                and r["way"] == "devices"
                and r["workers"] == min(cores, 2)
            ),
            None,
        )
        if top and top["speedup"] is not None:
            out.append(
                {
                    "target": f"hopper P={p}: default (one device per core) >= "
                    f"{TARGET_DEFAULT}x --devices 1 at 2 cores",
                    "value": top["speedup"],
                    "met": top["speedup"] >= TARGET_DEFAULT,
                }
            )
    for r in rows:
        if r["way"] == "processes" and r["workers"] == 2 and r["efficiency"] is not None:
            what = f"{r['task']} P={r['population']}"
            out.append(
                {
                    "target": f"{what}: efficiency 1 -> 2 processes >= {TARGET_PROCESSES:.0%}",
                    "value": r["efficiency"],
                    "met": r["efficiency"] >= TARGET_PROCESSES,
                }
            )
    return out


def table(rows: list[dict]) -> str:
    lines = []
    for r in rows:
        ok = r["status"] == "ok"
        rate = r.get("env_steps_per_s")
        lines.append(
            [
                f"{r['task']}" + (f" {r['dim'] / 1e6:g}M" if "dim" in r else ""),
                str(r["population"]),
                r["way"],
                str(r["workers"]),
                f"{rate:,.0f}" if ok and rate and r["task"] == "hopper" else "-",
                f"{r['seconds_per_generation']:.3f}" if ok else r["status"],
                f"{r['speedup']:.2f}" if r.get("speedup") else "-",
                f"{r['efficiency']:.0%}" if r.get("efficiency") else "-",
                f"{r['wall_s']:.0f}",
                f"{r['other_cpu_share']:.0%}",
            ]
        )
    head = (
        "task | P | workers are | n | env steps/s | s/generation | speedup | efficiency | "
        "run wall s | others' CPU"
    )
    return driver.markdown_table(head, "llllrrrrrr", lines)


def bytes_table(hlo: dict) -> str:
    lines = []
    for r in hlo["rows"]:
        ops = ", ".join(
            f"{c['op']} {'+'.join(c['operands'])}->{'+'.join(c['result'])}"
            for c in r["collectives"]
        )
        lines.append(
            [
                f"{r['task']}",
                str(r["population"]),
                f"{r['parameters']:,}",
                str(len(r["collectives"])),
                f"{r['operand_bytes']:,}",
                f"{r['result_bytes']:,}",
                f"{r['parameter_bytes']:,}",
                ops,
            ]
        )
    head = (
        "task | P | parameters | collectives | operand bytes | result bytes | parameter bytes | ops"
    )
    return driver.markdown_table(head, "lrrrrrrl", lines)


def plot(rows: list[dict], cores: int, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    ax.plot([1, cores], [1, cores], "k--", lw=1, label="ideal")
    groups = sorted({(r["task"], r["population"], r["way"]) for r in rows})
    for task, p, way in groups:
        pts = [
            (r["workers"], r["speedup"])
            for r in rows
            if (r["task"], r["population"], r["way"]) == (task, p, way) and r.get("speedup")
        ]
        if pts:
            xs, ys = zip(*sorted(pts), strict=True)
            style = "o-" if way == "devices" else "s:"
            ax.plot(xs, ys, style, label=f"{task} P={p}, {way}")
    ax.set_xlabel("workers (CPU devices in one process, or pinned processes)")
    ax.set_ylabel("speedup over 1 worker")
    ax.set_xticks(range(1, cores + 1))
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse_args(argv: list[str]):
    parser = driver.parser(
        __doc__, "hopper P=32 30 generations, sphere 1M (smoke)", "scaling", timeout=900
    )
    parser.add_argument(
        "--workers",
        type=driver.comma_list(int),
        default=None,
        help="worker counts (default 1 ... cores)",
    )
    parser.add_argument(
        "--parts",
        type=driver.comma_list(str),
        default=["hopper", "function", "bytes"],
        help="any of hopper,function,bytes",
    )
    parser.add_argument(
        "--populations",
        type=driver.comma_list(int),
        default=None,
        help="hopper populations (default 32,64; 32 with --quick)",
    )
    parser.add_argument("--figure", type=Path, default=None, help=f"default {FIGURE}")
    args = parser.parse_args(argv)
    args.out = args.out or driver.results_path("scaling", args.quick)
    return args


def run(args, argv: list[str]) -> None:
    cores = os.cpu_count() or 1
    workers = args.workers or list(range(1, cores + 1))
    info = machine_info(argv, ("jax", "jaxlib", "brax"))
    quick = args.quick
    hopper = QUICK["hopper"] if quick else HOPPER_GENERATIONS
    if args.populations:
        hopper = {p: hopper.get(p, max(hopper.values())) for p in args.populations}
    dim = QUICK["dim"] if quick else FUNCTION_DIM
    steady_from = QUICK["steady_from"] if quick else STEADY_FROM
    tasks = []
    if "hopper" in args.parts:
        tasks += [{"name": "hopper", "population": p, "generations": g} for p, g in hopper.items()]
    if "function" in args.parts:
        gens = QUICK["function_generations"] if quick else FUNCTION_GENERATIONS
        tasks.append({"name": FUNCTION, "population": FUNCTION_P, "dim": dim, "generations": gens})
    rows = []
    for task in tasks:
        for way in ("devices", "processes"):
            for n in workers:
                t = time.perf_counter()
                row = measure(task, way, n, steady_from, args.timeout)
                rate = row.get("env_steps_per_s")
                print(
                    f"{task['name']} P={task['population']} {way} n={n}: {row['status']} "
                    f"{row.get('seconds_per_generation', 0):.3f} s/gen"
                    + (f", {rate:,.0f} env steps/s" if rate else "")
                    + f" ({time.perf_counter() - t:.0f} s)"
                    + ("" if row["status"] == "ok" else f"\n{row['errors']}"),
                    file=sys.stderr,
                    flush=True,
                )
                rows.append(row)
    add_speedups(rows)
    hlo = None
    if "bytes" in args.parts:
        spec = {
            "kind": "hlo",
            "devices": max(2, cores),
            "tasks": [["hopper", p, None] for p in hopper] + [[FUNCTION, FUNCTION_P, dim]],
        }
        env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS",)}
        env["JAX_PLATFORMS"] = "cpu"
        outcome = spawn(__file__, spec, args.timeout, env)
        hlo = outcome.result if outcome.result is not None else {"error": outcome.error}
    found = verdicts(rows, cores)
    printed = [table(rows)]
    if hlo and "rows" in hlo:
        printed.append(bytes_table(hlo))
    printed += [
        f"{v['target']}: {v['value']:.2f} -> {'met' if v['met'] else 'MISSED'}" for v in found
    ]
    printed.append("GPU rows: not measured (no GPU on this machine).")
    if not quick and rows:
        figure = args.figure or FIGURE
        plot(
            rows,
            cores,
            figure,
            f"jaxes scaling, {cores}-core CPU ({info['cpu_model']}), commit {info['git']}",
        )
        printed.append(f"figure: {os.path.relpath(figure, REPO)}")
    payload = {
        "settings": {
            "hopper_generations": hopper,
            "steady_from_generation": steady_from,
            "function": {
                "fn": FUNCTION,
                "dim": dim,
                "population": FUNCTION_P,
                "strategy": "jaxes.open_es(P, 0.05) defaults",
            },
            "workers": workers,
            "cores": cores,
            "gpu": "not measured (no GPU on this machine)",
        },
        "rows": rows,
        "bytes_per_generation": hlo,
        "verdicts": found,
    }
    write_results(args.out, info, driver.shared_cpu_warnings(rows), printed, payload)


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, run_child, run)
