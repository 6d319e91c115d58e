"""MinAtar with jaxes: the five games, one shared setting, against gymnax's published PPO.

Salimans et al. 2017 compared ES with policy-gradient RL on Atari; MinAtar (Young & Tian
2019) is the 10×10-grid miniature of five Atari games, and gymnax (1.0.1) runs it in JAX.
This script trains each game with the one MinAtar preset of `jaxes.app.presets` (open_es,
P = 256, σ = 0.02, Adam 0.01, L2 0.005, `vbn_conv`: one 3×3 convolution of 16 channels and a
dense layer of 128, virtual batch normalisation; gymnax's own episode length: 1000 steps,
Freeway 2500) and compares it with gymnax's PPO baselines.

What it measures, per game:

1. `jaxes train --env GAME --seeds 0-2 --timesteps N --generations 100000` (the seeds
   vmapped in one program), stopped by SIGINT when the game has used `--wall-minutes`
   (default 30: the per-game target below) of wall clock, start-up and compilation
   included, or at N env steps (default 10 × PPO's env steps), whichever binds first.
   `benchmarks/table3.py`'s helpers run and watch the process.
2. From each seed's `metrics.jsonl`: the learning curve (every evaluation of the centre:
   simulated env steps, alive env steps, wall seconds, eval return), the final and best
   eval return, and the first evaluation at or above PPO's return (env steps and minutes).
   `total_env_steps` counts every step the rollout simulates (it stops at the end of the
   first 50-decision chunk in which every episode of the batch is over, so an episode that
   ended early still costs steps until the batch's longest one ends); `alive` counts the
   steps inside live episodes, which is what PPO's `num_train_steps` counts (its envs
   reset as soon as an episode ends). Both are in the curves; the table compares with PPO
   in alive steps and also gives the simulated ones.

The PPO side (no PPO is run here):

- returns: gymnax's README, table "Implemented Accelerated Environments", column
  "Ckpt (Return)" (github.com/RobertTLange/gymnax, README.md on main): Asterix 15,
  Breakout 28, Freeway 58, SpaceInvaders 131. Seaquest has no row in that table (its PPO
  agent in gymnax-blines has a config but no checkpoint and no published return), so its
  PPO return is blank and its targets cannot be judged.
- env steps: gymnax-blines' configs, agents/<GAME>-MinAtar/ppo.yaml
  (github.com/RobertTLange/gymnax-blines, commit 15b76af31ce2): `num_train_steps:
  10000000` for all five games (64 envs × 128 steps per update, 4 epochs, an MLP of 2 × 256
  on the flattened grid).

Targets (judged under the table): PPO's return reached, in median over the seeds, on at
least 2 of the 4 games with a PPO return, within the wall clock (45 minutes a game); every
game above the previous table (`PREVIOUS`) at that table's wall clock. The table gives the
median eval at 10M alive env steps (PPO's budget), at 100M if reached, and at the end.
A sitting can span sessions: run some games into one JSON and the rest into another, then
`--merge A.json B.json` writes one table of all of them (a game in a later file replaces the
same game in an earlier one, which is kept under "replaced"; summaries recomputed from the
stored curves).

`--overhead`: seconds per env step of one jaxes generation (`block_runner`, one generation,
open_es ask/evaluate/tell, the task's masked rollout) against a plain `jax.vmap` over
members of a `lax.scan` over the episode (gymnax's README rollout: `env.step` with its
auto-reset, rewards masked after the first done) with the same conv policy (`"conv"`, no
VBN: the plain rollout has no reference batch), the same P and episode length, all jitted
and timed after a warm-up (`--repeats` rounds, the three alternating; all with XLA's default
options). The jaxes generation is timed twice: with one chunk of every decision (no early
exit: it simulates exactly the plain rollout's steps; the overhead target is judged on it)
and with the task's default chunks of 50 decisions, which stop once every episode is over
(its cost per *simulated* step, and how much faster a generation is). Target: overhead
≤ 5 %.

Run:
  .venv/bin/python benchmarks/minatar.py --seeds 3-5       # five games × 3 seeds (hours)
  .venv/bin/python benchmarks/minatar.py --merge A.json B.json  # one table of two sittings
  .venv/bin/python benchmarks/minatar.py --games Breakout --wall-minutes 10
  .venv/bin/python benchmarks/minatar.py --quick           # Breakout, seed 0, ~1-2 minutes
  .venv/bin/python benchmarks/minatar.py --overhead        # the per-step overhead
`--quick` trains Breakout with seed 0 for a few generations at P = 64 and 200-step episodes
(a smoke run of the pipeline, not the shared setting) into benchmarks/results/minatar_quick.json;
`--overhead` writes benchmarks/results/minatar_overhead.json.
`--policy-cost`: one policy step of 3 × P members (the preset's network without its VBN
statistics, `conv`; three seeds) with
each member's own weights, as a generation runs it, against one shared set of weights (what
low-rank members would share), median of 20 × `--repeats` calls, one device; writes
benchmarks/results/minatar_policy_cost.json.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _driver as driver
from _common import machine_info, write_json, write_results
from table3 import add_alive_totals, parse_seeds, read_metrics, run_sitting

GAMES = ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
# gymnax README, "Ckpt (Return)" of the PPO agents; Seaquest: no published return.
PPO_RETURN = {"Asterix": 15.0, "Breakout": 28.0, "Freeway": 58.0, "Seaquest": None}
PPO_RETURN["SpaceInvaders"] = 131.0
# gymnax-blines agents/<GAME>-MinAtar/ppo.yaml (commit 15b76af31ce2): num_train_steps.
PPO_ENV_STEPS = dict.fromkeys(GAMES, 10_000_000)
PPO_SOURCES = {
    "returns": "gymnax README.md (main), table 'Implemented Accelerated Environments', "
    "column 'Ckpt (Return)'; Seaquest has no row there",
    "env_steps": "gymnax-blines agents/<GAME>-MinAtar/ppo.yaml @ 15b76af31ce2: "
    "num_train_steps 10000000",
}
STEPS_FACTOR = 10  # target: PPO's return within 10 x PPO's env steps
WALL_MINUTES = 45.0  # issue 39: each game's run stops at 45 minutes
# The table before the sweep (issue 39's "today"): the preset of eec6561 (full-rank members,
# 128-observation VBN reference), seeds 0-2, Intel Xeon: minutes per game, median final eval.
PREVIOUS = {
    "Asterix": (25.0, 0.125),
    "Breakout": (25.0, 3.25),
    "Freeway": (15.0, 19.25),
    "Seaquest": (25.0, 0.875),
    "SpaceInvaders": (25.0, 8.0),
}
PREVIOUS_SOURCE = "benchmarks/results/minatar.json at eec6561 (Intel Xeon, seeds 0-2)"
CHECKPOINTS = (10_000_000, 100_000_000)  # alive env steps: PPO's budget and 10x it
GENERATIONS = 100_000  # so that --timesteps or the wall clock is what stops a run
QUICK = {"game": "Breakout", "seeds": "0", "population": 64, "episode_length": 200}
QUICK_GENERATIONS, QUICK_EVAL_EVERY = 12, 2
DEFAULT_RUNS = Path.home() / ".cache" / "jaxes" / "minatar-runs"


# --------------------------------------------------------------------------------------------
# Pure helpers.
# --------------------------------------------------------------------------------------------


def env_name(game: str) -> str:
    return f"{game}-MinAtar"


def spread(values: list[float]) -> dict | None:
    """Median, min and max of `values` (None when empty)."""
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def first_at(curve: list[list], threshold: float | None, index: int) -> float | None:
    """Column `index` of the first curve point whose eval return (column 3) is >= threshold."""
    if threshold is None:
        return None
    return next((point[index] for point in curve if point[3] >= threshold), None)


def eval_at(curve: list[list], limit: float, index: int) -> float | None:
    """The last eval return (column 3) with column `index` at or below `limit`, if the run
    went past `limit` (None: it stopped short of it, or had no eval by then)."""
    if not curve or curve[-1][index] < limit:
        return None
    before = [point[3] for point in curve if point[index] <= limit]
    return before[-1] if before else None


def median_of(values: list[float | None]) -> float | None:
    """Median over seeds, or None unless every seed has a value."""
    if not values or any(v is None for v in values):
        return None
    return statistics.median(values)


def median_reached(values: list[float | None]) -> float | None:
    """Median with a seed that never reached counted as +inf (None: the median did not)."""
    if not values:
        return None
    median = statistics.median(math.inf if v is None else v for v in values)
    return None if math.isinf(median) else median


def seed_summary(directory: Path, seed: int, ppo_return: float | None) -> dict:
    """One seed's curve and numbers from its metrics.jsonl."""
    lines = add_alive_totals(read_metrics(directory / "metrics.jsonl"))
    evals = [x for x in lines if x.get("eval_return") is not None]
    # [total_env_steps, total_alive_steps, wall_time_s, eval_return] per evaluation
    curve = [
        [int(x["total_env_steps"]), int(x["total_alive_steps"]), x.get("wall_time_s"), 0.0]
        for x in evals
    ]
    for point, x in zip(curve, evals, strict=True):
        point[3] = round(float(x["eval_return"]), 3)
    returns = [p[3] for p in curve]
    return {
        "seed": seed,
        "generations": int(lines[-1]["generation"]) if lines else 0,
        "env_steps": int(lines[-1]["total_env_steps"]) if lines else 0,
        "alive_steps": int(lines[-1]["total_alive_steps"]) if lines else 0,
        "final_eval_return": returns[-1] if returns else None,
        "best_eval_return": max(returns) if returns else None,
        "ppo_return_env_steps": first_at(curve, ppo_return, 0),
        "ppo_return_alive_steps": first_at(curve, ppo_return, 1),
        "ppo_return_wall_s": first_at(curve, ppo_return, 2),
        "curve_columns": ["total_env_steps", "total_alive_steps", "wall_time_s", "eval_return"],
        "curve": curve,
    }


