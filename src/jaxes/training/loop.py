"""The training loop: blocks of generations on the device until every lane stops.

Each block has three sides, kept apart: the device side (``_Device.run``: the compiled block
and the evaluation after it, its outputs brought to the host), the host-side record
(``record.record_block``: metrics lines, stop decisions, one write per lane) and reporting
(``report``: the progress line and ETA, ``progress_fn``). Checkpoints follow, every
``checkpoint_every`` generations and when a lane stops.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp

from jaxes.training import report
from jaxes.training.lanes import Job, Lane, next_block
from jaxes.training.placement import to_host
from jaxes.training.programs import Programs, eval_key
from jaxes.training.record import Block, metrics_writers, record_block
from jaxes.training.settings import INT32_MAX


def train_lanes(job: Job, lanes: list[Lane], state, vmapped: bool, feeds=()) -> list[Lane]:
    """Trains the lanes from ``state`` (stacked over them when ``vmapped``) until each one
    stops; returns them where they stopped, with their ``seconds`` and ``compile_seconds``.
    ``feeds`` (``jaxes.training.loggers.Feed``, one per lane, or none) get each lane's lines,
    and send them to the trackers once a checkpoint holds them."""
    device = _Device.make(job, len(lanes) if vmapped else None)
    progress = report.progress_for(job, len(lanes), vmapped)
    wall_offset = max((lane.kept[-1]["wall_time_s"] for lane in lanes if lane.kept), default=0.0)
    started = time.perf_counter()
    with metrics_writers(job, lanes) as writers:
        while any(lane.stopped is None for lane in lanes):
            generation, length = next_block(lanes, job.loop["eval_every"])
            state, block = device.run(state, lanes, generation, length)
            elapsed = wall_offset + block.end - started
            lanes, moved = record_block(job, lanes, writers, block, elapsed, vmapped)
            report.show_block(progress, job, moved, length, block.end - block.start)
            report.warn_unranked(progress, moved, vmapped)
            for i, lane, lines in moved:
                if lines:
                    report.call_progress_fn(job, lane, lines, vmapped)
                    if feeds:
                        feeds[i].add(lines)
                    if _checkpoint_if_due(job, lane, state, i, vmapped) and feeds:
                        feeds[i].commit()
    progress.close()
    seconds = round(time.perf_counter() - started, 1)
    timed = {"seconds": seconds, "compile_seconds": round(device.compile_s, 1)}
    return [dataclasses.replace(lane, **timed) for lane in lanes]


def _checkpoint_if_due(job: Job, lane: Lane, state, i: int, vmapped: bool) -> bool:
    """Saves the lane's checkpoint when one is due; returns whether it did."""
    if lane.generation % job.loop["checkpoint_every"] == 0 or lane.stopped:
        lane_state = jax.tree.map(lambda x: x[i], state) if vmapped else state
        lane.ckpt.save(lane.generation, lane_state)
        return True
    return False


@dataclasses.dataclass
class _Device:
    """The device side of the loop: the compiled programs and the arguments they take."""

    job: Job
    programs: Programs
    lanes: int | None  # None: one run, not vmapped
    compile_s: float = 0.0

    @classmethod
    def make(cls, job: Job, lanes: int | None) -> _Device:
        budget, target = job.stops["timesteps"], job.stops["target_return"]
        stoppable = budget is not None or (lanes is not None and target is not None)
        programs = Programs(job.strategy, job.task, job.mesh, lanes, stoppable)
        return cls(job, programs, lanes)

    def run(self, state, lanes: list[Lane], generation: int, length: int):
        """Runs the block of ``length`` generations from ``generation`` (compiling it first
        if new) and evaluates the centre; returns the new state and the host's ``Block``."""
        args = self._arguments(state, lanes, generation, length)
        block = self.programs.blocks.get(length)
        if block is None:
            # Compiled ahead of the call, so the rate and ETA never count compilation.
            self.job.stream.write(f"compiling a block of {length} generations...\n")
            self.job.stream.flush()
            compiling = time.perf_counter()
            block = self.programs.compile(length, args)
            self.compile_s += time.perf_counter() - compiling
        start = time.perf_counter()
        outputs = block(*args[:1], *args[2:])
        state = outputs[0]
        returns, cost = self.programs.evaluate(state, args[1])
        metrics, returns, cost = to_host(outputs[1]), to_host(returns), to_host(cost)
        ran = to_host(outputs[2]) if self.programs.stoppable else None
        return state, Block(metrics, returns, cost, ran, length, start, time.perf_counter())

    def _arguments(self, state, lanes: list[Lane], generation: int, length: int) -> list:
        """``(state, eval_key, *stops)``: stops are each lane's env-step budget left and
        whether it is still running, when the block is stoppable."""
        vmapped = self.lanes is not None

        def stack(values, dtype=None):
            return jnp.asarray(values, dtype) if vmapped else jnp.asarray(values[0], dtype)

        keys = [eval_key(lane.seed, generation + length) for lane in lanes]
        args = [state, jnp.stack(keys) if vmapped else keys[0]]
        if self.programs.stoppable:
            budget = self.job.stops["timesteps"]
            remaining = [
                INT32_MAX if budget is None else min(budget - lane.total_env_steps, INT32_MAX)
                for lane in lanes
            ]
            args += [stack(remaining, jnp.int32), stack([x.stopped is None for x in lanes])]
        return args
