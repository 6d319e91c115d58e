"""The host-side record of a block: its ``metrics.jsonl`` lines, the stop decisions they lead
to, and one write per lane, so that a kill mid-write cuts at most the last line.

The stop rules live here and nowhere else: ``record_block`` and ``caught_up`` return each
run's next ``Lane`` (generation, env steps, last evaluation, whether and why it stopped)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from typing import NamedTuple

import jax
import numpy as np

from jaxes.training import rundir
from jaxes.training.lanes import Job, Lane


class Block(NamedTuple):
    """What a block of generations gave, on the host: ``metrics[length]`` per name,
    ``returns`` of the evaluation and its ``eval_cost`` (``{"env_steps", "alive_steps"}``, or
    ``{}`` for a task that cannot tell), ``ran`` (which generations ran; ``None``: all of them)
    and the times it started and ended (``time.perf_counter``), with every lane stacked along
    a leading axis when vmapped."""

    metrics: dict
    returns: np.ndarray
    eval_cost: dict
    ran: np.ndarray | None
    length: int
    start: float
    end: float


@contextlib.contextmanager
def metrics_writers(job: Job, lanes: list[Lane]) -> Iterator[list]:
    """Each lane's ``metrics.jsonl`` open for appending (nothing is written off the primary
    process)."""
    with contextlib.ExitStack() as files:
        yield [
            files.enter_context(open(lane.metrics_path if job.primary else os.devnull, "a"))
            for lane in lanes
        ]


def record_block(
    job: Job, lanes: list[Lane], writers: list, block: Block, elapsed: float, vmapped: bool
) -> tuple[list[Lane], list[tuple[int, Lane, list[dict]]]]:
    """Writes the block's lines of every running lane; returns the lanes moved on
    (``advance``) and ``(index, lane, lines)`` of each running one, ``elapsed`` being the
    run's wall time."""
    lanes, moved = list(lanes), []
    for i, lane in enumerate(lanes):
        if lane.stopped is not None:
            continue

        def pick(x, i=i):
            return x[i] if vmapped else x

        count = block.length if block.ran is None else int(np.sum(pick(block.ran)))
        lines = metrics_lines(jax.tree.map(pick, block.metrics), lane.generation, count, elapsed)
        cost = jax.tree.map(pick, block.eval_cost)
        lanes[i] = advance(lane, lines, pick(block.returns), job.stops, cost)
        # One write per block: a kill mid-write cuts at most the last line.
        writers[i].write("".join(rundir.metrics_line(x) for x in lines))
        writers[i].flush()
        moved.append((i, lanes[i], lines))
    return lanes, moved


def metrics_lines(metrics: dict, first_generation: int, count: int, elapsed: float) -> list[dict]:
    """The ``metrics.jsonl`` lines of the first ``count`` generations of a block.

    Example:
      >>> import numpy as np
      >>> metrics_lines({"fitness_mean": np.array([1.0, np.nan])}, 4, 2, 0.5)[1]
      {'generation': 6, 'fitness_mean': None, 'wall_time_s': 0.5}
    """
    lines = []
    for i in range(count):
        line = {"generation": first_generation + i + 1}
        for name, values in metrics.items():
            line[name] = rundir.finite_or_null(values[i].item())
        line["wall_time_s"] = round(elapsed, 3)
        lines.append(line)
    return lines


def advance(lane: Lane, lines: list[dict], returns, stops: dict, eval_cost=None) -> Lane:
    """``lane`` after a block's ``lines`` (each given its ``total_env_steps``, the last its
    evaluation from ``returns``, and every line the evaluations' env steps so far when
    ``eval_cost`` says what the evaluation cost), with the stop decision."""
    total = lane.total_env_steps
    for line in lines:
        total += int(line.get("env_steps") or line.get("evaluations") or 0)
        line["total_env_steps"] = total
    lane = dataclasses.replace(lane, generation=lane.generation + len(lines), total_env_steps=total)
    if not lines:
        return lane
    lane = count_evaluation(lane, lines, eval_cost or {})
    with np.errstate(invalid="ignore"):  # an infinite return has no spread
        mean, spread = float(np.mean(returns)), float(np.std(returns))
    lane = dataclasses.replace(lane, last_eval=rundir.finite_or_null(mean))
    lines[-1]["eval_return"] = lane.last_eval
    lines[-1]["eval_return_std"] = rundir.finite_or_null(spread)
    target = stops["target_return"]
    reached = target is not None and lane.last_eval is not None and lane.last_eval >= target
    return decide_stop(lane, stops, lane.total_env_steps, reached)


EVAL_COLUMNS = {"eval_env_steps": "env_steps", "eval_alive_steps": "alive_steps"}


def count_evaluation(lane: Lane, lines: list[dict], cost: dict) -> Lane:
    """``lane`` with the block's evaluation (on its last line) added to its running counts,
    written on every line as ``eval_env_steps`` and ``eval_alive_steps``: the env steps the
    evaluations simulated and lived so far, which ``total_env_steps`` (training's) leaves out.
    Written only where every evaluation of the run was counted: not for a task that cannot
    tell (``cost`` empty), nor for a run resumed from lines written before the columns.

    Example:
      >>> lane = Lane("out", 0, {}, None, eval_env_steps=100, eval_alive_steps=80)
      >>> lines = [{"generation": 1}, {"generation": 2}]
      >>> lane = count_evaluation(lane, lines, {"env_steps": 50, "alive_steps": 30})
      >>> lines[0]["eval_env_steps"], lines[1]["eval_env_steps"], lines[1]["eval_alive_steps"]
      (100, 150, 110)
    """
    if not cost or lane.eval_env_steps is None or lane.eval_alive_steps is None:
        return lane
    for line in lines[:-1]:
        line |= {"eval_env_steps": lane.eval_env_steps, "eval_alive_steps": lane.eval_alive_steps}
    counts = {name: getattr(lane, name) + int(cost[key]) for name, key in EVAL_COLUMNS.items()}
    lines[-1] |= counts
    return dataclasses.replace(lane, **counts)


def caught_up(lane: Lane, kept: list[dict], stops: dict) -> Lane:
    """Where a resumed run stood, from the metrics lines it ``kept``."""
    evals = [x for x in kept if x.get("eval_return") is not None]
    target = stops["target_return"]
    hit = [x for x in evals if target is not None and x["eval_return"] >= target]
    # Lines written before the evaluation columns existed leave the evaluations' steps
    # unknown (None): the run goes on without the columns rather than count from zero.
    counts = {name: kept[-1].get(name) if kept else 0 for name in EVAL_COLUMNS}
    lane = dataclasses.replace(
        lane,
        kept=tuple(kept),
        total_env_steps=kept[-1].get("total_env_steps", 0) if kept else 0,
        last_eval=evals[-1]["eval_return"] if evals else None,
        **counts,
    )
    return decide_stop(lane, stops, hit[0].get("total_env_steps") if hit else None, bool(hit))


def decide_stop(lane: Lane, stops: dict, target_env_steps, reached: bool) -> Lane:
    """Whether the run is over, and why: the target return first (``reached``, at
    ``target_env_steps``), then the timesteps budget, then the generations."""
    budget = stops["timesteps"]
    if reached:
        return dataclasses.replace(lane, stopped="target_return", target_env_steps=target_env_steps)
    if budget is not None and lane.total_env_steps >= budget:
        return dataclasses.replace(lane, stopped="timesteps")
    if lane.generation >= lane.settings["generations"]:
        return dataclasses.replace(lane, stopped="generations")
    return lane
