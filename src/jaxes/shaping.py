"""Fitness shaping: fitness (maximised) -> weights.

Every shaping treats NaN and ±inf fitness as the worst possible value, so a member whose
rollout blew up gets the lowest weight and can never put a NaN into the parameters.

No shaping narrows the fitness it is given: weights come in the fitness's dtype promoted to at
least float32 (float64 fitness is ranked and scaled as float64 numbers; bfloat16 and float16
as float32).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_batching import custom_vmap

Shaping = Callable[[jnp.ndarray], jnp.ndarray]


def _dtype(fitness: jnp.ndarray) -> jnp.dtype:
    """The dtype shaped weights take: the fitness's own, at least float32."""
    return jnp.promote_types(jnp.result_type(fitness), jnp.float32)


# Up to this many members ties are found by comparing every pair; above it, by binary search
# in the sorted fitness (a loop, cheaper than P² comparisons).
_COMPARE_ALL_MAX = 1024
# XLA:CPU splits a kernel it estimates at over ~100 µs of work across threads, and estimates
# one pass over P² comparisons past that from P ≈ 180, though it takes some 10 µs; the split
# costs a thread's wake-up, ~50 µs on a 2-core machine (docs/results/research-log.md, "Ranks
# without a thread hand-off"). So on the CPU, populations in that band count in blocks of
# columns, one block a loop step, each under the split (P = 200-384: 58-71 µs a call in one
# pass, 30-42 in blocks); at P = 512 the two take the same time, so the band ends before it.
_PAIRS_PER_BLOCK = 2**13
_BLOCKED_PAIRS = (128**2, 384**2)


def _count_below_and_equal(f: jnp.ndarray, others: jnp.ndarray) -> tuple[jnp.ndarray, ...]:
    """For each ``f_i``: how many ``others`` are below it and how many equal it, both counts in
    one variadic reduction (one kernel; no P × P array is stored). NaN ``others`` count in
    neither."""
    below = (others[None, :] < f[:, None]).astype(jnp.int32)
    equal = (others[None, :] == f[:, None]).astype(jnp.int32)
    zero = jnp.int32(0)
    return jax.lax.reduce(
        (below, equal), (zero, zero), lambda x, y: (x[0] + y[0], x[1] + y[1]), (1,)
    )


