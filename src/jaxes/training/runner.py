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

import concurrent.futures
import contextlib
import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

import jax
import jax.numpy as jnp
import numpy as np

from jaxes.checks import check_int
from jaxes.parallel import check_split, make_mesh, replicated, sharded_step
from jaxes.step import TrainState, generation_step
from jaxes.strategies import centre
from jaxes.training import checkpoint, compilation, rundir
from jaxes.training.checkpoint import is_key, rewrap_keys, unwrap_keys
from jaxes.training.progress import Progress
from jaxes.types import Strategy, Task

MAX_SEED = 2**31 - 1  # jax.random.key takes a signed 32-bit seed without x64
INT32_MAX = 2**31 - 1
# Settings a resumed run may change: when to stop, not what it does.
MAY_CHANGE = ("generations", "timesteps", "target_return")


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


def _cost_name(metrics: Mapping) -> str:
    """The per-generation metric that ``timesteps`` counts: the task's env steps, else its
    fitness evaluations."""
    for name in ("env_steps", "evaluations"):
        if name in metrics:
            return name
    raise ValueError("timesteps: the task reports neither env_steps nor evaluations to count")


def block_runner(
    strategy: Strategy,
    task: Task,
    length: int,
    mesh=None,
    *,
    lanes: int | None = None,
    stoppable: bool = False,
    evaluate: bool = True,
):
    """Jitted ``(train_state, eval_key) -> (train_state, metrics[length], eval_returns)``.

    The train state is donated: its buffers become the new state's, so a big model is held
    once, and the state passed in must not be used again. With a ``mesh`` the population of
    every generation is split over its devices (``parallel.sharded_step``) and the state must
    be replicated on it (``place``).

    With ``lanes=S`` the block runs ``S`` independent runs at once (``vmap``): states stacked
    along a leading axis, one eval key per run. With ``stoppable=True`` it takes two more
    arguments per run, ``remaining`` (int32: the budget of ``env_steps``, or of
    ``evaluations`` for a task without env steps) and ``active`` (bool), runs a generation only
    while the run is active and the generations before it in this block spent less than
    ``remaining``, and also returns which generations ran (``ran[length]``, a prefix). With
    ``evaluate=False`` there is no evaluation (no eval key, no ``eval_returns``): ``run``
    compiles that and ``eval_runner`` side by side.

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

    def train(ts: TrainState):
        return jax.lax.scan(lambda c, _: step(c), ts, None, length=length)

    def train_stoppable(ts: TrainState, remaining, active):
        _, like = jax.eval_shape(step, ts)
        cost = _cost_name(like)

        def one(carry, _):
            ts, spent = carry
            runs = active & (spent < remaining)
            skipped = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), like)
            ts, metrics = jax.lax.cond(runs, step, lambda ts: (ts, skipped), ts)
            spent = spent + jnp.where(runs, metrics[cost].astype(jnp.int32), 0)
            return (ts, spent), (metrics, runs)

        start = (ts, jnp.zeros((), jnp.int32))
        (ts, _), (metrics, ran) = jax.lax.scan(one, start, None, length=length)
        return ts, metrics, ran

    def block(ts: TrainState, key=None, *stops):
        outputs = train_stoppable(ts, *stops) if stoppable else train(ts)
        if not evaluate:
            return outputs
        ts, rest = outputs[0], outputs[1:]
        return (ts, rest[0], _evaluation(task, ts, key), *rest[1:])

    if evaluate:
        fn = block
    elif stoppable:
        fn = train_stoppable
    else:
        fn = train
    return _jit(fn, mesh, lanes, donate=True)


def eval_runner(strategy: Strategy, task: Task, mesh=None, *, lanes: int | None = None):
    """Jitted ``(train_state, eval_key) -> eval_returns``: the noise-free evaluation of the
    centre (``task.evaluate_policy``), ``vmap``-ed over ``lanes`` runs when given.

    Example:
      >>> import jax, jaxes
      >>> from jaxes.tasks.functions import function_task
      >>> es, task = jaxes.open_es(population_size=4, sigma=0.1), function_task("sphere", 2)
      >>> eval_runner(es, task)(init_state(es, task, seed=0), jax.random.key(1)).tolist()
      [-2.0]
    """
    del strategy  # the centre is read from the state

    def evaluation(ts: TrainState, key):
        return _evaluation(task, ts, key)

    return _jit(evaluation, mesh, lanes, donate=False)


def _evaluation(task: Task, ts: TrainState, key):
    return task.evaluate_policy(key, centre(ts.strategy_state), ts.task_state)


def _jit(fn, mesh, lanes: int | None, donate: bool):
    if lanes is not None:
        fn = jax.vmap(fn)
    donated = {"donate_argnums": 0} if donate else {}
    if mesh is None:
        return jax.jit(fn, **donated)
    # Replicated outputs: every process reads its own copy, and the next block sees the same
    # shardings (no retrace).
    return jax.jit(fn, out_shardings=replicated(mesh), **donated)


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


def check_stops(timesteps=None, target_return=None) -> None:
    """The stopping rules, checked (``ValueError`` naming the bad one): ``timesteps`` an int
    >= 1 or ``None``, ``target_return`` a finite number or ``None``.

    Example:
      >>> check_stops(timesteps=-1)
      Traceback (most recent call last):
        ...
      ValueError: timesteps: expected an int >= 1, got -1
    """
    if timesteps is not None:
        check_int("timesteps", timesteps, 1)
    if target_return is not None and (
        not isinstance(target_return, int | float)
        or isinstance(target_return, bool)
        or not math.isfinite(target_return)
    ):
        raise ValueError(f"target_return: expected a finite number, got {target_return!r}")


def run_settings(
    strategy: Strategy, loop: dict, config: Mapping | None, stops: Mapping | None = None
) -> dict:
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
        **(stops or {}),
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
        if name not in MAY_CHANGE and saved[name] != value:
            if not resume:
                raise rundir.RunDirError(
                    f"out: {os.path.dirname(path)} holds a run (stopped before its first "
                    f"checkpoint) whose {name} is {saved[name]!r}, not {value!r}; choose "
                    "another directory, or delete that one"
                )
            raise rundir.RunDirError(
                f"resume: {name}={value!r} differs from the run's {saved[name]!r} in {path}; "
                f"only {', '.join(MAY_CHANGE)} may change"
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
    timesteps: int | None = None,
    target_return: float | None = None,
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
      timesteps: stop after the generation at which the env steps of training (the task's
        ``env_steps``; ``evaluations`` for a task without) reach this, even inside a block.
        Evaluation episodes are not counted; ``metrics.jsonl`` has ``total_env_steps``.
      target_return: stop at the first evaluation whose mean return is >= this.
      config: your own settings, recorded in ``config.json`` (JSON values); a resumed run
        must pass the same.
      resume: continue the run in ``out`` from its newest readable checkpoint; only
        ``generations``, ``timesteps`` and ``target_return`` may differ from the saved run.
      progress_fn: ``progress_fn(generation, metrics)`` after each block, with the block's
        last metrics line (e.g. a logger's callback; Brax's trainers take the same).
      stream: where progress text goes (default stdout); ``plot``: write the learning curve
        PNG when matplotlib is installed; ``title``: the header line's description.

    Returns:
      A summary: ``generations``, ``start_generation``, ``final_eval_return``, ``run_dir``,
      ``seconds``, ``compile_seconds``, ``total_env_steps``, ``stopped`` (``"generations"``,
      ``"timesteps"`` or ``"target_return"``), ``target_env_steps`` (the env steps at the
      evaluation that reached ``target_return``, else ``None``), ``skipped`` (unreadable
      checkpoints fallen back from) and ``plot``.

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
    seed = check_int("seed", seed, 0, MAX_SEED)
    job = _Job.make(
        strategy, task, generations, eval_every, checkpoint_every, devices, timesteps,
        target_return, progress_fn, stream, plot,
    )  # fmt: skip
    title = title or f"{_name(strategy)}, P={job.size}"
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
) -> dict:
    """``run`` for several seeds at once: the runs are ``vmap``-ed in one jitted block (one
    compile for all of them), and each writes its own run directory ``out/seed-S`` (which
    ``run``, ``jaxes eval`` and ``jaxes render`` read like any other).

    A run that reaches ``timesteps`` or ``target_return`` stops there while the others go on.
    ``out/seeds.json`` records the seeds, ``out/summary.json`` the per-seed results with the
    median and spread of the final evaluations, and ``out/learning_curves.png`` shows every
    seed. ``progress_fn(generation, metrics)`` is called per seed, with ``metrics["seed"]``.

    Returns:
      ``summary.json``'s content: ``seeds``, ``runs`` (each ``run``'s summary, with ``seed``),
      ``final_eval_return`` (``median``, ``min``, ``max``), ``seconds`` and
      ``compile_seconds``.

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
    job = _Job.make(
        strategy, task, generations, eval_every, checkpoint_every, devices, timesteps,
        target_return, progress_fn, stream, plot,
    )  # fmt: skip
    title = title or f"{_name(strategy)}, P={job.size}"
    with rundir.lock(out) if job.primary else contextlib.nullcontext():
        _open_seeds(out, seeds, resume, job.primary)
        dirs = [(os.path.join(out, f"seed-{s}"), s) for s in seeds]
        with contextlib.ExitStack() as locks:
            if job.primary:
                for lane_out, _ in dirs:
                    locks.enter_context(rundir.lock(lane_out))
            title = f"{title}, {len(seeds)} seeds"
            lanes = _train(job, dirs, config, resume, title, out, vmapped=True)
        summary = _seeds_summary(seeds, lanes)
        if job.primary:
            if job.plot:
                summary["plot"] = _plot_seeds(lanes, os.path.join(out, "learning_curves.png"))
            rundir.write_json(os.path.join(out, SUMMARY), summary)
    return summary


