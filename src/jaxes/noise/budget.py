"""How much of a population is held at once.

A ``Perturbations`` recipe carries a ``memory_budget`` in bytes. Its ``eval_chunk`` and
``tell_chunk`` are how many members (bases) fit in it, so evaluation and the rebuild in
``tell`` never hold the whole ``P × d`` population. The sizes here are pure Python on shapes:
they decide the program's structure, never a number in it.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from jaxes.checks import check_int
from jaxes.types import Params

# 64 MiB of members (evaluation) or of rebuilt noise (tell) in flight at once.
DEFAULT_MEMORY_BUDGET = 64 * 2**20
# Up to this many bases per chunk ``moments`` sums with unrolled multiply-adds, not a dot.
FUSED_MAX_BATCH = 4
# A chunk of rebuilt noise up to this size is summed with one dot (it stays in cache).
DOT_MAX_BYTES = 4 * 2**20


def largest_divisor_at_most(n: int, limit: int) -> int:
    """The largest divisor of ``n`` that is ``<= limit`` (at least 1).

    Example:
      >>> largest_divisor_at_most(256, 100), largest_divisor_at_most(30, 7)
      (64, 6)
    """
    limit = max(1, min(n, limit))
    return max(k for k in range(1, limit + 1) if n % k == 0)


def member_bytes(params: Params, dtypes: Params | None = None) -> int:
    """Bytes one member holds while it is evaluated: itself in its dtypes (default: the
    params' own) plus its float32 noise.

    Example:
      >>> import jax.numpy as jnp
      >>> member_bytes({"w": jnp.zeros(10)}), member_bytes(jnp.zeros(10), jnp.zeros((), "bfloat16"))
      (80, 60)
    """
    dtypes = params if dtypes is None else dtypes
    return sum(
        math.prod(jnp.shape(x)) * (4 + jnp.dtype(t.dtype).itemsize)
        for x, t in zip(jax.tree.leaves(params), jax.tree.leaves(dtypes), strict=True)
    )


def noise_bytes(params: Params, dtypes: Params, squares: bool) -> int:
    """Bytes of one rebuilt float32 base perturbation in ``tell`` (twice that with its squares).

    Example:
      >>> import jax.numpy as jnp
      >>> noise_bytes(jnp.zeros(10), jnp.zeros(10), False), noise_bytes(jnp.zeros(10), None, True)
      (40, 80)
    """
    dtypes = params if dtypes is None else dtypes
    return sum(
        math.prod(jnp.shape(x)) * 4 * (1 + squares)
        for x, t in zip(jax.tree.leaves(params), jax.tree.leaves(dtypes), strict=True)
    )


def check_memory_budget(memory_budget) -> int | None:
    """``None`` (the default budget) or a number of bytes >= 1.

    Example:
      >>> check_memory_budget(None), check_memory_budget(2**20)
      (None, 1048576)
    """
    return None if memory_budget is None else check_int("memory_budget", memory_budget, 1)


def units_in_budget(memory_budget: int | None, what: str, unit_bytes: int) -> int:
    """How many units of ``unit_bytes`` a budget holds: at least 1 for the default budget
    (``None``), and an error if an explicit one cannot hold one ``what``.

    Example:
      >>> units_in_budget(None, "member", 2**20), units_in_budget(1000, "member", 300)
      (64, 3)
    """
    budget = DEFAULT_MEMORY_BUDGET if memory_budget is None else memory_budget
    count = budget // max(unit_bytes, 1)
    if count < 1 and memory_budget is not None:
        raise ValueError(
            f"memory_budget: {memory_budget} bytes cannot hold one {what} "
            f"({unit_bytes} bytes); use memory_budget >= {unit_bytes} or None"
        )
    return max(int(count), 1)


def bases_per_chunk(memory_budget: int | None, per_base: int, num_base: int) -> int:
    """Base perturbations ``moments`` rebuilds at once when each takes ``per_base`` bytes.

    Example:
      >>> bases_per_chunk(None, 4000, 32), bases_per_chunk(None, 2**20, 32)
      (32, 4)
    """
    batch = min(units_in_budget(memory_budget, "perturbation", per_base), num_base)
    if batch * per_base > DOT_MAX_BYTES:
        # Too big for the cache: sum a few bases at a time with fused multiply-adds, so the
        # noise is read once from the table and never written back.
        return min(batch, FUSED_MAX_BATCH)
    return batch
