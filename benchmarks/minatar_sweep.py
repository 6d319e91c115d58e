"""The MinAtar sweep: settings tried around one row on a game's seeds, each stopped at a budget.

`benchmarks/minatar.py` sits the five games with the MinAtar preset. This script is how the
preset's setting is chosen (issue 39), with `table3_sweep.py`'s discipline: a row (flags laid
over the preset), a grid of settings that change it, each setting trained on the sweep seeds
(0-2, one program) until `--wall-minutes` of wall clock (start-up and compilation included)
or `--timesteps` env steps per seed, whichever binds first; every setting is recorded, not
only the winner, and a rerun skips the settings already recorded over the same row, so
moving a winner into `ROW` and rerunning sweeps the next round around it. Settings are
judged at equal wall clock (the re-sit's budget is wall clock: 45 minutes a game), on the
median over seeds of the last evaluation of the centre; the held-out seeds (3-5) are the
re-sit's, never the sweep's.

The grid's leads (issue 39): low-rank members with r = 1 (3.4-4.1x the full-rank steps/s
with the conv network, 1.7x with vbn_conv: docs/benchmarks.md, "Control policies"), the
network without virtual batch normalisation (its reference pass is most of a factored
generation), NeuroEvoBench's tuned OpenES for MinAtar Breakout (σ 0.038, Adam 0.022; its
0.999 decays are not in `jaxes train`), and the population.

Results: `--results/<game>.json` (default benchmarks/results/minatar_sweep/), rewritten after
every setting. Run directories go to `--runs` (default ~/.cache/jaxes/minatar-sweep-runs,
`<game>/<row>/<setting>`), outside the repository, with a log per setting.

Run:
  .venv/bin/python benchmarks/minatar_sweep.py --games Breakout
  .venv/bin/python benchmarks/minatar_sweep.py --games Breakout --settings preset,conv-r1
  .venv/bin/python benchmarks/minatar_sweep.py --list        # the grid, nothing run
  .venv/bin/python benchmarks/minatar_sweep.py --report      # the recorded tables
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import _driver as driver
import minatar
from _common import RESULTS, machine_info, write_json
from table3_sweep import row_slug

# The row the grid is laid over (`jaxes train` flags, no dashes). Round 1 was laid over the
# preset (ROW = {}; its grid, as recorded in results/minatar_sweep/, was the preset, r = 1,
# conv r = 1 with and without NeuroEvoBench's σ 0.038 and Adam 0.022, r = 1 with them, r = 1
# with a 32-observation VBN reference, conv r = 1 at P = 512 and with L2 0): its winner on both
# games, r = 1 with the 32-observation reference, is round 2's row.
ROW: dict[str, str] = {"noise": "lowrank", "noise-rank": "1", "vbn-reference-size": "32"}
GRID: dict[str, dict[str, str]] = {
    "row": {},
    "reference16": {"vbn-reference-size": "16"},
    "population128": {"population": "128"},
    "population512": {"population": "512"},
    "sigma0.04": {"sigma": "0.04"},
    "sigma0.01": {"sigma": "0.01"},
    "lr0.02": {"learning-rate": "0.02"},
    "conv-neuroevobench": {"policy": "conv", "sigma": "0.038", "learning-rate": "0.022"},
}
SEEDS = "0-2"
WALL_MINUTES = 10.0
DEFAULT_RUNS = Path.home() / ".cache" / "jaxes" / "minatar-sweep-runs"


def setting_result(game: dict) -> dict:
    """The numbers a setting is judged on, from `minatar.game_summary`'s dict."""
    seeds = game["seeds"]
    last = [s["final_eval_return"] for s in seeds if s["final_eval_return"] is not None]
    return {
        "median_final_eval_return": statistics.median(last) if last else None,
        "final_eval_returns": last,
        "median_best_eval_return": (game["best_eval_return"] or {}).get("median"),
        "median_env_steps": (game["env_steps"] or {}).get("median"),
        "median_alive_steps": (game["alive_steps"] or {}).get("median"),
        "median_generations": statistics.median(s["generations"] for s in seeds),
        "wall_minutes": game["wall_minutes"],
    }