SEEDS = rundir.SEEDS
SUMMARY = "summary.json"


def _name(strategy: Strategy) -> str:
    return strategy.traits.name if strategy.traits is not None else "custom"


def check_seeds(seeds) -> list[int]:
    """``seeds`` as a list of distinct ints in 0 .. 2³¹ - 1 (``ValueError`` naming ``seeds``).

    Example:
      >>> check_seeds(range(3))
      [0, 1, 2]
      >>> check_seeds([4, 4])
      Traceback (most recent call last):
        ...
      ValueError: seeds: expected distinct seeds, got [4, 4]
    """
    try:
        seeds = list(seeds)
    except TypeError:
        raise ValueError(f"seeds: expected a list of ints, got {seeds!r}") from None
    if not seeds:
        raise ValueError("seeds: expected at least one seed")
    for value in seeds:
        check_int("seeds", value, 0, MAX_SEED)
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds: expected distinct seeds, got {seeds}")
    return seeds


def _open_seeds(out: str, seeds: list[int], resume: bool, primary: bool) -> None:
    """Checks ``out`` can take these seeds' runs and records them in ``seeds.json``."""
    path = os.path.join(out, SEEDS)
    held = rundir.seeds_of(out)
    if held is not None:
        if held != seeds:
            raise rundir.RunDirError(f"seeds: {out} holds the runs of seeds {held}, not {seeds}")
    elif resume:
        raise rundir.RunDirError(f"resume: {out} holds no runs of several seeds ({SEEDS})")
    elif rundir.entries(out):
        raise rundir.RunDirError(
            f"out: {out} already exists and is not empty; resume it (--resume) or choose "
            "another directory"
        )
    if primary:
        rundir.write_json(path, {"seeds": seeds})


