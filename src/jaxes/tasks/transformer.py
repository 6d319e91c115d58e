"""A small decoder-only transformer with an explicit, functional KV cache.

Every projection (the fused q/k/v, the attention output, the MLP's two layers, the output
head) is an ``nn.Dense``, so ``jaxes.factored.apply`` runs a member with its low-rank
perturbation inside each of them (``x W + (x A) Bᵀ``) and never builds the member's
matrices; the two ``nn.Embed`` tables take theirs at the lookup (``A[tokens] Bᵀ``), and the
LayerNorm scales and biases, being small, have their displacement added to the parameter.

The cache is a pytree passed in and returned (``KVCache``), not a mutable flax collection, so
decoding is a pure function that ``lax.scan`` carries and ``vmap`` batches over members.

``model.apply({"params": params}, tokens, cache, position)`` writes ``tokens`` ``(batch, T)``
at positions ``position .. position + T - 1`` and returns their logits and the new cache: one
call prefills a prompt, later calls decode one token each. With ``cache=None`` it is the
plain causal forward pass over the whole sequence (for backprop, and the reference the
cached decode is tested against).

The model computes in its parameters' dtype (float32 or bfloat16), or in ``dtype`` when set:
``Transformer(..., dtype=jnp.bfloat16)`` on float32 parameters rounds each weight where its
layer reads it (flax's mixed precision). Attention scores, the softmax and LayerNorm
statistics stay in float32. A weight that a decode loop never changes is still converted by
XLA once, ahead of the loop, for the whole model at a time (its bfloat16 rounding, and on
the CPU, which multiplies in float32, a float32 copy too): ``stream_weights=True`` ties each
projection's weights to its input (``jaxes.factored.ordering.after``), so one layer's converted
weights exist at a time, at the cost of converting them at every call.

Example:
  >>> import jax, jax.numpy as jnp
  >>> model = Transformer(vocab=12, d_model=16, heads=2, layers=1, max_len=8)
  >>> params = jax.jit(model.init)(jax.random.key(0), jnp.zeros((1, 1), jnp.int32))["params"]
  >>> apply = jax.jit(lambda *args: model.apply({"params": params}, *args))
  >>> tokens = jnp.array([[1, 2, 3, 4]])
  >>> full, _ = apply(tokens)  # no cache: the whole sequence
  >>> cache = model.init_cache(1, jnp.float32)
  >>> first, cache = apply(tokens[:, :3], cache, 0)  # prefill
  >>> last, cache = apply(tokens[:, 3:], cache, 3)  # one decode step
  >>> cached = jnp.concatenate([first, last], axis=1)
  >>> cached.shape, bool(jnp.allclose(cached, full, atol=1e-5))
  ((1, 4, 12), True)
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxes.tasks.layers import Dense, Embed


class KVCache(NamedTuple):
    """Keys and values of every position written so far, every layer stacked.

    Attributes:
      k: ``(layers, batch, max_len, heads, head_dim)``.
      v: the same shape.
    """

    k: jax.Array
    v: jax.Array


def _check_position(position, length: int, max_len: int) -> None:
    # A traced position cannot be checked; a concrete one can, and past max_len the cache
    # write would silently clamp (overwriting the last rows) rather than fail.
    if isinstance(position, int) and not 0 <= position <= max_len - length:
        raise ValueError(
            f"position: {length} tokens at position {position} do not fit in max_len={max_len}"
        )


class Block(nn.Module):
    """One pre-LayerNorm block: causal self-attention, then a GELU MLP, each residual."""

    d_model: int
    heads: int
    mlp: int
    dtype: Any = None
    stream_weights: bool = False

    @nn.compact
    def __call__(self, x, cache_kv, position):
        batch, length, _ = x.shape
        head_dim = self.d_model // self.heads
        dense = functools.partial(Dense, dtype=self.dtype, stream=self.stream_weights)
        qkv = dense(3 * self.d_model, name="qkv")(
            nn.LayerNorm(name="ln_attention", dtype=self.dtype)(x)
        )
        q, k, v = jnp.split(qkv.reshape(batch, length, 3 * self.heads, head_dim), 3, axis=2)
        queries_at = position + jnp.arange(length)
        if cache_kv is None:
            keys, values, keys_at = k, v, queries_at
        else:
            cache_k, cache_v = cache_kv
            at = (0, position, 0, 0)
            keys = jax.lax.dynamic_update_slice(cache_k, k.astype(cache_k.dtype), at)
            values = jax.lax.dynamic_update_slice(cache_v, v.astype(cache_v.dtype), at)
            cache_kv = (keys, values)
            # Rows not yet written are zeros: the causal mask hides them, as they are later.
            keys_at = jnp.arange(cache_k.shape[1])
        scores = jnp.einsum(
            "bthd,bshd->bhts", q, keys.astype(q.dtype), preferred_element_type=jnp.float32
        ) / jnp.sqrt(jnp.float32(head_dim))
        visible = keys_at[None, :] <= queries_at[:, None]
        scores = jnp.where(visible, scores, jnp.finfo(jnp.float32).min)
        weights = jax.nn.softmax(scores, axis=-1).astype(q.dtype)
        attended = jnp.einsum("bhts,bshd->bthd", weights, values.astype(q.dtype))
        x = x + dense(self.d_model, name="out")(attended.reshape(batch, length, -1))
        h = dense(self.mlp * self.d_model, name="mlp_in")(
            nn.LayerNorm(name="ln_mlp", dtype=self.dtype)(x)
        )
        x = x + dense(self.d_model, name="mlp_out")(nn.gelu(h))
        return x, cache_kv


class Transformer(nn.Module):
    """A decoder-only transformer: token and learned position embeddings, ``layers``
    pre-LayerNorm blocks, a final LayerNorm and a dense output head.

    Attributes:
      vocab: vocabulary size (token ids ``0 .. vocab - 1``).
      d_model: width of the residual stream; ``heads`` must divide it.
      heads: attention heads.
      layers: blocks.
      mlp: the MLP's hidden width as a multiple of ``d_model``.
      max_len: positions the model knows (and the cache holds).
      dtype: the dtype every layer computes in; ``None``: the parameters' dtype.
      stream_weights: read each projection's weights only once its input exists, so that
        one layer's converted weights are held at a time rather than the whole model's
        (less memory in a decode loop, a convert per call; the same outputs, bit for bit).
        On the CPU it serves float32 params read by a ``dtype=jnp.bfloat16`` model:
        bfloat16 params are widened there before any tie, and need more memory with it.
    """

    vocab: int
    d_model: int = 64
    heads: int = 4
    layers: int = 2
    mlp: int = 4
    max_len: int = 64
    dtype: Any = None
    stream_weights: bool = False

    def init_cache(self, batch: int, dtype=jnp.float32) -> KVCache:
        """An empty cache for ``batch`` sequences (no parameters needed).

        Example:
          >>> Transformer(vocab=5, d_model=8, heads=2, max_len=6).init_cache(3).k.shape
          (2, 3, 6, 2, 4)
        """
        if self.d_model % self.heads:
            raise ValueError(f"heads: {self.heads} does not divide d_model={self.d_model}")
        shape = (self.layers, batch, self.max_len, self.heads, self.d_model // self.heads)
        return KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype))

    @nn.compact
    def __call__(self, tokens: jax.Array, cache: KVCache | None = None, position=0):
        """``(logits, cache)``: logits ``(batch, T, vocab)`` for ``tokens`` ``(batch, T)``
        written at positions ``position ..``; ``cache=None`` runs the whole sequence causally
        and returns ``(logits, None)``."""
        if self.d_model % self.heads:
            raise ValueError(f"heads: {self.heads} does not divide d_model={self.d_model}")
        if not jnp.issubdtype(jnp.result_type(tokens), jnp.integer):
            raise ValueError(f"tokens: expected integer token ids, got {jnp.result_type(tokens)}")
        _check_position(position, tokens.shape[-1], self.max_len)
        positions = position + jnp.arange(tokens.shape[-1])
        x = Embed(self.vocab, self.d_model, name="embed", dtype=self.dtype)(tokens)
        x = x + Embed(self.max_len, self.d_model, name="position", dtype=self.dtype)(
            positions
        ).astype(x.dtype)
        ks, vs = [], []
        length = tokens.shape[-1]
        for i in range(self.layers):
            layer_cache = None if cache is None else (cache.k[i], cache.v[i])
            block = Block(
                self.d_model,
                self.heads,
                self.mlp,
                self.dtype,
                self.stream_weights,
                name=f"block_{i}",
            )
            x, layer_cache = block(x, layer_cache, position)
            if cache is not None:
                ks.append(jax.lax.dynamic_slice_in_dim(layer_cache[0], position, length, 1))
                vs.append(jax.lax.dynamic_slice_in_dim(layer_cache[1], position, length, 1))
        logits = Dense(self.vocab, name="head", dtype=self.dtype, stream=self.stream_weights)(
            nn.LayerNorm(name="ln_final", dtype=self.dtype)(x)
        )
        if cache is None:
            return logits, None
        # Only the new rows of every layer go into the stacked cache, in one write XLA does in
        # place (stacking whole layers, or writing each back, copies the cache).
        at = (0, 0, position, 0, 0)
        return logits, KVCache(
            jax.lax.dynamic_update_slice(cache.k, jnp.stack(ks), at),
            jax.lax.dynamic_update_slice(cache.v, jnp.stack(vs), at),
        )