def game_summary(game: str, seeds: list[dict], wall_s: float, budget: int) -> dict:
    ppo_return, ppo_steps = PPO_RETURN[game], PPO_ENV_STEPS[game]
    alive_to_ppo = median_reached([s["ppo_return_alive_steps"] for s in seeds])
    used = [s["alive_steps"] for s in seeds]
    if ppo_return is None:
        steps_target = None  # no PPO return to reach
    elif alive_to_ppo is not None:
        steps_target = alive_to_ppo <= STEPS_FACTOR * ppo_steps
    elif min(used, default=0) >= STEPS_FACTOR * ppo_steps:
        steps_target = False  # every seed spent 10x and missed
    else:
        steps_target = None  # stopped short of 10x PPO's steps: cannot tell
    final = [s["final_eval_return"] for s in seeds if s["final_eval_return"] is not None]
    best = [s["best_eval_return"] for s in seeds if s["best_eval_return"] is not None]
    minutes, previous = PREVIOUS[game]
    at_previous = median_of([eval_at(s["curve"], minutes * 60, 2) for s in seeds])
    return {
        "game": game,
        "env": env_name(game),
        "ppo_return": ppo_return,
        "ppo_env_steps": ppo_steps,
        "timesteps_budget": budget,
        "wall_minutes": round(wall_s / 60, 2),
        "final_eval_return": spread(final),
        "best_eval_return": spread(best),
        "env_steps": spread([s["env_steps"] for s in seeds]),
        "alive_steps": spread(used),
        "median_alive_steps_to_ppo": alive_to_ppo,
        "median_env_steps_to_ppo": median_reached([s["ppo_return_env_steps"] for s in seeds]),
        "target_steps_within_10x_ppo": steps_target,
        "eval_at_alive_steps": {
            str(n): median_of([eval_at(s["curve"], n, 1) for s in seeds]) for n in CHECKPOINTS
        },
        "previous": {"minutes": minutes, "final_eval_return": previous},
        "eval_at_previous_minutes": at_previous,
        "above_previous_at_equal_wall": None if at_previous is None else at_previous > previous,
        "seeds": seeds,
    }


