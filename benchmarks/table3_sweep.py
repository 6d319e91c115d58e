"""The Table 3 sweep: a small grid of settings per env, each stopped at the paper's budget.

`benchmarks/table3.py` sits Salimans et al.'s Table 3 with one setting per env (`jaxes train
--preset table3`). This script is how those settings are found, and its JSON is the record
of everything tried, not only the winner.

Per env, the grid varies one setting at a time around the env's `table3` setting
(`jaxes.app.presets.preset(env, name="table3")`): the population halved and doubled, σ halved
and doubled, the learning rate halved and doubled, the L2 term switched (0 <-> 0.005), the
evaluation cadence (2 <-> 5 generations), and a tanh MLP of 32, 32 instead of the linear
policy; plus the setting itself ("table3"). `GRID` lists them; `--settings` picks some.

Each setting is one `jaxes train --env ENV --preset table3 FLAGS --seeds 0-2 --timesteps N
--target-return S50 --generations 100000` (the seeds vmapped in one program), where N is the
paper's ES timesteps for TRPO's 50 % score and S50 that score: a seed stops once it reaches
50 % or has simulated N env steps (as `total_env_steps` counts them: every step of jaxes'
chunked batch), whichever comes first; a setting also stops when it has used
`--wall-minutes` (default 15) of wall clock, start-up and compilation included. From each
seed's `metrics.jsonl` (`table3.py`'s helpers): the first env steps at which the centre's
evaluation reached TRPO's 25 % and 50 % scores, in simulated and in alive steps (the
paper's count), and its best and last evaluations; per setting the medians over seeds (a
seed that never reached a score counted as +inf) and whether they are within the paper's
ES timesteps.

Results: `--results/<env>.json` (default benchmarks/results/table3_sweep/), rewritten after
every setting; each setting records the `table3` row it was laid over, and a rerun skips the
settings already recorded over the current row, so moving a winner into
`presets.NAMED["table3"]` and rerunning sweeps a new round around it. Run directories go to
`--runs` (default ~/.cache/jaxes/table3-sweep-runs, `<env>/<row>/<setting>`), outside the
repository, with a log per setting.

Cost on the project's 2-core CPU, as the recorded settings took (a setting runs at most 3 × N
env steps): inverted_pendulum about 1 minute, inverted_double_pendulum 1-3, hopper 5-7, swimmer
9-13 (the generalized backend), walker2d 15 (give it `--wall-minutes 18`).

Run:
  .venv/bin/python benchmarks/table3_sweep.py --envs hopper
  .venv/bin/python benchmarks/table3_sweep.py --envs walker2d --settings table3,sigma/2
  .venv/bin/python benchmarks/table3_sweep.py --list            # the grid, nothing run
  .venv/bin/python benchmarks/table3_sweep.py --report          # the recorded tables
  .venv/bin/python benchmarks/table3_sweep.py --report \
      --pool benchmarks/results/table3_sweep/seeds-3-5   # and held-out seeds pooled in
  .venv/bin/python benchmarks/table3_sweep.py --quick           # smoke run, about a minute
`--pool DIR` (with `--report`): also the settings recorded both in `--results` and in DIR (the
same config on other seeds, e.g. a held-out check), judged on the medians over all their seeds.
`--quick`: inverted_pendulum, the "table3" and "population/2" settings, seeds 0-1, 20,000 env
steps, results in a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import _driver as driver
from _common import RESULTS, finish_machine_info, machine_info, write_json
from table3 import (
    ENVS,
    GENERATIONS,
    PAPER,
    add_alive_totals,
    env_list,
    eval_curve,
    first_crossing,
    median_steps,
    parse_seeds,
    read_metrics,
    run_sitting,
    sci,
    within_paper,
)

from jaxes.app import presets

PRESET = "table3"
SCORES = (0, 1)  # indices of TRPO's 25 % and 50 % scores in table3.PAPER
DEFAULT_RUNS = Path.home() / ".cache" / "jaxes" / "table3-sweep-runs"
QUICK = {"env": "inverted_pendulum", "settings": "table3,population/2", "seeds": "0-1"}
QUICK["timesteps"] = 20_000


def _scaled(value: float, factor: float) -> float:
    return float(f"{value * factor:.4g}")


def grid(env: str) -> dict[str, dict[str, str]]:
    """The settings tried on `env`: name -> `jaxes train` flags (without the dashes) laid over
    its `table3` setting, one setting changed at a time.

    Example:
      >>> g = grid("halfcheetah")
      >>> list(g)[:3], g["population*2"], g["sigma/2"]
      (['table3', 'population/2', 'population*2'], {'population': '64'}, {'sigma': '0.015'})
    """
    base = presets.preset(env, name=PRESET)
    population = base["population_size"]
    settings = {"table3": {}}
    settings["population/2"] = {"population": str(max(2, population // 2 + population // 2 % 2))}
    settings["population*2"] = {"population": str(population * 2)}
    for flag, name in (("sigma", "sigma"), ("learning-rate", "learning_rate")):
        settings[f"{flag}/2"] = {flag: repr(_scaled(base[name], 0.5))}
        settings[f"{flag}*2"] = {flag: repr(_scaled(base[name], 2.0))}
    l2 = 0.0 if base["l2_coeff"] else 0.005
    settings[f"l2-coeff={l2:g}"] = {"l2-coeff": repr(l2)}
    cadence = 5 if base["eval_every"] == 2 else 2
    settings[f"eval-every={cadence}"] = {"eval-every": str(cadence)}
    if base["policy"] == "linear":
        settings["mlp 32x32"] = {"policy": "mlp", "hidden-sizes": "32,32"}
    return settings


def current_row(env: str) -> dict:
    """The env's `table3` row now: what the grid's settings are laid over."""
    return dict(presets.NAMED[PRESET].get(env, {}))


def row_slug(row: dict) -> str:
    """A row as a short name (for run directories and the table).

    Example:
      >>> row_slug({"sigma": 0.1, "population_size": 8}), row_slug({})
      ('population_size=8,sigma=0.1', 'preset')
    """
    return ",".join(f"{k}={v}" for k, v in sorted(row.items())) or "preset"


def budget(env: str) -> int:
    """The env-step cap of a seed: the paper's ES timesteps for TRPO's 50 % score."""
    return int(PAPER[env]["es_timesteps"][SCORES[-1]])


def command(env: str, flags: dict[str, str], seeds: str, timesteps: int, run_dir: Path) -> list:
    cmd = [sys.executable, "-m", "jaxes", "train", "--env", env, "--preset", PRESET]
    for flag, value in flags.items():
        cmd += [f"--{flag}", value]
    cmd += ["--seeds", seeds, "--timesteps", str(timesteps), "--generations", str(GENERATIONS)]
    cmd += ["--target-return", repr(PAPER[env]["thresholds"][SCORES[-1]])]
    return cmd + ["--out", str(run_dir)]


def seed_result(lines: list[dict], thresholds: list[float]) -> dict:
    """One seed's crossings of `thresholds` (simulated and alive steps), best and last
    evaluation and the steps it used, from its metrics lines."""
    lines = add_alive_totals(lines)
    curve, alive = eval_curve(lines), eval_curve(lines, "total_alive_steps")
    return {
        "threshold_env_steps": [first_crossing(curve, t) for t in thresholds],
        "threshold_alive_steps": [first_crossing(alive, t) for t in thresholds],
        "best_eval_return": max((v for _, v in curve), default=None),
        "final_eval_return": curve[-1][1] if curve else None,
        "env_steps_used": int(lines[-1].get("total_env_steps", 0)) if lines else 0,
        "alive_steps_used": int(lines[-1]["total_alive_steps"]) if lines else 0,
        "generations": int(lines[-1]["generation"]) if lines else 0,
    }


def summary(seeds: list[dict], paper_steps: list[float]) -> dict:
    """Medians over seeds of each score's crossing (a miss counted as +inf) in both counts,
    whether each median is within `paper_steps`, and the median best evaluation.

    Example:
      >>> a = {"threshold_env_steps": [10, 50], "threshold_alive_steps": [5, 20],
      ...      "best_eval_return": 3.0, "env_steps_used": 60, "alive_steps_used": 30}
      >>> b = a | {"threshold_env_steps": [30, None], "threshold_alive_steps": [9, None],
      ...          "best_eval_return": 1.0}
      >>> s = summary([a, b, a], [20, 40])
      >>> s["median_env_steps"], s["within_paper"], s["within_paper_alive"]
      ([10, 50], [True, False], [True, True])
    """
    out: dict = {"median_env_steps": [], "median_alive_steps": []}
    out |= {"within_paper": [], "within_paper_alive": []}
    for count, used in (("env", "env_steps_used"), ("alive", "alive_steps_used")):
        for i, steps in enumerate(paper_steps):
            values = [s[f"threshold_{count}_steps"][i] for s in seeds]
            median = median_steps(values)
            missed = [s[used] for s, v in zip(seeds, values, strict=True) if v is None]
            suffix = "" if count == "env" else "_alive"
            out[f"median_{count}_steps"].append(median)
            out[f"within_paper{suffix}"].append(within_paper(median, steps, missed))
    best = [s["best_eval_return"] for s in seeds if s["best_eval_return"] is not None]
    out["median_best_eval_return"] = statistics.median(best) if best else None
    return out


def run_setting(env: str, name: str, flags: dict, args, runs: Path) -> dict:
    """Trains one setting's seeds (one program) and reads back its result."""
    seeds = parse_seeds(args.seeds)
    slug = name.replace("/2", "-half").replace("*2", "-double").replace(" ", "-")
    run_dir = runs / env / row_slug(current_row(env)) / slug.replace(",", "-")
    if run_dir.exists() and any(run_dir.iterdir()):
        raise SystemExit(f"{run_dir}: runs not in the results file; delete it or pass --runs")
    timesteps = args.timesteps or budget(env)
    cmd = command(env, flags, args.seeds, timesteps, run_dir)
    print(f"{env} {name}: {' '.join(cmd[3:])}", flush=True)
    machine = machine_info(args.argv, ("jax", "jaxlib", "brax"))
    sitting = run_sitting(
        cmd, run_dir.with_suffix(".log"), args.wall_minutes * 60, f"{env} {name}", run_dir, seeds
    )
    finish_machine_info(machine, [])
    if sitting["interrupted"] or (sitting["returncode"] != 0 and not sitting["stopped_for_wall"]):
        # A setting cut short by hand or by a failure measured nothing to compare: the sweep
        # stops without recording it (its runs stay in run_dir, with the log).
        raise SystemExit(
            f"{env} {name}: jaxes train exited with {sitting['returncode']}; not recorded (log "
            f"{run_dir.with_suffix('.log')})"
        )
    paper = PAPER[env]
    thresholds = [paper["thresholds"][i] for i in SCORES]
    per_seed = [
        {"seed": s} | seed_result(read_metrics(run_dir / f"seed-{s}" / "metrics.jsonl"), thresholds)
        for s in seeds
    ]
    config_path = run_dir / f"seed-{seeds[0]}" / "config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else None
    return {
        "name": name,
        "row": current_row(env),
        "flags": flags,
        "command": cmd[1:],
        "timesteps_budget": timesteps,
        "config": None if config is None else {k: v for k, v in config.items() if k != "seed"},
        "seeds": per_seed,
        **summary(per_seed, [paper["es_timesteps"][i] for i in SCORES]),
        "sitting": sitting,
        "machine": machine,
    }


