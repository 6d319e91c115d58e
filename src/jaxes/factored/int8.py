"""Weight-only int8: matrices stored as int8 with one float32 scale per output channel.

A leaf ``W`` (``(..., m, n)``, two or more axes) is kept as ``Int8(values, scale)`` with
``scale[..., j] = max_i |W[..., i, j]| / 127`` and ``values = round(W / scale)`` in int8, so
``W ≈ values * scale``. A layer reading such a kernel computes ``(x @ values) * scale``: the
int8 values are exact in any float format (``|v| ≤ 127``), so the product accumulates in float32
and only the weights are quantised. With ES the float32 master θ is quantised once per
generation and every member is that quantised centre plus its displacement, so the update
estimates the gradient at ``dequantize(quantize(θ))`` (``jaxes.factored.evaluate(...,
quantize=True)``).

Example:
  >>> import jax.numpy as jnp
  >>> q = quantize({"w": jnp.array([[1.0, -0.5], [0.25, 2.0]]), "b": jnp.ones(2)})
  >>> q["w"].values.dtype, q["w"].scale.tolist(), q["b"].dtype
  (dtype('int8'), [0.007874015718698502, 0.015748031437397003], dtype('float32'))
  >>> dequantize(q)["w"].tolist()
  [[1.0, -0.5039370059967041], [0.25196850299835205, 2.0]]
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxes.types import Params

_LEVELS = 127


class Int8(NamedTuple):
    """A quantised matrix (or a batch of them over leading axes): ``values`` int8
    ``(..., m, n)``, ``scale`` float32 ``(..., n)``, one per output channel."""

    values: jax.Array
    scale: jax.Array

    def dequantize(self) -> jax.Array:
        """The float32 matrix the int8 values stand for."""
        return self.values.astype(jnp.float32) * self.scale[..., None, :]


def is_int8(x) -> bool:
    """Whether a leaf is an ``Int8`` (as ``is_leaf`` for ``jax.tree``)."""
    return isinstance(x, Int8)


def quantize_leaf(w: jax.Array) -> Int8:
    """``w`` (two or more axes) to int8 with a float32 scale per output channel (last axis);
    an all-zero channel gets scale 1."""
    w = jnp.asarray(w, jnp.float32)
    peak = jnp.max(jnp.abs(w), axis=-2)
    scale = jnp.where(peak > 0, peak / _LEVELS, 1.0)
    values = jnp.clip(jnp.round(w / scale[..., None, :]), -_LEVELS, _LEVELS).astype(jnp.int8)
    return Int8(values, scale)


def quantize(params: Params) -> Params:
    """Every leaf with two or more axes as ``Int8``; vectors (biases, norms) stay as they are."""
    return jax.tree.map(lambda x: quantize_leaf(x) if jnp.ndim(x) >= 2 else x, params)


def dequantize(params: Params) -> Params:
    """Every ``Int8`` leaf as the float32 matrix it stands for."""
    return jax.tree.map(lambda x: x.dequantize() if is_int8(x) else x, params, is_leaf=is_int8)


def matmul(x: jax.Array, w: Int8) -> jax.Array:
    """``x @ dequantize(w)`` as ``(x @ values) * scale``, accumulated in float32."""
    dtype = jnp.promote_types(x.dtype, jnp.bfloat16)
    out = jnp.matmul(x.astype(dtype), w.values.astype(dtype), preferred_element_type=jnp.float32)
    return out * w.scale


def check_leaf(path, x) -> None:
    """An int8 array that is not an ``Int8`` has no scales: refused, naming the leaf. Wider
    integers are not weights of this format (a ``uint16`` table holds a bfloat16 one's bits:
    ``jaxes.tasks.layers.embedding_bits``)."""
    if not is_int8(x) and jnp.result_type(x) in (jnp.int8, jnp.uint8):
        raise ValueError(
            f"params: leaf {jax.tree_util.keystr(path)} is {jnp.result_type(x)} without scales; "
            "quantise float weights with jaxes.factored.int8.quantize, which keeps a scale per "
            "output channel"
        )