def results_path(args, game: str) -> Path:
    return args.results / f"{game}.json"


def recorded(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {"settings": []}


def sweep_game(args, argv, game: str) -> None:
    path = results_path(args, game)
    record = recorded(path)
    done = {(s["row"], s["name"]) for s in record["settings"]}
    slug = row_slug(ROW)
    for name in args.settings:
        if (slug, name) in done:
            print(f"{game} {name}: recorded over row {slug}, skipped", flush=True)
            continue
        flags = {**ROW, **GRID[name]}
        runs = args.runs / game / slug / name
        train_args = minatar.parse_args(
            ["--games", game, "--seeds", args.seeds, "--wall-minutes", str(args.wall_minutes)]
            + (["--timesteps", str(args.timesteps)] if args.timesteps else [])
            + [f"--set={flag}={value}" for flag, value in flags.items()]
            + ["--runs", str(runs)]
        )
        result = minatar.train_game(train_args, game, runs)
        entry = {"row": slug, "name": name, "flags": flags, **setting_result(result)}
        entry["machine"] = machine_info(argv, packages=("jax", "jaxlib", "gymnax"))
        entry["game"] = result
        record["settings"].append(entry)
        write_json(path, record)
        print(f"{game} {name}: {summary_line(entry)}", flush=True)
        if cut_short(result["sitting"]):  # recorded as such, and the sweep stops
            raise SystemExit(130)


def cut_short(sitting: dict) -> bool:
    """Whether a setting's run ended before its budget: Ctrl-C here, or the run interrupted
    or failed on its own.

    Example:
      >>> cut_short({"interrupted": False, "stopped_for_wall": True, "returncode": 130})
      False
    """
    ended_early = not sitting["stopped_for_wall"] and sitting["returncode"] != 0
    return sitting["interrupted"] or ended_early


def summary_line(entry: dict) -> str:
    last = entry["median_final_eval_return"]
    steps = entry["median_env_steps"]
    cut = " (cut short)" if cut_short(entry["game"]["sitting"]) else ""
    return (
        f"median last eval {'-' if last is None else f'{last:.2f}'} "
        f"(seeds {entry['final_eval_returns']}), median best "
        f"{entry['median_best_eval_return']}, env steps {steps:.3g}, "
        f"{entry['median_generations']:.0f} generations, {entry['wall_minutes']:.1f} min{cut}"
    )


def report(args) -> None:
    for path in sorted(args.results.glob("*.json")):
        print(f"## {path.stem}")
        for entry in recorded(path)["settings"]:
            print(f"  [{entry['row']}] {entry['name']}: {summary_line(entry)}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    # It writes a JSON per game under --results, so no single --out.
    parser = driver.parser(__doc__, out=False, child=False)
    parser.add_argument("--games", type=driver.comma_list(str), default=["Breakout"])
    parser.add_argument("--settings", type=driver.comma_list(str), default=list(GRID))
    parser.add_argument("--seeds", default=SEEDS, help="the sweep's seeds (one program)")
    parser.add_argument("--wall-minutes", type=float, default=WALL_MINUTES)
    parser.add_argument("--timesteps", type=driver.parse_count, help="env-step cap per seed")
    parser.add_argument("--results", type=Path, default=RESULTS / "minatar_sweep")
    parser.add_argument("--runs", type=Path, default=DEFAULT_RUNS)
    parser.add_argument("--list", action="store_true", help="print the grid and exit")
    parser.add_argument("--report", action="store_true", help="print the recorded tables")
    args = parser.parse_args(argv)
    unknown = [s for s in args.settings if s not in GRID]
    if unknown:
        parser.error(f"unknown settings {unknown}; choose from {', '.join(GRID)}")
    unknown = [g for g in args.games if g not in minatar.GAMES]
    if unknown:
        parser.error(f"unknown games {unknown}; choose from {', '.join(minatar.GAMES)}")
    return args


def run(args, argv: list[str]) -> None:
    if args.list:
        for name, flags in GRID.items():
            print(f"{name}: {row_slug({**ROW, **flags})}")
        return
    if args.report:
        report(args)
        return
    for game in args.games:
        sweep_game(args, argv, game)


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, None, run)
