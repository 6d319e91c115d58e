"""Table 3 of Salimans et al. 2017 on Brax: env steps jaxes needs to reach TRPO's scores.

Salimans, Ho, Chen, Sidor & Sutskever, "Evolution Strategies as a Scalable Alternative to
Reinforcement Learning" (2017), Table 3, lists for six MuJoCo tasks the score TRPO had at 25,
50, 75 and 100 % of its learning progress, and the timesteps their ES needed to reach each.
This script measures the same for jaxes on Brax's versions of those tasks.

What it measures, per env:

1. jaxes: `jaxes train --env ENV --preset table3 --seeds 15-20 --timesteps N --eval-every K`
   (the env's Table 3 setting, `jaxes.app.presets.NAMED["table3"]` laid over its training
   preset: policy, population, sigma, learning rate, episode length, backend; found by
   `benchmarks/table3_sweep.py` on other seeds; the seeds vmapped in one program). K is not
   the preset's cadence but `env_eval_every(env)`: the fewest generations per evaluation at
   which the evaluations take at most `EVAL_SHARE` (10 %) of the env steps when episodes run
   their full length (`eval_every_for`; the cadence changes when the centre is measured, not
   the training). Every env step is counted: a run writes `total_env_steps` (training's:
   every step its chunked batch simulated, chunks of 50 until the last episode of the
   population ends, more than the paper counts) and `eval_env_steps` (the evaluations' so
   far), and the table counts their sum at each evaluation; a second table counts alive
   steps (steps inside live episodes, training's and the evaluations'), which is what the
   paper's timesteps and Brax ES count. Records written before runs had `eval_env_steps`
   (before issue 60) get the evaluations' steps from their config, exactly where episodes
   never end early and between bounds where they may (`counted_curves`), labelled so.
   For each seed and each of TRPO's four scores, two crossings of the noise-free evaluation
   of the centre: the first (`first_crossing`: the first evaluation at or above the score)
   and the sustained (`sustained_crossing`: from the earliest evaluation on which every mean
   of three consecutive evaluations to the end of the run stays at or above the score, at
   the last evaluation of its first window). The table gives the median over the seeds
   judged, a seed that never reached a score counted as +inf, so the median is "not reached"
   when more than half the seeds (of an even number: half) missed it; and whether it is
   within the paper's ES timesteps.
   Each env's runs stop at N = 1.5 x the paper's ES timesteps for 100 %, or when all its
   seeds together have used `--wall-minutes` (default 15) of wall clock, start-up and
   compilation included, whichever binds first; not at TRPO's final score (a run that
   stopped at its first crossing of it would leave nothing to judge a sustained crossing on).
   The table says which bound applied, with the env steps and seconds used. The wall clock
   is enforced by sending SIGINT to `jaxes train`, which keeps its checkpoints, so a sweep
   that is interrupted, or given more minutes, continues with `--resume`.
2. Brax ES side by side (hopper, halfcheetah and inverted_double_pendulum by default;
   `--brax-es-envs all` for all six): `brax.training.agents.es.train`, one seed, in its own
   process, with the same env-step budget N (`num_timesteps`) and the same wall clock cap,
   the backend, episode length, population (P/2 antithetic pairs), policy widths (linear:
   no hidden layer) and evaluation episodes of the jaxes preset, and its (env steps, eval
   return) curve from `progress_fn` (deterministic evaluation, about 1000 of them spread
   over N). Settings (`BRAX_VARIANTS`, chosen per env by `BRAX_ES_CHOICE`): centered-rank
   fitness, observation normalisation, and training that acts with the mode of Brax's
   tanh-Gaussian head (the deterministic policy of the paper and of jaxes) instead of
   sampling it; step sizes "tuned" (Adam lr 0.03, std 0.05, no L2, as
   benchmarks/brax_vs_brax_es.py found best on inverted_pendulum) or "preset" (the jaxes
   preset's sigma, lr and L2, converted to Brax's scale); hopper and walker2d take "preset",
   the others "tuned", as one-seed trials found (docs/results/research-log.md, "How Brax ES's
   settings were chosen"). The comparison is at equal env steps in Brax's count (alive steps): the
   largest that both curves reached, jaxes' median over seeds of its last evaluation at or
   before it against Brax's.

Brax's physics is not gym's MuJoCo (other models, contacts and integrators), so the paper's
numbers are a guide, not a like-for-like baseline: the comparison is approximate.

Results: one JSON per env in `--results` (default benchmarks/results/table3/<env>.json),
written after every sitting; a rerun skips finished envs and continues unfinished ones (with
the wall clock already used taken off the budget), so the table can be filled in several
sittings and on other machines, a GPU's included (each sitting records its machine). Run
directories, with checkpoints, go to `--runs` (default ~/.cache/jaxes/table3-runs), outside
the repository, with a log per env.

Every table names the seeds it judges, the commits and CPU its runs were measured at, and
the commit, CPU and command that computed it from the records (`--report`, which runs
nothing). Settings are chosen on seeds 0-11 (`table3_sweep.py` on 0-5, the seeds 6-11 table)
and judged on held-out seeds 15-20.

Run:
  .venv/bin/python benchmarks/table3.py --seeds 15-20 \
      --results benchmarks/results/table3-seeds-15-20 --runs ~/.cache/jaxes/table3-runs-15-20
  .venv/bin/python benchmarks/table3.py --envs hopper,swimmer --wall-minutes 30
  .venv/bin/python benchmarks/table3.py --report --seeds 6-11   # tables from the records
  .venv/bin/python benchmarks/table3.py --report --seeds 6-11 --write-docs  # + docs, plot
  .venv/bin/python benchmarks/table3.py --results /tmp/t3 --runs /tmp/t3-runs \
      --brax-es-from DIR   # a re-sit: reuse the valid Brax ES runs recorded in DIR
  .venv/bin/python benchmarks/table3.py --quick --results /tmp/t3   # smoke run, < 1 minute
`--seeds` defaults to 0-2 for a sitting; a results folder holds one set of seeds (a rerun with
others is refused: give them their own `--results` and `--runs`). With `--report` it picks the
recorded seeds to judge (default: all). `--quick`: inverted_pendulum, seeds 0-1, 50,000 env
steps, no Brax ES, results in `--results` (a temporary folder if not given), never in
benchmarks/results.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import _driver as driver
from _children import quiet_import, spawn
from _common import (
    REPO,
    RESULTS,
    cpu_model,
    finish_machine_info,
    machine_info,
    utc_now,
    write_json,
)

from jaxes.app import presets

PERCENTS = (25, 50, 75, 100)
PRESET = "table3"  # jaxes.app.presets.NAMED: the settings this table is sat with
# Table 3 of Salimans et al. 2017: TRPO's score at 25/50/75/100 % of its learning progress,
# and the timesteps ES needed to reach each.
PAPER = {
    "hopper": {
        "thresholds": (877.45, 1718.16, 2561.11, 3403.46),
        "es_timesteps": (3.83e5, 3.73e6, 9.63e6, 3.16e7),
    },
    "halfcheetah": {
        "thresholds": (-1.35, 793.55, 1589.83, 2385.79),
        "es_timesteps": (1.36e5, 8.28e5, 1.42e6, 2.88e6),
    },
    "walker2d": {
        "thresholds": (957.68, 1916.48, 2872.81, 3830.03),
        "es_timesteps": (6.43e5, 1.29e7, 2.31e7, 3.79e7),
    },
    "swimmer": {
        "thresholds": (41.97, 70.73, 99.68, 128.25),
        "es_timesteps": (5.88e5, 8.52e5, 1.23e6, 1.39e6),
    },
    "inverted_double_pendulum": {
        "thresholds": (2358.98, 4609.68, 6874.03, 9104.07),
        "es_timesteps": (3.98e5, 4.66e5, 5.30e5, 5.39e6),
    },
    "inverted_pendulum": {
        "thresholds": (276.59, 519.15, 753.17, 1000.00),
        "es_timesteps": (6.25e4, 1.43e5, 2.55e5, 4.55e5),
    },
}
ENVS = tuple(PAPER)
BUDGET_FACTOR = 1.5  # env-step cap: 1.5 x the paper's ES timesteps for 100 %
WINDOW = 3  # evaluations in the running mean of the sustained crossing
EVAL_SHARE = Fraction(1, 10)  # the most of a run's env steps its evaluations should take
CHUNK = 50  # jaxes.tasks.brax.brax_task's chunk_length, which `jaxes train` leaves as it is
# Brax's halfcheetah and swimmer never end an episode early (their `done` is always 0), so
# every evaluation plays its episodes to the end: an older record's evaluation steps are exact.
NO_EARLY_END = frozenset({"halfcheetah", "swimmer"})
# Brax's inverted_pendulum pays 1.0 for every step alive: an evaluation's mean return is its
# mean episode length.
RETURN_IS_LENGTH = frozenset({"inverted_pendulum"})
GENERATIONS = 100_000  # passed to `jaxes train` so that --timesteps is what stops it
MIN_SITTING_S = 60.0  # less wall budget than this left: not worth a start-up and compile
POLL_S = 2.0
REPORT_EVERY_S = 60.0
SIGINT_GRACE_S = 60.0  # `jaxes train` exits at once on SIGINT; this is a safety net
BRAX_ES_DEFAULT_ENVS = ("hopper", "halfcheetah", "inverted_double_pendulum")
BRAX_EVALS = 1000  # Brax ES evaluates every N / BRAX_EVALS env steps
QUICK = {"env": "inverted_pendulum", "seeds": "0-1", "timesteps": 50_000}
DEFAULT_RUNS = Path.home() / ".cache" / "jaxes" / "table3-runs"
DOCS = REPO / "docs" / "benchmarks.md"
MARK_START, MARK_END = "<!-- table3:start -->", "<!-- table3:end -->"

# Brax ES settings: keyword arguments of `brax.training.agents.es.train` (the fitness shaping
# by name; None: the jaxes preset's step size), and `sampled_actions`: whether training
# samples actions from Brax's tanh-Gaussian head (Brax's own way) or takes its mode, the
# deterministic policy of the paper (and of jaxes), by giving the head a zero variance scale.
# `BRAX_ES_CHOICE` says which one the table uses per env (`--brax-es-variant` overrides it).
_TUNED = {
    "learning_rate": 0.03,
    "perturbation_std": 0.05,
    "l2coeff": 0.0,
    "fitness_shaping": "CENTERED_RANK",
    "normalize_observations": True,
}
BRAX_VARIANTS = {
    "tuned": _TUNED | {"sampled_actions": False},
    "tuned_sampled": _TUNED | {"sampled_actions": True},
    "preset": _TUNED
    | {"learning_rate": None, "perturbation_std": None, "l2coeff": None, "sampled_actions": False},
    "defaults": {
        "learning_rate": 1e-3,
        "perturbation_std": 0.1,
        "l2coeff": 0.0,
        "fitness_shaping": "ORIGINAL",
        "normalize_observations": False,
        "sampled_actions": True,
    },
}


# Chosen from one-seed trials of about 3 minutes on this CPU (module docstring): the jaxes
# preset's step sizes were better on hopper and walker2d, the tuned ones on halfcheetah, and
# they are the same on inverted_double_pendulum; the untried envs take "tuned".
BRAX_ES_CHOICE = {"hopper": "preset", "walker2d": "preset"}


def brax_es_settings(variant: str, config: dict) -> dict:
    """The Brax ES keyword arguments of `variant`, the jaxes preset's (`config`) step sizes
    where it has None. Brax's update is sum over pairs of (w+ - w-) eps / pairs = 2 sigma x
    jaxes' estimate, so jaxes' L2 term `l2_coeff * theta` is Brax's `l2coeff` / (2 sigma);
    Adam makes the learning rates comparable as they are."""
    settings = dict(BRAX_VARIANTS[variant])
    sigma = config.get("sigma", 0.05)
    preset = {
        "learning_rate": config.get("learning_rate", 0.03),
        "perturbation_std": sigma,
        "l2coeff": 2 * sigma * (config.get("l2_coeff") or 0.0),
    }
    return {k: preset[k] if v is None else v for k, v in settings.items()}


# --------------------------------------------------------------------------------------------
# Pure helpers: thresholds, medians, bounds (unit-tested in tests/test_table3.py).
# --------------------------------------------------------------------------------------------


def parse_seeds(text: str) -> list[int]:
    """The seeds `jaxes train --seeds` takes: "0-2" -> [0, 1, 2], "0,3,5" -> [0, 3, 5]."""
    seeds: list[int] = []
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"seeds: expected e.g. 0-2 or 0,3,5, got {text!r}")
        seeds += range(int(low), int(high) + 1) if dash else [int(low)]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds: expected distinct seeds, got {text!r}")
    return seeds


def timesteps_budget(env: str) -> int:
    """The env-step cap: 1.5 x the paper's ES timesteps for TRPO's final score."""
    return int(BUDGET_FACTOR * PAPER[env]["es_timesteps"][-1])


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """The lines of a `metrics.jsonl` (none if it is absent); a cut last line (a run killed
    mid-write) is dropped."""
    path = Path(path)
    if not path.is_file():
        return []
    lines = []
    for text in path.read_text().splitlines():
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:
            continue
    return lines


def add_alive_totals(lines: list[dict]) -> list[dict]:
    """`lines` with `total_alive_steps`, the running sum of `alive_steps`: the steps inside
    episodes that had not ended, which is what the paper's timesteps (and Brax ES) count;
    `total_env_steps` also counts the steps a chunked batch simulates after an episode ended."""
    total, out = 0, []
    for line in lines:
        total += int(line.get("alive_steps") or 0)
        out.append(line | {"total_alive_steps": total})
    return out


def eval_curve(lines: list[dict], count: str = "total_env_steps") -> list[tuple[int, float]]:
    """(`count`, eval_return) of each evaluation line with a finite return."""
    return [
        (int(x[count]), float(x["eval_return"]))
        for x in lines
        if x.get("eval_return") is not None and x.get(count) is not None
    ]


def first_crossing(curve: list[tuple[int, float]], threshold: float) -> int | None:
    """The env steps of the first evaluation whose return is >= `threshold` (None: never)."""
    return next((int(steps) for steps, value in curve if value >= threshold), None)


def sustained_crossing(
    curve: list[tuple[int, float]], threshold: float, window: int = WINDOW
) -> int | None:
    """The env steps at which the score is reached and kept. With m_j the mean of evaluations
    j .. j + window - 1 (j = 0 .. n - window: every full window of consecutive evaluations),
    the crossing is the earliest j* such that m_j >= `threshold` for every j >= j*, and its
    env steps are those of evaluation j* + window - 1, the last of its window: when that mean
    is first known, so never before the first crossing (a mean >= the score has a member >=
    it). None when the curve has fewer than `window` evaluations or its last window's mean is
    below: it did not hold to the end of what was measured. A run that stops at its first
    evaluation >= TRPO's final score (`--target-return`) ends on that evaluation, which its
    last windows include; for the final score itself that leaves the measure undefined.

    A single spike that the first crossing counts is not sustained:
      >>> spike = [(1, 0.0), (2, 10.0), (3, 0.0), (4, 0.0), (5, 6.0), (6, 6.0), (7, 6.0)]
      >>> first_crossing(spike, 5.0), sustained_crossing(spike, 5.0)
      (2, 7)
    """
    values = [value for _, value in curve]
    start = None
    for j in range(len(values) - window + 1):
        if statistics.fmean(values[j : j + window]) < threshold:
            start = None
        elif start is None:
            start = j
    return None if start is None else int(curve[start + window - 1][0])


def eval_every_for(
    population: int, eval_episodes: int = 8, episodes_per_member: int = 1, share=EVAL_SHARE
) -> int:
    """The fewest generations per evaluation at which evaluating costs at most `share` of a
    run's env steps when every episode plays the env's episode length L: a generation plays
    P x m episodes and an evaluation E, so evaluation's share is E L / (k P m L + E L) =
    E / (k P m + E), which is <= share from k = E (1 - share) / (share P m) on. L cancels
    because training and evaluation play the same episode length; where training's episodes
    end early and the centre's do not, evaluation costs more than this, which the table's
    measured share shows. The cadence only says when the centre is measured: the training
    itself is the same at any cadence (evaluation has its own keys and changes no state).

      >>> [eval_every_for(p) for p in (4, 8, 32)]
      [18, 9, 3]
      >>> round(eval_share(9, 8), 3), round(eval_share(8, 8), 3)
      (0.1, 0.111)
    """
    share = Fraction(share)
    return max(
        1, math.ceil(eval_episodes * (1 - share) / (share * population * episodes_per_member))
    )


def eval_share(
    eval_every: int, population: int, eval_episodes: int = 8, episodes_per_member: int = 1
) -> float:
    """Evaluation's share of a run's env steps at `eval_every` with full-length episodes."""
    return eval_episodes / (eval_every * population * episodes_per_member + eval_episodes)


def env_eval_every(env: str) -> int:
    """`eval_every_for` the env's `table3` setting (population, evaluation episodes)."""
    setting = presets.preset(env, name=PRESET)
    return eval_every_for(
        setting["population_size"],
        setting.get("eval_episodes", 8),
        setting.get("episodes_per_member", 1),
    )


