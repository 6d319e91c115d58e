"""The training loop for any ``Strategy`` and ``Task``, with its run directory: ``run`` trains
one run, ``run_seeds`` several seeds at once.

``run`` compiles one block of ``eval_every`` generations (``jaxes.step.generation_step`` fused
with ``lax.scan``) plus a noise-free evaluation of the centre, appends a line per generation
to ``metrics.jsonl``, shows progress, calls the user's ``progress_fn``, checkpoints the whole
state so that a stopped run resumes bit-identically, and plots the learning curve. The Brax
``TrainConfig`` path (``jaxes.app.train``) is one user of it; a user's own task is another.

The guarantees live here and in ``rundir``, so API and CLI users get the same: a new run needs
an empty directory (or one holding only a run that never reached its first checkpoint, which
restarts in place); a resumed run must have the settings in its ``config.json`` (only
``generations``, ``timesteps`` and ``target_return`` may change, and ``config.json`` is updated
to them); a damaged newest checkpoint falls back to the one before; one process at a time
writes a run (``rundir.lock``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from jaxes.checks import check_int
from jaxes.parallel import describe_devices
from jaxes.training import checkpoint, report, rundir
from jaxes.training.lanes import Job, Lane, open_lanes, restore_states
from jaxes.training.loggers import open_feed
from jaxes.training.loop import train_lanes
from jaxes.training.record import caught_up
from jaxes.training.settings import MAX_SEED, check_seeds, strategy_name
from jaxes.types import Strategy, Task


def run(
    strategy: Strategy,
    task: Task,
    out: str,
    *,
    generations: int,
    seed: int = 0,
    eval_every: int = 5,
    checkpoint_every: int | None = None,
    devices: int = 0,
    timesteps: int | None = None,
    target_return: float | None = None,
    config: Mapping | None = None,
    resume: bool = False,
    progress_fn: Callable[[int, dict], Any] | None = None,
    stream: TextIO | None = None,
    plot: bool = True,
    title: str | None = None,
    loggers: str | Sequence[str] | None = None,
) -> dict:
    """Trains ``strategy`` on ``task`` for ``generations`` in total, writing into ``out``.

    Args:
      strategy, task: any ``jaxes.Strategy`` and ``jaxes.types.Task``.
      out: the run directory: new, empty, or (``resume=True``) a run to continue.
      generations: total generations (when resuming: in total, not more).
      seed: the run's seed (0 .. 2³¹ - 1); the same seed gives the same run.
      eval_every: generations per fused block; the centre is evaluated after each block.
      checkpoint_every: generations between checkpoints, a multiple of ``eval_every``
        (default ``eval_every``); the newest 3 (``checkpoint.KEEP``) are kept, older ones
        deleted.
      devices: devices to split the population over (0: in one process, the most of its
        devices that split the population evenly; across processes, every device). On a CPU,
        call ``jaxes.parallel.use_cpu_cores()`` before JAX starts to get one device per core.
      timesteps: stop after the generation at which the env steps of training (the task's
        ``env_steps``; ``evaluations`` for a task without) reach this, even inside a block.
        Evaluation episodes are not counted; ``metrics.jsonl`` has ``total_env_steps``, and
        for a control task ``eval_env_steps`` (the evaluations' env steps so far).
      target_return: stop at the first evaluation whose mean return is >= this.
      config: your own settings, recorded in ``config.json`` (JSON values); a resumed run
        must pass the same.
      resume: continue the run in ``out`` from its newest readable checkpoint; only
        ``generations``, ``timesteps`` and ``target_return`` may differ from the saved run.
      progress_fn: ``progress_fn(generation, metrics)`` after each block, with the block's
        last metrics line (e.g. a logger's callback; Brax's trainers take the same).
      stream: where progress text goes (default stdout); ``plot``: write the learning curve
        PNG when matplotlib is installed; ``title``: the header line's description.
      loggers: experiment trackers to log to as well, ``"csv"``, ``"tensorboard"``,
        ``"wandb"``, ``"mlflow"``, several as a comma list or a list
        (``jaxes.training.loggers``): every metrics line, the settings as hyper-parameters
        and the learning curve; offline by default; a resumed run continues its tracked run
        (pass the same ``loggers``). A tracker that fails is reported once and dropped; the
        run goes on.

    Returns:
      A summary: ``generations``, ``start_generation``, ``final_eval_return``, ``run_dir``,
      ``seconds``, ``compile_seconds``, ``total_env_steps``, ``stopped`` (``"generations"``,
      ``"timesteps"`` or ``"target_return"``), ``target_env_steps`` (the env steps at the
      evaluation that reached ``target_return``, else ``None``), ``skipped`` (unreadable
      checkpoints fallen back from) and ``plot``. ``run_dir`` and ``plot`` are absolute
      paths.

    Files: ``config.json``, ``metrics.jsonl`` (one strict-JSON object per generation, with
    ``eval_return`` on each block's last generation), ``checkpoints/`` (the newest 3) and,
    with the ``plot`` extra, ``learning_curve.png``. With several processes only process 0
    writes run files, and all of them take part in checkpoints.

    Example (a user's own task, not Brax: any ``Task`` gets the whole runner):
      >>> import io, tempfile, jaxes
      >>> from jaxes.tasks.functions import function_task
      >>> es, task = jaxes.open_es(8, sigma=0.1), function_task("sphere", 3)
      >>> out = tempfile.mkdtemp()
      >>> summary = run(es, task, out, generations=4, eval_every=2, stream=io.StringIO(),
      ...               plot=False)
      >>> summary["generations"], sorted(os.listdir(out))
      (4, ['.lock', 'checkpoints', 'config.json', 'metrics.jsonl'])
      >>> run(es, task, out, generations=6, eval_every=2, resume=True, stream=io.StringIO(),
      ...     plot=False)["start_generation"]
      4
    """
    out = rundir.check_out(out)
    seed = check_int("seed", seed, 0, MAX_SEED)
    job = Job.make(
        strategy, task, generations, eval_every, checkpoint_every, devices, timesteps,
        target_return, progress_fn, stream, plot, loggers,
    )  # fmt: skip
    title = title or f"{strategy_name(strategy)}, P={job.size}"
    with rundir.lock(out) if job.primary else contextlib.nullcontext():
        (lane,) = _train(job, [(out, seed)], config, resume, title, out, vmapped=False)
    return lane.summary()


def run_seeds(
    strategy: Strategy,
    task: Task,
    out: str,
    *,
    seeds,
    generations: int,
    eval_every: int = 5,
    checkpoint_every: int | None = None,
    devices: int = 0,
    timesteps: int | None = None,
    target_return: float | None = None,
    config: Mapping | None = None,
    resume: bool = False,
    progress_fn: Callable[[int, dict], Any] | None = None,
    stream: TextIO | None = None,
    plot: bool = True,
    title: str | None = None,
    loggers: str | Sequence[str] | None = None,
) -> dict:
    """``run`` for several seeds at once: the runs are ``vmap``-ed in one jitted block (one
    compile for all of them), and each writes its own run directory ``out/seed-S`` (which
    ``run``, ``jaxes eval`` and ``jaxes render`` read like any other).

    A run that reaches ``timesteps`` or ``target_return`` stops there while the others go on.
    ``out/seeds.json`` records the seeds, ``out/summary.json`` the per-seed results with the
    median and spread of the final evaluations, and ``out/learning_curves.png`` (with the
    ``plot`` extra) shows every seed. ``progress_fn(generation, metrics)`` is called per
    seed, with ``metrics["seed"]``; the progress line shows the median over the seeds, and
    says so. ``loggers`` log one
    tracked run per seed (``seed-S``), grouped under ``out``'s name.

    Returns:
      ``summary.json``'s content: ``seeds``, ``runs`` (each ``run``'s summary, with ``seed``),
      ``final_eval_return`` (``median``, ``min``, ``max``), ``seconds``,
      ``compile_seconds`` and ``plot``; every path in it is absolute.

    Example:
      >>> import io, tempfile, jaxes
      >>> from jaxes.tasks.functions import function_task
      >>> es, task = jaxes.open_es(8, sigma=0.1), function_task("sphere", 3)
      >>> out = tempfile.mkdtemp()
      >>> summary = run_seeds(es, task, out, seeds=[0, 1], generations=4, eval_every=2,
      ...                     stream=io.StringIO(), plot=False)
      >>> [r["generations"] for r in summary["runs"]], sorted(os.listdir(out))[1:]
      ([4, 4], ['seed-0', 'seed-1', 'seeds.json', 'summary.json'])
    """
    out = rundir.check_out(out)
    seeds = check_seeds(seeds)
    job = Job.make(
        strategy, task, generations, eval_every, checkpoint_every, devices, timesteps,
        target_return, progress_fn, stream, plot, loggers,
    )  # fmt: skip
    title = title or f"{strategy_name(strategy)}, P={job.size}"
    with rundir.lock(out) if job.primary else contextlib.nullcontext():
        rundir.open_seeds(out, seeds, resume, job.primary)
        dirs = [(rundir.seed_dir(out, s), s) for s in seeds]
        with contextlib.ExitStack() as locks:
            if job.primary:
                for lane_out, _ in dirs:
                    locks.enter_context(rundir.lock(lane_out))
            title = f"{title}, {len(seeds)} seeds"
            lanes = _train(job, dirs, config, resume, title, out, vmapped=True)
        summary = report.seeds_summary(seeds, lanes)
        if job.primary:
            if job.plot:
                png = os.path.join(out, rundir.LEARNING_CURVES)
                summary["plot"] = report.plot_seeds(lanes, png)
            rundir.write_json(os.path.join(out, rundir.SUMMARY), summary)
    return summary


def _train(job: Job, dirs, config, resume: bool, title: str, out: str, vmapped: bool):
    """Opens, restores and trains the runs in ``dirs`` (``(out, seed)`` pairs) together;
    returns their ``Lane``s."""
    opening = open_lanes(job, dirs, config, resume, vmapped)
    job.stream.write(
        f"jaxes: {title} on {describe_devices(job.mesh)}, "
        f"{job.loop['generations']} generations -> {out}\n"
    )
    job.stream.flush()
    with contextlib.ExitStack() as closing:
        opened = []
        for lane_out, seed, settings, mode in opening:
            ckpt = checkpoint.Checkpointer(rundir.checkpoints_of(lane_out))
            closing.callback(ckpt.close)
            opened.append((Lane(lane_out, seed, settings, ckpt), mode))
        state, lanes = restore_states(job, opened, vmapped)
        lanes = [
            caught_up(
                lane,
                rundir.truncate_metrics(lane.metrics_path, lane.start) if job.primary else [],
                job.stops,
            )
            for lane in lanes
        ]
        feeds = _open_feeds(job, lanes, out, vmapped)
        for feed in feeds:
            closing.callback(feed.close)
        lanes = train_lanes(job, lanes, state, vmapped, feeds)
        if job.plot and job.primary:
            lanes = [
                dataclasses.replace(
                    lane,
                    plot=report.plot_run(
                        lane.metrics_path, os.path.join(lane.out, rundir.LEARNING_CURVE)
                    ),
                )
                for lane in lanes
            ]
        for lane, feed in zip(lanes, feeds, strict=False):
            feed.finish(lane.plot)
    return lanes


def _open_feeds(job: Job, lanes: list[Lane], out: str, vmapped: bool) -> list:
    """Each lane's trackers (none off the primary process, or without ``loggers``)."""
    if not job.loggers or not job.primary:
        return []
    group = os.path.basename(os.path.abspath(out)) if vmapped else None
    return [open_feed(job.loggers, lane, out, group, lane.settings, job.stream) for lane in lanes]
