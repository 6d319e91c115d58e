"""Training: the runner behind ``jaxes train``, fusing many generations per dispatch.

``jaxes.step.generation_step`` is ask → evaluate → tell as a pure function of a
``TrainState``; users can put it in their own ``jit``/``scan``. ``run`` compiles one block of
``eval_every`` generations fused with ``lax.scan`` plus a noise-free evaluation of the centre
policy, appends a line per generation to ``metrics.jsonl``, shows progress, and checkpoints
the whole state so a stopped run resumes bit-identically.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import jax
import jax.numpy as jnp
import numpy as np

from jaxes.checkpoint import is_key, rewrap_keys, unwrap_keys
from jaxes.parallel import check_split, make_mesh, replicated, sharded_step
from jaxes.step import TrainState, generation_step
from jaxes.strategies import ars, open_es, pgpe, sep_cma_es, snes
from jaxes.strategies.common import centre
from jaxes.tasks import brax as brax_tasks
from jaxes.types import Strategy, Task

# name -> (population_size, sigma, learning_rate) -> Strategy; "learning_rate" is each
# strategy's step size of the mean.
STRATEGIES: dict[str, Callable[[int, float, float], Strategy]] = {
    "open_es": lambda p, sigma, lr: open_es(p, sigma, learning_rate=lr),
    "pgpe": lambda p, sigma, lr: pgpe(p, sigma, center_learning_rate=lr),
    "snes": lambda p, sigma, lr: snes(p, sigma, mean_learning_rate=lr),
    "ars": lambda p, sigma, lr: ars(p, sigma, learning_rate=lr),
    "sep_cma_es": lambda p, sigma, lr: sep_cma_es(p, sigma, mean_learning_rate=lr),
}
# Defaults (sigma, learning_rate) for Brax policies, used when the config leaves them unset.
STRATEGY_DEFAULTS: dict[str, tuple[float, float]] = {
    "open_es": (0.05, 0.03),
    "pgpe": (0.05, 0.03),
    "snes": (0.05, 1.0),
    "ars": (0.05, 0.03),
    "sep_cma_es": (0.05, 1.0),
}
LEARNING_RATE_MEANING = (
    "Adam's for open_es, ClipUp's step for pgpe, η_μ for snes, α for ars, c_m for sep_cma_es"
)
POLICIES = ("linear", "mlp")


class ConfigError(ValueError):
    """A training setting is invalid; the message names it and what is allowed."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Every setting of a run; saved as ``config.json`` in the run directory."""

    env: str = "inverted_pendulum"
    backend: str = "spring"
    episode_length: int = 1000
    strategy: str = "open_es"
    population_size: int = 32
    sigma: float | None = None  # None: STRATEGY_DEFAULTS[strategy]
    learning_rate: float | None = None  # None: STRATEGY_DEFAULTS[strategy]
    generations: int = 80
    seed: int = 0
    policy: str = "linear"
    hidden_sizes: tuple[int, ...] = (32, 32)
    episodes_per_member: int = 1
    eval_every: int = 5
    eval_episodes: int = 8
    checkpoint_every: int = 10
    normalize_observations: bool = True
    devices: int = 0

    def __post_init__(self):
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        for name in (
            "episode_length",
            "population_size",
            "generations",
            "episodes_per_member",
            "eval_every",
            "eval_episodes",
            "checkpoint_every",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name}: expected an int >= 1, got {value!r}")
        if not isinstance(self.devices, int) or isinstance(self.devices, bool) or self.devices < 0:
            raise ConfigError(f"devices: expected an int >= 0 (0 = all), got {self.devices!r}")
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"strategy: unknown {self.strategy!r}; allowed: {sorted(STRATEGIES)}")
        default_sigma, default_lr = STRATEGY_DEFAULTS[self.strategy]
        if self.sigma is None:
            object.__setattr__(self, "sigma", default_sigma)
        if self.learning_rate is None:
            object.__setattr__(self, "learning_rate", default_lr)
        if self.policy not in POLICIES:
            raise ConfigError(f"policy: unknown {self.policy!r}; allowed: {list(POLICIES)}")
        if self.backend not in brax_tasks.BACKENDS:
            raise ConfigError(
                f"backend: unknown {self.backend!r}; allowed: {list(brax_tasks.BACKENDS)}"
            )
        if self.checkpoint_every % self.eval_every:
            raise ConfigError(
                f"checkpoint_every: must be a multiple of eval_every ({self.eval_every}), "
                f"got {self.checkpoint_every}"
            )

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_dict(cls, data: dict) -> TrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(f"config: unknown settings {unknown}")
        return cls(**data)