def chunked_steps(config: dict, longest: int) -> int:
    """The env steps an evaluation of a run with `config` (its config.json) simulates when its
    longest episode lasts `longest` decisions: its episodes run together in chunks of
    decisions until that one ends, and a chunk runs whole (as `RolloutInfo.env_steps`
    counts it), past the episode length when the chunk does not divide it.

      >>> chunked_steps({"episode_length": 1000, "eval_episodes": 8}, 1000)
      8000
      >>> chunked_steps({"episode_length": 1000, "eval_episodes": 8}, 51)
      800
      >>> chunked_steps({"episode_length": 120, "eval_episodes": 2, "action_repeat": 2}, 60)
      400
    """
    repeat = config.get("action_repeat") or 1
    decisions = -(-config["episode_length"] // repeat)
    chunk = min(config.get("chunk_length") or CHUNK, decisions)
    longest = min(max(longest, 1), decisions)
    return config.get("eval_episodes", 8) * chunk * -(-longest // chunk) * repeat


def evaluation_bounds(env: str, config: dict, eval_return: float) -> tuple[tuple, tuple]:
    """The least and the most env steps one evaluation of an older run (which did not record
    them) can have simulated and lived: `((least, most), (least, most))`.

    - An env whose episodes never end early (`NO_EARLY_END`): every episode runs its whole
      length, so both are exact.
    - An env that pays 1 a step alive (`RETURN_IS_LENGTH`): the mean return is the mean
      episode length, so the steps lived are exact (episodes x return), and the longest
      episode, which sets the chunks simulated, lies between the mean and the length that
      leaves every other episode one step.
    - Any other: at least one chunk (every episode lives a step), at most every chunk.

      >>> config = {"episode_length": 1000, "eval_episodes": 8}
      >>> evaluation_bounds("swimmer", config, -3.0)
      ((8000, 8000), (8000, 8000))
      >>> evaluation_bounds("inverted_pendulum", config, 60.0)
      ((800, 4000), (480, 480))
      >>> evaluation_bounds("hopper", config, 300.0)
      ((400, 8000), (8, 8000))
    """
    episodes, length = config.get("eval_episodes", 8), config["episode_length"]
    most = chunked_steps(config, length)
    if env in NO_EARLY_END:
        return (most, most), (episodes * length, episodes * length)
    if env in RETURN_IS_LENGTH and (config.get("action_repeat") or 1) == 1:
        lived = round(episodes * eval_return)
        longest = (-(-lived // episodes), lived - (episodes - 1))
        return tuple(chunked_steps(config, n) for n in longest), (lived, lived)
    return (chunked_steps(config, 1), most), (episodes, episodes * length)


def counted_curves(curve: list[list], config: dict, env: str) -> tuple[str, dict]:
    """`(kind, curves)` of one seed's recorded evaluations (each `[total_env_steps,
    eval_return, total_alive_steps]`, then `eval_env_steps, eval_alive_steps` where the run
    wrote them): (steps, return) curves in training's count alone (`training`,
    `training_alive`: the count before issue 60) and in the count of every env step, the
    evaluations' included, from below and from above (`low`, `high`, `alive_low`,
    `alive_high`). `kind`:

    - "counted": the run wrote `eval_env_steps`, so low = high, exact.
    - "exact": an older run whose evaluations' steps are known all the same
      (`evaluation_bounds`: its episodes never end early), so low = high.
    - "bounded": an older run whose evaluations' simulated steps are only bounded
      (`evaluation_bounds`, summed over the evaluations so far).

    Every evaluation of an older run is in its curve (none had a non-finite return: the
    records' evaluation counts are their generations / eval_every, rounded up), so the i-th
    point follows i + 1 evaluations.
    """
    if not curve:
        return "counted", {count: [] for count in COUNTS}
    curves = {
        "training": [(int(p[0]), p[1]) for p in curve],
        "training_alive": [(int(p[2]), p[1]) for p in curve],
    }
    if all(len(p) >= 5 for p in curve):
        curves["low"] = curves["high"] = [(int(p[0] + p[3]), p[1]) for p in curve]
        curves["alive_low"] = curves["alive_high"] = [(int(p[2] + p[4]), p[1]) for p in curve]
        return "counted", curves
    extra = {count: 0 for count in ("low", "high", "alive_low", "alive_high")}
    for count in extra:
        curves[count] = []
    for point in curve:
        (least, most), (lived_least, lived_most) = evaluation_bounds(env, config, point[1])
        added = {"low": least, "high": most, "alive_low": lived_least, "alive_high": lived_most}
        for count, steps in added.items():
            extra[count] += steps
            base = point[2] if count.startswith("alive") else point[0]
            curves[count].append((int(base + extra[count]), point[1]))
    return ("exact" if curves["low"] == curves["high"] else "bounded"), curves


def median_steps(values: list[int | None]) -> int | None:
    """Median of per-seed env steps with a seed that never reached counted as +inf; None
    ("not reached") when that median is infinite, i.e. more than half the seeds missed (with
    an even count, half of them: the median averages the two middle values)."""
    if not values:
        return None
    median = statistics.median(math.inf if v is None else v for v in values)
    return None if math.isinf(median) else round(median)


def seed_stop(steps_used: int, steps_budget: int, final_crossing: int | None) -> str | None:
    """Why a seed's run is over: "scores reached" (it reached TRPO's final score, where
    `--target-return` stops it: every score is then reached), "timesteps" (it used the budget),
    or None (it is not over)."""
    if final_crossing is not None:
        return "scores reached"
    return "timesteps" if steps_used >= steps_budget else None


def bound_applied(
    seed_stops: list[str | None],
    wall_used_s: float,
    wall_budget_s: float,
    returncode: int | None,
    stopped_for_wall: bool,
) -> str | None:
    """Which cap ended an env's runs: "timesteps" (every seed is over, some at the env-step
    budget), "scores reached" (every seed reached every score first), "wall clock" (the
    seconds ran out: stopped by SIGINT, or too few left to start again), "generations"
    (`jaxes train` ended by itself before either), or None (not finished: a sitting failed
    or was stopped from outside)."""
    if seed_stops and all(seed_stops):
        reached = all(stop == "scores reached" for stop in seed_stops)
        return "scores reached" if reached else "timesteps"
    if stopped_for_wall or wall_budget_s - wall_used_s < MIN_SITTING_S:
        return "wall clock"
    if returncode == 0:
        return "generations"
    return None


def within_paper(median: int | None, paper_steps: float, missed_steps: list[int]) -> bool | None:
    """Whether jaxes' median reached a score within the paper's ES timesteps: True/False, or
    None when that cannot be told: the median missed it, but a seed that missed it stopped
    short of the paper's steps (`missed_steps`: env steps used by the seeds that missed)."""
    if median is not None:
        return median <= paper_steps
    return False if all(steps >= paper_steps for steps in missed_steps) else None


MEASURES = {"first": first_crossing, "sustained": sustained_crossing}
COUNTS = ("low", "high", "alive_low", "alive_high", "training", "training_alive")


def seed_measures(seed: dict, thresholds, config: dict, env: str) -> dict:
    """One seed's crossings of each of `thresholds`, by each measure (`MEASURES`) in each
    count (`COUNTS`, from `counted_curves`), the env steps it used in each count, and the
    share of its env steps that its evaluations took (from below and from above)."""
    kind, curves = counted_curves(seed["curve"], config, env)
    crossings = {
        name: {count: [measure(curves[count], t) for t in thresholds] for count in COUNTS}
        for name, measure in MEASURES.items()
    }
    used = {}
    for count in COUNTS:
        alive = count.endswith("alive") or count.startswith("alive")
        base = seed["alive_steps_used"] if alive else seed["env_steps_used"]
        reference = curves["training_alive" if alive else "training"]
        used[count] = base + (curves[count][-1][0] - reference[-1][0] if reference else 0)
    shares = [
        (used[count] - seed["env_steps_used"]) / used[count] if used[count] else 0.0
        for count in ("low", "high")
    ]
    return {"seed": seed["seed"], "kind": kind, "crossings": crossings, "used": used,
            "eval_share": shares}  # fmt: skip


def verdict(low: bool | None, high: bool | None) -> bool | None:
    """Whether a median is within the paper's timesteps, from a lower and an upper bound of
    the env steps: yes when even the upper bound is (then the lower is too), no when even the
    lower bound is not; None ("?") when they disagree or cannot tell."""
    return low if low == high else None


def judged_seeds(record: dict, seeds: list[int] | None) -> list[dict]:
    """The record's seeds that `seeds` names (all of them when None); every seed named must
    be in the record."""
    recorded = {s["seed"]: s for s in record["seeds"]}
    missing = sorted(set(seeds or ()) - set(recorded))
    if missing:
        raise ValueError(
            f"{record['env']}: seeds {missing} are not in the record (it has {sorted(recorded)})"
        )
    return [recorded[n] for n in (seeds or sorted(recorded))]


def measure_env(record: dict, seeds: list[int] | None = None) -> dict:
    """The Table 3 measures of one env's record on `seeds` (all recorded seeds when None):
    per measure (first, sustained) the medians over seeds in every count, how many seeds
    reached each score, and whether the median is within the paper's ES timesteps, counting
    every env step (`within`, from the low and high counts) and in alive steps
    (`within_alive`); the kind of count (the weakest of its seeds': counted, exact, bounded);
    the evaluations' share of the env steps (median over seeds, from below and above)."""
    env, paper = record["env"], record["paper"]
    config = record["settings"].get("jaxes_config") or {}
    per_seed = [
        seed_measures(s, paper["thresholds"], config, env) for s in judged_seeds(record, seeds)
    ]
    kinds = {m["kind"] for m in per_seed}
    kind = next(k for k in ("bounded", "exact", "counted") if k in kinds | {"counted"})
    out = {"env": env, "seeds": [m["seed"] for m in per_seed], "kind": kind}
    for name in MEASURES:
        medians, within = {}, {}
        for count in COUNTS:
            values = [[m["crossings"][name][count][i] for m in per_seed] for i in range(4)]
            medians[count] = [median_steps(v) for v in values]
            within[count] = [
                within_paper(
                    medians[count][i],
                    paper["es_timesteps"][i],
                    [
                        m["used"][count]
                        for m, v in zip(per_seed, values[i], strict=True)
                        if v is None
                    ],
                )
                for i in range(4)
            ]
        reached = [
            sum(m["crossings"][name]["low"][i] is not None for m in per_seed) for i in range(4)
        ]
        out[name] = {
            "median": medians,
            "reached": reached,
            "within": [verdict(a, b) for a, b in zip(within["low"], within["high"], strict=True)],
            "within_alive": [
                verdict(a, b)
                for a, b in zip(within["alive_low"], within["alive_high"], strict=True)
            ],
            "within_training_only": within["training"],
        }
    out["eval_share"] = [statistics.median(m["eval_share"][i] for m in per_seed) for i in (0, 1)]
    return out


def value_at(curve: list[tuple[int, float]], steps: int) -> float | None:
    """The return of the last evaluation at or before `steps` env steps (None: none)."""
    before = [value for s, value in curve if s <= steps]
    return before[-1] if before else None


def compare_at_equal_steps(
    jaxes_curves: list[list[tuple[int, float]]], brax_curve: list[tuple[int, float]]
) -> dict | None:
    """jaxes (median over seeds) against Brax ES at the largest env steps both reached; None
    when either has no evaluation."""
    ends = [c[-1][0] for c in jaxes_curves if c]
    if not ends or not brax_curve:
        return None
    steps = min(min(ends), brax_curve[-1][0])
    per_seed = [value_at(c, steps) for c in jaxes_curves]
    reached = [v for v in per_seed if v is not None]
    brax = value_at(brax_curve, steps)
    if not reached or brax is None:
        return None
    jaxes = statistics.median(reached)
    return {
        "env_steps": steps,
        "jaxes_median_return": jaxes,
        "jaxes_per_seed_return": per_seed,
        "brax_es_return": brax,
        "jaxes_beats_brax_es": jaxes > brax,
    }


# --------------------------------------------------------------------------------------------
# jaxes: one sitting of `jaxes train`, stopped by SIGINT when the wall budget runs out.
# --------------------------------------------------------------------------------------------


def seed_dirs(run_dir: Path, seeds: list[int]) -> list[Path]:
    return [run_dir / f"seed-{seed}" for seed in seeds]


def has_run(run_dir: Path, seeds: list[int]) -> bool:
    """Whether a previous sitting left a run to resume (a seed's config.json)."""
    return any((d / "config.json").is_file() for d in seed_dirs(run_dir, seeds))


def jaxes_command(env: str, seeds: str, timesteps: int, run_dir: Path, resume: bool) -> list:
    """`jaxes train` with the env's Table 3 setting (`--preset table3`) and the evaluation
    cadence of `env_eval_every` (evaluation at most `EVAL_SHARE` of the env steps), not the
    preset's. No `--target-return`: a run that stopped at its first evaluation at TRPO's final
    score (as the records before issue 60 did) ends on what may be a spike, and leaves no
    evaluations after it to tell a sustained crossing from a lucky one."""
    cadence = str(env_eval_every(env))
    cmd = [sys.executable, "-m", "jaxes", "train", "--env", env, "--preset", PRESET]
    cmd += ["--seeds", seeds, "--timesteps", str(timesteps), "--generations", str(GENERATIONS)]
    # A checkpoint after every evaluation: a sitting stopped by the wall clock loses at most
    # one block when it is resumed.
    cmd += ["--eval-every", cadence, "--checkpoint-every", cadence]
    return cmd + ["--out", str(run_dir)] + (["--resume"] if resume else [])


def stops_at_final_score(record: dict) -> bool:
    """Whether the record's runs stopped at their first evaluation at TRPO's final score
    (`--target-return`, the records before issue 60): their sustained crossing of it is
    undefined, and of the other scores cut short for seeds that stopped soon after."""
    return any("--target-return" in s["command"] for s in record["sittings"])


def seed_progress(run_dir: Path, seeds: list[int]) -> tuple[int, float | None]:
    """The env steps of the furthest seed (a seed that reached the last score stops early, so
    the slowest says nothing of the sitting's progress), and the median of the seeds' last
    evaluations."""
    steps, last = [], []
    for directory in seed_dirs(run_dir, seeds):
        lines = read_metrics(directory / "metrics.jsonl")
        steps.append(int(lines[-1].get("total_env_steps", 0)) if lines else 0)
        curve = eval_curve(lines)
        if curve:
            last.append(curve[-1][1])
    return max(steps), (statistics.median(last) if last else None)


def run_sitting(cmd: list, log_path: Path, wall_left_s: float, label: str, run_dir, seeds):
    """Runs `cmd` (output to `log_path`) until it ends or `wall_left_s` seconds have passed,
    then SIGINT. Returns the sitting's returncode, wall_s, stopped_for_wall and interrupted
    (Ctrl-C here: the child got it too, and the sitting is still recorded)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a") as log:
        log.write(f"\n$ {' '.join(cmd)}   # {utc_now()}\n")
        log.flush()
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        stopped, interrupted = False, False
        try:
            stopped = watch(proc, start, wall_left_s, label, run_dir, seeds)
        except KeyboardInterrupt:
            interrupted = True
            stop(proc)
        return {
            "returncode": proc.wait(),
            "wall_s": round(time.perf_counter() - start, 1),
            "stopped_for_wall": stopped,
            "interrupted": interrupted,
        }


def watch(proc, start: float, wall_left_s: float, label: str, run_dir, seeds) -> bool:
    """Waits for `proc`, printing progress now and then; SIGINT once the wall budget is
    spent. Returns whether it sent that SIGINT."""
    reported = start
    while proc.poll() is None:
        time.sleep(POLL_S)
        now = time.perf_counter()
        if now - start >= wall_left_s:
            stop(proc)
            return True
        if now - reported >= REPORT_EVERY_S:
            reported = now
            steps, last = seed_progress(run_dir, seeds)
            last_text = "-" if last is None else f"{last:.1f}"
            print(
                f"  {label}: {now - start:.0f} s of {wall_left_s:.0f} s, env steps "
                f"{sci(steps)} (furthest seed), median last eval {last_text}",
                flush=True,
            )
    return False


def stop(proc) -> None:
    """SIGINT (`jaxes train` exits at once, checkpoints intact); SIGKILL if it lingers."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=SIGINT_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()


def log_tail(path: Path, chars: int = 3000) -> str:
    return path.read_text()[-chars:] if path.is_file() else ""


# --------------------------------------------------------------------------------------------
# Per-env results: a JSON file per env, updated after every sitting.
# --------------------------------------------------------------------------------------------


def new_record(env: str, seeds_arg: str, budget: int, run_dir: Path) -> dict:
    paper = PAPER[env]
    return {
        "env": env,
        "status": "unfinished",
        "settings": {
            "seeds": parse_seeds(seeds_arg),
            "seeds_arg": seeds_arg,
            "timesteps_budget": budget,
            "budget_rule": f"{BUDGET_FACTOR:g} x paper ES timesteps at 100 %"
            if budget == timesteps_budget(env)
            else "--timesteps",
            "generations_flag": GENERATIONS,
            "run_dir": str(run_dir),
        },
        "paper": {
            "trpo_percent": list(PERCENTS),
            "thresholds": list(paper["thresholds"]),
            "es_timesteps": list(paper["es_timesteps"]),
        },
        "sittings": [],
        "wall_s_used": 0.0,
    }


def check_same_settings(record: dict, seeds_arg: str, budget: int, path: Path) -> None:
    """A rerun must measure the same thing as the sittings before it."""
    settings = record["settings"]
    if settings["seeds"] != parse_seeds(seeds_arg) or settings["timesteps_budget"] != budget:
        raise SystemExit(
            f"{path}: recorded with seeds {settings['seeds_arg']} and budget "
            f"{settings['timesteps_budget']} env steps, not {seeds_arg} and {budget}; use "
            "another --results folder (and --runs), or delete that file and its runs"
        )


def recorded_curve(lines: list[dict]) -> list[list]:
    """Each evaluation of a run's metrics lines (with `total_alive_steps`) as the record keeps
    it: `[total_env_steps, eval_return, total_alive_steps]`, then `eval_env_steps,
    eval_alive_steps` (the evaluations' steps so far) where every evaluation line has them."""
    evals = [
        x
        for x in lines
        if x.get("eval_return") is not None and x.get("total_env_steps") is not None
    ]
    counted = all(x.get("eval_env_steps") is not None for x in evals)
    return [
        [int(x["total_env_steps"]), round(float(x["eval_return"]), 3), x["total_alive_steps"]]
        + ([int(x["eval_env_steps"]), int(x["eval_alive_steps"])] if counted else [])
        for x in evals
    ]


def seed_summary(directory: Path, seed: int, thresholds, budget: int) -> dict:
    """One seed's run: its use of the budget, its first crossings in training's count
    (`threshold_env_steps`, `threshold_alive_steps`: the count before issue 60, which is what
    stops it) and its curve, from which `measure_env` counts the evaluations too."""
    lines = add_alive_totals(read_metrics(directory / "metrics.jsonl"))
    curve, alive = eval_curve(lines), eval_curve(lines, "total_alive_steps")
    gen_steps = [int(x["env_steps"]) for x in lines if x.get("env_steps") is not None]
    used = int(lines[-1].get("total_env_steps", 0)) if lines else 0
    crossings = [first_crossing(curve, t) for t in thresholds]
    return {
        "seed": seed,
        "generations": int(lines[-1]["generation"]) if lines else 0,
        "env_steps_used": used,
        "alive_steps_used": lines[-1]["total_alive_steps"] if lines else 0,
        "max_generation_env_steps": max(gen_steps, default=0),
        # The budget is the only stop (`jaxes_command`), whatever scores the seed reached.
        "stopped": seed_stop(used, budget, None),
        "threshold_env_steps": crossings,
        "threshold_alive_steps": [first_crossing(alive, t) for t in thresholds],
        "final_eval_return": curve[-1][1] if curve else None,
        "best_eval_return": max((v for _, v in curve), default=None),
        "evaluations": len(curve),
        "curve": recorded_curve(lines),
    }


def medians(seeds: list[dict], key: str) -> tuple[list[int | None], list[int]]:
    """Per score: the median over seeds of `key` (None: not reached) and how many reached."""
    values = [[s[key][i] for s in seeds] for i in range(len(PERCENTS))]
    return [median_steps(v) for v in values], [sum(x is not None for x in v) for v in values]


def summarise(record: dict, wall_budget_s: float, returncode, stopped_for_wall) -> None:
    """Per-seed crossings, medians, the bound and the comparison with the paper, from the
    run directories as they are now."""
    settings, paper = record["settings"], record["paper"]
    seed_list, budget = settings["seeds"], settings["timesteps_budget"]
    dirs = seed_dirs(Path(settings["run_dir"]), seed_list)
    seeds = [
        seed_summary(d, s, paper["thresholds"], budget)
        for d, s in zip(dirs, seed_list, strict=True)
    ]
    steps, reached = medians(seeds, "threshold_env_steps")
    record["seeds"] = seeds
    record["env_steps_used"] = max(s["env_steps_used"] for s in seeds)
    record["median"] = {
        "threshold_env_steps": steps,
        "seeds_reached": reached,
        "threshold_alive_steps": medians(seeds, "threshold_alive_steps")[0],
    }
    record["within_paper"] = {}
    for i, percent in enumerate(PERCENTS[:2]):
        missed = [s["env_steps_used"] for s in seeds if s["threshold_env_steps"][i] is None]
        record["within_paper"][f"{percent} %"] = within_paper(
            steps[i], paper["es_timesteps"][i], missed
        )
    record["within_paper_alive"] = within_paper_alive(record)
    stops = [s["stopped"] for s in seeds]
    bound = bound_applied(stops, record["wall_s_used"], wall_budget_s, returncode, stopped_for_wall)
    record["bound"] = {
        "applied": bound,
        "env_steps_used": record["env_steps_used"],
        "wall_s_used": round(record["wall_s_used"], 1),
        "wall_budget_s": wall_budget_s,
    }
    record["status"] = "unfinished" if bound is None else "done"
    record["measures"] = measure_env(record)


def jaxes_config(run_dir: Path, seeds: list[int]) -> dict | None:
    """The preset as `jaxes train` recorded it (seed 0's config.json, without the seed)."""
    path = seed_dirs(run_dir, seeds)[0] / "config.json"
    if not path.is_file():
        return None
    return {k: v for k, v in json.loads(path.read_text()).items() if k != "seed"}


def load_record(env: str, args, path: Path, budget: int) -> dict:
    """The env's record from earlier sittings, or a new one (checked against the settings)."""
    run_dir = args.runs / env
    if path.is_file():
        record = json.loads(path.read_text())
    elif run_dir.exists() and any(run_dir.iterdir()):
        raise SystemExit(
            f"{run_dir} holds runs that {path} does not account for (their wall time is "
            "unknown); delete it or pass another --runs"
        )
    else:
        record = new_record(env, args.seeds, budget, run_dir)
    check_same_settings(record, args.seeds, budget, path)
    return record


def jaxes_sitting(env: str, args, record: dict, wall_left: float) -> dict:
    """One sitting of `jaxes train` (resuming the run directory if there is one); adds it to
    the record and returns it."""
    settings = record["settings"]
    run_dir, seeds = Path(settings["run_dir"]), settings["seeds"]
    budget = settings["timesteps_budget"]
    resume = has_run(run_dir, seeds)
    cmd = jaxes_command(env, args.seeds, budget, run_dir, resume)
    print(
        f"{env}: {'resuming' if resume else 'starting'} {len(seeds)} seeds, budget "
        f"{sci(budget)} env steps, {wall_left:.0f} s of wall clock left",
        flush=True,
    )
    sitting = {"started_utc": utc_now(), "resumed": resume, "command": cmd[1:]}
    sitting["machine"] = machine_info(args.argv, ("jax", "jaxlib", "brax"))
    log = args.runs / f"{env}.log"
    sitting |= run_sitting(cmd, log, wall_left, env, run_dir, seeds)
    finish_machine_info(sitting["machine"], [])  # warns if src/jaxes changed meanwhile
    if sitting["returncode"] != 0 and not sitting["stopped_for_wall"]:
        sitting["log_tail"] = log_tail(log)
    record["sittings"].append(sitting)
    record["wall_s_used"] += sitting["wall_s"]
    return sitting


FINAL_BOUNDS = ("timesteps", "scores reached", "generations")  # more wall time changes nothing


def run_jaxes_env(env: str, args, path: Path) -> dict:
    """Brings one env's jaxes runs to a bound (resuming earlier sittings); returns its record."""
    budget = args.timesteps or timesteps_budget(env)
    record = load_record(env, args, path, budget)
    wall_budget = args.wall_minutes * 60.0
    wall_left = wall_budget - record["wall_s_used"]
    bound = record.get("bound", {}).get("applied")
    if bound in FINAL_BOUNDS or (bound == "wall clock" and wall_left < MIN_SITTING_S):
        print(f"{env}: finished ({bound}), skipped", flush=True)
        return record
    sitting = {"returncode": None, "stopped_for_wall": False, "interrupted": False}
    if wall_left >= MIN_SITTING_S:
        sitting = jaxes_sitting(env, args, record, wall_left)
    run_dir, seeds = Path(record["settings"]["run_dir"]), record["settings"]["seeds"]
    record["settings"]["jaxes_config"] = jaxes_config(run_dir, seeds)
    summarise(record, wall_budget, sitting["returncode"], sitting["stopped_for_wall"])
    write_json(path, record)
    if sitting["interrupted"]:
        raise SystemExit(f"{env}: interrupted; {path} records it, rerun to continue")
    if record["status"] != "done":
        raise RuntimeError(
            f"{env}: jaxes train exited with {sitting['returncode']}; log "
            f"{args.runs / f'{env}.log'}:\n{sitting.get('log_tail', '')}"
        )
    return record


# --------------------------------------------------------------------------------------------
# Brax ES: a child process per env (`--child`), killed when its wall budget runs out.
# --------------------------------------------------------------------------------------------


def brax_child(spec: dict) -> dict:
    """`brax.training.agents.es.train` on one env; appends each evaluation to spec["curve"]
    (a JSONL file) as it comes, so a run killed at its wall budget keeps its curve."""
    import functools

    quiet_import("brax.envs", "brax.training.agents.es.train")
    from brax.training import distribution
    from brax.training.agents.es import networks as es_networks
    from brax.training.agents.es import train as brax_es

    from jaxes.tasks.brax.envs import load_env

    settings = dict(spec["es"])
    shaping = brax_es.FitnessShaping[settings.pop("fitness_shaping")]
    sampled = settings.pop("sampled_actions")
    start = time.perf_counter()
    curve_file = open(spec["curve"], "a")  # noqa: SIM115 (closed with the process)

    def progress(num_steps, metrics):
        point = {
            "env_steps": int(num_steps),
            "eval_return": float(metrics["eval/episode_reward"]),
            "wall_s": round(time.perf_counter() - start, 2),
        }
        curve_file.write(json.dumps(point) + "\n")
        curve_file.flush()

    # jaxes' loader: the same env, with MuJoCo's log file and swimmer's clip fix taken care of.
    env = load_env(spec["env"], spec["backend"])
    brax_es.train(
        environment=env,
        num_timesteps=spec["num_timesteps"],
        episode_length=spec["episode_length"],
        population_size=spec["population"] // 2,  # Brax plays each perturbation as a +/- pair
        fitness_shaping=shaping,
        num_evals=BRAX_EVALS + 1,
        num_eval_envs=spec["eval_episodes"],
        deterministic_eval=True,
        network_factory=functools.partial(
            brax_networks, tuple(spec["hidden_sizes"]), sampled, es_networks, distribution
        ),
        seed=spec["seed"],
        progress_fn=progress,
        **settings,
    )
    return {"wall_s": round(time.perf_counter() - start, 1)}


def brax_networks(hidden, sampled, es_networks, distribution, **kwargs):
    """Brax's ES networks; without `sampled`, a head of variance scale 0, whose samples are
    its mode (tanh of the mean): training acts deterministically, as evaluation does."""
    nets = es_networks.make_es_networks(hidden_layer_sizes=hidden, **kwargs)
    if sampled:
        return nets
    head = distribution.NormalTanhDistribution(event_size=kwargs["action_size"], var_scale=0.0)
    return nets.replace(parametric_action_distribution=head)


def brax_spec(env: str, config: dict, budget: int, variant: str, curve: Path) -> dict:
    """The Brax ES run matching the jaxes preset (as `config.json` recorded it)."""
    hidden = config.get("hidden_sizes", []) if config.get("policy") == "mlp" else []
    return {
        "kind": "brax",
        "env": env,
        "backend": config["backend"],
        "episode_length": config["episode_length"],
        "population": config["population_size"],
        "hidden_sizes": list(hidden),
        "eval_episodes": config.get("eval_episodes", 8),
        "num_timesteps": budget,
        "seed": 0,
        "variant": variant,
        "es": brax_es_settings(variant, config),
        "curve": str(curve),
    }


def brax_settings_text(spec: dict) -> str:
    v = spec["es"]
    return (
        f"{spec['variant']}: population_size={spec['population'] // 2} (x2 +/-), "
        f"adam({v['learning_rate']:g}), perturbation_std={v['perturbation_std']:g}, "
        f"l2coeff={v['l2coeff']:g}, "
        f"{v['fitness_shaping']}, normalize_observations={v['normalize_observations']}, "
        f"hidden {tuple(spec['hidden_sizes'])} + tanh-Gaussian head ("
        f"{'sampled' if v['sampled_actions'] else 'mode'} actions in training), "
        f"deterministic eval over {spec['eval_episodes']} episodes, "
        f"{spec['backend']}, episode {spec['episode_length']}"
    )


def compare_brax(record: dict) -> None:
    """jaxes against the env's Brax ES curve, from the jaxes runs as they are now (a later
    sitting may have extended them)."""
    brax = record["brax_es"]
    curve = [tuple(p) for p in brax["curve"]]
    # Brax ES counts the steps of live episodes, so jaxes' alive steps are the like for like.
    alive = [[(p[2], p[1]) for p in s["curve"]] for s in record["seeds"]]
    simulated = [[(p[0], p[1]) for p in s["curve"]] for s in record["seeds"]]
    brax["comparison"] = compare_at_equal_steps(alive, curve)
    brax["comparison_simulated_steps"] = compare_at_equal_steps(simulated, curve)


def finished_brax_runs(record: dict, elsewhere: Path | None, env: str):
    """(where, record) of the finished Brax ES runs this env may reuse: its own record's, then
    the one in `--brax-es-from`."""
    found = [("this record", record.get("brax_es"))]
    if elsewhere is not None and (elsewhere / f"{env}.json").is_file():
        other = json.loads((elsewhere / f"{env}.json").read_text())
        found.append((rel(elsewhere / f"{env}.json"), other.get("brax_es")))
    return [(where, old) for where, old in found if old and old.get("status") == "done"]


def same_brax_run(a: dict, b: dict) -> bool:
    """Whether two Brax ES specs run the same thing (where their curves go aside): Brax ES
    is seeded and deterministic, so a finished run with the same spec is the same run.

    Example:
      >>> same_brax_run({"population": 32, "curve": "a"}, {"population": 32, "curve": "b"})
      True
      >>> same_brax_run({"population": 32, "curve": "a"}, {"population": 64, "curve": "a"})
      False
    """
    drop = lambda spec: {k: v for k, v in spec.items() if k != "curve"}  # noqa: E731
    return drop(a) == drop(b)


def run_brax_env(record: dict, args, path: Path) -> None:
    """Runs Brax ES on the env of `record` unless it has a finished run; records its curve."""
    env = record["env"]
    variant = args.brax_es_variant or BRAX_ES_CHOICE.get(env, "tuned")
    config = record["settings"].get("jaxes_config")
    if not config:
        raise RuntimeError(f"{env}: no jaxes config.json to match Brax ES to")
    curve_path = args.runs / f"{env}-brax-es.jsonl"
    budget = record["settings"]["timesteps_budget"]
    spec = brax_spec(env, config, budget, variant, curve_path)
    for where, old in finished_brax_runs(record, args.brax_es_from, env):
        if same_brax_run(old["spec"], spec):
            print(f"{env}: Brax ES finished ({old['bound']}, {where}), reused", flush=True)
            if where != "this record":
                record["brax_es"] = {**old, "reused_from": where}
            return
    curve_path.unlink(missing_ok=True)  # Brax ES cannot resume: a new run, a new curve
    wall_budget = args.wall_minutes * 60.0
    print(
        f"{env}: Brax ES ({variant}), budget {sci(budget)} env steps or {wall_budget:.0f} s",
        flush=True,
    )
    started, machine = utc_now(), machine_info(args.argv, ("jax", "jaxlib", "brax"))
    t0 = time.perf_counter()
    child = spawn(__file__, spec, timeout=wall_budget)
    bound = {"ok": "timesteps", "timeout": "wall clock"}.get(child.status)
    failure = None if bound else child.error
    seconds = time.perf_counter() - t0
    finish_machine_info(machine, [])
    points = read_metrics(curve_path)
    curve = [(p["env_steps"], p["eval_return"]) for p in points]
    record["brax_es"] = {
        "status": "done" if bound else "failed",
        "spec": spec,
        "settings": brax_settings_text(spec),
        "bound": bound,
        "started_utc": started,
        "machine": machine,
        "wall_s": round(seconds, 1),
        "env_steps_used": curve[-1][0] if curve else 0,
        "curve": [[s, round(v, 3)] for s, v in curve],
        "curve_wall_s": [p["wall_s"] for p in points],
    }
    if failure:
        record["brax_es"]["stderr_tail"] = failure
    write_json(path, record)
    if failure:
        raise RuntimeError(f"{env}: Brax ES failed:\n{failure}")


# --------------------------------------------------------------------------------------------
# Report: tables, the docs section, the plot.
# --------------------------------------------------------------------------------------------


def sci(x: float) -> str:
    """3 significant digits, exponents as the paper writes them: 2.08e4, 950."""
    return f"{x:.3g}".replace("e+0", "e").replace("e+", "e")


def fmt_steps(x, missing: str = "not reached") -> str:
    return missing if x is None else sci(x)


def bound_text(record: dict) -> str:
    b = record["bound"]
    steps, wall = f"{sci(b['env_steps_used'])} env steps", f"{b['wall_s_used']:.0f} s"
    return f"{b['applied'] or 'unfinished'} ({steps}, {wall})"


def yes_no(value: bool | None) -> str:
    return {True: "yes", False: "no", None: "?"}[value]


def within_paper_alive(record: dict) -> dict:
    """``within_paper`` counted in alive steps: the paper's timesteps are steps inside live
    episodes (gym episodes end at done), which is what jaxes' alive steps count."""
    seeds, paper = record["seeds"], record["paper"]
    alive_steps = record["median"]["threshold_alive_steps"]
    out = {}
    for i, percent in enumerate(PERCENTS[:2]):
        missed = [s["alive_steps_used"] for s in seeds if s["threshold_alive_steps"][i] is None]
        out[f"{percent} %"] = within_paper(alive_steps[i], paper["es_timesteps"][i], missed)
    return out


def seeds_text(seeds: list[int]) -> str:
    """Seeds as runs of consecutive numbers.

    >>> seeds_text([6, 7, 8, 9, 10, 11]), seeds_text([0, 1, 2, 5]), seeds_text([3])
    ('6–11', '0–2, 5', '3')
    """
    runs: list[list[int]] = []
    for seed in sorted(seeds):
        if runs and seed == runs[-1][-1] + 1:
            runs[-1].append(seed)
        else:
            runs.append([seed])
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


COUNT_TEXT = {
    "counted": "counted",
    "exact": "exact (no early ends)",
    "bounded": "bounded: the evaluations' least – most",
}


def steps_range(low, high, missing: str = "not reached") -> str:
    """A median known exactly ("6.4e4") or between bounds ("6.8e4–1.1e5")."""
    if high is None or low is None:
        return missing
    return sci(high) if low == high else f"{sci(low)}–{sci(high)}"


def crossing_cells(m: dict, name: str, scores, alive: bool = False) -> list[str]:
    """The medians of measure `name` at each of `scores` (indices), with the seeds reached."""
    low, high = ("alive_low", "alive_high") if alive else ("low", "high")
    n, medians = len(m["seeds"]), m[name]["median"]
    return [
        f"{steps_range(medians[low][i], medians[high][i])} ({m[name]['reached'][i]}/{n})"
        for i in scores
    ]


def share_text(m: dict) -> str:
    """The evaluations' share of the env steps (median over seeds)."""
    low, high = m["eval_share"]
    return f"{100 * high:.1f} %" if m["kind"] != "bounded" else f"≤ {100 * high:.1f} %"


def cadence_text(env: str, config: dict | None) -> str:
    """The run's eval_every and the rule's (`env_eval_every`), each with the evaluations'
    share of the env steps it gives when every episode runs to its end."""
    rule = env_eval_every(env)
    pop, episodes = (config or {}).get("population_size"), (config or {}).get("eval_episodes", 8)
    if not pop:
        return f"- / {rule}"
    ran = config["eval_every"]
    return (
        f"{ran} ({100 * eval_share(ran, pop, episodes):.0f} %) / "
        f"{rule} ({100 * eval_share(rule, pop, episodes):.0f} %)"
    )


FIRST3 = range(3)  # the scores the headline judges: TRPO's 25, 50 and 75 %


def table3_markdown(records: list[dict]) -> str:
    """The table: per env the median env steps, every step counted (training and evaluation),
    to each score by the first and by the sustained crossing, and whether within the paper."""
    lines = [
        "| env | seeds | env steps | first 25 % | first 50 % | first 75 % | first 100 % | "
        "sustained 25 % | sustained 50 % | sustained 75 % | sustained 100 % | paper ES 25 / 50 "
        "/ 75 / 100 % | within paper ES, first 25 / 50 / 75 % | within, sustained 25 / 50 / 75 % |",
        "|---|---|---|" + "---:|" * 8 + "---|---|---|",
    ]
    for r in records:
        m = r["measures"]
        paper = " / ".join(sci(x) for x in r["paper"]["es_timesteps"])
        within = [" / ".join(yes_no(m[name]["within"][i]) for i in FIRST3) for name in MEASURES]
        cells = crossing_cells(m, "first", range(4)) + crossing_cells(m, "sustained", range(4))
        if stops_at_final_score(r):
            cells[-1] = "n/a"
        lines.append(
            f"| {r['env']} | {seeds_text(m['seeds'])} | {COUNT_TEXT[m['kind']]} | "
            + " | ".join(cells)
            + f" | {paper} | {within[0]} | {within[1]} |"
        )
    return "\n".join(lines)


def details_markdown(records: list[dict]) -> str:
    """Per env: the same medians in alive steps (the paper's count), the first crossings in
    training's count alone (what this table said before evaluation steps were counted), the
    evaluations' share of the env steps, the cadence, and the bound that ended the runs."""
    lines = [
        "| env | alive steps, first 25 / 50 / 75 / 100 % | alive, sustained 25 / 50 / 75 % | "
        "within paper in alive steps, first / sustained 25 / 50 / 75 % | training alone, first "
        "25 / 50 / 75 / 100 % | evaluations' share of env steps | eval every: run / rule "
        "(share at full length) | bound (env steps, wall clock used) |",
        "|---|---|---|---|---|---:|---|---|",
    ]
    for r in records:
        m = r["measures"]
        alive = [
            " / ".join(crossing_cells(m, name, scores, alive=True))
            for name, scores in (("first", range(4)), ("sustained", FIRST3))
        ]
        within = " ; ".join(
            " / ".join(yes_no(m[name]["within_alive"][i]) for i in FIRST3) for name in MEASURES
        )
        training = " / ".join(fmt_steps(x, "-") for x in m["first"]["median"]["training"])
        config = r["settings"].get("jaxes_config")
        lines.append(
            f"| {r['env']} | {alive[0]} | {alive[1]} | {within} | {training} | {share_text(m)} | "
            f"{cadence_text(r['env'], config)} | {bound_text(r)} |"
        )
    return "\n".join(lines)


def headline(records: list[dict]) -> str:
    """How many envs' medians are within the paper's ES timesteps at TRPO's 25, 50 and 75 %
    scores, every env step counted, by the first and by the sustained crossing (with how many
    the bounds of older records leave undecided)."""
    out = []
    for name in MEASURES:
        cells = []
        for i in FIRST3:
            verdicts = [r["measures"][name]["within"][i] for r in records]
            undecided = sum(v is None for v in verdicts)
            extra = f" ({undecided} undecided)" if undecided else ""
            cells.append(f"{PERCENTS[i]} % {sum(v is True for v in verdicts)}{extra}")
        out.append(f"{name} crossing: " + ", ".join(cells) + f" of {len(records)} envs")
    return "Within the paper's ES timesteps, every env step counted: " + "; ".join(out) + "."


def setting_text(config: dict | None) -> str:
    """The learning settings of a jaxes run, from its `config.json`."""
    if not config:
        return "-"
    policy = config["policy"]
    if policy != "linear":
        policy += " " + ",".join(str(h) for h in config["hidden_sizes"])
    return (
        f"{config['strategy']} P={config['population_size']}, sigma {config['sigma']:g}, "
        f"lr {config['learning_rate']:g}, L2 {config['l2_coeff']:g}, {policy}, "
        f"eval every {config['eval_every']}, {config['backend']}"
    )


def settings_markdown(records: list[dict]) -> str:
    """Per env: the setting, the `jaxes train` command, the commit and the machine of each
    sitting."""
    lines = [
        "| env | setting (`--preset table3`) | command | commit | machine |",
        "|---|---|---|---|---|",
    ]
    for r in records:
        sittings = r["sittings"]
        command = " ".join(["jaxes", *sittings[0]["command"][2:]]) if sittings else "-"
        commits = ", ".join(dict.fromkeys(s["machine"]["git"] for s in sittings)) or "-"
        machines = ", ".join(
            dict.fromkeys(
                f"{s['machine']['cpu_model']}, {s['machine']['cpu_cores']} cores" for s in sittings
            )
        )
        lines.append(
            f"| {r['env']} | {setting_text(r['settings'].get('jaxes_config'))} | `{command}` | "
            f"{commits} | {machines or '-'} |"
        )
    return "\n".join(lines)


def comparison_cells(c: dict | None) -> str:
    """Steps, jaxes' median, Brax ES's return and whether jaxes beats it (or dashes)."""
    if c is None:
        return "- | - | - | -"
    return (
        f"{sci(c['env_steps'])} | {c['jaxes_median_return']:.1f} | {c['brax_es_return']:.1f} | "
        f"{yes_no(c['jaxes_beats_brax_es'])}"
    )


def brax_markdown(records: list[dict]) -> str:
    lines = [
        "| env | compared at alive steps | jaxes median return | Brax ES return | jaxes beats "
        "Brax ES | the same with jaxes' total_env_steps: steps | jaxes | Brax ES | jaxes beats "
        "| Brax ES bound (env steps, wall clock) | Brax ES best return |",
        "|---|---:|---:|---:|---|---:|---:|---:|---|---|---:|",
    ]
    for r in records:
        b = r.get("brax_es")
        if not b:
            continue
        best = max((v for _, v in b["curve"]), default=None)
        best_text = "-" if best is None else f"{best:.1f}"
        used = f"{b['bound']} ({sci(b['env_steps_used'])}, {b['wall_s']:.0f} s)"
        lines.append(
            f"| {r['env']} | {comparison_cells(b['comparison'])} | "
            f"{comparison_cells(b['comparison_simulated_steps'])} | {used} | {best_text} |"
        )
    return "\n".join(lines) if len(lines) > 2 else ""


APPROXIMATE = (
    "Brax's physics is not gym's MuJoCo (other models, contacts, integrators and reward "
    "details), so the paper's ES timesteps are a guide rather than a like-for-like baseline; "
    "every comparison here is approximate."
)


MEANING = (
    "Env steps jaxes needed to reach TRPO's score at 25/50/75/100 % of its learning "
    "(Salimans et al. 2017, Table 3): the median over the seeds judged (a seed that never "
    "reached a score counted as infinite; in brackets, the seeds that reached it). Every env "
    "step is counted: those of training (`total_env_steps`, every step jaxes' chunked batch "
    "simulated) and those of the evaluations of the centre so far (`eval_env_steps`). "
    '"env steps" says how: counted (the runs wrote `eval_env_steps`), exact (older runs on '
    "envs whose episodes never end early: every evaluation played 8 x 1000 steps), or bounded "
    "(older runs on envs whose episodes may end early: the evaluations' steps between the "
    "least and the most they can have been, `evaluation_bounds`: one chunk of 50 steps per "
    "episode to 8 x 1000, and for inverted_pendulum, which pays 1 a step alive, from its "
    "returns; within the paper is then yes or no only where both bounds agree, ? otherwise). "
    "First crossing: the first evaluation at or above the score. "
    f"Sustained crossing: from the earliest evaluation on which every mean of {WINDOW} "
    "consecutive evaluations to the end of the run is at or above the score, counted at the "
    f"last evaluation of its first window (`sustained_crossing`). The records before issue 60 "
    "stopped each run at its first evaluation at the final score (`--target-return`): their "
    "sustained 100 % is not given (n/a), and a seed that stopped fewer than three evaluations "
    "after a first crossing counts as not having sustained it."
)


def report(records: list[dict]) -> str:
    """The tables of `records` (each with its `measures`) as markdown."""
    parts = [
        MEANING,
        "",
        table3_markdown(records),
        "",
        headline(records),
        "",
        "Alive steps count only steps inside live episodes, as the paper's timesteps do, the "
        "evaluations' included; training alone is the count this table used before issue 60:",
        "",
        details_markdown(records),
        "",
        settings_markdown(records),
    ]
    brax = brax_markdown(records)
    if brax:
        settings = {r["brax_es"]["settings"] for r in records if r.get("brax_es")}
        parts += [
            "",
            "Brax ES (one seed) against jaxes (median over seeds) at equal env steps of "
            "training (Brax ES's count leaves its evaluations out, as jaxes' training count "
            "does): first both counted as steps inside live episodes (Brax ES's count; jaxes' "
            "alive steps), then with jaxes' total_env_steps (every step it simulated) against "
            "Brax's count:",
            "",
            brax,
            "",
        ]
        parts += [f"Brax ES settings: {s}" for s in sorted(settings)]
    return "\n".join(parts + ["", APPROXIMATE])


def machine_line(records: list[dict]) -> str:
    machines = {}
    for r in records:
        for s in r["sittings"]:
            m = s["machine"]
            key = (m["cpu_model"], m["cpu_cores"], m["ram_gib"], m.get("jax"))
            machines[key] = machines.get(key, 0) + 1
    return "; ".join(
        f"{cpu}, {cores} cores, {ram} GiB RAM, jax {jax} ({n} sitting(s))"
        for (cpu, cores, ram, jax), n in machines.items()
    )


def regenerate_command(args, records: list[dict]) -> str:
    """The command that recomputes these tables from the run records alone (runs nothing)."""
    seeds = sorted({n for r in records for n in r["measures"]["seeds"]})
    envs = ",".join(r["env"] for r in records)
    cmd = [".venv/bin/python", "benchmarks/table3.py", "--report", "--results", rel(args.results)]
    cmd += ["--seeds", seeds_arg(seeds)] + ([] if envs == ",".join(ENVS) else ["--envs", envs])
    return " ".join(cmd)


def seeds_arg(seeds: list[int]) -> str:
    """Seeds as `--seeds` takes them: [6, 7, 8, 9, 10, 11] -> "6-11"."""
    return seeds_text(seeds).replace("–", "-").replace(" ", "")


def report_revision() -> str:
    """The commit the tables are computed at, with "+dirty" when what computes them (this
    script and the presets its cadence reads) differs from it; other changes to src/ do not
    touch the arithmetic over the records."""
    files = [str(Path(__file__).resolve()), str(REPO / "src" / "jaxes" / "app" / "presets.py")]
    git = ["git", "-C", str(REPO)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    status = subprocess.run(
        [*git, "status", "--porcelain", "--", *files], capture_output=True, text=True
    )
    return (head.stdout.strip() or "unknown") + ("+dirty" if status.stdout.strip() else "")


def provenance(records: list[dict], args) -> str:
    """Which seeds the tables judge, where and at which commits the runs were measured, and the
    commit, CPU and command that computed the tables from their records."""
    seeds = sorted({n for r in records for n in r["measures"]["seeds"]})
    dates = sorted(s["started_utc"] for r in records for s in r["sittings"])
    measured = sorted({s["machine"]["git"] for r in records for s in r["sittings"]})
    span = f" (sittings started {dates[0]} to {dates[-1]})" if dates else ""
    return (
        f"Judged on seeds {seeds_text(seeds)}. Run records: `{rel(args.results)}/<env>.json`, "
        f"measured at commit(s) {', '.join(measured) or '-'}{span} on {machine_line(records)}. "
        f"Tables computed from those records at commit {report_revision()} on {cpu_model()} by "
        f"`{regenerate_command(args, records)}` ({utc_now()})."
    )


def docs_section(records: list[dict], args, plot_name: str) -> str:
    return "\n".join(
        [
            MARK_START,
            "## Salimans et al. 2017, Table 3, on Brax: `benchmarks/table3.py`",
            "",
            provenance(records, args),
            "",
            report(records),
            "",
            f"![eval return vs env steps]({plot_name})",
            "",
            "Plot: eval return of the centre vs env steps, each jaxes seed a thin line (every "
            "env step counted where the record can tell it, counted or exact; training's alone "
            "where it only bounds it), Brax ES dashed (in its own count, steps of live "
            "episodes of training, which is fewer for the same run), TRPO's four scores as "
            "horizontal lines and the paper's ES timesteps for them as markers.",
            MARK_END,
        ]
    )


def write_docs_section(docs: Path, section: str) -> None:
    """Replaces the text between the table3 markers in `docs` (appends them if missing)."""
    text = docs.read_text() if docs.is_file() else "# Benchmarks\n"
    pattern = re.compile(re.escape(MARK_START) + ".*?" + re.escape(MARK_END), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    docs.parent.mkdir(parents=True, exist_ok=True)
    docs.write_text(text)


def plot(records: list[dict], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(3, len(records))
    rows = math.ceil(len(records) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.8 * rows), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, r in zip(axes.flat, records, strict=False):
        config = r["settings"].get("jaxes_config") or {}
        for s in r["seeds"]:
            # Every env step where the record can tell it, training's alone where it bounds it.
            curve = counted_curves(s["curve"], config, r["env"])[1]["low"]
            if curve:
                ax.plot(*zip(*curve, strict=True), lw=0.8, color=colors[0])
        b = r.get("brax_es")
        if b and b["curve"]:
            x, y = zip(*[p for p in b["curve"] if p[0] > 0] or b["curve"], strict=True)
            ax.plot(x, y, "--", lw=1.2, color=colors[1], label="Brax ES")
        paper = r["paper"]
        for i, (t, steps) in enumerate(
            zip(paper["thresholds"], paper["es_timesteps"], strict=True)
        ):
            ax.axhline(t, color="grey", lw=0.6, ls=":")
            label = "paper ES" if i == 0 else None
            ax.plot([steps], [t], "o", color=colors[2], ms=5, label=label)
        ax.plot([], [], lw=0.8, color=colors[0], label="jaxes (each seed)")
        ax.set_xscale("log")
        ax.set_title(r["env"])
        ax.set_xlabel("env steps")
        ax.set_ylabel("eval return")
        ax.legend(fontsize=7, loc="lower right")
    for ax in list(axes.flat)[len(records) :]:
        ax.set_visible(False)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)


def rel(path: Path) -> str:
    path = Path(path).resolve()
    return os.path.relpath(path, REPO) if path.is_relative_to(REPO) else str(path)


# --------------------------------------------------------------------------------------------
# Command line.
# --------------------------------------------------------------------------------------------


def env_list(text: str) -> list[str]:
    envs = list(ENVS) if text == "all" else [e.strip() for e in text.split(",") if e.strip()]
    unknown = [e for e in envs if e not in PAPER]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown env(s) {unknown}; known: {', '.join(ENVS)}")
    return envs


def parse_args(argv: list[str]):
    parser = driver.parser(__doc__, "smoke run (see the docstring)", out=False)
    parser.add_argument("--envs", type=env_list, default=None, help="a,b or all (default all)")
    parser.add_argument(
        "--seeds",
        default=None,
        help="as jaxes train takes them, e.g. 15-20 (default 0-2); with --report, the recorded "
        "seeds to judge on (default all of them)",
    )
    parser.add_argument(
        "--report",
        action="store_true",
        help="recompute the tables from the records in --results and run nothing",
    )
    parser.add_argument("--wall-minutes", type=float, default=15.0, help="per env, all seeds")
    parser.add_argument("--timesteps", type=int, default=None, help="override the env-step cap")
    parser.add_argument("--no-brax-es", action="store_true", help="skip Brax ES")
    parser.add_argument(
        "--brax-es-from",
        type=Path,
        default=None,
        help="a results folder whose finished Brax ES runs are reused where their spec is "
        "the one this sitting would run (a re-sit of jaxes alone)",
    )
    parser.add_argument(
        "--brax-es-envs",
        type=env_list,
        default=list(BRAX_ES_DEFAULT_ENVS),
        help=f"a,b or all (default {','.join(BRAX_ES_DEFAULT_ENVS)}); only those in --envs",
    )
    parser.add_argument(
        "--brax-es-variant",
        choices=sorted(BRAX_VARIANTS),
        default=None,
        help="Brax ES settings for every env (default: BRAX_ES_CHOICE, else tuned)",
    )
    parser.add_argument("--results", type=Path, default=None, help="folder of <env>.json")
    parser.add_argument("--runs", type=Path, default=None, help=f"default {DEFAULT_RUNS}")
    parser.add_argument(
        "--write-docs",
        action="store_true",
        help="draw the plot and re-render the results pages' tables (benchmarks/render.py)",
    )
    parser.add_argument(
        "--docs", type=Path, default=DOCS, help="the plot goes beside this file (--write-docs)"
    )
    args = parser.parse_args(argv)
    if args.child:
        return args
    if args.quick:
        if args.write_docs or args.report:
            parser.error("--quick results never go into the docs, nor into a --report")
        args.envs = args.envs or [QUICK["env"]]
        args.seeds = args.seeds or QUICK["seeds"]
        args.timesteps = args.timesteps or QUICK["timesteps"]
        args.no_brax_es = True
        args.results = args.results or Path(tempfile.mkdtemp(prefix="table3-quick-"))
        if args.results.resolve() == (RESULTS / "table3").resolve():
            parser.error("--quick must not write into benchmarks/results/table3")
    args.envs = args.envs or list(ENVS)
    if not args.report:
        args.seeds = args.seeds or "0-2"
    try:
        args.judged = None if args.seeds is None else parse_seeds(args.seeds)
    except ValueError as err:
        parser.error(str(err))
    args.results = (args.results or RESULTS / "table3").absolute()
    args.runs = (args.runs or (args.results / "runs" if args.quick else DEFAULT_RUNS)).absolute()
    return args


def judged_record(record: dict, seeds: list[int] | None) -> dict:
    """`record` on the seeds judged (all when None), with its measures and its comparison
    with Brax ES computed from their curves (the record itself is left as it is)."""
    out = record | {"seeds": judged_seeds(record, seeds)}
    out["measures"] = measure_env(out)
    if out.get("brax_es"):
        out["brax_es"] = dict(out["brax_es"])
        compare_brax(out)
    return out


def recorded(args) -> list[dict]:
    """The records in `--results` of the envs asked for (those without one are named)."""
    records = []
    for env in args.envs:
        path = args.results / f"{env}.json"
        if path.is_file():
            records.append(json.loads(path.read_text()))
        else:
            print(f"{env}: no record in {rel(args.results)}", flush=True)
    if not records:
        raise SystemExit(f"no records in {rel(args.results)} for {', '.join(args.envs)}")
    return records


def sit(args) -> list[dict]:
    """Brings each env's runs to a bound (resuming earlier sittings); returns the records."""
    records = []
    for env in args.envs:
        path = args.results / f"{env}.json"
        record = run_jaxes_env(env, args, path)
        if not args.no_brax_es and env in args.brax_es_envs:
            run_brax_env(record, args, path)
        if "brax_es" in record:
            compare_brax(record)
            write_json(path, record)
        records.append(record)
    return records


def run(args, argv: list[str]) -> None:
    args.argv = argv
    records = recorded(args) if args.report else sit(args)
    try:
        records = [judged_record(r, args.judged) for r in records]
    except ValueError as err:
        raise SystemExit(str(err)) from None
    print("\n" + provenance(records, args) + "\n\n" + report(records))
    if not args.report:
        print(f"\nresults in {rel(args.results)}; run directories in {args.runs}")
    if args.write_docs:
        # The tables on the results pages are benchmarks/render.py's, from the records on disk
        # (every seed of benchmarks/results/table3/ and table3-seeds-15-20/); this draws the plot.
        import render

        png = args.docs.parent / "table3.png"
        plot(records, png)
        render.main([])
        print(f"wrote {rel(png)} and re-rendered the results pages (benchmarks/render.py)")


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, brax_child, run)
