"""The runs that train together, one lane each: ``run`` trains one lane, ``run_seeds`` one per
seed, ``vmap``-ed in one program.

``Job`` is what stays fixed while they train (strategy, task, loop settings, stopping rules,
mesh); ``Lane`` is where one run stands (its directory, generation, env steps, whether and why
it stopped), an immutable value: ``jaxes.training.record`` owns the stop rules and returns the
next ``Lane`` of each run. ``open_lanes`` admits each run into its directory and
``restore_states`` gives the state they train from.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, TextIO

import jax
import jax.numpy as jnp

from jaxes.parallel import check_split, default_split, make_mesh
from jaxes.training import checkpoint, rundir
from jaxes.training.loggers import check_loggers
from jaxes.training.placement import place
from jaxes.training.programs import init_state
from jaxes.training.settings import check_loop, check_stops, run_settings
from jaxes.types import Strategy, Task


@dataclasses.dataclass(frozen=True)
class Job:
    """What stays fixed while one ``run`` (or ``run_seeds``) trains."""

    strategy: Strategy
    task: Task
    loop: dict
    stops: dict
    mesh: Any
    primary: bool
    stream: TextIO
    progress_fn: Callable[[int, dict], Any] | None
    plot: bool
    loggers: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return self.strategy.population_size

    @classmethod
    def make(cls, strategy, task, generations, eval_every, checkpoint_every, devices,
             timesteps, target_return, progress_fn, stream, plot, loggers=None):  # fmt: skip
        loop = check_loop(generations, 0, eval_every, checkpoint_every, devices)
        names = check_loggers(loggers)
        del loop["seed"]  # each run has its own
        check_stops(timesteps, target_return)
        if not devices and jax.process_count() == 1:
            # Every device that can take an even share: on a CPU split one per core
            # (parallel.use_cpu_cores), a population of 30 runs on 3 of 4 devices.
            devices = default_split(strategy.population_size, jax.device_count())
        mesh = make_mesh(devices or None)
        check_split(strategy.population_size, mesh.devices.size)
        primary = jax.process_index() == 0
        stream = (stream or sys.stdout) if primary else open(os.devnull, "w")  # noqa: SIM115
        stops = {"timesteps": timesteps, "target_return": target_return}
        return cls(strategy, task, loop, stops, mesh, primary, stream, progress_fn, plot, names)


@dataclasses.dataclass(frozen=True)
class Lane:
    """One run among those training together: its files and where it stands. Frozen: the
    next ``Lane`` is a new value (``dataclasses.replace``), made by ``record`` (generations,
    env steps, evaluations and the stop decision) and by the steps that restore, time and
    plot the run."""

    out: str
    seed: int
    settings: dict
    ckpt: checkpoint.Checkpointer
    start: int = 0
    generation: int = 0
    total_env_steps: int = 0
    eval_env_steps: int | None = 0  # None: not counted (``record.count_evaluation``)
    eval_alive_steps: int | None = 0
    stopped: str | None = None
    target_env_steps: int | None = None
    last_eval: float | None = None
    kept: tuple = ()
    skipped: tuple = ()
    seconds: float = 0.0
    compile_seconds: float = 0.0
    plot: str | None = None

    @property
    def metrics_path(self) -> str:
        return rundir.metrics_of(self.out)

    def summary(self) -> dict:
        """``run``'s summary of this run; ``run_dir`` and ``plot`` are absolute paths."""
        return {
            "generations": self.generation,
            "start_generation": self.start,
            "final_eval_return": self.last_eval,
            "run_dir": os.path.abspath(self.out),
            "seconds": self.seconds,
            "compile_seconds": self.compile_seconds,
            "total_env_steps": self.total_env_steps,
            "stopped": self.stopped,
            "target_env_steps": self.target_env_steps,
            "skipped": list(self.skipped),
            **({"plot": os.path.abspath(self.plot)} if self.plot is not None else {}),
        }


def open_lanes(job: Job, dirs, config: Mapping | None, resume: bool, vmapped: bool) -> list:
    """``(out, seed, settings, mode)`` of each run in ``dirs`` (``(out, seed)`` pairs): its
    settings, and (on the primary process) its admission to ``out`` (``rundir.open_run``)."""
    opening = []
    for lane_out, seed in dirs:
        lane_config = dict(config or {})
        if vmapped and "seed" in lane_config:
            lane_config["seed"] = seed
        loop = {**job.loop, "seed": seed}
        settings = run_settings(job.strategy, loop, lane_config, job.stops)
        if job.primary:
            mode = rundir.open_run(lane_out, settings, resume)
        else:
            mode = "resume" if resume else "new"
        opening.append((lane_out, seed, settings, mode))
    return opening


def restore_states(job: Job, opened, vmapped: bool) -> tuple[Any, list[Lane]]:
    """The state to train from (stacked over the runs when ``vmapped``) and the lanes at their
    start generation, from ``opened`` (``(lane, mode)`` pairs); sets damaged checkpoints
    aside."""
    states, lanes = [], []
    for lane, mode in opened:
        state = init_state(job.strategy, job.task, lane.seed)
        if not vmapped:
            state = place(state, job.mesh)
        if mode == "restart":
            job.stream.write("no checkpoint yet: starting again from generation 0\n")
        if mode == "resume":
            start, state, damaged = lane.ckpt.restore_newest_readable(state)
            for step, reason in damaged:
                kept_at = lane.ckpt.set_aside(step) if job.primary else None
                job.stream.write(f"skipping a damaged checkpoint, moved to {kept_at}: {reason}\n")
            lane = dataclasses.replace(
                lane, start=start, skipped=tuple(reason for _, reason in damaged)
            )
            job.stream.write(f"resuming from checkpoint {lane.start}\n")
        lanes.append(dataclasses.replace(lane, generation=lane.start))
        states.append(state)
    if not vmapped:
        return states[0], lanes
    return place(jax.tree.map(lambda *xs: jnp.stack(xs), *states), job.mesh), lanes


def next_block(lanes: list[Lane], eval_every: int) -> tuple[int, int]:
    """The generation the running lanes are at, and the next block's length."""
    running = [lane for lane in lanes if lane.stopped is None]
    generation = running[0].generation
    if any(lane.generation != generation for lane in running):
        raise checkpoint.CheckpointError(
            f"seeds: the runs stand at different generations "
            f"({[lane.generation for lane in running]}); resume each one on its own"
        )
    generations = running[0].settings["generations"]
    # A run stopped off a block boundary (by timesteps) realigns with a shorter block.
    return generation, min(eval_every - generation % eval_every, generations - generation)