def _count_in_blocks(f: jnp.ndarray) -> tuple[jnp.ndarray, ...]:
    """``_count_below_and_equal(f, f)`` over blocks of columns, one block a ``lax.scan`` step."""
    p = f.shape[0]
    block = max(1, _PAIRS_PER_BLOCK // p)
    blocks = -(-p // block)
    # NaN padding: it compares false with everything, so it counts nowhere.
    columns = jnp.pad(f, (0, blocks * block - p), constant_values=jnp.nan)

    def step(total, others):
        return jax.tree.map(jnp.add, total, _count_below_and_equal(f, others)), None

    zeros = (jnp.zeros(p, jnp.int32), jnp.zeros(p, jnp.int32))
    return jax.lax.scan(step, zeros, columns.reshape(blocks, block))[0]


@custom_vmap
def _counts(f: jnp.ndarray) -> tuple[jnp.ndarray, ...]:
    """``_count_below_and_equal(f, f)``; on the CPU in blocks where one pass would be split."""
    p = f.shape[0]
    if _BLOCKED_PAIRS[0] < p * p <= _BLOCKED_PAIRS[1]:
        return jax.lax.platform_dependent(
            f, cpu=_count_in_blocks, default=lambda f: _count_below_and_equal(f, f)
        )
    return _count_below_and_equal(f, f)


@_counts.def_vmap
def _counts_batched(axis_size, in_batched, f):
    # A batch of populations (vmapped seeds) is work enough for the split to pay: one
    # reduction over the batch (8 populations of 256: 81 µs, in blocks 195 µs; research log).
    del axis_size
    if not in_batched[0]:
        return _counts(f), (False, False)
    return jax.vmap(lambda x: _count_below_and_equal(x, x))(f), (True, True)


def _tie_span(f: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """For each member, the first and last ascending positions of its tie group (``f``: no
    NaN)."""
    if f.shape[0] <= _COMPARE_ALL_MAX:
        # Integer counts: nothing to differentiate (and ``custom_vmap`` has no derivative).
        below, equal = _counts(jax.lax.stop_gradient(f))
        return below, below + equal - 1
    ordered = jnp.sort(f)
    return (
        jnp.searchsorted(ordered, f, side="left"),
        jnp.searchsorted(ordered, f, side="right") - 1,
    )


def centered_rank(fitness: jnp.ndarray) -> jnp.ndarray:
    """Ranks scaled to [-0.5, 0.5] (Salimans et al. 2017); ties share their average rank.

    The weights sum to zero and depend only on the order of the fitness values, so any
    strictly increasing map of fitness leaves them unchanged. Non-finite fitness ranks last.

    Example:
      >>> [round(float(w), 4) for w in centered_rank(jnp.array([3.0, -1.0, 10.0, jnp.nan]))]
      [0.1667, -0.1667, 0.5, -0.5]
    """
    dtype = _dtype(fitness)
    f = jnp.where(jnp.isfinite(fitness), fitness, -jnp.inf).astype(dtype)
    p = f.shape[0]
    low, high = _tie_span(f)
    # (2·rank - (P-1)) / (2(P-1)) with 2·rank = low + high: integer numerators symmetric about
    # zero, so the weights are exactly antisymmetric and sum to exactly zero.
    return (low + high - (p - 1)).astype(dtype) / (2.0 * (p - 1))


def _finite_or_worst(fitness: jnp.ndarray) -> jnp.ndarray:
    finite = jnp.isfinite(fitness)
    worst = jnp.min(jnp.where(finite, fitness, jnp.inf))
    worst = jnp.where(jnp.any(finite), worst, 0.0)
    return jnp.where(finite, fitness, worst).astype(_dtype(fitness))


def z_score(fitness: jnp.ndarray) -> jnp.ndarray:
    """``(F - mean) / std``; zeros when all fitness is equal. Non-finite fitness becomes the
    worst finite value first.

    Example:
      >>> [round(float(w), 3) for w in z_score(jnp.array([1.0, 2.0, 3.0]))]
      [-1.225, 0.0, 1.225]
    """
    f = _finite_or_worst(fitness)
    # On values scaled into [-1, 1] first (the z-score does not change): squared as they come,
    # fitness past about 1e19 overflows float32 and below about 1e-19 underflows.
    f = _scaled_to(f, 0)
    std = jnp.std(f)
    return jnp.where(std > 0, (f - jnp.mean(f)) / jnp.where(std > 0, std, 1.0), 0.0)


def raw(fitness: jnp.ndarray) -> jnp.ndarray:
    """Fitness as it is, except non-finite values become the worst finite value.

    Example:
      >>> raw(jnp.array([1.0, jnp.inf, -2.0])).tolist()
      [1.0, -2.0, -2.0]
    """
    return _finite_or_worst(fitness)


def _cumulative(per_rank, dtype) -> jnp.ndarray:
    """``[0, w_0, w_0 + w_1, ...]`` for the per-rank values ``w``, in ``dtype``.

    A table known when the shaping is traced (it depends on P alone) is summed in float64 by
    NumPy and rounded once: a constant of the program, the same on every backend. Computed in
    the program it cost about ten tiny kernels a call (a log, a sum, a cumulative sum), each
    launched for more than it computes at a small P. A traced table is summed in the program.
    """
    try:
        table = np.asarray(per_rank, np.float64)
    except jax.errors.TracerArrayConversionError:
        per_rank = jnp.asarray(per_rank, dtype)
        return jnp.concatenate([jnp.zeros(1, dtype), jnp.cumsum(per_rank)])
    return jnp.asarray(np.concatenate([[0.0], np.cumsum(table)]), dtype)


def _by_rank(fitness: jnp.ndarray, per_rank) -> jnp.ndarray:
    """Gives member ``i`` the value ``per_rank[k]`` of its rank ``k`` (0 = best), averaged over
    the ranks a group of tied members spans; non-finite fitness ranks last."""
    f = jnp.where(jnp.isfinite(fitness), fitness, -jnp.inf).astype(_dtype(fitness))
    p = f.shape[0]
    low, high = _tie_span(f)  # ascending positions of the tie group
    cumulative = _cumulative(per_rank, f.dtype)
    # Best-first ranks of the group are P-1-high .. P-1-low.
    return (cumulative[p - low] - cumulative[p - 1 - high]) / (high - low + 1)


def log_rank_utilities(fitness: jnp.ndarray) -> jnp.ndarray:
    """The NES utilities (Wierstra et al. 2014, used by SNES): for rank ``k = 1..P`` (best
    first) ``u_k = max(0, ln(P/2 + 1) - ln k) / Σ_j max(0, ln(P/2 + 1) - ln j) - 1/P``;
    tied members share the mean utility of the ranks they span.

    They sum to zero; ``u - min(u)`` are the positive log weights of the best half, summing
    to one (the masses of weighted recombination).

    Example:
      >>> [round(float(u), 3) for u in log_rank_utilities(jnp.array([0.0, 3.0, 1.0, 2.0]))]
      [-0.25, 0.48, -0.25, 0.02]
    """
    p = fitness.shape[0]
    raw_u = np.maximum(0.0, np.log(p / 2.0 + 1.0) - np.log(np.arange(1.0, p + 1)))
    return _by_rank(fitness, raw_u / np.sum(raw_u) - 1.0 / p)


def rank_weights(per_rank: jnp.ndarray) -> Shaping:
    """The shaping that gives the member of rank ``k`` (0 = best) the weight ``per_rank[k]``;
    tied members share the mean weight of the ranks they span, so the weights keep their sum.

    Example:
      >>> w = rank_weights(jnp.array([0.75, 0.25, 0.0, -0.5]))(jnp.array([1.0, 4.0, 2.0, 2.0]))
      >>> w.tolist()
      [-0.5, 0.75, 0.125, 0.125]
    """

    def weights(fitness: jnp.ndarray) -> jnp.ndarray:
        return _by_rank(fitness, per_rank)

    return weights


def recombination_weights(elite_size: int) -> Shaping:
    """CMA-ES weights: ``ln(μ + 1/2) - ln k`` for the best ``μ = elite_size`` members
    (``k = 1..μ``), normalised to sum to one; zero for the rest. Tied members share the mean
    weight of the ranks they span.

    Example:
      >>> w = recombination_weights(2)(jnp.array([0.0, 3.0, 1.0, 2.0]))
      >>> [round(float(x), 3) for x in w]
      [0.0, 0.804, 0.0, 0.196]
    """

    def weights(fitness: jnp.ndarray) -> jnp.ndarray:
        k = np.arange(1.0, fitness.shape[0] + 1)
        raw_w = np.where(k <= elite_size, np.log(elite_size + 0.5) - np.log(k), 0.0)
        return _by_rank(fitness, raw_w / np.sum(raw_w))

    return weights


def des_weights(temperature) -> Shaping:
    """The utilities of evosax's SNES with ``temperature > 0``: the discovered recombination
    weights of DES (Lange et al. 2023). For rank ``k = 0..P-1`` (best first) and centred rank
    ``c_k = k/(P-1) - 1/2``, ``w_k = softmax_k(-20 · sigmoid(temperature · c_k))``, then minus
    ``1/P`` so they sum to zero (evosax leaves the ``1/P`` in; a strategy that centres its
    utilities, as ``jaxes.snes`` does, is the same in expectation). Tied members share the mean
    weight of the ranks they span. The higher the temperature, the more of the weight goes
    to the better half.

    Example:
      >>> fitness = jnp.array([0.0, 3.0, 1.0, 2.0])
      >>> [round(float(x), 3) for x in des_weights(30.0)(fitness)]
      [-0.25, 0.283, -0.25, 0.217]
      >>> [round(float(x), 3) for x in des_weights(2.0)(fitness)]
      [-0.25, 0.699, -0.248, -0.201]
    """
    if not isinstance(temperature, jax.core.Tracer) and not (
        isinstance(temperature, int | float | np.number | np.ndarray | jax.Array)
        and np.isfinite(temperature)
        and temperature > 0
    ):
        raise ValueError(f"temperature: expected a finite number > 0, got {temperature!r}")

    def weights(fitness: jnp.ndarray) -> jnp.ndarray:
        return _by_rank(fitness, _des_table(fitness.shape[0], temperature))

    return weights


def _des_table(p: int, temperature):
    """``des_weights``' per-rank values, best first: in float64 NumPy for a concrete
    temperature (a constant of the program), in the program for a traced one."""
    xp = jnp if isinstance(temperature, jax.core.Tracer) else np
    centred = xp.arange(p) / (p - 1) - 0.5
    # sigmoid(x) = (1 + tanh(x/2))/2, which no temperature overflows.
    squashed = 0.5 * (1.0 + xp.tanh(0.5 * temperature * centred))
    # The softmax of -20·squashed, shifted by its largest value (the best rank's, k = 0).
    raw_w = xp.exp(-20.0 * (squashed - squashed[0]))
    return raw_w / xp.sum(raw_w) - 1.0 / p


SHAPINGS: dict[str, Shaping] = {
    "centered_rank": centered_rank,
    "z_score": z_score,
    "raw": raw,
    "log_rank": log_rank_utilities,
}


# The shapings that see fitness only through its ranks.
RANK_SHAPINGS = ("centered_rank", "log_rank")


def get_shaping(shaping: str | Shaping) -> Shaping:
    """Looks up a shaping by name, or passes a callable through.

    Example:
      >>> import jax.numpy as jnp
      >>> get_shaping("z_score") is z_score
      True
      >>> get_shaping(jnp.tanh).__wrapped__ is jnp.tanh  # its weights ``bounded``
      True
      >>> get_shaping("rank")  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      ValueError: fitness_shaping: unknown value 'rank'; allowed: [...] or a callable
    """
    if callable(shaping):
        return shaping if shaping in SHAPINGS.values() and shaping is not raw else _bounded(shaping)
    if shaping not in SHAPINGS:
        raise ValueError(
            f"fitness_shaping: unknown value {shaping!r}; allowed: {sorted(SHAPINGS)} or a callable"
        )
    return _bounded(raw) if shaping == "raw" else SHAPINGS[shaping]


# The band the largest weight a strategy gets is brought into (``bounded``): wide enough that
# raw fitness of any everyday scale reaches the strategy exactly, narrow enough that the
# centroid sums, a step over the smallest σ and an optimizer's squares stay finite in float32.
WEIGHT_BAND = (-20, 40)


def _scaled_to(x: jnp.ndarray, low: int, high: int | None = None) -> jnp.ndarray:
    """``x`` times the power of two that brings its largest magnitude into ``[2^(low-1),
    2^high)`` (``high`` defaults to ``low``); zeros stay zeros. Exact: no digit changes."""
    high = low if high is None else high
    _, exponent = jnp.frexp(jnp.max(jnp.abs(x)))  # largest = m·2^exponent, m in [½, 1)
    shift = jnp.clip(exponent, low, high) - exponent
    # In two halves: a factor below 2^-126 (3e38 to 1 needs 2^-128) would be subnormal, which
    # XLA's CPU backend flushes to zero.
    half = shift // 2
    return jnp.where(jnp.any(x != 0), jnp.ldexp(jnp.ldexp(x, half), shift - half), x)


def bounded(weights: jnp.ndarray) -> jnp.ndarray:
    """``weights`` times the power of two that brings their largest magnitude into
    ``[2^-20, 2^40]`` (``WEIGHT_BAND``); unchanged inside it, and zeros stay zeros.

    A power of two changes no digit, so the direction the weights give is exactly the same;
    only the step's length is bounded (an optimizer like Adam, invariant to that scale, sees no
    difference at all).

    Example:
      >>> import numpy as np
      >>> big = np.array([3e38, -1e38], np.float32)
      >>> bool(np.all(np.asarray(bounded(jnp.asarray(big))) == np.ldexp(big, -88)))
      True
      >>> bounded(jnp.array([1.5, -2.0])).tolist()
      [1.5, -2.0]
    """
    low, high = WEIGHT_BAND
    return _scaled_to(weights, low + 1, high)


def _bounded(shape: Shaping) -> Shaping:
    """``shape`` whose weights are ``bounded``: a strategy's view of an unbounded shaping."""

    def weights(fitness: jnp.ndarray) -> jnp.ndarray:
        return bounded(shape(fitness))

    weights.__wrapped__ = shape
    return weights