@dataclasses.dataclass(frozen=True)
class _Job:
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

    @property
    def size(self) -> int:
        return self.strategy.population_size

    @classmethod
    def make(cls, strategy, task, generations, eval_every, checkpoint_every, devices,
             timesteps, target_return, progress_fn, stream, plot):  # fmt: skip
        loop = check_loop(generations, 0, eval_every, checkpoint_every, devices)
        del loop["seed"]  # each run has its own
        check_stops(timesteps, target_return)
        mesh = make_mesh(devices or None)
        check_split(strategy.population_size, mesh.devices.size)
        primary = jax.process_index() == 0
        stream = (stream or sys.stdout) if primary else open(os.devnull, "w")  # noqa: SIM115
        stops = {"timesteps": timesteps, "target_return": target_return}
        return cls(strategy, task, loop, stops, mesh, primary, stream, progress_fn, plot)


@dataclasses.dataclass
class _Lane:
    """One run among those training together: its files and where it stands."""

    out: str
    seed: int
    settings: dict
    ckpt: checkpoint.Checkpointer
    start: int = 0
    generation: int = 0
    total_env_steps: int = 0
    stopped: str | None = None
    target_env_steps: int | None = None
    last_eval: float | None = None
    kept: list = dataclasses.field(default_factory=list)
    skipped: list = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    compile_seconds: float = 0.0
    plot: str | None = None

    @property
    def metrics_path(self) -> str:
        return os.path.join(self.out, rundir.METRICS)

    def catch_up(self, stops: dict) -> None:
        """Where a resumed run stood, from the metrics it kept."""
        evals = [x for x in self.kept if x.get("eval_return") is not None]
        self.total_env_steps = self.kept[-1].get("total_env_steps", 0) if self.kept else 0
        self.last_eval = evals[-1]["eval_return"] if evals else None
        target = stops["target_return"]
        hit = [x for x in evals if target is not None and x["eval_return"] >= target]
        self.decide_stop(stops, hit[0].get("total_env_steps") if hit else None, bool(hit))

    def decide_stop(self, stops: dict, target_env_steps, reached: bool) -> None:
        """Whether the run is over, and why: the target return first (``reached``, at
        ``target_env_steps``), then the timesteps budget, then the generations."""
        budget = stops["timesteps"]
        if reached:
            self.stopped, self.target_env_steps = "target_return", target_env_steps
        elif budget is not None and self.total_env_steps >= budget:
            self.stopped = "timesteps"
        elif self.generation >= self.settings["generations"]:
            self.stopped = "generations"

    def summary(self) -> dict:
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
            "skipped": self.skipped,
            **({"plot": self.plot} if self.plot is not None else {}),
        }


