"""The training loop for any ``Strategy`` and ``Task``, with its run directory.

``run`` compiles one block of ``eval_every`` generations (``jaxes.step.generation_step`` fused
with ``lax.scan``) plus a noise-free evaluation of the centre, appends a line per generation
to ``metrics.jsonl``, shows progress, calls the user's ``progress_fn``, checkpoints the whole
state so that a stopped run resumes bit-identically, and plots the learning curve. The Brax
``TrainConfig`` path (``jaxes.train``) is one user of it; a user's own task is another.

The guarantees live here, so API and CLI users get the same: a new run needs an empty
directory (or one holding only a run that never reached its first checkpoint, which restarts
in place); a resumed run must have the settings in its ``config.json`` (only ``generations``
may change, and ``config.json`` is updated to it); a damaged newest checkpoint falls back to
the one before; one process at a time writes a run (``rundir.lock``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, TextIO

import jax
import jax.numpy as jnp
import numpy as np

from jaxes import checkpoint, rundir
from jaxes.checkpoint import is_key, rewrap_keys, unwrap_keys
from jaxes.checks import check_int
from jaxes.parallel import check_split, make_mesh, replicated, sharded_step
from jaxes.progress import Progress
from jaxes.step import TrainState, generation_step
from jaxes.strategies.common import centre
from jaxes.types import Strategy, Task

MAX_SEED = 2**31 - 1  # jax.random.key takes a signed 32-bit seed without x64


def init_state(strategy: Strategy, task: Task, seed: int) -> TrainState:
    """A fresh run: policy params from the task, strategy and task states, the run key.

    Example:
      >>> import jaxes
      >>> from jaxes.tasks.functions import function_task
      >>> es, task = jaxes.open_es(population_size=4, sigma=0.1), function_task("sphere", 2)
      >>> ts = init_state(es, task, seed=0)
      >>> int(ts.generation), ts.strategy_state.params.tolist()
      (0, [1.0, 1.0])
    """

    def init(seed):
        params_key, strategy_key, task_key, run_key = jax.random.split(_train_root(seed), 4)
        return TrainState(
            strategy_state=strategy.init(strategy_key, task.init_params(params_key)),
            task_state=task.init(task_key),
            key=run_key,
            generation=jnp.zeros((), jnp.int32),
        )

    # One compiled program instead of dozens of op-by-op compiles before the first generation.
    return jax.jit(init)(seed)


def _train_root(seed: int) -> jax.Array:
    return jax.random.fold_in(jax.random.key(seed), 0)


def eval_key(seed: int, generation: int) -> jax.Array:
    """The key of the evaluation after ``generation``: a stream apart from training's, so
    evaluating never changes what training does."""
    return jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), 1), generation)


def block_runner(strategy: Strategy, task: Task, length: int, mesh=None):
    """Jitted ``(train_state, eval_key) -> (train_state, metrics[length], eval_returns)``.

    The train state is donated: its buffers become the new state's, so a big model is held
    once, and the state passed in must not be used again. With a ``mesh`` the population of
    every generation is split over its devices (``parallel.sharded_step``) and the state must
    be replicated on it (``place``).

    Example (any ``Task`` works; a function task compiles in seconds, a Brax one takes longer):
      >>> import jax, jaxes
      >>> from jaxes.tasks.functions import function_task
      >>> es, task = jaxes.open_es(population_size=4, sigma=0.1), function_task("sphere", 2)
      >>> runner = block_runner(es, task, 2)
      >>> ts, metrics, returns = runner(init_state(es, task, seed=0), jax.random.key(1))
      >>> int(ts.generation), metrics["fitness_mean"].shape, returns.shape
      (2, (2,), (1,))
    """
    step = generation_step(strategy, task) if mesh is None else sharded_step(strategy, task, mesh)

    def block(ts: TrainState, key):
        ts, metrics = jax.lax.scan(lambda c, _: step(c), ts, None, length=length)
        return ts, metrics, task.evaluate_policy(key, centre(ts.strategy_state), ts.task_state)

    if mesh is None:
        return jax.jit(block, donate_argnums=0)
    # Replicated outputs: every process reads its own copy, and the next block sees the same
    # shardings (no retrace).
    return jax.jit(block, out_shardings=replicated(mesh), donate_argnums=0)


def place(state: TrainState, mesh) -> TrainState:
    """``state`` replicated on every device of ``mesh`` (of every process).

    Example:
      >>> import jaxes
      >>> from jaxes.tasks.functions import function_task
      >>> es, task = jaxes.open_es(population_size=4, sigma=0.1), function_task("sphere", 2)
      >>> ts = place(init_state(es, task, seed=0), make_mesh())
      >>> ts.strategy_state.params.sharding.is_fully_replicated, is_key(ts.key)
      (True, True)
    """
    host = to_host(unwrap_keys(state))
    return jax.jit(lambda data: rewrap_keys(data, state), out_shardings=replicated(mesh))(host)


def to_host(tree):
    """Arrays as this process's local copy (works for arrays replicated across processes).

    PRNG keys stay as they are.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> host = to_host({"x": jnp.ones(2), "key": jax.random.key(0)})
      >>> type(host["x"]).__name__, is_key(host["key"])
      ('ndarray', True)
    """
    return jax.tree.map(
        lambda x: (
            np.asarray(x.addressable_data(0)) if isinstance(x, jax.Array) and not is_key(x) else x
        ),
        tree,
    )


def check_loop(generations, seed, eval_every, checkpoint_every=None, devices=0) -> dict[str, int]:
    """The loop's settings, checked (``ValueError`` naming the bad one); ``checkpoint_every``
    defaults to ``eval_every``. ``TrainConfig`` checks its loop fields with this too.

    Example:
      >>> check_loop(20, 0, 5)["checkpoint_every"]
      5
      >>> check_loop(20, 0, 5, 7)
      Traceback (most recent call last):
        ...
      ValueError: checkpoint_every: must be a multiple of eval_every (5), got 7
    """
    checkpoint_every = eval_every if checkpoint_every is None else checkpoint_every
    loop = dict(
        generations=check_int("generations", generations, 1),
        seed=check_int("seed", seed, 0, MAX_SEED),
        eval_every=check_int("eval_every", eval_every, 1),
        checkpoint_every=check_int("checkpoint_every", checkpoint_every, 1),
        devices=check_int("devices", devices, 0),
    )
    if loop["checkpoint_every"] % loop["eval_every"]:
        raise ValueError(
            f"checkpoint_every: must be a multiple of eval_every ({eval_every}), "
            f"got {checkpoint_every}"
        )
    return loop


def run_settings(strategy: Strategy, loop: dict, config: Mapping | None) -> dict:
    """The settings ``config.json`` records: the ``loop``'s (``check_loop``), the strategy's
    name and population, and the caller's ``config`` (JSON values; where it repeats one of
    those it must agree).

    Example:
      >>> import jaxes
      >>> s = run_settings(jaxes.pgpe(8), check_loop(20, 0, 5), {"lr": 0.1})
      >>> s["strategy"], s["checkpoint_every"], s["lr"]
      ('pgpe', 5, 0.1)
    """
    traits = strategy.traits
    own = {
        "strategy": traits.name if traits is not None else "custom",
        "population_size": strategy.population_size,
        **loop,
    }
    try:
        extra = json.loads(json.dumps(dict(config or {}), allow_nan=False))
    except (TypeError, ValueError) as err:
        raise ValueError(f"config: expected JSON values (numbers, strings, lists), {err}") from None
    for name, value in extra.items():
        if name in own and value != own[name]:
            raise ValueError(f"config: {name}={value!r} differs from the run's {own[name]!r}")
    return {**extra, **own}


def _check_same_run(saved, settings: dict, path: str, resume: bool) -> None:
    if not isinstance(saved, dict):
        raise rundir.RunDirError(f"{path}: expected a JSON object of settings")
    missing = sorted(set(settings) - set(saved))
    if missing:
        raise rundir.RunDirError(f"{path}: missing settings {missing}")
    for name, value in settings.items():
        if name != "generations" and saved[name] != value:
            if not resume:
                raise rundir.RunDirError(
                    f"out: {os.path.dirname(path)} holds a run (stopped before its first "
                    f"checkpoint) whose {name} is {saved[name]!r}, not {value!r}; choose "
                    "another directory, or delete that one"
                )
            raise rundir.RunDirError(
                f"resume: {name}={value!r} differs from the run's {saved[name]!r} in {path}; "
                "only generations may change"
            )
    unknown = sorted(set(saved) - set(settings))
    if unknown:
        raise rundir.RunDirError(f"{path}: unknown settings {unknown}")


def _open_run(out: str, settings: dict, resume: bool) -> str:
    """Checks ``out`` can take this run; returns ``"new"``, ``"restart"`` or ``"resume"``."""
    config_path = os.path.join(out, rundir.CONFIG)
    held = rundir.entries(out)
    has_config = os.path.isfile(config_path)
    steps = checkpoint.complete_steps(os.path.join(out, "checkpoints"))
    if resume:
        rundir.config_of(out, "resume")
    if not resume and held and (not has_config or steps):
        raise rundir.RunDirError(
            f"out: {out} already exists and is not empty; resume it (--resume) or choose "
            "another directory"
        )
    if has_config:
        _check_same_run(rundir.read_json(config_path), settings, config_path, resume)
    if resume and steps and steps[-1] > settings["generations"]:
        raise rundir.RunDirError(
            f"generations: the run has done {steps[-1]} generations already; ask for at least "
            f"{steps[-1]}"
        )
    # Written first, so that a run stopped at any later moment can be restarted or resumed.
    rundir.write_json(config_path, settings)
    if not has_config:
        return "new"
    return "resume" if steps else "restart"


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
    config: Mapping | None = None,
    resume: bool = False,
    progress_fn: Callable[[int, dict], Any] | None = None,
    stream: TextIO | None = None,
    plot: bool = True,
    title: str | None = None,
) -> dict:
    """Trains ``strategy`` on ``task`` for ``generations`` in total, writing into ``out``.

    Args:
      strategy, task: any ``jaxes.Strategy`` and ``jaxes.types.Task``.
      out: the run directory: new, empty, or (``resume=True``) a run to continue.
      generations: total generations (when resuming: in total, not more).
      seed: the run's seed (0 .. 2³¹ - 1); the same seed gives the same run.
      eval_every: generations per fused block; the centre is evaluated after each block.
      checkpoint_every: generations between checkpoints, a multiple of ``eval_every``
        (default ``eval_every``).
      devices: devices to split the population over (0: every device of every process).
      config: your own settings, recorded in ``config.json`` (JSON values); a resumed run
        must pass the same.
      resume: continue the run in ``out`` from its newest readable checkpoint.
      progress_fn: ``progress_fn(generation, metrics)`` after each block, with the block's
        last metrics line (e.g. a logger's callback; Brax's trainers take the same).
      stream: where progress text goes (default stdout); ``plot``: write the learning curve
        PNG when matplotlib is installed; ``title``: the header line's description.

    Returns:
      A summary: ``generations``, ``start_generation``, ``final_eval_return``, ``run_dir``,
      ``seconds``, ``skipped`` (unreadable checkpoints fallen back from) and ``plot``.

    Files: ``config.json``, ``metrics.jsonl`` (one strict-JSON object per generation, with
    ``eval_return`` on each block's last generation), ``checkpoints/`` and
    ``learning_curve.png``. With several processes only process 0 writes run files, and all
    of them take part in checkpoints.

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
    loop = check_loop(generations, seed, eval_every, checkpoint_every, devices)
    settings = run_settings(strategy, loop, config)
    mesh = make_mesh(devices or None)
    check_split(strategy.population_size, mesh.devices.size)
    primary = jax.process_index() == 0
    stream = (stream or sys.stdout) if primary else open(os.devnull, "w")  # noqa: SIM115
    title = title or f"{settings['strategy']}, P={strategy.population_size}"
    with rundir.lock(out) if primary else contextlib.nullcontext():
        mode = _open_run(out, settings, resume) if primary else ("resume" if resume else "new")
        stream.write(
            f"jaxes train: {title} on {mesh.devices.size} device(s), {generations} generations "
            f"-> {out}\n"
        )
        stream.flush()
        ckpt = checkpoint.Checkpointer(os.path.join(out, "checkpoints"))
        try:
            session = _Session(strategy, task, settings, mesh, ckpt, primary, stream, progress_fn)
            state, start, skipped = _starting_state(session, mode)
            metrics_path = os.path.join(out, rundir.METRICS)
            kept = rundir.truncate_metrics(metrics_path, start) if primary else []
            done, new_eval, seconds = _loop(session, state, start, metrics_path, kept)
        finally:
            ckpt.close()
    evals = [x["eval_return"] for x in kept if x.get("eval_return") is not None]
    summary = {
        "generations": done,
        "start_generation": start,
        # A run resumed at its end evaluates nothing new: report its last evaluation.
        "final_eval_return": new_eval if done > start else (evals[-1] if evals else None),
        "run_dir": os.path.abspath(out),
        "seconds": seconds,
        "skipped": skipped,
    }
    if plot and primary:
        summary["plot"] = _plot(metrics_path, os.path.join(out, "learning_curve.png"))
    return summary


class _Session(NamedTuple):
    """What stays fixed while one ``run`` trains."""

    strategy: Strategy
    task: Task
    settings: dict
    mesh: Any
    ckpt: checkpoint.Checkpointer
    primary: bool
    stream: TextIO
    progress_fn: Callable[[int, dict], Any] | None


def _starting_state(session: _Session, mode: str):
    """The state to train from, its generation, and the damaged checkpoints passed over."""
    strategy, task, ckpt, stream = session.strategy, session.task, session.ckpt, session.stream
    state = place(init_state(strategy, task, session.settings["seed"]), session.mesh)
    if mode == "restart":
        stream.write("no checkpoint yet: starting again from generation 0\n")
    if mode != "resume":
        return state, 0, []
    start, state, damaged = ckpt.restore_newest_readable(state)
    for step, reason in damaged:
        kept_at = ckpt.set_aside(step) if session.primary else None
        stream.write(f"skipping a damaged checkpoint, moved to {kept_at}: {reason}\n")
    stream.write(f"resuming from checkpoint {start}\n")
    eval_every, generations = session.settings["eval_every"], session.settings["generations"]
    if start % eval_every and start != generations:
        raise checkpoint.CheckpointError(
            f"checkpoint {start} is not at a block boundary (eval_every={eval_every})"
        )
    return state, start, [reason for _, reason in damaged]


def _metrics_lines(metrics: dict, first_generation: int, elapsed: float) -> list[dict]:
    host = to_host(metrics)
    length = len(next(iter(host.values())))
    lines = []
    for i in range(length):
        line = {"generation": first_generation + i + 1}
        for name, values in host.items():
            line[name] = rundir.finite_or_null(values[i].item())
        line["wall_time_s"] = round(elapsed, 3)
        lines.append(line)
    return lines


def _loop(session: _Session, state, start: int, metrics_path: str, kept: list[dict]):
    """Trains from generation ``start``; returns the generations done, the last evaluation
    and the seconds it took."""
    strategy, task, settings = session.strategy, session.task, session.settings
    generations, seed = settings["generations"], settings["seed"]
    eval_every, checkpoint_every = settings["eval_every"], settings["checkpoint_every"]
    wall_offset = kept[-1]["wall_time_s"] if kept else 0.0
    runners: dict[int, Callable] = {}
    progress = Progress(generations, session.stream)
    started = time.perf_counter()
    generation, last_eval = start, None
    with open(metrics_path if session.primary else os.devnull, "a") as metrics_file:
        while generation < generations:
            block_start = time.perf_counter()
            length = min(eval_every, generations - generation)
            if length not in runners:
                runners[length] = block_runner(strategy, task, length, session.mesh)
            state, metrics, returns = runners[length](state, eval_key(seed, generation + length))
            returns = to_host(returns)
            now = time.perf_counter()
            lines = _metrics_lines(metrics, generation, wall_offset + now - started)
            with np.errstate(invalid="ignore"):  # an infinite return has no spread
                mean, spread = float(returns.mean()), float(returns.std())
            last_eval = rundir.finite_or_null(mean)
            lines[-1]["eval_return"] = last_eval
            lines[-1]["eval_return_std"] = rundir.finite_or_null(spread)
            # One write per block: a kill mid-write cuts at most the last line.
            metrics_file.write("".join(rundir.metrics_line(x) for x in lines))
            metrics_file.flush()
            generation += length
            # Rate of this block alone (the first one includes compilation).
            block_s = max(now - block_start, 1e-9)
            steps = sum(x.get("env_steps", strategy.population_size) for x in lines)
            eta = block_s / length * (generations - generation)
            progress.update(generation, lines[-1], steps / block_s, eta)
            if session.progress_fn is not None:
                session.progress_fn(generation, dict(lines[-1]))
            if generation % checkpoint_every == 0 or generation == generations:
                session.ckpt.save(generation, state)
    progress.close()
    return generation, last_eval, round(time.perf_counter() - started, 1)


def _plot(metrics_path: str, png_path: str) -> str | None:
    try:
        from jaxes import plotting
    except ImportError:
        return None
    plotting.learning_curve(metrics_path, png_path)
    return png_path
