"""What a run reports while and after it trains: the progress line with its rate and ETA, the
user's ``progress_fn``, summaries, and the learning-curve plots."""

from __future__ import annotations

import math
import os

import numpy as np

from jaxes.training.lanes import Job, Lane
from jaxes.training.progress import Progress

# The statistic the progress line shows for several seeds: one number per column.
SEEDS_STATISTIC = "median over {} seeds"


def progress_for(job: Job, lanes: int, vmapped: bool) -> Progress:
    """The progress line of ``lanes`` runs; with several seeds it says which statistic of
    them it shows."""
    statistic = SEEDS_STATISTIC.format(lanes) if vmapped else None
    return Progress(job.loop["generations"], job.stream, statistic=statistic)


def show_block(progress: Progress, job: Job, moved, length: int, block_s: float) -> None:
    """Updates the progress line after a block of ``length`` generations that took
    ``block_s`` seconds; ``moved`` holds ``(index, lane, lines)`` of the lanes it moved."""
    block_s = max(block_s, 1e-9)
    steps = sum(x.get("env_steps", job.size) for _, _, lines in moved for x in lines)
    shown = max(lane.generation for _, lane, _ in moved)
    eta = block_s / length * _generations_left(job, moved, shown, steps)
    progress.update(shown, progress_numbers(moved), steps / block_s, eta)


def warn_unranked(progress: Progress, moved, seeds: bool) -> None:
    """One line for each lane whose block had a generation with no finite fitness (all NaN or
    ±inf): ``tell`` skipped its update (``info.applied`` is False), so the run did not move.

    Example:
      >>> import io, types
      >>> out = io.StringIO()
      >>> lane = types.SimpleNamespace(seed=3)
      >>> lines = [{"generation": g, "num_finite": n} for g, n in ((7, 8), (8, 0), (9, 0))]
      >>> warn_unranked(Progress(10, out), [(0, lane, lines)], seeds=False)
      >>> for part in out.getvalue().strip().split(", "):
      ...     print(part)
      warning: generation 8 had no finite fitness (every value NaN or ±inf)
      so its update was skipped (1 more generation like it after it)
    """
    for _, lane, lines in moved:
        empty = [x["generation"] for x in lines if x.get("num_finite") == 0]
        if not empty:
            continue
        more = len(empty) - 1
        after = f" ({more} more generation{'s' * (more > 1)} like it after it)" if more else ""
        who = f"seed {lane.seed}: " if seeds else ""
        progress.note(
            f"warning: {who}generation {empty[0]} had no finite fitness (every value NaN or "
            f"±inf), so its update was skipped{after}"
        )


def _generations_left(job: Job, moved, shown: int, steps: int) -> int:
    """The generations left to run: to ``generations``, or fewer where the timesteps budget
    ends the run sooner (at this block's env steps per generation)."""
    left = job.loop["generations"] - shown
    budget = job.stops["timesteps"]
    if budget is not None and steps:
        per_generation = steps / max(1, sum(len(lines) for _, _, lines in moved))
        spent = min(lane.total_env_steps for _, lane, _ in moved)
        left = min(left, math.ceil(max(0, budget - spent) / per_generation))
    return left


def progress_numbers(moved) -> dict:
    """The progress line's numbers: the run's own, or the median over the seeds.

    Example:
      >>> moved = [(0, None, [{"fitness_mean": 1.0}]), (1, None, [{"fitness_mean": 3.0}])]
      >>> progress_numbers(moved)
      {'fitness_mean': 2.0, 'best_fitness': None, 'eval_return': None}
    """
    last = [lines[-1] for _, _, lines in moved if lines]
    line = {}
    for name in ("fitness_mean", "best_fitness", "eval_return"):
        values = [x[name] for x in last if x.get(name) is not None]
        line[name] = float(np.median(values)) if values else None
    return line


def call_progress_fn(job: Job, lane: Lane, lines: list[dict], vmapped: bool) -> None:
    """``job.progress_fn(generation, last line)``, the line with its ``seed`` when vmapped."""
    if job.progress_fn is not None:
        seed = {"seed": lane.seed} if vmapped else {}
        job.progress_fn(lane.generation, {**lines[-1], **seed})


def seeds_summary(seeds: list[int], lanes: list[Lane]) -> dict:
    """``run_seeds``' summary: each run's, and the median and spread of their final
    evaluations."""
    runs = [{"seed": lane.seed, **lane.summary()} for lane in lanes]
    finals = [r["final_eval_return"] for r in runs if r["final_eval_return"] is not None]
    spread = {"median": None, "min": None, "max": None}
    if finals:
        spread = {"median": float(np.median(finals)), "min": min(finals), "max": max(finals)}
    return {
        "seeds": seeds,
        "runs": runs,
        "final_eval_return": spread,
        "seconds": lanes[0].seconds,
        "compile_seconds": lanes[0].compile_seconds,
    }


def plot_run(metrics_path: str, png_path: str) -> str | None:
    """The learning curve of one run as ``png_path`` (absolute); ``None`` without
    matplotlib."""
    try:
        from jaxes import plotting
    except ImportError:
        return None
    plotting.learning_curve(metrics_path, png_path)
    return os.path.abspath(png_path)


def plot_seeds(lanes: list[Lane], png_path: str) -> str | None:
    """Every seed's evaluation returns in one plot, ``png_path`` (absolute); ``None`` without
    matplotlib."""
    try:
        from jaxes import plotting
    except ImportError:
        return None
    plotting.seed_curves([x.metrics_path for x in lanes], [x.seed for x in lanes], png_path)
    return os.path.abspath(png_path)