def _train(job: _Job, dirs, config, resume: bool, title: str, out: str, vmapped: bool):
    """Opens, restores and trains the runs in ``dirs`` (``(out, seed)`` pairs) together;
    returns their ``_Lane``s."""
    opening = []
    for lane_out, seed in dirs:
        lane_config = dict(config or {})
        if vmapped and "seed" in lane_config:
            lane_config["seed"] = seed
        loop = {**job.loop, "seed": seed}
        settings = run_settings(job.strategy, loop, lane_config, job.stops)
        if job.primary:
            mode = _open_run(lane_out, settings, resume)
        else:
            mode = "resume" if resume else "new"
        opening.append((lane_out, seed, settings, mode))
    job.stream.write(
        f"jaxes train: {title} on {job.mesh.devices.size} device(s), "
        f"{job.loop['generations']} generations -> {out}\n"
    )
    job.stream.flush()
    with contextlib.ExitStack() as closing:
        opened = []
        for lane_out, seed, settings, mode in opening:
            ckpt = checkpoint.Checkpointer(os.path.join(lane_out, "checkpoints"))
            closing.callback(ckpt.close)
            opened.append((_Lane(lane_out, seed, settings, ckpt), mode))
        state = _restore(job, opened, vmapped)
        lanes = [lane for lane, _ in opened]
        for lane in lanes:
            if job.primary:
                lane.kept = rundir.truncate_metrics(lane.metrics_path, lane.start)
            lane.catch_up(job.stops)
        _loop(job, lanes, state, vmapped)
    if job.plot and job.primary:
        for lane in lanes:
            lane.plot = _plot(lane.metrics_path, os.path.join(lane.out, "learning_curve.png"))
    return lanes