def _num(x: float | None, digits: int = 1) -> str:
    if x is None:
        return "-"
    if abs(x) >= 1e5:
        return f"{x:.2e}"
    return f"{x:.{digits}f}"


def _spread_text(s: dict | None, digits: int = 1) -> str:
    if s is None:
        return "-"
    return f"{_num(s['median'], digits)} [{_num(s['min'], digits)}, {_num(s['max'], digits)}]"


def _verdict(value: bool | None) -> str:
    return {True: "yes", False: "no", None: "n/a"}[value]


def table(games: list[dict]) -> str:
    """The Markdown summary (medians [min, max] over seeds) and the verdicts of the targets."""
    rows = [
        [
            g["game"],
            _num(g["ppo_return"], 0),
            *(_num(g["eval_at_alive_steps"][str(n)], 2) for n in CHECKPOINTS),
            _spread_text(g["final_eval_return"]),
            _spread_text(g["best_eval_return"]),
            _spread_text(g["alive_steps"], 0),
            _spread_text(g["env_steps"], 0),
            _spread_text(spread([s["generations"] for s in g["seeds"]]), 0),
            f"{g['wall_minutes']:.1f}",
            _num(g["median_alive_steps_to_ppo"], 0),
            f"{_num(g['previous']['final_eval_return'], 2)} @ {g['previous']['minutes']:.0f} min",
            _num(g["eval_at_previous_minutes"], 2),
        ]
        for g in games
    ]
    head = (
        "game | PPO return | eval @ 10M alive steps | eval @ 100M | final eval | best eval | "
        "alive env steps | simulated env steps | updates | minutes | alive steps to PPO return | "
        "previous table | this setting at its minutes"
    )
    with_ppo = [g for g in games if g["ppo_return"] is not None]
    reached = [g["game"] for g in with_ppo if g["median_alive_steps_to_ppo"] is not None]
    above = [g["game"] for g in games if g["above_previous_at_equal_wall"]]
    note = (
        "\nmedian [min, max] over seeds; 'eval @ N': the last evaluation at or before N alive env "
        "steps (PPO's count), median over seeds ('-': not every seed got there); 'alive steps to "
        "PPO return': median over seeds of the first evaluation at or above it (a seed that "
        "never reached it counts as +inf; '-': not reached); 'previous table': "
        f"{PREVIOUS_SOURCE}, its median final eval and minutes; 'this setting at its minutes': "
        "the last evaluation by that wall clock."
        f"\n\nPPO's return reached on {len(reached)} of {len(with_ppo)} games with a PPO return "
        f"({', '.join(reached) or 'none'}; target: 2 of 4). Above the previous table at equal "
        f"wall clock on {len(above)} of {len(games)} games ({', '.join(above) or 'none'}; "
        "target: all)."
    )
    return driver.markdown_table(head, "lrrrrrrrrrrrr", rows) + note


