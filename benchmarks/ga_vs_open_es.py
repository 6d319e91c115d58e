"""The seed-encoded GA against OpenAI-ES at equal env steps on gymnax (issue 62).

Each strategy trains with `jaxes train --env ENV --strategy NAME --seeds F-(F+N-1)` (the seeds
vmapped in one program) and the env's preset, so each runs as a user would run it: on
CartPole-v1 a linear policy on normalised observations, P = 32, 8 evaluation episodes of the
centre every `--eval-every` generations; open_es with the preset's σ = 0.1 and Adam 0.05,
ga with its own defaults (σ = 0.05, T = P // 8 = 4 parents, the elite kept) and with T = 8
(`--elite-ratio 0.25`); then both with a (32, 32) tanh MLP (`--policy mlp`). With the linear
policy the GA does not depend on σ at all: the policy acts by the argmax of θ·obs, θ starts at
zero, so every member of a run with σ' is σ'/σ times the member of a run with σ. With
`--minatar GAME` (e.g. Breakout-MinAtar) the same on that game's preset (P = 256,
`vbn_conv`, low-rank noise for open_es; the GA refuses low-rank noise and takes `--noise
table` and σ = 0.02), stopped at `--minatar-steps` training env steps.

From each seed's `metrics.jsonl`, with env steps = the training rollouts' alive steps summed
(the steps inside live episodes, what RL counts; evaluations of the centre not counted, the
same protocol for both):

- the env steps at the first evaluation of the centre at or above `--target` (CartPole's
  maximum, 500, by default), "miss" if never within the budget;
- the centre's evaluation return at a few env-step budgets (the last evaluation at or before
  each; "-" where a run had not evaluated yet).

Reported per strategy: the median over the seeds (and min, max of the steps to the target).

Run:
  .venv/bin/python benchmarks/ga_vs_open_es.py                 # CartPole, 10 seeds
  .venv/bin/python benchmarks/ga_vs_open_es.py --report FILE --budgets ...   # a table again
  .venv/bin/python benchmarks/ga_vs_open_es.py --seeds 3 --generations 20   # a quick look
  .venv/bin/python benchmarks/ga_vs_open_es.py --minatar Breakout-MinAtar --seeds 2
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _driver as driver
import numpy as np
from _common import REPO, machine_info, write_results

MLP = ["--policy", "mlp", "--hidden-sizes", "32,32"]
CARTPOLE_ROWS = {
    "open_es": ["--strategy", "open_es"],
    "ga": ["--strategy", "ga"],
    "ga T=8": ["--strategy", "ga", "--elite-ratio", "0.25"],
    "open_es mlp": ["--strategy", "open_es", *MLP],
    "ga mlp": ["--strategy", "ga", *MLP],
}
MINATAR_ROWS = {
    "open_es": ["--strategy", "open_es"],
    "ga": ["--strategy", "ga", "--noise", "table", "--sigma", "0.02"],
}


def curve(path: Path) -> list[tuple[int, float]]:
    """(training alive env steps so far, eval return) at each evaluation of the centre."""
    steps, out = 0, []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        steps += int(record["alive_steps"])
        if "eval_return" in record:
            out.append((steps, float(record["eval_return"])))
    return out


def at_budget(points: list[tuple[int, float]], budget: int) -> float:
    before = [ret for steps, ret in points if steps <= budget]
    return before[-1] if before else math.nan


def to_target(points: list[tuple[int, float]], target: float) -> float:
    hit = [steps for steps, ret in points if ret >= target]
    return float(hit[0]) if hit else math.inf


def show(value: float, steps: bool = True) -> str:
    if math.isnan(value):
        return "-"
    if math.isinf(value):
        return "miss"
    return f"{value:,.0f}" if steps else f"{round(value, 2):g}"


def median(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return float(np.median(finite)) if finite else math.nan


def table(rows: dict, target: float, budgets: list[int]) -> list[str]:
    """The markdown table of ``rows`` (name -> its record, ``curves`` per seed)."""
    header = " | ".join(f"eval at {b:,} steps" for b in budgets)
    lines = [
        f"| strategy | env steps to eval ≥ {target:g} (median [min, max]) | {header} | "
        "env steps trained (median) |",
        "|---" * (3 + len(budgets)) + "|",
    ]
    for name, row in rows.items():
        curves = row["curves"]
        steps = [to_target(c, target) for c in curves]
        cells = " | ".join(show(median([at_budget(c, b) for c in curves]), False) for b in budgets)
        trained = median([c[-1][0] if c else math.nan for c in curves])
        lines.append(
            f"| {name} | {show(float(np.median(steps)))} [{show(min(steps))}, "
            f"{show(max(steps))}] ({sum(map(math.isinf, steps))} of {len(steps)} missed) | "
            f"{cells} | {show(trained)} |"
        )
    return lines


def parse_args(argv: list[str]):
    parser = driver.parser(__doc__, None, "ga_vs_open_es_<cartpole or game>", child=False)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0, help="F: seeds F .. F+N-1")
    parser.add_argument("--generations", type=int, default=60)
    parser.add_argument("--eval-every", type=int, default=2)
    parser.add_argument("--target", type=float, default=500.0)
    parser.add_argument(
        "--budgets", type=driver.comma_list(int), default="50000,100000,200000,400000"
    )
    parser.add_argument("--minatar", default=None)
    parser.add_argument("--minatar-steps", type=int, default=2_000_000)
    parser.add_argument("--report", type=Path, help="a results JSON: its table again, no run")
    args = parser.parse_args(argv)
    # e.g. Breakout-MinAtar -> ga_vs_open_es_breakout.json
    slug = (args.minatar or "cartpole").lower().replace("-minatar", "")
    args.out = args.out or driver.results_path(f"ga_vs_open_es_{slug}")
    return args


def run(args, argv: list[str]) -> None:
    if args.report:
        rows = json.loads(args.report.read_text())["rows"]
        print("\n".join(table(rows, args.target, args.budgets)))
        return
    env = args.minatar or "CartPole-v1"
    flags_of = MINATAR_ROWS if args.minatar else CARTPOLE_ROWS
    info = machine_info(argv)
    results = {}
    jaxes = str(REPO / ".venv" / "bin" / "jaxes")
    seed_range = f"{args.first_seed}-{args.first_seed + args.seeds - 1}"
    for name, flags in flags_of.items():
        with tempfile.TemporaryDirectory() as tmp:
            command = [jaxes, "train", "--env", env, *flags, "--seeds", seed_range]
            command += ["--generations", str(args.generations), "--eval-every"]
            command += [str(args.eval_every), "--checkpoint-every", str(args.generations)]
            if args.minatar:
                command += ["--timesteps", str(args.minatar_steps)]
            start = time.perf_counter()
            done = subprocess.run([*command, "--out", tmp], capture_output=True, text=True)
            seconds = time.perf_counter() - start
            if done.returncode:
                raise SystemExit(f"{name}: {' '.join(command)} failed:\n{done.stderr[-3000:]}")
            curves = [curve(p / "metrics.jsonl") for p in sorted(Path(tmp).glob("seed-*"))]
        results[name] = {
            "command": " ".join(command[1:]),
            "seconds": round(seconds, 1),
            "steps_to_target": [to_target(c, args.target) for c in curves],
            "eval_at_budget": {str(b): [at_budget(c, b) for c in curves] for b in args.budgets},
            "curves": curves,
        }
        print(
            table({name: results[name]}, args.target, args.budgets)[-1], file=sys.stderr, flush=True
        )
    settings = {
        "env": env,
        "seeds": args.seeds,
        "first_seed": args.first_seed,
        "generations": args.generations,
        "eval_every": args.eval_every,
        "target": args.target,
        "budgets": args.budgets,
    }
    lines = table(results, args.target, args.budgets)
    write_results(args.out, info, [], ["\n".join(lines)], {"settings": settings, "rows": results})


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, None, run)
