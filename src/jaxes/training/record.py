"""The host-side record of a block: its ``metrics.jsonl`` lines, the stop decisions they lead
to, and one write per lane, so that a kill mid-write cuts at most the last line."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import NamedTuple

import jax
import numpy as np

from jaxes.training import rundir
from jaxes.training.lanes import Job, Lane


class Block(NamedTuple):
    """What a block of generations gave, on the host: ``metrics[length]`` per name,
    ``returns`` of the evaluation, ``ran`` (which generations ran; ``None``: all of them) and
    the times it started and ended (``time.perf_counter``), with every lane stacked along a
    leading axis when vmapped."""

    metrics: dict
    returns: np.ndarray
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
) -> list[tuple[int, Lane, list[dict]]]:
    """Writes the block's lines of every running lane and moves the lane on (``advance``);
    returns ``(index, lane, lines)`` of each, ``elapsed`` being the run's wall time."""
    moved = []
    for i, lane in enumerate(lanes):
        if lane.stopped is not None:
            continue

        def pick(x, i=i):
            return x[i] if vmapped else x

        count = block.length if block.ran is None else int(np.sum(pick(block.ran)))
        lines = metrics_lines(jax.tree.map(pick, block.metrics), lane.generation, count, elapsed)
        advance(lane, lines, pick(block.returns), job.stops)
        # One write per block: a kill mid-write cuts at most the last line.
        writers[i].write("".join(rundir.metrics_line(x) for x in lines))
        writers[i].flush()
        moved.append((i, lane, lines))
    return moved


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


def advance(lane: Lane, lines: list[dict], returns, stops: dict) -> None:
    """Counts a block's generations into ``lane`` and decides whether it stops."""
    for line in lines:
        lane.total_env_steps += int(line.get("env_steps") or line.get("evaluations") or 0)
        line["total_env_steps"] = lane.total_env_steps
    lane.generation += len(lines)
    if not lines:
        return
    with np.errstate(invalid="ignore"):  # an infinite return has no spread
        mean, spread = float(np.mean(returns)), float(np.std(returns))
    lane.last_eval = rundir.finite_or_null(mean)
    lines[-1]["eval_return"] = lane.last_eval
    lines[-1]["eval_return_std"] = rundir.finite_or_null(spread)
    target = stops["target_return"]
    reached = target is not None and lane.last_eval is not None and lane.last_eval >= target
    lane.decide_stop(stops, lane.total_env_steps, reached)