# --------------------------------------------------------------------------------------------
# Training runs.
# --------------------------------------------------------------------------------------------


def train_command(args, game: str, run_dir: Path) -> list[str]:
    cmd = [sys.executable, "-m", "jaxes", "train", "--env", env_name(game)]
    cmd += ["--seeds", args.seeds, "--timesteps", str(args.timesteps)]
    cmd += ["--generations", str(args.generations), "--out", str(run_dir)]
    if args.population:
        cmd += ["--population", str(args.population)]
    if args.episode_length:
        cmd += ["--episode-length", str(args.episode_length)]
    if args.eval_every:
        cmd += ["--eval-every", str(args.eval_every), "--checkpoint-every", str(args.eval_every)]
    if args.action_repeat != 1:
        cmd += ["--action-repeat", str(args.action_repeat)]
    for flag, value in args.set:
        cmd += [f"--{flag}", value]
    return cmd


def train_game(args, game: str, runs: Path) -> dict:
    seeds = parse_seeds(args.seeds)
    run_dir = runs / env_name(game)
    if run_dir.exists() and any(run_dir.iterdir()):
        raise SystemExit(f"{run_dir}: not empty; give another --runs folder")
    cmd = train_command(args, game, run_dir)
    print(f"{game}: {' '.join(cmd[1:])}", flush=True)
    sitting = run_sitting(
        cmd, runs / f"{env_name(game)}.log", args.wall_minutes * 60, game, run_dir, seeds
    )
    dirs = [run_dir / f"seed-{s}" for s in seeds]  # --seeds: one folder per seed, even one
    summaries = [seed_summary(d, s, PPO_RETURN[game]) for d, s in zip(dirs, seeds, strict=True)]
    result = game_summary(game, summaries, sitting["wall_s"], args.timesteps)
    result["sitting"] = sitting | {"command": cmd[1:]}
    if sitting["returncode"] not in (0, -2, 130) and not sitting["stopped_for_wall"]:
        print((runs / f"{env_name(game)}.log").read_text()[-3000:], file=sys.stderr)
    return result