def _restore(job: _Job, opened, vmapped: bool):
    """The state to train from (stacked over the runs when ``vmapped``); sets each run's
    start generation and sets damaged checkpoints aside."""
    states = []
    for lane, mode in opened:
        state = init_state(job.strategy, job.task, lane.seed)
        if not vmapped:
            state = place(state, job.mesh)
        if mode == "restart":
            job.stream.write("no checkpoint yet: starting again from generation 0\n")
        if mode == "resume":
            lane.start, state, damaged = lane.ckpt.restore_newest_readable(state)
            for step, reason in damaged:
                kept_at = lane.ckpt.set_aside(step) if job.primary else None
                job.stream.write(f"skipping a damaged checkpoint, moved to {kept_at}: {reason}\n")
            lane.skipped = [reason for _, reason in damaged]
            job.stream.write(f"resuming from checkpoint {lane.start}\n")
        lane.generation = lane.start
        states.append(state)
    if not vmapped:
        return states[0]
    return place(jax.tree.map(lambda *xs: jnp.stack(xs), *states), job.mesh)


def _metrics_lines(metrics: dict, first_generation: int, count: int, elapsed: float) -> list[dict]:
    lines = []
    for i in range(count):
        line = {"generation": first_generation + i + 1}
        for name, values in metrics.items():
            line[name] = rundir.finite_or_null(values[i].item())
        line["wall_time_s"] = round(elapsed, 3)
        lines.append(line)
    return lines


def _next_block(lanes: list[_Lane], eval_every: int) -> tuple[int, int]:
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


def _loop(job: _Job, lanes: list[_Lane], state, vmapped: bool) -> None:
    """Trains the lanes until each one stops."""
    budget, target = job.stops["timesteps"], job.stops["target_return"]
    stoppable = budget is not None or (vmapped and target is not None)
    programs: dict[int, Callable] = {}
    evaluation: dict = {}  # the evaluation's program, compiled once beside the first block
    progress = Progress(job.loop["generations"], job.stream)
    wall_offset = max((lane.kept[-1]["wall_time_s"] for lane in lanes if lane.kept), default=0.0)
    started = time.perf_counter()
    compile_s = 0.0

    def stack(values, dtype=None):
        return jnp.asarray(values, dtype) if vmapped else jnp.asarray(values[0], dtype)

    with contextlib.ExitStack() as files:
        writers = [
            files.enter_context(open(lane.metrics_path if job.primary else os.devnull, "a"))
            for lane in lanes
        ]
        while any(lane.stopped is None for lane in lanes):
            generation, length = _next_block(lanes, job.loop["eval_every"])
            keys = [eval_key(lane.seed, generation + length) for lane in lanes]
            args = [state, jnp.stack(keys) if vmapped else keys[0]]
            if stoppable:
                remaining = [
                    INT32_MAX if budget is None else min(budget - lane.total_env_steps, INT32_MAX)
                    for lane in lanes
                ]
                args += [stack(remaining, jnp.int32), stack([x.stopped is None for x in lanes])]
            if length not in programs:
                # Compiled ahead of the call, so the rate and ETA never count compilation.
                job.stream.write(f"compiling a block of {length} generations...\n")
                job.stream.flush()
                compiling = time.perf_counter()
                programs[length] = _compile_block(job, length, len(lanes) if vmapped else None,
                                                  stoppable, args, evaluation)  # fmt: skip
                compile_s += time.perf_counter() - compiling
            block_start = time.perf_counter()
            outputs = programs[length](*args[:1], *args[2:])
            state = outputs[0]
            returns = evaluation["program"].result()(state, args[1])
            metrics, returns = to_host(outputs[1]), to_host(returns)
            ran = to_host(outputs[2]) if stoppable else None
            now = time.perf_counter()
            moved = []
            for i, lane in enumerate(lanes):
                if lane.stopped is not None:
                    continue

                def pick(x, i=i):
                    return x[i] if vmapped else x

                count = length if ran is None else int(np.sum(pick(ran)))
                lines = _metrics_lines(
                    jax.tree.map(pick, metrics),
                    lane.generation,
                    count,
                    wall_offset + now - started,
                )
                _advance(lane, lines, pick(returns), job.stops)
                # One write per block: a kill mid-write cuts at most the last line.
                writers[i].write("".join(rundir.metrics_line(x) for x in lines))
                writers[i].flush()
                moved.append((i, lane, lines))
            block_s = max(now - block_start, 1e-9)
            steps = sum(x.get("env_steps", job.size) for _, _, lines in moved for x in lines)
            shown = max(lane.generation for _, lane, _ in moved)
            left = job.loop["generations"] - shown
            if budget is not None and steps:  # the budget may end the run sooner
                per_generation = steps / max(1, sum(len(lines) for _, _, lines in moved))
                spent = min(lane.total_env_steps for _, lane, _ in moved)
                left = min(left, math.ceil(max(0, budget - spent) / per_generation))
            eta = block_s / length * left
            progress.update(shown, _progress_line(moved), steps / block_s, eta)
            for i, lane, lines in moved:
                if not lines:
                    continue
                if job.progress_fn is not None:
                    seed = {"seed": lane.seed} if vmapped else {}
                    job.progress_fn(lane.generation, {**lines[-1], **seed})
                if lane.generation % job.loop["checkpoint_every"] == 0 or lane.stopped:
                    lane_state = jax.tree.map(lambda x, i=i: x[i], state) if vmapped else state
                    lane.ckpt.save(lane.generation, lane_state)
    progress.close()
    seconds = round(time.perf_counter() - started, 1)
    for lane in lanes:
        lane.seconds, lane.compile_seconds = seconds, round(compile_s, 1)