def build(config: TrainConfig) -> tuple[Strategy, Task]:
    """The strategy and the Brax task a config describes (errors name the bad setting).

    Building compiles nothing (the observation size comes from a traced reset).

    Example:
      >>> strategy, task = build(TrainConfig(strategy="pgpe", population_size=8))
      >>> strategy.population_size, type(task.env).__name__
      (8, 'InvertedPendulum')
      >>> build(TrainConfig(population_size=7))  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      jaxes.train.ConfigError: open_es: population_size: antithetic pairs need an even population...
    """
    task = brax_tasks.brax_task(
        config.env,
        config.backend,
        config.episode_length,
        config.policy,
        config.hidden_sizes,
        episodes_per_member=config.episodes_per_member,
        eval_episodes=config.eval_episodes,
        normalize_observations=config.normalize_observations,
    )
    try:
        strategy = STRATEGIES[config.strategy](
            config.population_size, config.sigma, config.learning_rate
        )
    except ValueError as err:
        raise ConfigError(f"{config.strategy}: {err}") from err
    return strategy, task


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


def _eval_key(seed: int, generation: int) -> jax.Array:
    # A stream apart from training's, so evaluating never changes what training does.
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

    def block(ts: TrainState, eval_key):
        ts, metrics = jax.lax.scan(lambda c, _: step(c), ts, None, length=length)
        centre = centre_params(ts.strategy_state)
        return ts, metrics, task.evaluate_policy(eval_key, centre, ts.task_state)

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


def centre_params(strategy_state) -> Any:
    """The strategy's current centre (what is evaluated without noise), in the params' dtypes.

    Example:
      >>> import jax, jax.numpy as jnp, jaxes
      >>> state = jaxes.open_es(population_size=4).init(jax.random.key(0), jnp.zeros(2))
      >>> centre_params(state).tolist()
      [0.0, 0.0]
    """
    return centre(strategy_state)


class RunDirError(ValueError):
    """The output directory cannot be used as asked."""


def prepare_run_dir(out: str, resume: bool) -> None:
    """Refuses to overwrite: a new run needs an absent or empty directory; resume needs a run.

    Example:
      >>> import os, tempfile
      >>> tmp = tempfile.TemporaryDirectory()
      >>> out = os.path.join(tmp.name, "run")
      >>> prepare_run_dir(out, resume=False)  # creates it
      >>> os.path.isdir(out)
      True
      >>> prepare_run_dir(out, resume=True)  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      jaxes.train.RunDirError: --resume: .../run holds no run (config.json is missing)
      >>> tmp.cleanup()
    """
    if resume:
        if not os.path.isfile(os.path.join(out, "config.json")):
            raise RunDirError(f"--resume: {out} holds no run (config.json is missing)")
        return
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise RunDirError(
            f"out: {out} already exists and is not empty; pass --resume to continue that run "
            "or choose another directory"
        )
    try:
        os.makedirs(out, exist_ok=True)
        probe = os.path.join(out, ".write-test")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as err:
        raise RunDirError(f"out: cannot write to {out} ({err.strerror})") from err


class Progress:
    """One status line: generation, returns, env steps/s, ETA. Redrawn in place on a terminal."""

    def __init__(self, total: int, stream: TextIO | None = None):
        self.total = total
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()

    def update(self, generation: int, line: dict, steps_per_s: float, eta_s: float) -> None:
        ev = line.get("eval_return")
        text = (
            f"gen {generation:>5}/{self.total}  mean {line['fitness_mean']:9.2f}  "
            f"best {line['best_fitness']:9.2f}  eval {ev if ev is None else f'{ev:9.2f}'}  "
            f"{steps_per_s:,.0f} steps/s  ETA {eta_s:5.0f}s"
        )
        self.stream.write(("\r" + text) if self.tty else (text + "\n"))
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _metrics_lines(metrics: dict, first_generation: int, elapsed: float) -> list[dict]:
    host = to_host(metrics)
    length = len(next(iter(host.values())))
    lines = []
    for i in range(length):
        line = {"generation": first_generation + i + 1}
        for name, values in host.items():
            value = values[i].item()
            line[name] = value if not (isinstance(value, float) and math.isnan(value)) else None
        line["wall_time_s"] = round(elapsed, 3)
        lines.append(line)
    return lines


def _truncate_metrics(path: str, generation: int) -> float:
    """Keeps the lines up to ``generation`` (a resumed run redoes the rest); their wall time."""
    if not os.path.exists(path):
        return 0.0
    with open(path) as f:
        lines = [json.loads(x) for x in f if x.strip()]
    kept = [x for x in lines if x["generation"] <= generation]
    with open(path + ".tmp", "w") as f:
        f.writelines(json.dumps(x) + "\n" for x in kept)
    os.replace(path + ".tmp", path)
    return kept[-1]["wall_time_s"] if kept else 0.0


