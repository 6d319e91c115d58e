"""Setting checks and small helpers shared by every strategy factory."""

from __future__ import annotations

import numbers
from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxes import noise as noise_lib

Schedule = Callable[[jax.Array], jax.Array]


def check_population_size(population_size, antithetic: bool) -> int:
    """``P`` must be an int >= 2, and even with antithetic pairs."""
    if (
        not isinstance(population_size, numbers.Integral)
        or isinstance(population_size, bool)
        or population_size < 2
    ):
        raise ValueError(f"population_size: expected an int >= 2, got {population_size!r}")
    if antithetic and population_size % 2:
        raise ValueError(
            f"population_size: antithetic pairs need an even population, got {population_size}; "
            f"use {population_size - 1} or {population_size + 1}, or antithetic=False"
        )
    return int(population_size)


def check_positive(name: str, value, allow_zero: bool = False) -> float:
    """A finite real number > 0 (or >= 0)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    ok = ok and float(value) == float(value) and abs(float(value)) != float("inf")
    ok = ok and (value >= 0 if allow_zero else value > 0)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name}: expected a finite number {bound}, got {value!r}")
    return float(value)


def sigma_schedule(sigma, sigma_floor: float = 0.0) -> Schedule:
    """σ as a function of the generation: a constant > 0 or an optax schedule, floored.

    Example:
      >>> import optax
      >>> s = sigma_schedule(optax.exponential_decay(0.1, 1, 0.5), sigma_floor=0.02)
      >>> [round(float(s(t)), 3) for t in (0, 1, 5)]
      [0.1, 0.05, 0.02]
    """
    floor = check_positive("sigma_floor", sigma_floor, allow_zero=True)
    if callable(sigma):
        return lambda generation: jnp.maximum(jnp.asarray(sigma(generation), jnp.float32), floor)
    value = max(check_positive("sigma", sigma), floor)
    return lambda generation: jnp.float32(value)


def check_batch_size(batch_size) -> int | None:
    """``None`` or an int >= 1."""
    if batch_size is None:
        return None
    if (
        not isinstance(batch_size, numbers.Integral)
        or isinstance(batch_size, bool)
        or batch_size < 1
    ):
        raise ValueError(f"noise_batch_size: expected None or an int >= 1, got {batch_size!r}")
    return int(batch_size)


NOISE_SOURCES = ("gaussian", "table")


def make_perturbations(
    noise: str, noise_table_size: int, population_size: int, antithetic: bool, batch_size
) -> noise_lib.Perturbations:
    """Builds the static perturbation recipe from a strategy's settings."""
    if noise == "gaussian":
        source = noise_lib.gaussian()
    elif noise == "table":
        source = noise_lib.noise_table(noise_table_size)
    else:
        raise ValueError(f"noise: unknown source {noise!r}; allowed: {list(NOISE_SOURCES)}")
    return noise_lib.Perturbations(
        source=source,
        population_size=population_size,
        antithetic=bool(antithetic),
        batch_size=check_batch_size(batch_size),
    )


def check_fitness(fitness, population_size: int) -> jax.Array:
    """Fitness must be a floating array of shape ``(P,)``; checked at trace time."""
    shape = jnp.shape(fitness)
    if shape != (population_size,):
        raise ValueError(
            f"fitness: expected shape ({population_size},) (one value per member), got {shape}"
        )
    dtype = jnp.result_type(fitness)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"fitness: expected a floating dtype, got {dtype}; cast it to float32")
    return jnp.asarray(fitness)


def finite_stats(fitness: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Mean, max and min over the finite fitness values (NaN if none is finite)."""
    finite = jnp.isfinite(fitness)
    count = jnp.sum(finite)
    mean = jnp.where(count > 0, jnp.sum(jnp.where(finite, fitness, 0.0)) / count, jnp.nan)
    fmax = jnp.where(count > 0, jnp.max(jnp.where(finite, fitness, -jnp.inf)), jnp.nan)
    fmin = jnp.where(count > 0, jnp.min(jnp.where(finite, fitness, jnp.inf)), jnp.nan)
    return mean, fmax, fmin
