"""Unrolled meta-problems as tasks: a meta-parameter θ drives an inner computation of ``T``
steps (an inner optimisation, a recurrent model) scored by the sum of its per-step losses, and
each generation runs one truncation of ``K`` more steps (``jaxes.pes``, ``jaxes.nres``).

The task state carries the inner states: one per member (a particle), stacked on a leading axis
``P``, with the truncations run so far in the unroll. ``evaluate`` continues each member's own
inner state for ``K`` steps with that member's θ (fitness: minus the ``K`` losses' sum),
``update`` keeps the new inner states and counts the truncation, and after ``T / K`` of them
the next ``evaluate`` starts every particle again from ``init_inner(key)`` (one fresh inner
problem, shared by the particles). A batch of members sees its own particles' inner states
(``Task.member_state`` slices them), so the population is evaluated in chunks, or split over
devices, as any other task's.

The strategy counts the same truncations in its own state (PES's noise sums, NRES's kept
noise); one ``evaluate`` and ``update`` per ``tell`` (``jaxes.step.generation_step``) keeps
the two together. Build both with the same ``unroll_length`` and ``truncation_length``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxes.checks import check_int, check_positive, check_truncations
from jaxes.types import Strategy, Task


class UnrolledState(NamedTuple):
    """The task state: ``inner``, each particle's inner state (leading axis ``P``), and
    ``truncation``, the truncations run in the current unroll (``0 .. T/K - 1``)."""

    inner: Any
    truncation: jax.Array


class UnrollInfo(NamedTuple):
    """Counts of one generation: members evaluated, inner steps run (``K`` per member)."""

    evaluations: jax.Array
    inner_steps: jax.Array


@dataclasses.dataclass(frozen=True)
class UnrolledTask(Task):
    """A ``Task`` over an unrolled computation; it also has its ``unroll_length`` ``T``, its
    ``truncation_length`` ``K`` and ``meta_loss(theta, key)``, the whole unroll's summed loss
    from ``init_inner(key)`` (differentiable: ``jax.grad`` of it is the autodiff gradient the
    estimates of ``jaxes.pes`` and ``jaxes.nres`` are unbiased for)."""

    unroll_length: int = 0
    truncation_length: int = 0
    meta_loss: Callable[[Any, jax.Array], jax.Array] | None = None


def unrolled_task(
    init_inner: Callable[[jax.Array], Any],
    step: Callable[[Any, Any, jax.Array], tuple[Any, jax.Array]],
    theta,
    *,
    population_size: int,
    unroll_length: int,
    truncation_length: int,
) -> UnrolledTask:
    """The ``UnrolledTask`` of an inner computation.

    Args:
      init_inner: ``init_inner(key) -> inner``, the inner state at step 0 (one particle's).
      step: ``step(theta, inner, t) -> (inner, loss)``: inner step ``t`` (``0 .. T-1``, an
        int32 scalar) under meta-parameters ``theta``, and the scalar loss it scores.
      theta: the meta-parameters to start from (``init_params``).
      population_size: ``P``, the particles whose inner states the task state carries.
      unroll_length: ``T``, inner steps in a whole unroll.
      truncation_length: ``K``, inner steps per generation; it must divide ``T``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> def step(theta, x, t):
      ...     x = x - jnp.exp(theta[0]) * x
      ...     return x, jnp.sum(x**2)
      >>> task = unrolled_task(lambda key: jnp.ones(2), step, jnp.array([-1.0]),
      ...                      population_size=2, unroll_length=4, truncation_length=2)
      >>> state = task.init(jax.random.key(0))
      >>> fitness, inner, info = task.evaluate(jax.random.key(1), jnp.full((2, 1), -1.0), state)
      >>> state = task.update(state, inner)
      >>> fitness2, _, _ = task.evaluate(jax.random.key(2), jnp.full((2, 1), -1.0), state)
      >>> total = -(fitness[0] + fitness2[0])
      >>> bool(jnp.allclose(total, task.meta_loss(jnp.array([-1.0]), None))), int(info.inner_steps)
      (True, 4)
    """
    p = check_int("population_size", population_size, 2)
    truncations = check_truncations(unroll_length, truncation_length)
    k = truncation_length

    def run(theta, inner, first, steps: int):
        def body(carry, t):
            inner, total = carry
            inner, loss = step(theta, inner, t)
            return (inner, total + loss), None

        times = first + jnp.arange(steps, dtype=jnp.int32)
        start = (inner, jnp.zeros((), jnp.result_type(float)))
        return jax.lax.scan(body, start, times)[0]

    def init(key):
        inner = jax.tree.map(lambda x: jnp.stack([x] * p), init_inner(key))
        return UnrolledState(inner, jnp.zeros((), jnp.int32))

    def evaluate(key, members, task_state: UnrolledState):
        batch = jax.tree.leaves(members)[0].shape[0]
        particles = jax.tree.leaves(task_state.inner)[0].shape[0]
        if batch != particles:
            raise ValueError(
                f"members: an unrolled task continues each particle's inner state, so a batch "
                f"of {batch} members needs their {batch} inner states, got {particles} (pass "
                "the task state task.member_state(task_state, first, count) gives)"
            )
        fresh = init_inner(key)
        restart = task_state.truncation == 0
        start = jax.tree.map(lambda f, s: jnp.where(restart, f[None], s), fresh, task_state.inner)
        first = task_state.truncation * k
        inner, loss = jax.vmap(lambda th, s: run(th, s, first, k))(members, start)
        info = UnrollInfo(jnp.int32(batch), jnp.int32(batch * k))
        return -loss, inner, info

    def update(task_state: UnrolledState, inner) -> UnrolledState:
        return UnrolledState(inner, (task_state.truncation + 1) % truncations)

    def meta_loss(theta, key):
        return run(theta, init_inner(key), jnp.int32(0), unroll_length)[1]

    def evaluate_policy(key, params, task_state):
        del task_state
        return -meta_loss(params, key)[None]

    return UnrolledTask(
        init=init,
        evaluate=evaluate,
        evaluate_policy=evaluate_policy,
        init_params=lambda key: jax.tree.map(jnp.asarray, theta),
        update=update,
        member_state=particles,
        unroll_length=unroll_length,
        truncation_length=k,
        meta_loss=meta_loss,
    )


def particles(task_state: UnrolledState, first, count: int) -> UnrolledState:
    """The task state of particles ``first .. first + count - 1`` (an unrolled task's
    ``member_state``): their inner states, and the truncation count they share."""

    def rows(x):
        return jax.lax.dynamic_slice_in_dim(x, first, count)

    return task_state._replace(inner=jax.tree.map(rows, task_state.inner))


def unroll_estimate(strategy: Strategy, task: UnrolledTask, theta, key: jax.Array):
    """A strategy's estimate over one whole unroll with θ held: the sum of the ``T/K``
    truncations' ``strategy.estimate`` directions, each truncation a generation (``ask``, the
    task's ``evaluate`` and ``update``, ``tell``) after which θ is put back. Fitness is minus the
    loss, so the sum estimates ``-jax.grad(task.meta_loss)(theta, key)``: PES's and NRES's
    without bias, truncated ES's (``open_es`` with ``fitness_shaping="raw"``) with one.

    ``key`` gives the inner problem (``init_inner(key)``, as ``meta_loss(theta, key)`` has it)
    and, split, the strategy's and every ``ask``'s keys; ``vmap`` it over keys for many
    independent estimates in one program.

    Example:
      >>> import jax, jax.numpy as jnp, jaxes
      >>> task = step_size_task(8, unroll_length=20, truncation_length=5)
      >>> es = jaxes.pes(8, 0.01, unroll_length=20, truncation_length=5)
      >>> keys = jax.random.split(jax.random.key(0), 200)
      >>> estimates = jax.vmap(lambda k: unroll_estimate(es, task, jnp.array([-4.0]), k))(keys)
      >>> gradient = jax.grad(task.meta_loss)(jnp.array([-4.0]), None)
      >>> error = -estimates.mean(0) - gradient  # within 3 standard errors
      >>> bool(jnp.abs(error) < 3 * estimates.std(0) / jnp.sqrt(200.0))
      True
    """
    init_key, run_key = jax.random.split(key)
    state = strategy.init(init_key, theta)
    held = state.params

    def truncation(carry, ask_key):
        state, task_state = carry
        population, state = strategy.ask(ask_key, state)
        fitness, inner, _ = task.evaluate(key, population, task_state)
        direction, _ = strategy.estimate(state, fitness)
        state, _ = strategy.tell(state, fitness)
        carry = (state.replace(params=held), task.update(task_state, inner))
        return carry, direction

    truncations = task.unroll_length // task.truncation_length
    carry = (state, task.init(key))
    directions = jax.lax.scan(truncation, carry, jax.random.split(run_key, truncations))[1]
    return jax.tree.map(lambda d: d.sum(0), directions)


def step_size_task(
    population_size: int,
    *,
    curvatures=(0.1, 0.3, 1.0, 3.0, 10.0),
    log_step_size: float = -4.0,
    unroll_length: int = 100,
    truncation_length: int = 10,
    start_scale: float = 0.0,
) -> UnrolledTask:
    """Meta-learning a step size: gradient descent on ``f(x) = ½ Σ a_j x_j²`` (the
    ``curvatures`` ``a``) with step ``exp(θ)``, from ``x = 1 + start_scale · N(0, I)`` (a fresh
    draw each unroll; ``x = 1`` for a ``None`` key), ``T`` steps scored by ``Σ_t f(x_{t+1})``.
    ``θ = [log η]`` starts at ``log_step_size``; the meta-loss grows without bound past
    ``η = 2 / max a``.

    Example:
      >>> import jax.numpy as jnp
      >>> task = step_size_task(4, unroll_length=20, truncation_length=5)
      >>> [float(x) for x in task.init_params(None)], task.unroll_length
      ([-4.0], 20)
      >>> bool(task.meta_loss(jnp.array([-2.0]), None) < task.meta_loss(jnp.array([-4.0]), None))
      True
    """
    a = jnp.asarray(curvatures, jnp.float32)
    if a.ndim != 1 or a.size == 0 or not bool(jnp.all(a > 0)):
        raise ValueError(f"curvatures: expected numbers > 0, got {curvatures!r}")
    scale = check_positive("start_scale", start_scale, allow_zero=True)

    def init_inner(key):
        if not scale or key is None:
            return jnp.ones_like(a)
        return 1.0 + scale * jax.random.normal(key, a.shape)

    def step(theta, x, t):
        del t
        x = x - jnp.exp(theta[0]) * a * x
        return x, 0.5 * jnp.sum(a * x**2)

    return unrolled_task(
        init_inner,
        step,
        jnp.array([log_step_size], jnp.float32),
        population_size=population_size,
        unroll_length=unroll_length,
        truncation_length=truncation_length,
    )
