"""Members evaluated in chunks, never the whole population at once.

``ask`` returns the whole population (``P × d`` floats), which is what a small model wants. For
a big model the population does not fit in memory, and it does not need to: every member is
rebuilt from the key in the state (``strategy.member``), so members can be built and evaluated a
chunk at a time (``lax.map`` over chunks, ``vmap`` inside one). The chunk is the largest one
that fits in the strategy's ``memory_budget`` (``strategy.eval_chunk``).

Under ``jit`` the population ``ask`` returns is dead code when only these functions read the
members, so XLA never builds it::

    _, state = strategy.ask(key, state)
    fitness = jaxes.evaluate(strategy, state, my_fitness)
    state, info = strategy.tell(state, fitness)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jaxes import trees
from jaxes.checks import check_int
from jaxes.types import Params, Strategy


def chunk_size(
    strategy: Strategy, state, count: int, chunk: int | None = None, factored: bool = False
) -> int:
    """Members per chunk: ``chunk`` if given (it must divide ``count``), else the strategy's
    choice under its memory budget (all ``count`` for a strategy without one); ``factored``:
    the members are evaluated as displacements from a shared centre, whose factors cost far
    less than a member."""
    if chunk is not None:
        chunk = check_int("chunk_size", chunk, 1, count)
        if count % chunk:
            raise ValueError(f"chunk_size: {chunk} does not divide the {count} members evaluated")
        return chunk
    if strategy.eval_chunk is None:
        return count
    if factored:
        return strategy.eval_chunk(state, count, factored=True)
    return strategy.eval_chunk(state, count)


def map_members(
    strategy: Strategy,
    state,
    batch_fn: Callable[[Params], Any],
    first=0,
    count: int | None = None,
    chunk: int | None = None,
    first_is_even: bool | None = None,
    build: Callable[[Any, Any], Any] | None = None,
    with_start: bool = False,
):
    """``batch_fn`` over members ``first .. first + count - 1`` of the population the last
    ``ask`` drew, a chunk of members at a time (``with_start``: ``batch_fn(members, start)``,
    with the chunk's first member index).

    ``build(state, i)`` makes what ``batch_fn`` gets for member ``i`` (default: the member,
    ``strategy.member``; ``strategy.perturbation`` gives its displacement instead).

    ``batch_fn(members)`` gets a pytree of members with a leading axis (the chunk) and returns
    any pytree; the results come back stacked with a leading axis of chunks, ``(n, ...)``.
    ``first`` may be traced (a device's offset); ``count`` and ``chunk`` are static. When
    ``first`` is even (known from a concrete ``first``, or promised by ``first_is_even``) and
    the chunk is even, antithetic pairs are built together from one read of their noise.
    """
    count = strategy.population_size if count is None else check_int("count", count, 1)
    chunk = chunk_size(strategy, state, count, chunk)
    if first_is_even is None:
        first_is_even = isinstance(first, int) and first % 2 == 0
    paired = build is None and strategy.members is not None and first_is_even and chunk % 2 == 0
    displacements = build is not None
    build = strategy.member if build is None else build

    def run(start):
        if paired:
            members = strategy.members(state, start, chunk)
        else:
            idx = start + jnp.arange(chunk, dtype=jnp.int32)
            if displacements:
                members = _written(lambda i: build(state, i), idx)
            else:
                members = jax.vmap(lambda i: build(state, i))(idx)
        return batch_fn(members, start) if with_start else batch_fn(members)

    starts = first + jnp.arange(0, count, chunk, dtype=jnp.int32)
    if starts.shape[0] == 1:
        return jax.tree.map(lambda x: x[None], run(starts[0]))
    return jax.lax.map(run, starts)


def _written(build: Callable, idx: jax.Array):
    """``vmap(build)(idx)`` built in two halves by a loop, so that each value is written to
    memory once. Inlined, XLA fuses a displacement's sampling (a normal draw per bias entry)
    into its consumers and draws it again at every use: a VBN reference pass broadcasts each
    member's biases over 128 × 100 positions, and ran 2× slower (Breakout's vbn_conv, P = 256).
    A loop of one step is inlined, so an odd count is built directly."""
    n = idx.shape[0]
    if n % 2:
        return jax.vmap(build)(idx)
    halves = jax.lax.map(jax.vmap(build), idx.reshape(2, n // 2))
    return jax.tree.map(lambda x: x.reshape((n,) + x.shape[2:]), halves)


def evaluate(
    strategy: Strategy,
    state,
    fitness_fn: Callable[[Params], jax.Array],
    *,
    chunk_size: int | None = None,
) -> jax.Array:
    """Fitness ``(P,)`` of the population the last ``ask`` drew, evaluated a chunk at a time.

    Args:
      strategy: the strategy whose ``ask`` produced ``state``.
      state: the state ``ask`` returned.
      fitness_fn: one member's params -> a scalar fitness (maximised).
      chunk_size: members evaluated at once (must divide ``P``); ``None`` takes as many as fit
        in the strategy's ``memory_budget``.

    Example:
      >>> import jax, jax.numpy as jnp, jaxes
      >>> es = jaxes.open_es(population_size=8, sigma=0.1, memory_budget=64)  # 2 members
      >>> state = es.init(jax.random.key(0), {"w": jnp.ones(4)})
      >>> population, state = es.ask(jax.random.key(1), state)
      >>> fitness = evaluate(es, state, lambda p: -jnp.sum(p["w"] ** 2))
      >>> reference = jax.vmap(lambda p: -jnp.sum(p["w"] ** 2))(population)  # same members
      >>> bool(jnp.allclose(fitness, reference, rtol=1e-6))
      True
    """
    pending = getattr(state, "pending", None)
    if pending is not None and not isinstance(pending, jax.core.Tracer) and not bool(pending):
        raise ValueError(
            "state: no population to evaluate; call strategy.ask(key, state) first and pass "
            "the state it returns"
        )
    out = map_members(strategy, state, jax.vmap(fitness_fn), chunk=chunk_size)
    if jnp.ndim(out) != 2:
        raise ValueError(
            f"fitness_fn: expected a scalar fitness per member, got shape {jnp.shape(out)[2:]}"
        )
    out = out.reshape(-1)
    if pending is None:
        return out
    # Traced and without a pending ask: NaN fitness, which tell ignores (nothing is pending).
    return jnp.where(pending, out, jnp.nan)


def _factored(strategy: Strategy, state) -> bool:
    """Whether the strategy's member displacements keep some leaf factored (traced, not run):
    a factored leaf is a node of factors where the params hold one array."""
    if strategy.perturbation is None:
        return False
    shapes = jax.eval_shape(lambda: strategy.perturbation(state, 0))
    return jax.tree.structure(shapes) != jax.tree.structure(state.params)


def evaluate_task(
    strategy: Strategy, state, task, key, task_state, first=0, count=None, first_is_even=None
):
    """A ``Task``'s ``evaluate`` over members ``first .. first + count - 1`` in chunks:
    ``(fitness, member_stats, info)`` as if the task had seen all of them at once (fitness and
    stats in member order, info summed). A task with ``evaluate_factored`` gets the centre and
    the members' displacements instead, where the strategy's displacements have a factored
    (low-rank) leaf; with dense noise the members themselves are built, bit-identical to
    ``centre + displacement``, so both paths see the same members."""
    chunk = getattr(task, "chunk_size", None)
    member_state = getattr(task, "member_state", None)

    def seen(start, batch):
        """The task state a batch of members from ``start`` sees (``Task.member_state``)."""
        if member_state is None:
            return task_state
        return member_state(task_state, start, jax.tree.leaves(batch)[0].shape[0])

    if getattr(task, "evaluate_factored", None) is not None and _factored(strategy, state):
        total = strategy.population_size if count is None else count
        chunk = chunk_size(strategy, state, total, chunk, factored=True)
        centre = trees.cast_like(state.params, state.dtypes)

        def batch_fn(deltas, start):
            return task.evaluate_factored(key, centre, deltas, seen(start, deltas))

        build = strategy.perturbation
    else:

        def batch_fn(members, start):
            return task.evaluate(key, members, seen(start, members))

        build = None
    fitness, stats, info = map_members(
        strategy,
        state,
        batch_fn,
        first,
        count,
        chunk,
        first_is_even=first_is_even,
        build=build,
        with_start=True,
    )

    def merge(x):
        return x.reshape((-1,) + x.shape[2:])

    return merge(fitness), jax.tree.map(merge, stats), jax.tree.map(lambda x: x.sum(0), info)
