"""One generation as a pure function: ask → evaluate → tell.

The same function runs on one device and, given an ``axis_name``, as one device's share of a
population split over ``num_shards`` devices (``jaxes.parallel`` wraps it in ``shard_map``;
users may ``jax.pmap`` it). Split, each device builds and evaluates only its own members and
the fitness values are gathered, so every device runs the same ``tell``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxes.types import Strategy, Task


class TrainState(NamedTuple):
    """Everything a run carries from one generation to the next."""

    strategy_state: Any
    task_state: Any
    key: jax.Array
    generation: jax.Array


def scalar_metrics(info) -> dict:
    """The scalar fields of a strategy's ``info`` (parameter-sized ones stay out of logs).

    Example:
      >>> import collections, jax.numpy as jnp
      >>> Info = collections.namedtuple("Info", "fitness_mean best_params sigma")
      >>> metrics = scalar_metrics(Info(jnp.array(1.5), jnp.zeros(3), jnp.array(0.1)))
      >>> sorted(metrics), float(metrics["fitness_mean"])
      (['fitness_mean', 'sigma'], 1.5)
    """
    return {k: v for k, v in info._asdict().items() if isinstance(v, jax.Array) and v.ndim == 0}


def generation_step(
    strategy: Strategy, task: Task, axis_name: str | None = None, num_shards: int = 1
):
    """``step(train_state) -> (train_state, metrics)``, pure.

    Args:
      strategy: the strategy.
      task: the fitness source; with ``axis_name`` its ``evaluate`` must accept
        ``axis_name=`` (to merge its statistics across devices).
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
        key, ask_key, eval_key = jax.random.split(ts.key, 3)
        population, strategy_state = strategy.ask(ask_key, ts.strategy_state)
        if axis_name is None:
            fitness, task_state, rollout = task.evaluate(eval_key, population, ts.task_state)
        else:
            # This device's members only; the full population above is dead code for XLA.
            first = jax.lax.axis_index(axis_name) * per_shard
            mine = jax.vmap(lambda i: strategy.member(strategy_state, i))(
                first + jnp.arange(per_shard)
            )
            local, task_state, rollout = task.evaluate(
                eval_key, mine, ts.task_state, axis_name=axis_name
            )
            fitness = jax.lax.all_gather(local, axis_name, tiled=True)
        strategy_state, info = strategy.tell(strategy_state, fitness)
        metrics = scalar_metrics(info)
        metrics.update(rollout._asdict())
        return TrainState(strategy_state, task_state, key, ts.generation + 1), metrics

    return step