def load(path: Path, env: str, args) -> dict:
    if path.is_file():
        record = json.loads(path.read_text())
        if record["seeds"] != parse_seeds(args.seeds):
            raise SystemExit(f"{path}: recorded with seeds {record['seeds']}, not {args.seeds}")
        return record
    paper = PAPER[env]
    return {
        "env": env,
        "preset": PRESET,
        "seeds": parse_seeds(args.seeds),
        "scores_percent": [25, 50],
        "thresholds": [paper["thresholds"][i] for i in SCORES],
        "paper_es_timesteps": [paper["es_timesteps"][i] for i in SCORES],
        "settings": [],
    }


def _steps(value) -> str:
    return "-" if value is None else sci(value)


def _yes(value) -> str:
    return {True: "yes", False: "no", None: "?"}[value]


def _judged(s: dict) -> list[str]:
    """A summary's cells: medians in both counts, best evaluation, and the verdicts."""
    best = s["median_best_eval_return"]
    return [
        " / ".join(_steps(x) for x in s["median_env_steps"]),
        " / ".join(_steps(x) for x in s["median_alive_steps"]),
        "-" if best is None else f"{best:.1f}",
        " / ".join(_yes(x) for x in s["within_paper"]),
        " / ".join(_yes(x) for x in s["within_paper_alive"]),
    ]