def run_training(args, argv) -> None:
    info = machine_info(argv, packages=("jax", "jaxlib", "gymnax"))
    runs = Path(args.runs or tempfile.mkdtemp(prefix="jaxes-minatar-"))
    games = []
    for game in args.games:  # written after every game, so a long run's games so far are kept
        games.append(train_game(args, game, runs))
        write_games(args, argv, info, runs, games)


def write_games(args, argv, info: dict, runs: Path, games: list[dict]) -> None:
    settings = {
        "seeds": parse_seeds(args.seeds),
        "timesteps_budget": args.timesteps,
        "wall_minutes_per_game": args.wall_minutes,
        "overrides": {
            "population": args.population,
            "episode_length": args.episode_length,
            "eval_every": args.eval_every,
            "action_repeat": args.action_repeat,
            "set": dict(args.set),
        },
        "quick": args.quick,
        "runs": str(runs),
    }
    payload = {"settings": settings, "ppo_sources": PPO_SOURCES, "games": games}
    write_results(args.out, info, [], [table(games)], payload, show_machine=False)


# --------------------------------------------------------------------------------------------
# --overhead: a jaxes generation against a plain vmap + scan rollout.
# --------------------------------------------------------------------------------------------


def plain_rollout(env, env_params, apply, steps: int):
    """gymnax's README rollout for a population: vmap over members of a scan over `steps`
    env steps (gymnax auto-resets; rewards after the first done are masked out)."""
    import jax
    import jax.numpy as jnp

    def episode(params, key):
        reset_key, step_key = jax.random.split(key)
        obs, state = env.reset(reset_key, env_params)

        def step(carry, n):
            obs, state, total, alive = carry
            action = apply(params, obs.astype(jnp.float32))  # the grid as jaxes feeds it
            obs, state, reward, term, trunc, _ = env.step(
                jax.random.fold_in(step_key, n), state, action, env_params
            )
            done = term | trunc
            total = total + jnp.where(alive, reward, 0.0)
            return (obs, state, total, alive & ~done), None

        start = (obs, state, jnp.float32(0.0), jnp.bool_(True))
        (_, _, total, _), _ = jax.lax.scan(step, start, jnp.arange(steps))
        return total

    return jax.jit(jax.vmap(episode, in_axes=(0, None)))


