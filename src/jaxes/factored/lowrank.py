"""Matrices kept as factors (``LowRank``), and the few operations a ``tell`` needs on them
without multiplying them out: scaling, differences, norms and inner products.

Low-rank noise (``jaxes.noise.lowrank``) makes each member's displacement ``A Bᵀ``; the
population's weighted sum ``Σ_b c_b A_b B_bᵀ`` is again a product of factors, with the bases
side by side: ``[c_1 A_1 … c_K A_K] [B_1 … B_K]ᵀ``. A ``tell`` that keeps it so computes
norms from ``r × r`` Gram matrices and writes each dense matrix once, into the donated
buffer that keeps it (``jaxes.optim.clipup``).

Every function here takes dense leaves too and does to them exactly what the plain ``jnp``
expression does, so a tree without factors gives the same bits as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxes.factored import ordering

_HIGHEST = jax.lax.Precision.HIGHEST


class LowRank(NamedTuple):
    """A matrix (or a batch of them) kept as factors: ``a @ swapaxes(b)`` over the last two
    axes. ``a`` is ``(..., m, r)``, ``b`` is ``(..., n, r)``; any scale (``1/√r``, ``σ``, the
    antithetic sign, a coefficient) is carried by ``a``. ``r`` may be 0 (the zero matrix)."""

    a: jax.Array
    b: jax.Array

    def dense(self) -> jax.Array:
        """The ``(..., m, n)`` matrix the factors stand for."""
        return jnp.einsum("...mr,...nr->...mn", self.a, self.b, precision=_HIGHEST)


def is_factored(x) -> bool:
    """Whether a leaf is a ``LowRank`` (as ``is_leaf`` for ``jax.tree``)."""
    return isinstance(x, LowRank)


def dense(tree):
    """``tree`` with every ``LowRank`` leaf multiplied out.

    Example:
      >>> import jax.numpy as jnp
      >>> dense({"w": LowRank(jnp.ones((2, 1)), jnp.full((3, 1), 2.0))})["w"].tolist()
      [[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]
    """
    return jax.tree.map(lambda x: x.dense() if is_factored(x) else x, tree, is_leaf=is_factored)


def map_linear(fn: Callable, tree):
    """``fn`` applied to every leaf, where ``fn`` is linear and elementwise (a scaling): a
    ``LowRank`` gets it on its left factor, a dense leaf as it is (the same bits as
    ``jax.tree.map(fn, tree)``).

    Example:
      >>> import jax.numpy as jnp
      >>> x = LowRank(jnp.ones((2, 1)), jnp.ones((2, 1)))
      >>> dense(map_linear(lambda v: 3.0 * v, {"w": x}))["w"].tolist()
      [[3.0, 3.0], [3.0, 3.0]]
    """
    return jax.tree.map(
        lambda x: LowRank(fn(x.a), x.b) if is_factored(x) else fn(x), tree, is_leaf=is_factored
    )


def subtract(x, y):
    """``x - y`` for two leaves: dense ones as ``jnp.subtract``, two ``LowRank`` side by side
    (``[a_x, -a_y] [b_x, b_y]ᵀ``), a ``LowRank`` and a dense one multiplied out.

    Example:
      >>> import jax.numpy as jnp
      >>> x, y = LowRank(jnp.ones((2, 1)), jnp.ones((2, 1))), zeros_like_factors((2, 2))
      >>> subtract(x, y).a.shape, subtract(x, x).dense().tolist()
      ((2, 1), [[0.0, 0.0], [0.0, 0.0]])
    """
    if is_factored(x) and is_factored(y):
        if y.a.shape[-1] == 0:
            return x
        a = jnp.concatenate([x.a, -y.a], axis=-1)
        return LowRank(a, jnp.concatenate([x.b, y.b], axis=-1))
    return jnp.subtract(dense(x), dense(y))


def zeros_like_factors(shape: tuple[int, ...], dtype=jnp.float32) -> LowRank:
    """The zero ``shape`` matrix as factors of rank 0 (nothing to store or multiply)."""
    *lead, m, n = shape
    return LowRank(jnp.zeros((*lead, m, 0), dtype), jnp.zeros((*lead, n, 0), dtype))


def square_norm(x) -> jax.Array:
    """``‖x‖²`` (float32 at least): for a ``LowRank``, ``Σ (AᵀA) ⊙ (BᵀB)``, from two ``r × r``
    Gram matrices.

    Example:
      >>> import jax.numpy as jnp
      >>> x = LowRank(jnp.array([[1.0, 0.0], [0.0, 2.0]]), jnp.array([[3.0, 1.0]]))
      >>> float(square_norm(x)), float(jnp.sum(x.dense() ** 2))
      (13.0, 13.0)
    """
    if not is_factored(x):
        return jnp.sum(jnp.square(x.astype(jnp.promote_types(x.dtype, jnp.float32))))
    gram_a = jnp.einsum("...mr,...ms->...rs", x.a, x.a, precision=_HIGHEST)
    gram_b = jnp.einsum("...nr,...ns->...rs", x.b, x.b, precision=_HIGHEST)
    return jnp.sum(gram_a * gram_b)


def inner(v: jax.Array, x) -> jax.Array:
    """``⟨v, x⟩`` for a dense ``v``: for a ``LowRank``, ``Σ (V B) ⊙ A``, which reads ``v`` once
    and builds no ``m × n`` product.

    Example:
      >>> import jax.numpy as jnp
      >>> x = LowRank(jnp.array([[1.0], [2.0]]), jnp.array([[1.0], [-1.0]]))
      >>> v = jnp.array([[1.0, 2.0], [3.0, 4.0]])
      >>> float(inner(v, x)), float(jnp.sum(v * x.dense()))
      (-3.0, -3.0)
    """
    if not is_factored(x):
        return jnp.sum(v * x)
    vb = jnp.einsum("...mn,...nr->...mr", v, x.b, precision=_HIGHEST)
    return jnp.sum(vb * x.a)


def after(x: LowRank, done: jax.Array) -> LowRank:
    """``x`` unchanged, bit for bit, but computed after ``done``
    (``jaxes.factored.ordering.after`` on its left factor). Writing the leaves of a tree in
    turn, each ``LowRank`` made dense only ``after`` the previous leaf's write, keeps one dense
    product alive at a time; otherwise XLA:CPU's scheduler starts every product at once (they
    depend on nothing else) and holds them all (``benchmarks/sequence.py``)."""
    return LowRank(ordering.after(x.a, done), x.b)