def table(record: dict) -> str:
    rows = [
        [row_slug(s["row"]), s["name"] + (" (note)" if s.get("note") else "")]
        + _judged(s)
        + [f"{s['sitting']['wall_s'] / 60:.1f}"]
        for s in record["settings"]
    ]
    paper = " / ".join(sci(x) for x in record["paper_es_timesteps"])
    head = (
        f"{record['env']}: {len(record['seeds'])} seeds, medians; the paper's ES: {paper} env "
        "steps to TRPO's 25 / 50 % scores\n"
    )
    notes = "".join(
        f"\n(note) {s['name']} over {row_slug(s['row'])}: {s['note']}"
        for s in record["settings"]
        if s.get("note")
    )
    return (
        head
        + driver.markdown_table(
            "table3 row | setting | env steps 25 / 50 % | alive steps 25 / 50 % | best eval | "
            "within 25 / 50 % | in alive steps | minutes",
            "llrrrllr",
            rows,
        )
        + notes
    )


def pooled(records: list[dict]) -> list[dict]:
    """The settings recorded with the same config in several `records` (other seeds), each
    judged on the medians over all their seeds; names "SETTING over ROW", joined by " = "
    where the records name the config differently.

    Example:
      >>> seed = {"threshold_env_steps": [5, None], "threshold_alive_steps": [5, None],
      ...         "best_eval_return": 1.0, "env_steps_used": 20, "alive_steps_used": 20}
      >>> setting = {"config": {"population_size": 8}, "seeds": [seed | {"seed": 0}]}
      >>> a = {"paper_es_timesteps": [10, 10], "settings": [setting | {"name": "x", "row": {}}]}
      >>> b = a | {"settings": [setting | {"name": "table3", "row": {"population_size": 8},
      ...                                  "seeds": [seed | {"seed": 1}]}]}
      >>> [(p["name"], p["seeds"], p["within_paper"]) for p in pooled([a, b])]
      [('x over preset = table3 over population_size=8', [0, 1], [True, False])]
    """
    groups: dict[str, list[dict]] = {}
    for record in records:
        for s in record["settings"]:
            if s.get("config") is not None:
                groups.setdefault(json.dumps(s["config"], sort_keys=True), []).append(s)
    out = []
    for settings in groups.values():
        seeds = [seed for s in settings for seed in s["seeds"]]
        if len(settings) < 2 or len({x["seed"] for x in seeds}) < len(seeds):
            continue  # recorded once, or the same seeds twice: nothing to pool
        names = dict.fromkeys(f"{s['name']} over {row_slug(s['row'])}" for s in settings)
        out.append(
            {"name": " = ".join(names), "seeds": sorted(x["seed"] for x in seeds)}
            | summary(seeds, records[0]["paper_es_timesteps"])
        )
    return out


