"""Weighted sums of a population's displacements, rebuilt from keys a chunk at a time.

``moments`` computes ``Σ_i coeffs[k, i] δ_i`` (and ``Σ_i square_coeffs[k, i] δ_i²``) for a
``Perturbations`` recipe without ever holding the ``P × d`` population: it rebuilds
``tell_chunk`` bases at a time and adds each chunk into one running sum per row. Four paths,
one function each, sum a chunk:

  * ``dot_sums``: the chunk's noise stacked and contracted with one dot (a chunk that fits in
    cache);
  * ``fused_sums``: a few bases as unrolled multiply-adds, which XLA fuses with reading the
    noise (a big model), so no chunk is stored;
  * ``factored_sums``: a low-rank source's factors contracted as they are, never multiplied
    out (no squares asked; a rounded leaf beside them sums its realised displacements);
  * ``rounded_sums``: a leaf whose members were rounded to a narrower dtype sums the
    displacement the member really had, ``x_i - θ``, not the nominal ``s_i σ ε``.

Which path runs is decided from shapes and settings at trace time, and each keeps its
operations in one fixed order: the same recipe, key and coefficients give bit-identical sums.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxes.factored.lowrank import LowRank, is_factored, zeros_like_factors
from jaxes.factored.noise import side_by_side
from jaxes.noise.budget import FUSED_MAX_BATCH
from jaxes.noise.keys import noise_key
from jaxes.trees import broadcast_like, is_rounded, master_dtype
from jaxes.types import Params

_HIGHEST = jax.lax.Precision.HIGHEST


class _Rows(NamedTuple):
    """Coefficient rows of one call (first moments, then squares if asked), by member sign:
    ``plus`` for the ``+ε`` members (every member without pairs), ``minus`` for the ``-ε`` ones
    (``None`` without pairs), ``folded`` for ``ε_j`` itself (``plus ∓ minus``)."""

    plus: list
    minus: list
    folded: list


class _Leaves(NamedTuple):
    """The params' leaves with each one's σ, whether its members were rounded, the dtype they
    were rounded to, and the dtype its running sums accumulate in."""

    values: list
    treedef: Any
    sigma: list
    rounded: list
    dtypes: list
    acc: list


def check_coeffs(coeffs, population_size: int) -> jax.Array:
    """``coeffs`` as a ``(K, P)`` array, never narrower than float32.

    Example:
      >>> check_coeffs([[1, 2, 3, 4]], 4).dtype
      dtype('float32')
    """
    coeffs = jnp.asarray(coeffs)
    # Never narrower than float32, never narrowed: float64 masses give float64 sums.
    coeffs = coeffs.astype(jnp.promote_types(coeffs.dtype, jnp.float32))
    if coeffs.ndim != 2 or coeffs.shape[1] != population_size:
        raise ValueError(f"coeffs: expected shape (K, {population_size}), got {coeffs.shape}")
    return coeffs


def dot_sums(c: jax.Array, eps: jax.Array) -> list[jax.Array]:
    """``[Σ_b c[k, b] eps[b] for k]`` for noise stacked over bases, as one dot.

    Example:
      >>> import jax.numpy as jnp
      >>> [x.tolist() for x in dot_sums(jnp.array([[1.0, 2.0]]), jnp.array([[1.0], [3.0]]))]
      [[7.0]]
    """
    out = jnp.tensordot(c, eps, axes=(1, 0), precision=_HIGHEST)
    return [out[k] for k in range(c.shape[0])]


def fused_sums(c: jax.Array, eps: list) -> list[jax.Array]:
    """``[Σ_b c[k, b] eps[b] for k]`` for a list of a few bases, as unrolled multiply-adds
    that XLA fuses with reading the noise and adding into the running sums.

    Example:
      >>> import jax.numpy as jnp
      >>> [x.tolist() for x in fused_sums(jnp.array([[1.0, 2.0]]), [jnp.ones(1), jnp.ones(1)])]
      [[3.0]]
    """
    return [sum(c[k, b] * eps[b] for b in range(len(eps))) for k in range(c.shape[0])]


def factored_sums(combine: Callable, stacked: list, leaves, chunk, kept: list) -> list:
    """Per leaf, the chunk's first-moment sums from its factors stacked over bases (``stacked``:
    one entry per leaf), contracted by ``combine`` (the source's, or ``side_by_side`` to keep
    them as factors; ``kept``: the rows summed for leaves not rounded); a rounded leaf (its
    noise is dense) sums the displacement its members really had."""
    out = []
    for f, x, s, r, t in zip(
        stacked, leaves.values, leaves.sigma, leaves.rounded, leaves.dtypes, strict=True
    ):
        if r:
            out.append(rounded_sums(chunk, x, s, f, t, dot_sums))
        else:
            out.append([combine(_take(chunk.folded[0], kept), f)])
    return out


def _take(c: jax.Array, kept: list) -> jax.Array:
    """Rows ``kept`` of the coefficients ``c`` (``c`` itself when every row is kept)."""
    if len(kept) == c.shape[0]:
        return c
    return jnp.stack([c[k] for k in kept])


def _per_base(fn, eps):
    """``fn`` of a stacked block of bases, or of each base in a list of them."""
    return [fn(b) for b in eps] if isinstance(eps, list) else fn(eps)


def nominal_sums(folded: list, eps, weighted: Callable) -> list:
    """A leaf's sums of ``ε`` (and ``ε²``) with the pairs folded into the coefficients; σ is
    applied once, at the end."""
    sums = [weighted(folded[0], eps)]
    if len(folded) > 1:
        sums.append(weighted(folded[1], _per_base(jnp.square, eps)))
    return sums


def rounded_sums(rows: _Rows, x, sigma, eps, dtype, weighted: Callable) -> list:
    """A rounded leaf's sums of the realised displacements ``x_i - θ`` (and their squares),
    each member rebuilt in float32 and rounded to ``dtype`` as it was evaluated."""
    theta = x.astype(jnp.float32)

    def realised(sign):
        def one(b):
            member = theta + jnp.float32(sign) * (sigma * b)
            return member.astype(dtype).astype(jnp.float32) - theta

        return _per_base(one, eps)

    def add(a, b):
        return [u + v for u, v in zip(a, b, strict=True)]

    d_plus = realised(1.0)
    sums = [weighted(rows.plus[0], d_plus)]
    if len(rows.plus) > 1:
        sums.append(weighted(rows.plus[1], _per_base(jnp.square, d_plus)))
    if rows.minus[0] is not None:
        d_minus = realised(-1.0)
        sums[0] = add(sums[0], weighted(rows.minus[0], d_minus))
        if len(rows.minus) > 1:
            sums[1] = add(sums[1], weighted(rows.minus[1], _per_base(jnp.square, d_minus)))
    return sums


def _draw(base_of: Callable, start, batch: int, fused: bool):
    """The chunk's noise, per leaf: stacked over bases, or (fused) a list of one per base."""
    if not fused:
        return jax.vmap(base_of)(start + jnp.arange(batch))
    # A few bases, each its own slice of the table: XLA reads them inside the fused
    # multiply-adds (a vmap would gather them into a stored block first).
    draws = [base_of(start + b) for b in range(batch)]
    return [list(leaf) for leaf in zip(*draws, strict=True)]


