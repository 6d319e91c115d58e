"""Argument checks whose errors name the argument and what is allowed (internal helpers)."""

from __future__ import annotations

import numbers


def check_positive(name: str, value, allow_zero: bool = False) -> float:
    """A finite real number > 0 (or >= 0)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    ok = ok and float(value) == float(value) and abs(float(value)) != float("inf")
    ok = ok and (value >= 0 if allow_zero else value > 0)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name}: expected a finite number {bound}, got {value!r}")
    return float(value)


def check_int(name: str, value, low: int, high: int | None = None) -> int:
    """An int in ``[low, high]``; the error names the argument and the allowed range."""
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    ok = ok and value >= low and (high is None or value <= high)
    if not ok:
        allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name}: expected an int {allowed}, got {value!r}")
    return int(value)