def timed(fns, repeats: int) -> tuple[list[list[float]], list[list]]:
    """Seconds of each call of each of `fns`, and what each call returned, `repeats` rounds,
    the functions alternating within a round (so that load from other processes falls on all
    alike)."""
    times, outs = [[] for _ in fns], [[] for _ in fns]
    for _ in range(repeats):
        for fn, seconds, out in zip(fns, times, outs, strict=True):
            start = time.perf_counter()
            out.append(fn())
            seconds.append(time.perf_counter() - start)
    return times, outs


def run_overhead(args, argv) -> None:
    import jax

    import jaxes
    from jaxes.tasks.gymnax import gymnax_task
    from jaxes.training.programs import block_runner, init_state

    info = machine_info(argv, packages=("jax", "jaxlib", "gymnax"), jax_backend=True)
    game, population = args.games[0], args.population or 256
    length = args.episode_length or 1000
    es = jaxes.open_es(population_size=population, sigma=0.02, learning_rate=0.01, l2_coeff=0.005)

    def generation(chunk_length):
        """One jaxes generation as a timed call that returns the env steps it simulated."""
        task = gymnax_task(env_name(game), "conv", episode_length=length, chunk_length=chunk_length)
        runner = block_runner(es, task, 1, evaluate=False)
        state = init_state(es, task, seed=0)

        def call():
            nonlocal state
            state, metrics = runner(state)
            return int(jax.block_until_ready(metrics["env_steps"])[0])

        return task, call

    # One chunk of every decision: no early exit, so it simulates what the plain rollout does.
    task, whole = generation(length)
    _, early = generation(50)
    # The same conv policy, P members around the same centre, the same episode length.
    members = jax.tree.map(
        lambda x: x[None] + 0.02 * jax.random.normal(jax.random.key(1), (population,) + x.shape),
        task.init_params(jax.random.key(0)),
    )
    plain = plain_rollout(task.env, task.env_params, task.policy.apply, length)
    key = jax.random.key(2)

    def plain_generation():
        jax.block_until_ready(plain(members, key))
        return population * length

    calls = [whole, early, plain_generation]
    for call in calls:  # compile and warm up
        call()
    seconds, simulated = timed(calls, args.repeats)
    per_step = [sum(s) / sum(n) for s, n in zip(seconds, simulated, strict=True)]
    overhead = per_step[0] / per_step[2] - 1
    early_overhead = per_step[1] / per_step[2] - 1
    speedup = statistics.median(seconds[2]) / statistics.median(seconds[1])
    result = {
        "game": game,
        "population": population,
        "episode_length": length,
        "policy": "conv",
        "repeats": args.repeats,
        "env_steps_per_generation": population * length,
        "jaxes_generation_s": seconds[0],
        "jaxes_early_exit_generation_s": seconds[1],
        "jaxes_early_exit_env_steps": simulated[1],
        "plain_rollout_s": seconds[2],
        "jaxes_s_per_env_step": per_step[0],
        "jaxes_early_exit_s_per_simulated_step": per_step[1],
        "plain_s_per_env_step": per_step[2],
        "overhead": overhead,
        "early_exit_overhead_per_simulated_step": early_overhead,
        "early_exit_speedup_per_generation": speedup,
        "target_overhead_at_most_5_percent": overhead <= 0.05,
    }
    names = ["jaxes, one chunk (no early exit)", "jaxes, chunks of 50 (early exit)"]
    rows = [
        [
            name,
            f"{statistics.median(s):.3f}",
            f"{statistics.median(n):.3g}",
            f"{step:.3e}",
            f"{step / per_step[2] - 1:+.1%}",
        ]
        for name, s, n, step in zip(names, seconds, simulated, per_step, strict=False)
    ]
    rows.append(
        [
            "plain vmap + scan rollout",
            f"{statistics.median(seconds[2]):.3f}",
            f"{population * length:.3g}",
            f"{per_step[2]:.3e}",
            None,
        ]
    )
    text = driver.markdown_table(
        "what | s per generation (median) | env steps simulated | s per env step | overhead",
        "lrrrr",
        rows,
    )
    verdict = (
        f"\ntarget overhead ≤ 5 % (one chunk, the same steps as the plain rollout): "
        f"{'met' if overhead <= 0.05 else 'not met'}; early exit: {speedup:.1f}× fewer "
        "seconds per generation than the plain rollout"
    )
    head = f"{env_name(game)}, P = {population}, {length}-step episodes, conv policy\n"
    write_results(
        args.out, info, [], [head + text + verdict], {"overhead": result}, show_machine=False
    )