def _dense_sums(chunk: _Rows, leaves: _Leaves, eps: list, weighted: Callable, kept) -> list:
    """Per leaf, the chunk's sums from its dense noise ``eps`` (one entry per leaf); a leaf not
    rounded sums only the ``kept`` first-moment rows."""
    sums = []
    for x, s, e, r, t in zip(
        leaves.values, leaves.sigma, eps, leaves.rounded, leaves.dtypes, strict=True
    ):
        if r:
            sums.append(rounded_sums(chunk, x, s, e, t, weighted))
        else:
            folded = [_take(chunk.folded[0], kept), *chunk.folded[1:]]
            sums.append(nominal_sums(folded, e, weighted))
    return sums


def _split_rows(groups: list, antithetic: bool) -> _Rows:
    plus = [c[:, 0::2] if antithetic else c for c in groups]
    minus = [c[:, 1::2] if antithetic else None for c in groups]
    # First moments fold a pair as (c+ - c-) ε, squares as (c+ + c-) ε².
    folded = [
        p if m is None else p + sign * m
        for p, m, sign in zip(plus, minus, (-1.0, 1.0), strict=False)
    ]
    return _Rows(plus, minus, folded)


def _map_rows(fn, rows: _Rows) -> _Rows:
    return _Rows(*([None if c is None else fn(c) for c in cs] for cs in rows))