def run(
    config: TrainConfig,
    out: str,
    resume: bool = False,
    stream: TextIO | None = None,
    plot: bool = True,
) -> dict:
    """Trains as ``config`` says, writing into ``out``; returns a summary.

    Files: ``config.json``, ``metrics.jsonl`` (one JSON object per generation, with
    ``eval_return`` on each block's last generation), ``checkpoints/`` and, when matplotlib
    is installed, ``learning_curve.png``. The population is split over ``config.devices``
    devices (0: every device of every process); with several processes only process 0 writes
    run files, and all of them take part in checkpoints.

    Example (skipped in doctests: compiling the Brax rollout takes tens of seconds on CPU):
      >>> import io
      >>> config = TrainConfig(episode_length=100, generations=10)
      >>> summary = run(config, "runs/pendulum", stream=io.StringIO())  # doctest: +SKIP
      >>> summary["generations"]  # doctest: +SKIP
      10
    """
    from jaxes import checkpoint

    strategy, task = build(config)  # every setting is checked before anything is written
    mesh = make_mesh(config.devices or None)
    check_split(config.population_size, mesh.devices.size)
    primary = jax.process_index() == 0
    if primary or resume:
        prepare_run_dir(out, resume)
    stream = (stream or sys.stdout) if primary else open(os.devnull, "w")  # noqa: SIM115
    stream.write(
        f"jaxes train: {config.strategy} on {config.env} ({config.backend}), "
        f"P={config.population_size} on {mesh.devices.size} device(s), "
        f"{config.generations} generations -> {out}\n"
    )
    stream.flush()
    if primary and not resume:
        with open(os.path.join(out, "config.json"), "w") as f:
            f.write(config.to_json())
    ckpt = checkpoint.Checkpointer(os.path.join(out, "checkpoints"))
    metrics_path = os.path.join(out, "metrics.jsonl")
    state = place(init_state(strategy, task, config.seed), mesh)
    start_gen, wall_offset = 0, 0.0
    if resume:
        start_gen, state = ckpt.restore(state)
        if start_gen % config.eval_every and start_gen != config.generations:
            raise checkpoint.CheckpointError(
                f"checkpoint {start_gen} is not at a block boundary (eval_every="
                f"{config.eval_every})"
            )
        if primary:
            wall_offset = _truncate_metrics(metrics_path, start_gen)
    runners: dict[int, Callable] = {}
    progress = Progress(config.generations, stream)
    started = time.perf_counter()
    generation = start_gen
    last_eval = None
    with open(metrics_path, "a") if primary else open(os.devnull, "w") as metrics_file:
        while generation < config.generations:
            block_start = time.perf_counter()
            length = min(config.eval_every, config.generations - generation)
            if length not in runners:
                runners[length] = block_runner(strategy, task, length, mesh)
            state, metrics, returns = runners[length](
                state, _eval_key(config.seed, generation + length)
            )
            returns = to_host(returns)
            now = time.perf_counter()
            lines = _metrics_lines(metrics, generation, wall_offset + now - started)
            last_eval = float(returns.mean())
            lines[-1]["eval_return"] = last_eval
            lines[-1]["eval_return_std"] = float(returns.std())
            metrics_file.writelines(json.dumps(x) + "\n" for x in lines)
            metrics_file.flush()
            generation += length
            # Rate of this block alone (the first one includes compilation).
            block_s = max(now - block_start, 1e-9)
            rate = sum(x["env_steps"] for x in lines) / block_s
            progress.update(
                generation, lines[-1], rate, block_s / length * (config.generations - generation)
            )
            if generation % config.checkpoint_every == 0 or generation == config.generations:
                ckpt.save(generation, state)
    progress.close()
    ckpt.close()
    summary = {
        "generations": generation,
        "final_eval_return": last_eval,
        "run_dir": os.path.abspath(out),
        "seconds": round(time.perf_counter() - started, 1),
    }
    if plot and primary:
        summary["plot"] = _plot(metrics_path, os.path.join(out, "learning_curve.png"))
    return summary


def _plot(metrics_path: str, png_path: str) -> str | None:
    try:
        from jaxes import plotting
    except ImportError:
        return None
    plotting.learning_curve(metrics_path, png_path)
    return png_path


def load_run(out: str) -> tuple[TrainConfig, Strategy, Task, int, TrainState]:
    """Config, strategy, task and the newest checkpointed state of a run directory.

    Example (a run directory as ``run`` starts it, made by hand so that nothing is trained):
      >>> import os, tempfile
      >>> from jaxes.checkpoint import Checkpointer
      >>> tmp = tempfile.TemporaryDirectory()
      >>> config = TrainConfig(population_size=8, policy="linear")
      >>> with open(os.path.join(tmp.name, "config.json"), "w") as f:
      ...     _ = f.write(config.to_json())
      >>> ckpt = Checkpointer(os.path.join(tmp.name, "checkpoints"))
      >>> ckpt.save(0, init_state(*build(config), config.seed))
      >>> ckpt.close()
      >>> config, strategy, task, step, state = load_run(tmp.name)
      >>> config.policy, step, int(state.generation)
      ('linear', 0, 0)
      >>> tmp.cleanup()
    """
    from jaxes import checkpoint

    path = os.path.join(out, "config.json")
    if not os.path.isfile(path):
        raise RunDirError(f"run_dir: {out} holds no run (config.json is missing)")
    with open(path) as f:
        config = TrainConfig.from_dict(json.load(f))
    strategy, task = build(config)
    ckpt = checkpoint.Checkpointer(os.path.join(out, "checkpoints"), create=False)
    step, state = ckpt.restore(init_state(strategy, task, config.seed))
    ckpt.close()
    return config, strategy, task, step, state
