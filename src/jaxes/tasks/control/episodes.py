"""Episodes that end at different times, run in chunks until the last one is over.

A batch of episodes (members × episodes) advances one policy decision at a time. Running a
fixed number of decisions wastes the steps after every episode has ended; checking after every
decision costs a loop iteration each. ``in_chunks`` runs ``chunk`` decisions per ``lax.scan``
inside a ``lax.while_loop`` that checks between chunks, the trade Brax's and gymnax's rollouts
share.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import jax

from jaxes import collectives

Carry = TypeVar("Carry")


def in_chunks(
    decide: Callable[[Carry], Carry],
    going: Callable[[Carry], jax.Array],
    carry: Carry,
    chunk: int,
) -> Carry:
    """``decide`` repeated in chunks of ``chunk`` while ``going(carry)`` holds between chunks.

    ``carry`` is a NamedTuple with a scalar ``chunks`` field, which counts the chunks run (so
    the caller can say how many steps were simulated). Under ``shard_map`` the carry starts the
    same on every device and becomes each device's own once its members act, so it is typed
    varying from the start and the loop keeps one type.

    Example:
      >>> from typing import NamedTuple
      >>> import jax.numpy as jnp
      >>> class Count(NamedTuple):
      ...     t: jax.Array
      ...     chunks: jax.Array
      >>> out = in_chunks(lambda c: c._replace(t=c.t + 1), lambda c: c.t < 7,
      ...                 Count(jnp.int32(0), jnp.int32(0)), chunk=3)
      >>> int(out.t), int(out.chunks)
      (9, 3)
    """

    def run_chunk(c):
        c, _ = jax.lax.scan(lambda x, _: (decide(x), None), c, None, length=chunk)
        return c._replace(chunks=c.chunks + 1)

    return jax.lax.while_loop(going, run_chunk, collectives.varying(carry))
