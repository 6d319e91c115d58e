"""CPU threads: what a larger thread pool for XLA's CPU client would cost, run for run.

A pmap loop that dispatches 32 steps ahead of its CPU devices deadlocks in XLA's CPU client
(issue 45; the mechanism is in `jaxes.parallel`'s docstring). Two fixes: the loop waits now and
then (what jaxes does and its examples show), or PJRT_NPROC gives the client twice as many
threads as devices. PJRT_NPROC also sizes XLA's intra-op pool, so this compares XLA's own
pool (PJRT_NPROC = max(cores, devices), what every process gets) with the doubled one
(max(cores, 2 x devices)), for each task at 2 and 4 CPU devices in one process. Each run is
`benchmarks/scaling.py`'s: fresh processes, an empty compile cache, the steady state read
from metrics.jsonl (`jaxes train --env hopper --population 32 --devices n`; a sphere
function task through `jaxes.training.run` at d = 1M and 10M, P = 32), repeated (3 times by
default, alternating which pool runs first) because the machine's speed drifts between runs.
The ratio is the doubled pool's median seconds per generation over XLA's (above 1: the
doubled pool is slower).

Run:
  .venv/bin/python benchmarks/cpu_threads.py          # hopper P=32, sphere 1M and 10M (~30 min)
  .venv/bin/python benchmarks/cpu_threads.py --quick  # sphere 1M only, 2 devices
Results: benchmarks/results/cpu_threads.json (cpu_threads_quick.json with --quick).
"""

from __future__ import annotations

import os
import statistics
import sys

import _driver as driver
import scaling
from _common import machine_info, write_results

TASKS = [
    {"name": "hopper", "population": 32, "generations": 60},
    {"name": "sphere", "population": 32, "dim": 1_000_000, "generations": 40},
    {"name": "sphere", "population": 32, "dim": 10_000_000, "generations": 40},
]
QUICK_TASKS = [{"name": "sphere", "population": 32, "dim": 1_000_000, "generations": 20}]
STEADY_FROM, QUICK_STEADY_FROM = 20, 10


def pools(cores: int, devices: int) -> dict[str, int]:
    """PJRT_NPROC under each setting: XLA's default pool and the doubled one."""
    return {"xla": max(cores, devices), "doubled": max(cores, 2 * devices)}


def run(args, argv: list[str]) -> None:
    cores = os.cpu_count() or 1
    info = machine_info(argv, ("jax", "jaxlib", "brax"))
    tasks = QUICK_TASKS if args.quick else TASKS
    devices = [2] if args.quick else [2, 4]
    steady_from = QUICK_STEADY_FROM if args.quick else STEADY_FROM
    rows, summary = [], []
    for task in tasks:
        for n in devices:
            times = {setting: [] for setting in pools(cores, n)}
            for repeat in range(args.repeats):
                # Alternate which pool goes first: the machine's speed drifts between runs.
                order = list(pools(cores, n).items())[:: 1 if repeat % 2 == 0 else -1]
                for setting, threads in order:
                    row = scaling.measure(
                        task, "devices", n, steady_from, args.timeout, {"PJRT_NPROC": str(threads)}
                    )
                    row |= {"pool": setting, "pjrt_nproc": threads, "repeat": repeat}
                    rows.append(row)
                    if row["status"] == "ok":
                        times[setting].append(row["seconds_per_generation"])
                    print(
                        f"{label(task)} n={n} {setting} ({threads} threads) #{repeat}: "
                        f"{row['status']} {row.get('seconds_per_generation', 0):.4f} s/gen",
                        file=sys.stderr,
                        flush=True,
                    )
            medians = {k: statistics.median(v) if v else None for k, v in times.items()}
            ok = all(medians.values())
            summary.append(
                {
                    "task": label(task),
                    "devices": n,
                    "pjrt_nproc": pools(cores, n),
                    "median_seconds_per_generation": medians,
                    "runs": {k: len(v) for k, v in times.items()},
                    "ratio_doubled_to_xla": medians["doubled"] / medians["xla"] if ok else None,
                }
            )
    printed = [table(summary)]
    payload = {
        "settings": {
            "steady_from_generation": steady_from,
            "devices": devices,
            "cores": cores,
            "repeats": args.repeats,
        },
        "summary": summary,
        "rows": rows,
    }
    write_results(args.out, info, driver.shared_cpu_warnings(rows), printed, payload)


def label(task: dict) -> str:
    return task["name"] + (f" {task['dim'] / 1e6:g}M" if "dim" in task else "")


def table(summary: list[dict]) -> str:
    lines = []
    for r in summary:
        med, threads, ratio = r["median_seconds_per_generation"], r["pjrt_nproc"], None
        ratio = r["ratio_doubled_to_xla"]
        lines.append(
            [
                r["task"],
                str(r["devices"]),
                *(
                    f"{med[k]:.4f} ({threads[k]})" if med[k] else "error"
                    for k in ("xla", "doubled")
                ),
                f"{ratio:.2f}" if ratio else "-",
                f"{min(r['runs'].values())}",
            ]
        )
    head = (
        "task (P = 32) | devices | XLA's pool: s/gen (PJRT_NPROC) | doubled: s/gen (PJRT_NPROC) | "
        "doubled / XLA's | runs each"
    )
    return driver.markdown_table(head, "lrrrrr", lines)


def parse_args(argv: list[str]):
    parser = driver.parser(__doc__, "sphere 1M at 2 devices (smoke)", "cpu_threads", timeout=900)
    parser.add_argument("--repeats", type=int, default=3, help="runs per setting (median)")
    args = parser.parse_args(argv)
    args.out = args.out or driver.results_path("cpu_threads", args.quick)
    return args


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, None, run)
