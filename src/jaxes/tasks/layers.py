"""flax layers that read their weights where they are used, for the sequence models.

``Dense`` is ``nn.Dense`` (so ``jaxes.factored.apply`` adds a member's low-rank term to it)
whose weights, with ``stream=True``, are read only once its input exists
(``jaxes.factored.ordering.after``): a decode loop then converts one layer's weights at a
time instead of XLA hoisting every layer's converts ahead of the loop. ``Embed`` is
``nn.Embed`` that rounds the rows it looks up to ``dtype``, not the whole table.

Example:
  >>> import jax, jax.numpy as jnp
  >>> layer = Dense(3, use_bias=False, stream=True)
  >>> params = layer.init(jax.random.key(0), jnp.ones((2, 4)))["params"]
  >>> sorted(params), layer.apply({"params": params}, jnp.ones((2, 4))).shape
  (['kernel'], (2, 3))
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import linen as nn
from flax.linen.dtypes import promote_dtype

from jaxes.factored import ordering


class Dense(nn.Dense):
    """``nn.Dense``, whose weights with ``stream`` are read only once its input exists."""

    stream: bool = False

    @nn.compact
    def __call__(self, inputs):
        # Written out, not super().__call__: flax intercepts both calls, and
        # jaxes.factored.apply would add the layer's term twice.
        shape = (inputs.shape[-1], self.features)
        kernel = self.param("kernel", self.kernel_init, shape, self.param_dtype)
        bias = None
        if self.use_bias:
            bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype)
        if self.stream:
            kernel, bias = ordering.after((kernel, bias), inputs)
        inputs, kernel, bias = promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        dims = (((inputs.ndim - 1,), (0,)), ((), ()))
        out = jax.lax.dot_general(inputs, kernel, dims, precision=self.precision)
        return out if bias is None else out + bias


class Embed(nn.Embed):
    """``nn.Embed`` that rounds the rows it looks up, not the table: the same values, without
    a copy of the table in ``dtype``; with ``stream`` its ``attend`` (a tied head) reads the
    table only once its query exists."""

    stream: bool = False

    def __call__(self, inputs):
        rows = jnp.take(self.embedding, inputs, axis=0)
        return rows if self.dtype is None else rows.astype(self.dtype)

    def attend(self, query):
        # Unstreamed, XLA hoists the table's converts out of the decode loops (on the CPU,
        # which widens a bfloat16 dot: three float32 copies of Qwen2.5's 151,936-row table,
        # 1.6 GB at 0.5B); streamed, one step's copy at a time.
        embedding = self.embedding
        if self.stream:
            embedding = ordering.after(embedding, query)
        query, embedding = self.promote_dtype(query, embedding, dtype=self.dtype)
        return jnp.dot(query, embedding.T)
