"""Benchmark functions as tasks. Fitness is the *negated* function value (maximised)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxes.types import Task


def sphere(x: jax.Array) -> jax.Array:
    """Σ x²; minimum 0 at the origin.

    Example:
      >>> import jax.numpy as jnp
      >>> float(sphere(jnp.array([1.0, 2.0])))
      5.0
    """
    return jnp.sum(x**2)


def rosenbrock(x: jax.Array) -> jax.Array:
    """Σ 100 (x_{i+1} - x_i²)² + (1 - x_i)²; minimum 0 at x = 1.

    Example:
      >>> import jax.numpy as jnp
      >>> float(rosenbrock(jnp.ones(3))), float(rosenbrock(jnp.zeros(3)))
      (0.0, 2.0)
    """
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def rastrigin(x: jax.Array) -> jax.Array:
    """10 d + Σ x² - 10 cos(2π x); minimum 0 at the origin.

    Example:
      >>> import jax.numpy as jnp
      >>> float(rastrigin(jnp.zeros(2))), round(float(rastrigin(jnp.ones(2))), 4)
      (0.0, 2.0)
    """
    return 10.0 * x.shape[-1] + jnp.sum(x**2 - 10.0 * jnp.cos(2.0 * jnp.pi * x))


def ackley(x: jax.Array) -> jax.Array:
    """The Ackley function; minimum 0 at the origin.

    Example:
      >>> import jax.numpy as jnp
      >>> round(float(ackley(jnp.zeros(2))), 4), round(float(ackley(jnp.ones(2))), 4)
      (0.0, 3.6254)
    """
    d = x.shape[-1]
    return (
        -20.0 * jnp.exp(-0.2 * jnp.sqrt(jnp.sum(x**2) / d))
        - jnp.exp(jnp.sum(jnp.cos(2.0 * jnp.pi * x)) / d)
        + 20.0
        + jnp.e
    )


FUNCTIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "sphere": sphere,
    "rosenbrock": rosenbrock,
    "rastrigin": rastrigin,
    "ackley": ackley,
}


class FunctionInfo(NamedTuple):
    """Evaluations spent (one per member)."""

    evaluations: jax.Array


def function_task(fn: str | Callable, dim: int, start: float = 1.0) -> Task:
    """Minimise ``fn`` over ``R^dim`` from ``x = start``; fitness is ``-fn(x)``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> task = function_task("sphere", 3)
      >>> fitness, _, info = task.evaluate(jax.random.key(0), jnp.ones((2, 3)), task.init(None))
      >>> fitness.tolist()
      [-3.0, -3.0]
    """
    if isinstance(fn, str):
        if fn not in FUNCTIONS:
            raise ValueError(f"fn: unknown function {fn!r}; allowed: {sorted(FUNCTIONS)}")
        fn = FUNCTIONS[fn]
    if not isinstance(dim, int) or dim < 1:
        raise ValueError(f"dim: expected an int >= 1, got {dim!r}")

    def init(key):
        del key

    def evaluate(key, members, task_state):
        del key, task_state
        fitness = -jax.vmap(fn)(members)
        return fitness, None, FunctionInfo(jnp.int32(fitness.shape[0]))

    def evaluate_policy(key, params, task_state):
        del key, task_state
        return -fn(params)[None]

    def init_params(key):
        del key
        return jnp.full((dim,), start, jnp.float32)

    return Task(init, evaluate, evaluate_policy, init_params)