def _compile_block(job: _Job, length: int, lanes, stoppable: bool, args, evaluation: dict):
    """The training block of ``length`` generations, compiled; the first call also starts the
    evaluation's compile in a thread beside it. XLA compiles without the GIL, so on a machine
    with two cores the evaluation's compile (about 40 % of the first block's on a Brax task,
    ``benchmarks/compile_profile.py``) hides behind the training block's."""
    train = block_runner(
        job.strategy, job.task, length, job.mesh, lanes=lanes, stoppable=stoppable,
        evaluate=False,
    )  # fmt: skip
    lowered = train.lower(*args[:1], *args[2:])
    if "program" not in evaluation:
        # Traced in the thread too: the trace needs the GIL, which the block's compile below
        # releases, so the block's compile (the longer one) starts first.
        def compile_evaluation():
            evaluation_fn = eval_runner(job.strategy, job.task, job.mesh, lanes=lanes)
            return compilation.compile(evaluation_fn.lower(*args[:2]))

        pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="jaxes-compile")
        evaluation["program"] = pool.submit(compile_evaluation)
        pool.shutdown(wait=False)
    compiled = compilation.compile(lowered)
    evaluation["program"].result()  # a compile error surfaces here, before the first block
    return compiled


def _advance(lane: _Lane, lines: list[dict], returns, stops: dict) -> None:
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


def _progress_line(moved) -> dict:
    """The progress line's numbers: the run's own, or the median over the seeds."""
    last = [lines[-1] for _, _, lines in moved if lines]
    line = {}
    for name in ("fitness_mean", "best_fitness", "eval_return"):
        values = [x[name] for x in last if x.get(name) is not None]
        line[name] = float(np.median(values)) if values else None
    return line


def _seeds_summary(seeds: list[int], lanes: list[_Lane]) -> dict:
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


def _plot(metrics_path: str, png_path: str) -> str | None:
    try:
        from jaxes import plotting
    except ImportError:
        return None
    plotting.learning_curve(metrics_path, png_path)
    return png_path


def _plot_seeds(lanes: list[_Lane], png_path: str) -> str | None:
    try:
        from jaxes import plotting
    except ImportError:
        return None
    plotting.seed_curves([x.metrics_path for x in lanes], [x.seed for x in lanes], png_path)
    return png_path