def run_policy_cost(args, argv) -> None:
    """One policy step of P × 3 members (the preset's population, three seeds) with each
    member's own weights (what a generation does) against one shared set of weights."""
    import jax
    import jax.numpy as jnp

    from jaxes.tasks.gymnax import gymnax_task

    info = machine_info(argv, packages=("jax", "jaxlib", "gymnax"), jax_backend=True)
    game, members = args.games[0], 3 * (args.population or 256)
    task = gymnax_task(env_name(game), "conv")  # vbn_conv's weights, without its statistics
    params = task.init_params(jax.random.key(0))
    stacked = jax.tree.map(
        lambda x: x[None] + 0.02 * jax.random.normal(jax.random.key(1), (members,) + x.shape),
        params,
    )
    obs = jnp.zeros((members,) + task.family.observations.shape, jnp.float32)
    own = jax.jit(jax.vmap(task.policy.apply))
    shared = jax.jit(jax.vmap(task.policy.apply, in_axes=(None, 0)))
    calls = [lambda: jax.block_until_ready(own(stacked, obs))]
    calls.append(lambda: jax.block_until_ready(shared(params, obs)))
    for call in calls:  # compile and warm up
        call()
    seconds, _ = timed(calls, 20 * args.repeats)
    own_s, shared_s = (statistics.median(s) for s in seconds)
    size = sum(x.size for x in jax.tree.leaves(params))
    result = {"game": game, "members": members, "params_per_member": size}
    result |= {"own_weights_s": own_s, "shared_weights_s": shared_s, "ratio": own_s / shared_s}
    text = (
        f"{env_name(game)}, conv ({size} parameters), one policy step of {members} members: "
        f"own weights {own_s * 1e3:.1f} ms, shared weights {shared_s * 1e3:.1f} ms "
        f"({own_s / shared_s:.1f}x)"
    )
    write_results(args.out, info, [], [text], {"policy_cost": result}, show_machine=False)


# --------------------------------------------------------------------------------------------
# The command line.
# --------------------------------------------------------------------------------------------