def _leaves_of(params: Params, sigma, dtypes: Params, coeff_dtype) -> _Leaves:
    values, treedef = jax.tree.flatten(params)
    sig = treedef.flatten_up_to(broadcast_like(sigma, params))
    rounded = [is_rounded(t.dtype) for t in jax.tree.leaves(dtypes)]
    out_dtypes = [t.dtype for t in jax.tree.leaves(dtypes)]
    acc = [jnp.promote_types(coeff_dtype, master_dtype(t)) for t in out_dtypes]
    return _Leaves(values, treedef, sig, rounded, out_dtypes, acc)


def _sum_chunks(
    chunk_sums: Callable, n_chunks: int, batch: int, leaves: _Leaves, rows: _Rows, kept: list
):
    """Every chunk's sums added up: one chunk as it is, more in a scan of running sums (a leaf
    not rounded carries only the ``kept`` first-moment rows)."""
    if n_chunks == 1:
        return chunk_sums(0)
    zeros = [
        [
            [jnp.zeros(jnp.shape(x), a)] * (len(kept) if kind == 0 and not r else c.shape[0])
            for kind, c in enumerate(rows.folded)
        ]
        for x, a, r in zip(leaves.values, leaves.acc, leaves.rounded, strict=True)
    ]

    def body(acc, start):
        return jax.tree.map(jnp.add, acc, chunk_sums(start)), None

    total, _ = jax.lax.scan(body, zeros, jnp.arange(n_chunks) * batch)
    return total


def worth_keeping(m: int, n: int, width: int) -> bool:
    """Whether an ``m × n`` sum is kept as factors of inner size ``width`` (bases × rank): only
    where they take at most half the matrix's room. Below that the factors (and their draw)
    cost more than the matrix, and a dense sum is cheaper and faster
    (``benchmarks/factored_tell.py``).

    Example:
      >>> worth_keeping(2048, 2048, 128), worth_keeping(256, 256, 128)
      (True, False)
    """
    return 2 * width * (m + n) <= m * n


def _kept_or_combined(combine: Callable, n_chunks: int, coeffs, stacked) -> list:
    """``side_by_side`` for a factored leaf ``worth_keeping`` over every chunk, else
    ``combine``."""
    if is_factored(stacked):
        (m, r), n = stacked.a.shape[-2:], stacked.b.shape[-2]
        if worth_keeping(m, n, n_chunks * stacked.a.shape[0] * r):
            return side_by_side(coeffs, stacked)
    return combine(coeffs, stacked)


def _place_chunks(chunk_sums: Callable, n_chunks: int, batch: int):
    """Every chunk's sums, kept as factors: each chunk's ``LowRank`` factors are written into
    their own columns of factors as wide as all chunks together, so only one chunk's draw
    is held at a time; dense sums (rounded leaves) are added up."""
    if n_chunks == 1:
        return chunk_sums(0)
    one = jax.eval_shape(chunk_sums, 0)

    def zeros(x):
        if not is_factored(x):
            return jnp.zeros(x.shape, x.dtype)
        return LowRank(*(jnp.zeros((*f.shape[:-1], n_chunks * f.shape[-1]), f.dtype) for f in x))

    def place(at):
        def one_leaf(acc, x):
            if not is_factored(x):
                return acc + x
            width = x.a.shape[-1]
            return LowRank(
                *(
                    jax.lax.dynamic_update_slice_in_dim(total, part, at * width, axis=-1)
                    for total, part in zip(acc, x, strict=True)
                )
            )

        return one_leaf

    def body(acc, i):
        new = chunk_sums(i * batch)
        return jax.tree.map(place(i), acc, new, is_leaf=is_factored), None

    init = jax.tree.map(zeros, one, is_leaf=lambda x: is_factored(x) or hasattr(x, "shape"))
    total, _ = jax.lax.scan(body, init, jnp.arange(n_chunks))
    return total