def pooled_table(env: str, rows: list[dict]) -> str:
    cells = [[p["name"], ",".join(map(str, p["seeds"]))] + _judged(p) for p in rows]
    head = f"{env}, pooled over the records' seeds:\n"
    return head + driver.markdown_table(
        "setting | seeds | env steps 25 / 50 % | alive steps 25 / 50 % | best eval | "
        "within 25 / 50 % | in alive steps",
        "llrrrll",
        cells,
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = driver.parser(__doc__, "smoke run (see the docstring)", out=False, child=False)
    parser.add_argument("--envs", type=env_list, default=None, help="a,b or all (default all)")
    parser.add_argument("--settings", default=None, help="comma-separated names (default all)")
    parser.add_argument("--seeds", default="0-2", help="as jaxes train takes them")
    parser.add_argument("--wall-minutes", type=float, default=15.0, help="per setting")
    parser.add_argument("--timesteps", type=int, default=None, help="override the env-step cap")
    parser.add_argument("--results", type=Path, default=None, help="folder of <env>.json")
    parser.add_argument("--runs", type=Path, default=None, help=f"default {DEFAULT_RUNS}")
    parser.add_argument("--list", action="store_true", help="print the grid and exit")
    parser.add_argument(
        "--report", action="store_true", help="print the recorded tables and exit (runs nothing)"
    )
    parser.add_argument(
        "--pool", type=Path, default=None, help="with --report: also pool with DIR's records"
    )
    args = parser.parse_args(argv)
    if args.pool is not None and not args.report:
        parser.error("--pool: only with --report")
    if args.quick:
        args.envs = args.envs or [QUICK["env"]]
        args.settings = args.settings or QUICK["settings"]
        args.seeds, args.timesteps = QUICK["seeds"], args.timesteps or QUICK["timesteps"]
        args.results = args.results or Path(tempfile.mkdtemp(prefix="table3-sweep-quick-"))
    args.envs = args.envs or list(ENVS)
    try:
        parse_seeds(args.seeds)
    except ValueError as err:
        parser.error(str(err))
    names = None if args.settings is None else [x.strip() for x in args.settings.split(",")]
    for env in args.envs:
        unknown = sorted(set(names or ()) - set(grid(env)))
        if unknown:
            parser.error(f"--settings: {unknown} not in {env}'s grid: {', '.join(grid(env))}")
    args.names = names
    args.results = (args.results or RESULTS / "table3_sweep").absolute()
    args.runs = (args.runs or (args.results / "runs" if args.quick else DEFAULT_RUNS)).absolute()
    return args


def run(args, argv: list[str]) -> None:
    args.argv = argv
    for env in args.envs:
        settings = grid(env)
        if args.list:
            for name, flags in settings.items():
                print(f"{env} {name}: {' '.join(f'--{k} {v}' for k, v in flags.items())}")
            continue
        path = args.results / f"{env}.json"
        if args.report:
            if path.is_file():
                print(table(json.loads(path.read_text())) + "\n")
            other = None if args.pool is None else args.pool / f"{env}.json"
            if path.is_file() and other is not None and other.is_file():
                rows = pooled([json.loads(f.read_text()) for f in (path, other)])
                if rows:
                    print(pooled_table(env, rows) + "\n")
            continue
        record = load(path, env, args)
        # A setting is a name laid over a row: when the row changes (a winner moved into
        # NAMED), the same names are a new round around it.
        done = {(s["name"], row_slug(s["row"])) for s in record["settings"]}
        for name in args.names or settings:
            if (name, row_slug(current_row(env))) in done:
                print(f"{env} {name}: recorded, skipped", flush=True)
                continue
            record["settings"].append(run_setting(env, name, settings[name], args, args.runs))
            write_json(path, record)  # after every setting: a long sweep keeps what it did
        print("\n" + table(record) + "\n", flush=True)
    if not (args.list or args.report):
        print(f"results in {args.results}; run directories in {args.runs}")


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, None, run)