def flag_value(text: str) -> tuple[str, str]:
    """``FLAG=VALUE`` as ``(flag, value)``.

    Example:
      >>> flag_value("noise-rank=1")
      ('noise-rank', '1')
    """
    flag, sep, value = text.partition("=")
    if not sep or not flag or flag.startswith("-"):
        raise argparse.ArgumentTypeError(f"expected FLAG=VALUE (no dashes), got {text!r}")
    return flag, value


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = driver.parser(
        __doc__, "Breakout, seed 0, a few generations (~1-2 min)", "minatar", child=False
    )
    parser.add_argument("--overhead", action="store_true", help="per-step overhead vs gymnax")
    parser.add_argument(
        "--policy-cost", action="store_true", help="a policy step: own vs shared weights"
    )
    parser.add_argument(
        "--games",
        type=driver.comma_list(str),
        default=None,
        help="comma-separated games (default: all five; --overhead: Breakout)",
    )
    parser.add_argument("--seeds", default="0-2", help="seeds, e.g. 0-2 (one program)")
    parser.add_argument(
        "--timesteps",
        type=driver.parse_count,
        help="env-step cap per run (default: 10 x PPO's env steps)",
    )
    parser.add_argument(
        "--wall-minutes",
        type=float,
        default=WALL_MINUTES,
        help="wall clock per game, all its seeds together",
    )
    parser.add_argument("--generations", type=int, default=GENERATIONS)
    parser.add_argument("--population", type=int, help="override the preset's P")
    parser.add_argument("--episode-length", type=int, help="override gymnax's episode length")
    parser.add_argument("--eval-every", type=int, help="override the preset's eval cadence")
    parser.add_argument("--action-repeat", type=int, default=1)
    parser.add_argument(
        "--set",
        type=flag_value,
        action="append",
        default=[],
        metavar="FLAG=VALUE",
        help="another `jaxes train` flag, e.g. --set noise=lowrank (repeatable)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="--overhead: timed repeats")
    parser.add_argument("--runs", type=Path, help="run directories (default: a temp folder)")
    parser.add_argument(
        "--merge", type=Path, nargs="+", help="results files of sittings to write as one table"
    )
    args = parser.parse_args(argv)
    if args.games is None:  # --overhead and --policy-cost: Breakout unless told
        args.games = [QUICK["game"]] if args.overhead or args.policy_cost else list(GAMES)
    unknown = [g for g in args.games if g not in GAMES]
    if unknown:
        parser.error(f"unknown games {unknown}; choose from {', '.join(GAMES)}")
    if args.quick:
        args.games, args.seeds = [QUICK["game"]], QUICK["seeds"]
        args.population = args.population or QUICK["population"]
        args.episode_length = args.episode_length or QUICK["episode_length"]
        args.generations, args.eval_every = QUICK_GENERATIONS, QUICK_EVAL_EVERY
    if args.timesteps is None:
        args.timesteps = STEPS_FACTOR * max(PPO_ENV_STEPS[g] for g in args.games)
    name = "minatar_overhead" if args.overhead else "minatar"
    name = "minatar_policy_cost" if args.policy_cost else name
    args.out = args.out or driver.results_path(name, args.quick and name == "minatar")
    return args


def run_merge(args, argv) -> None:
    """One results file of several sittings' games, each summary recomputed from its seeds'
    stored curves (the machine of the first file; every file's is kept)."""
    files = []
    for path in args.merge:
        try:
            files.append(json.loads(path.read_text()))
        except (OSError, ValueError) as err:
            raise SystemExit(f"--merge: cannot read {path} ({err})") from None
    by_game, replaced = {}, []
    for path, data in zip(args.merge, files, strict=True):
        for g in data["games"]:
            wall_s, budget = g["sitting"]["wall_s"], g["timesteps_budget"]
            summary = game_summary(g["game"], g["seeds"], wall_s, budget)
            if g["game"] in by_game:  # a later sitting of a game replaces the earlier one
                replaced.append({"game": g["game"], "by": str(path), **by_game[g["game"]]})
            by_game[g["game"]] = summary | {"sitting": g["sitting"]}
    order = {game: i for i, game in enumerate(GAMES)}
    games = sorted(by_game.values(), key=lambda g: order[g["game"]])
    info = files[0]["machine"] | {"merged_from": [str(p) for p in args.merge]}
    payload = {
        "settings": files[0]["settings"],
        "ppo_sources": PPO_SOURCES,
        "sittings": [{"machine": d["machine"], "settings": d["settings"]} for d in files],
        "games": games,
        "replaced": replaced,
    }
    print(table(games))
    write_json(args.out, {"machine": info, **payload})  # the sittings' machines, unchanged
    print(f"wrote {args.out}", file=sys.stderr)


def run(args, argv) -> None:
    if args.merge:
        run_merge(args, argv)
    elif args.overhead:
        run_overhead(args, argv)
    elif args.policy_cost:
        run_policy_cost(args, argv)
    else:
        run_training(args, argv)


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, None, run)
