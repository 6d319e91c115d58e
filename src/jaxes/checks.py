"""Argument checks whose errors name the argument and what is allowed (internal helpers).

Numeric hyper-parameters may be JAX scalars, so that a whole run can be ``vmap``-ed over a
grid of them: a concrete value is checked, a traced one (inside ``jit``/``vmap``) cannot be
and is passed through as a float32 scalar.
"""

from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp
import numpy as np


def is_traced(value) -> bool:
    """Whether ``value`` is a JAX tracer (its number is not known until run time)."""
    return isinstance(value, jax.core.Tracer)


def _real_scalar(name: str, value):
    """A Python float, or a float32 JAX scalar when traced; ``ValueError`` for anything else."""
    if isinstance(value, (bool, str | bytes)):
        raise ValueError(f"{name}: expected a number, got {value!r}")
    if is_traced(value) or isinstance(value, jax.Array | np.ndarray | np.generic):
        if jnp.shape(value) != () or not (
            jnp.issubdtype(jnp.result_type(value), jnp.floating)
            or jnp.issubdtype(jnp.result_type(value), jnp.integer)
        ):
            raise ValueError(
                f"{name}: expected a real scalar, got an array of shape {jnp.shape(value)} "
                f"and dtype {jnp.result_type(value)}"
            )
        if is_traced(value):
            return jnp.asarray(value, jnp.float32)
        return float(value)
    if not isinstance(value, numbers.Real):
        raise ValueError(f"{name}: expected a number, got {value!r}")
    return float(value)


def check_positive(name: str, value, allow_zero: bool = False):
    """A finite real number > 0 (or >= 0); a traced scalar passes unchecked."""
    number = _real_scalar(name, value)
    if is_traced(number):
        return number
    ok = number == number and abs(number) != float("inf")
    ok = ok and (number >= 0 if allow_zero else number > 0)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name}: expected a finite number {bound}, got {value!r}")
    return number


def check_below(name: str, value, high: float, what: str) -> None:
    """``value < high`` when concrete (traced values pass); ``what`` names the allowed range."""
    if not is_traced(value) and not value < high:
        raise ValueError(f"{name}: expected a number in {what}, got {value!r}")


def check_int(name: str, value, low: int, high: int | None = None) -> int:
    """An int in ``[low, high]``; the error names the argument and the allowed range.

    A traced value is refused: these ints set array shapes, so they must be static.
    """
    if is_traced(value):
        raise ValueError(
            f"{name}: must be a static Python int (it sets array shapes), got a traced value; "
            "close over it instead of passing it through jit/vmap"
        )
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    ok = ok and value >= low and (high is None or value <= high)
    if not ok:
        allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name}: expected an int {allowed}, got {value!r}")
    return int(value)


def check_truncations(unroll_length, truncation_length) -> int:
    """How many truncations of ``truncation_length`` inner steps make an unroll of
    ``unroll_length`` (``T / K``, an int >= 1): both static ints >= 1, ``K`` a divisor of ``T``
    (each truncation runs exactly ``K`` steps, so an unroll ends at a truncation's end).

    Example:
      >>> check_truncations(100, 10)
      10
      >>> check_truncations(100, 7)
      Traceback (most recent call last):
        ...
      ValueError: truncation_length: 7 does not divide unroll_length 100 (an unroll must end at a truncation's end); use a divisor of 100, e.g. 5 or 10
    """  # noqa: E501
    t = check_int("unroll_length", unroll_length, 1)
    k = check_int("truncation_length", truncation_length, 1, t)
    if t % k:
        below = max(d for d in range(1, k) if t % d == 0)
        above = min(d for d in range(k + 1, t + 1) if t % d == 0)
        raise ValueError(
            f"truncation_length: {k} does not divide unroll_length {t} (an unroll must end at "
            f"a truncation's end); use a divisor of {t}, e.g. {below} or {above}"
        )
    return t // k