def _scaled(total: list, leaves: _Leaves, kind: int, k: int, kept: list) -> Params:
    """Row ``k`` of moment ``kind`` as a pytree: nominal leaves summed ε, so they are scaled by
    σ (σ² for squares) once, here; rounded ones summed their realised displacement. A first
    moment row a nominal leaf did not sum (not in ``kept``) is exactly zero."""
    row = []
    for parts, s, r, x, a in zip(
        total, leaves.sigma, leaves.rounded, leaves.values, leaves.acc, strict=True
    ):
        dtype = master_dtype(x.dtype)
        if kind == 0 and not r and k not in kept:
            as_factors = bool(parts[0]) and is_factored(parts[0][0])
            zero = zeros_like_factors(jnp.shape(x), dtype) if as_factors else None
            row.append(jnp.zeros(jnp.shape(x), dtype) if zero is None else zero)
            continue
        scale = jnp.asarray(1.0 if r else s, a)
        scale = scale if kind == 0 or r else jnp.square(scale)
        at = kept.index(k) if kind == 0 and not r else k
        part = parts[kind][at]
        if is_factored(part):
            row.append(LowRank((part.a * scale).astype(dtype), part.b.astype(dtype)))
        else:
            row.append((part * scale).astype(dtype))
    return leaves.treedef.unflatten(row)


def moments(
    recipe,
    noise_state,
    key,
    params: Params,
    sigma,
    coeffs: jax.Array,
    square_coeffs: jax.Array | None = None,
    dtypes: Params | None = None,
    paired_rows: tuple[int, ...] = (),
    keep_factors: bool = False,
) -> tuple[list[Params], list[Params] | None]:
    """``Perturbations.moments`` for the recipe ``recipe`` (a ``Perturbations``): see there."""
    # A narrow leaf whose member is round(θ) + δ (factored noise) sums its nominal δ.
    dtypes = recipe.member_dtypes(noise_state, params, dtypes)
    groups = [check_coeffs(coeffs, recipe.population_size)]
    if square_coeffs is not None:
        groups.append(check_coeffs(square_coeffs, recipe.population_size))
    rows = _split_rows(groups, recipe.antithetic)
    leaves = _leaves_of(params, sigma, dtypes, groups[0].dtype)
    # Rounding is decided per leaf: a leaf whose members were not rounded folds a pair's
    # equal coefficients to exactly zero, so it sums no paired row at all.
    paired = set(paired_rows) if recipe.antithetic else set()
    kept = [k for k in range(groups[0].shape[0]) if k not in paired]
    n = recipe.num_base
    squares = square_coeffs is not None
    # Factors are contracted as they are (one contraction per leaf) where nothing needs the
    # dense ε of a factored leaf: no squares asked. A rounded leaf (never factored: its
    # noise is dense) sums its realised displacement beside them.
    factored = recipe.source.combine is not None and not squares and not all(leaves.rounded)
    keep_factors = keep_factors and factored
    if factored:
        batch = recipe._factor_chunk(noise_state, key, params)
    else:
        batch = recipe.tell_chunk(params, dtypes, squares)
    n_chunks = -(-n // batch)
    # Padding bases carry zero coefficients, so their noise never counts.
    rows = _map_rows(lambda c: jnp.pad(c, ((0, 0), (0, n_chunks * batch - n))), rows)
    fused = batch <= FUSED_MAX_BATCH
    weighted = fused_sums if fused else dot_sums
    treedef = leaves.treedef

    def factors_of(j):
        return treedef.flatten_up_to(recipe.source.factors(noise_state, noise_key(key), j, params))

    def base_of(j):
        return treedef.flatten_up_to(recipe.base(noise_state, key, j, params))

    def chunk_sums(start):
        chunk = _map_rows(lambda c: jax.lax.dynamic_slice_in_dim(c, start, batch, 1), rows)
        if factored:
            stacked = jax.vmap(factors_of)(start + jnp.arange(batch))
            combine = recipe.source.combine
            if keep_factors:
                combine = functools.partial(_kept_or_combined, combine, n_chunks)
            return factored_sums(combine, stacked, leaves, chunk, kept)
        return _dense_sums(chunk, leaves, _draw(base_of, start, batch, fused), weighted, kept)

    if keep_factors:
        total = _place_chunks(chunk_sums, n_chunks, batch)
    else:
        total = _sum_chunks(chunk_sums, n_chunks, batch, leaves, rows, kept)
    kinds = [
        [_scaled(total, leaves, kind, k, kept) for k in range(groups[kind].shape[0])]
        for kind in range(len(groups))
    ]
    return kinds[0], (kinds[1] if len(kinds) > 1 else None)
