"""Low-rank perturbations (EGGROLL, "Evolution Strategies at the Hyperscale", 2025).

Every leaf with two or more axes is perturbed over its last two by a rank-``r`` product
``ε = A Bᵀ / √r`` (``A`` is ``m × r``, ``B`` is ``n × r``, both N(0, 1), any leading axes
batched); every other leaf gets full N(0, 1) noise. ``r`` is clamped per leaf to
``min(m, n)``, the largest rank an ``m × n`` matrix has.

``E[vec(ε) vec(ε)ᵀ] = I`` for any ``r``: ``E[ε_ik ε_jl] = (1/r) Σ_a E[A_ia A_ja] E[B_ka B_la]
= δ_ij δ_kl``. So the update, a first moment of the sampled displacements, estimates the same
direction as with Gaussian noise. Higher moments differ (``ε`` is not Gaussian), so a
strategy term derived for Gaussian samples (SNES's and PGPE's σ updates, CMA's covariance)
does not hold for it; those strategies refuse this source unless the term is switched off.

A member's factors cost ``(m + n) r`` normals per matrix instead of ``m n``. ``tell`` sums
``Σ_b c_b A_b B_bᵀ`` as one contraction over bases and rank (``combine``), never a stack of
``m × n`` matrices, and ``jaxes.factored`` runs a member with its factors applied inside the
layers (``x W + (x A) Bᵀ``), so no member matrix is formed at all.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from jaxes.checks import check_int
from jaxes.factored.lowrank import LowRank, dense, is_factored
from jaxes.noise import threefry
from jaxes.noise.keys import base_key
from jaxes.noise.sources import NoiseSource
from jaxes.types import Params

__all__ = [
    "combine",
    "factor_shapes",
    "leaf_rank",
    "lowrank",
    "side_by_side",
]

_HIGHEST = jax.lax.Precision.HIGHEST


def leaf_rank(shape: tuple[int, ...], rank: int) -> int | None:
    """The rank a leaf of ``shape`` is perturbed with: ``min(rank, m, n)`` for two or more
    axes, ``None`` (full Gaussian) for fewer.

    Example:
      >>> leaf_rank((64, 10), 4), leaf_rank((3, 2, 5), 4), leaf_rank((10,), 4)
      (4, 2, None)
    """
    if len(shape) < 2:
        return None
    return min(rank, shape[-2], shape[-1])


def factor_shapes(shape: tuple[int, ...], rank: int) -> tuple[tuple[int, ...], ...]:
    """The shapes of a leaf's factors ``(a, b)``, or ``(shape,)`` for a leaf drawn dense.

    Example:
      >>> factor_shapes((7, 64, 10), 4), factor_shapes((10,), 4)
      (((7, 64, 4), (7, 10, 4)), ((10,),))
    """
    r = leaf_rank(shape, rank)
    if r is None:
        return (shape,)
    lead = shape[:-2]
    return (lead + (shape[-2], r), lead + (shape[-1], r))


def lowrank(rank: int = 1) -> NoiseSource:
    """Rank-``rank`` perturbations ``A Bᵀ / √r`` for every leaf with two or more axes, full
    N(0, 1) noise for the others; all factors from one threefry draw of the member's key.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> src = lowrank(2)
      >>> params = {"w": jnp.zeros((5, 3)), "b": jnp.zeros(3)}
      >>> f = src.factors(None, jax.random.key(0), 0, params)
      >>> f["w"].a.shape, f["w"].b.shape, f["b"].shape
      ((5, 2), (3, 2), (3,))
      >>> bool(jnp.allclose(src.sample(None, jax.random.key(0), 0, params)["w"], f["w"].dense()))
      True
    """
    rank = check_int("rank", rank, 1)

    def init(key, params):
        del key, params
        return None

    def factors(noise_state, key, j, params: Params):
        del noise_state
        key = base_key(key, j)
        leaves, treedef = jax.tree.flatten(params)
        shapes = [factor_shapes(jnp.shape(x), rank) for x in leaves]
        sizes = [math.prod(s) for group in shapes for s in group]
        # One draw for every factor of every leaf: one RNG kernel, however many leaves.
        flat = threefry.normal(key, (sum(sizes),), jnp.float32)
        out, at = [], 0
        for group in shapes:
            parts = []
            for shape in group:
                size = math.prod(shape)
                parts.append(flat[at : at + size].reshape(shape))
                at += size
            if len(parts) == 1:
                out.append(parts[0])
            else:
                a, b = parts
                out.append(LowRank(a * jnp.float32(1 / math.sqrt(a.shape[-1])), b))
        return treedef.unflatten(out)

    def sample(noise_state, key, j, params):
        return dense(factors(noise_state, key, j, params))

    return NoiseSource(
        init, sample, f"lowrank(r={rank})", gaussian=False, factors=factors, combine=combine
    )


def combine(coeffs: jax.Array, stacked) -> list[jax.Array]:
    """``[Σ_b coeffs[k, b] ε_b for each row k]`` from one leaf's noise stacked over bases.

    For a ``LowRank`` leaf (``a``: ``(batch, ..., m, r)``) this is one contraction over bases
    and rank together, an ``m × (batch·r)`` by ``(batch·r) × n`` product: no stack of
    ``m × n`` matrices is formed. A dense leaf is a plain weighted sum.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> a = jax.random.normal(jax.random.key(0), (2, 3, 1))  # 2 bases of 3 x 4 matrices
      >>> b = jax.random.normal(jax.random.key(1), (2, 4, 1))
      >>> c = jnp.array([[1.0, -2.0]])
      >>> ref = a[0] @ b[0].T - 2.0 * a[1] @ b[1].T
      >>> bool(jnp.allclose(combine(c, LowRank(a, b))[0], ref, atol=1e-5))
      True
    """
    if not is_factored(stacked):
        out = jnp.tensordot(coeffs, stacked, axes=(1, 0), precision=_HIGHEST)
        return [out[k] for k in range(coeffs.shape[0])]
    weighted = jnp.einsum("kb,b...mr->kb...mr", coeffs, stacked.a, precision=_HIGHEST)
    out = jnp.einsum("kb...mr,b...nr->k...mn", weighted, stacked.b, precision=_HIGHEST)
    return [out[k] for k in range(coeffs.shape[0])]


def side_by_side(coeffs: jax.Array, stacked) -> list:
    """``combine``'s sums kept as factors: for each row ``k``, ``Σ_b coeffs[k, b] A_b B_bᵀ`` as
    one ``LowRank`` whose factors hold the bases side by side (inner size ``batch·r``), with
    the coefficients on the left. A dense leaf is summed as ``combine`` sums it.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> a = jax.random.normal(jax.random.key(0), (2, 3, 1))
      >>> b = jax.random.normal(jax.random.key(1), (2, 4, 1))
      >>> c = jnp.array([[1.0, -2.0]])
      >>> kept = side_by_side(c, LowRank(a, b))[0]
      >>> kept.a.shape, bool(jnp.allclose(kept.dense(), combine(c, LowRank(a, b))[0], atol=1e-5))
      ((3, 2), True)
    """
    if not is_factored(stacked):
        return combine(coeffs, stacked)

    def beside(x):  # (batch, ..., m, r) -> (..., m, batch·r)
        x = jnp.moveaxis(x, 0, -2)
        return x.reshape(*x.shape[:-2], x.shape[-2] * x.shape[-1])

    weighted = jnp.einsum("kb,b...mr->kb...mr", coeffs, stacked.a, precision=_HIGHEST)
    right = beside(stacked.b)
    return [LowRank(beside(weighted[k]), right) for k in range(coeffs.shape[0])]
