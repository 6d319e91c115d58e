"""One generation as a pure function: ask → evaluate → tell.

The same function runs on one device and, given an ``axis_name``, as one device's share of a
population split over ``num_shards`` devices (``jaxes.parallel`` wraps it in ``shard_map``;
users may ``jax.pmap`` it). Each device builds and evaluates only its own members, a chunk at a
time under the strategy's memory budget (``jaxes.evaluation``), so the population is never in
memory whole; the fitness values (and the task's per-member statistics) are gathered, so every
device runs the same ``tell`` and the same task ``update``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

from jaxes import evaluation
from jaxes.collectives import gather_members
from jaxes.noise import threefry
from jaxes.types import Strategy, Task


class TrainState(NamedTuple):
    """Everything a run carries from one generation to the next."""

    strategy_state: Any
    task_state: Any
    key: jax.Array
    generation: jax.Array


def scalar_metrics(info) -> dict:
    """The scalar fields of a strategy's ``info`` (parameter-sized ones stay out of logs), a
    sub-record's fields among them (``StrategyInfo.termination``).

    Example:
      >>> import collections, jax.numpy as jnp
      >>> Info = collections.namedtuple("Info", "fitness_mean params sigma")
      >>> metrics = scalar_metrics(Info(jnp.array(1.5), jnp.zeros(3), jnp.array(0.1)))
      >>> sorted(metrics), float(metrics["fitness_mean"])
      (['fitness_mean', 'sigma'], 1.5)
    """
    fields = dict(info._asdict())
    for name, value in list(fields.items()):
        if hasattr(value, "_asdict"):  # a sub-record (the CMA family's termination): its columns
            del fields[name]
            fields.update(value._asdict())
    return {k: v for k, v in fields.items() if isinstance(v, jax.Array) and v.ndim == 0}


def generation_step(
    strategy: Strategy, task: Task, axis_name: str | None = None, num_shards: int = 1
):
    """``step(train_state) -> (train_state, metrics)``, pure.

    Args:
      strategy: the strategy.
      task: the fitness source.
      axis_name: the mapped axis the population is split over, or ``None`` on one device.
      num_shards: devices along ``axis_name``; must divide the population size.

    Example:
      >>> import jax, jax.numpy as jnp, jaxes
      >>> from jaxes.tasks.functions import function_task
      >>> es, task = jaxes.open_es(population_size=4, sigma=0.1), function_task("sphere", 2)
      >>> ts = TrainState(
      ...     strategy_state=es.init(jax.random.key(0), task.init_params(None)),
      ...     task_state=task.init(None),
      ...     key=jax.random.key(1),
      ...     generation=jnp.zeros((), jnp.int32),
      ... )
      >>> ts, metrics = jax.jit(generation_step(es, task))(ts)
      >>> int(ts.generation), int(metrics["evaluations"]), float(metrics["fitness_max"]) < 0
      (1, 4, True)
    """
    per_shard = strategy.population_size // num_shards

    def step(ts: TrainState):
        key, ask_key, eval_key = threefry.split(ts.key, 3)
        # Only members rebuilt in chunks are evaluated: ask's population is dead code for XLA.
        _, strategy_state = strategy.ask(ask_key, ts.strategy_state)
        first = 0 if axis_name is None else jax.lax.axis_index(axis_name) * per_shard
        fitness, stats, rollout = evaluation.evaluate_task(
            strategy,
            strategy_state,
            task,
            eval_key,
            ts.task_state,
            first,
            per_shard,
            first_is_even=per_shard % 2 == 0,
        )
        if axis_name is not None:
            # Gathered as axis-invariant values (and a psum is one), so the new state is typed
            # as the same on every device: shard_map's check_vma holds.
            fitness, stats = gather_members((fitness, stats), axis_name)
            rollout = jax.lax.psum(rollout, axis_name)
        task_state = ts.task_state if task.update is None else task.update(ts.task_state, stats)
        strategy_state, info = strategy.tell(strategy_state, fitness)
        metrics = scalar_metrics(info)
        metrics.update(rollout._asdict())
        return TrainState(strategy_state, task_state, key, ts.generation + 1), metrics

    return step
