"""The decoder of Qwen2 / Qwen2.5, Qwen3 and Llama 3, in flax with an explicit KV cache.

One module serves the three families (``jaxes.llm.families.ModelConfig`` names how they differ).
Every projection (q, k, v, o, gate, up, down and an untied output head) is an ``nn.Dense``
and the token table an ``nn.Embed``, so ``jaxes.factored.apply`` runs a member with its
low-rank perturbation inside each of them (``x W + (x A) Bᵀ``) and never builds a member's
matrices; a tied head is the table's ``attend``, which takes its term the same way.

The parameter tree mirrors the checkpoint's names (``layers_3/self_attn/q_proj/kernel`` is
``model.layers.3.self_attn.q_proj.weight``, transposed), so ``jaxes.llm.weights`` maps one to
the other by rule.

Prompts of different lengths are left-padded: the cache (``LMCache``) keeps each row's first
real slot (``start``), so a row's positions count from its first token and its queries never
see its padding, as transformers computes with an attention mask. A call is
``model.apply({"params": params}, tokens, cache, position)``, the same as
``jaxes.tasks.transformer.Transformer``, so ``jaxes.tasks.sequence.generate`` decodes either.
Attention scores, the softmax and RMSNorm's statistics are float32 whatever ``dtype`` is.

Example:
  >>> import jax, jax.numpy as jnp
  >>> from jaxes.llm.families import ModelConfig
  >>> config = ModelConfig("qwen3", vocab=16, d_model=8, mlp=12, layers=1, heads=2,
  ...                      kv_heads=1, head_dim=4, max_len=16, qk_norm=True, tied=True)
  >>> model = CausalLM(config, cache_len=8)
  >>> params = jax.jit(model.init)(jax.random.key(0), jnp.zeros((1, 1), jnp.int32))["params"]
  >>> tokens = jnp.array([[0, 3, 4, 5], [6, 7, 8, 9]])
  >>> start = jnp.array([1, 0])  # the first row is left-padded by one token
  >>> full, _ = model.apply({"params": params}, tokens, start=start)
  >>> cache = model.init_cache(2, start=start)
  >>> first, cache = model.apply({"params": params}, tokens[:, :3], cache, 0)
  >>> last, cache = model.apply({"params": params}, tokens[:, 3:], cache, 3)
  >>> bool(jnp.allclose(jnp.concatenate([first, last], 1)[:, 1:], full[:, 1:], atol=1e-5))
  True
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxes.llm.families import ModelConfig
from jaxes.tasks.layers import Dense, Embed


def _stored(new, stored):
    """``new`` keys or values as ``stored`` holds them: a bfloat16 cache holds the integers of
    its bits (``init_cache``). XLA:CPU writes a slot of a bfloat16 array by widening the whole
    array to float32 and back: under the members' ``vmap`` each decode step wrote a new cache
    and copied it (0.5B's memory plan held the KV caches 2.1 times over); an integer slot is
    written in place. Elsewhere the view is free."""
    if stored.dtype == jnp.uint16:
        return jax.lax.bitcast_convert_type(new.astype(jnp.bfloat16), jnp.uint16)
    return new.astype(stored.dtype)


def _read(stored):
    """A layer's stored keys or values as numbers (bfloat16 for a cache of bits)."""
    if stored.dtype == jnp.uint16:
        return jax.lax.bitcast_convert_type(stored, jnp.bfloat16)
    return stored


class LMCache(NamedTuple):
    """Keys and values of every slot written so far, every layer stacked, and where each row's
    tokens begin.

    Attributes:
      k: ``(layers, batch, cache_len, kv_heads, head_dim)``; a bfloat16 cache as the
        ``uint16`` integers of its bits (``init_cache``).
      v: the same shape.
      start: ``(batch,)`` int32, the first slot holding a real token (left padding before it).
    """

    k: jax.Array
    v: jax.Array
    start: jax.Array


def inverse_frequencies(config: ModelConfig) -> np.ndarray:
    """RoPE's ``head_dim / 2`` inverse frequencies, float32, as transformers computes them
    (Llama 3.1's scaling: long wavelengths divided by ``factor``, short ones kept, and a
    smooth blend between)."""
    exponents = np.arange(0, config.head_dim, 2, dtype=np.int64).astype(np.float32)
    inv = (1.0 / (np.float32(config.rope_theta) ** (exponents / config.head_dim))).astype(
        np.float32
    )
    s = config.rope_scaling
    if s is None:
        return inv
    wavelength = 2 * math.pi / inv
    long_wave = s.original_max_position / s.low_freq_factor
    short_wave = s.original_max_position / s.high_freq_factor
    slowed = np.where(wavelength > long_wave, inv / s.factor, inv)
    blend = (s.original_max_position / wavelength - s.low_freq_factor) / (
        s.high_freq_factor - s.low_freq_factor
    )
    smoothed = (1 - blend) * slowed / s.factor + blend * slowed
    medium = (wavelength >= short_wave) & (wavelength <= long_wave)
    return np.where(medium, smoothed, slowed).astype(np.float32)


def rotate(x: jax.Array, positions: jax.Array, inv_freq: np.ndarray) -> jax.Array:
    """RoPE on ``x`` ``(batch, T, heads, head_dim)`` at ``positions`` ``(batch, T)``: the two
    halves of each head rotated as a pair (transformers' ``rotate_half`` layout)."""
    angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)  # (b, T, d/2)
    angles = jnp.concatenate([angles, angles], axis=-1)[:, :, None, :]
    cos, sin = jnp.cos(angles).astype(x.dtype), jnp.sin(angles).astype(x.dtype)
    half = x.shape[-1] // 2
    turned = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + turned * sin


class RMSNorm(nn.Module):
    """``weight * x / rms(x)``, the statistics in float32 and the result rounded before the
    weight multiplies it (transformers' order)."""

    eps: float = 1e-6
    dtype: Any = None

    @nn.compact
    def __call__(self, x):
        weight = self.param("weight", nn.initializers.ones, (x.shape[-1],))
        wide = x.astype(jnp.float32)
        normed = wide * jax.lax.rsqrt(jnp.mean(wide * wide, axis=-1, keepdims=True) + self.eps)
        dtype = self.dtype or jnp.result_type(x, weight)
        return weight.astype(dtype) * normed.astype(x.dtype).astype(dtype)


class Attention(nn.Module):
    """Grouped-query self-attention with RoPE, writing this call's keys and values into the
    layer's cache at ``position``."""

    config: ModelConfig
    dtype: Any = None
    stream: bool = False

    @nn.compact
    def __call__(self, x, layer_cache, position, positions, visible):
        c = self.config
        batch, length, _ = x.shape
        dense = functools.partial(Dense, dtype=self.dtype, stream=self.stream)
        q = dense(c.heads * c.head_dim, use_bias=c.qkv_bias, name="q_proj")(x)
        k = dense(c.kv_heads * c.head_dim, use_bias=c.qkv_bias, name="k_proj")(x)
        v = dense(c.kv_heads * c.head_dim, use_bias=c.qkv_bias, name="v_proj")(x)
        q = q.reshape(batch, length, c.heads, c.head_dim)
        k = k.reshape(batch, length, c.kv_heads, c.head_dim)
        v = v.reshape(batch, length, c.kv_heads, c.head_dim)
        if c.qk_norm:
            q = RMSNorm(c.norm_eps, self.dtype, name="q_norm")(q)
            k = RMSNorm(c.norm_eps, self.dtype, name="k_norm")(k)
        inv_freq = inverse_frequencies(c)
        q, k = rotate(q, positions, inv_freq), rotate(k, positions, inv_freq)
        if layer_cache is None:
            keys, values = k, v
        else:
            at = (0, position, 0, 0)
            layer_cache = tuple(
                jax.lax.dynamic_update_slice(stored, _stored(new, stored), at)
                for stored, new in zip(layer_cache, (k, v), strict=True)
            )
            keys, values = (_read(stored) for stored in layer_cache)
        group = c.heads // c.kv_heads
        q = q.reshape(batch, length, c.kv_heads, group, c.head_dim)
        scores = jnp.einsum(
            "btkgd,bskd->bkgts", q, keys.astype(q.dtype), preferred_element_type=jnp.float32
        ) / jnp.sqrt(jnp.float32(c.head_dim))
        scores = jnp.where(visible[:, None, None], scores, jnp.finfo(jnp.float32).min)
        weights = jax.nn.softmax(scores, axis=-1).astype(q.dtype)
        attended = jnp.einsum("bkgts,bskd->btkgd", weights, values.astype(q.dtype))
        out = dense(c.d_model, use_bias=False, name="o_proj")(
            attended.reshape(batch, length, c.heads * c.head_dim)
        )
        return out, layer_cache


class MLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    config: ModelConfig
    dtype: Any = None
    stream: bool = False

    @nn.compact
    def __call__(self, x):
        c = self.config
        dense = functools.partial(Dense, dtype=self.dtype, stream=self.stream, use_bias=c.mlp_bias)
        gate = dense(c.mlp, name="gate_proj")(x)
        up = dense(c.mlp, name="up_proj")(x)
        return dense(c.d_model, name="down_proj")(nn.silu(gate) * up)


class DecoderLayer(nn.Module):
    """Pre-RMSNorm attention and MLP, each residual."""

    config: ModelConfig
    dtype: Any = None
    stream: bool = False

    @nn.compact
    def __call__(self, x, layer_cache, position, positions, visible):
        c = self.config
        attention = Attention(c, self.dtype, self.stream, name="self_attn")
        h, layer_cache = attention(
            RMSNorm(c.norm_eps, self.dtype, name="input_layernorm")(x),
            layer_cache,
            position,
            positions,
            visible,
        )
        x = x + h
        mlp = MLP(c, self.dtype, self.stream, name="mlp")
        x = x + mlp(RMSNorm(c.norm_eps, self.dtype, name="post_attention_layernorm")(x))
        return x, layer_cache


def _check_tokens(tokens, position, cache_len: int) -> None:
    if not jnp.issubdtype(jnp.result_type(tokens), jnp.integer):
        raise ValueError(f"tokens: expected integer token ids, got {jnp.result_type(tokens)}")
    if isinstance(position, int) and not 0 <= position <= cache_len - tokens.shape[-1]:
        raise ValueError(
            f"position: {tokens.shape[-1]} tokens at position {position} do not fit in "
            f"cache_len={cache_len}"
        )


class CausalLM(nn.Module):
    """A Qwen2 / Qwen3 / Llama 3 causal language model.

    Attributes:
      config: the checkpoint's ``ModelConfig`` (``jaxes.llm.read_config``).
      cache_len: slots a cache holds (prompt and answer), and so ``max_len`` for
        ``jaxes.tasks.sequence``; ``None``: the config's ``max_position_embeddings``.
      dtype: the dtype every layer computes in; ``None``: the parameters' dtype.
      stream_weights: read each projection's weights only once its input exists (one layer's
        converted weights held at a time in a decode loop; the same outputs, bit for bit).
    """

    config: ModelConfig
    cache_len: int | None = None
    dtype: Any = None
    stream_weights: bool = False

    @property
    def max_len(self) -> int:
        return self.config.max_len if self.cache_len is None else self.cache_len

    def init_cache(self, batch: int, dtype=jnp.float32, start=None) -> LMCache:
        """An empty cache for ``batch`` rows whose real tokens begin at slot ``start``
        (``(batch,)`` ints: each row's left padding; ``None``: none); a ``dtype`` of bfloat16
        is held as the ``uint16`` integers of its bits, which the model reads as bfloat16."""
        c = self.config
        shape = (c.layers, batch, self.max_len, c.kv_heads, c.head_dim)
        start = jnp.zeros((batch,), jnp.int32) if start is None else jnp.asarray(start, jnp.int32)
        stored = jnp.uint16 if jnp.dtype(dtype) == jnp.bfloat16 else dtype
        return LMCache(jnp.zeros(shape, stored), jnp.zeros(shape, stored), start)

    @nn.compact
    def __call__(self, tokens: jax.Array, cache: LMCache | None = None, position=0, start=None):
        """``(logits, cache)``: logits ``(batch, T, vocab)`` for ``tokens`` ``(batch, T)`` at
        slots ``position ..``. ``cache=None`` runs the whole sequence causally (``start``:
        each row's left padding) and returns ``(logits, None)``."""
        c = self.config
        _check_tokens(tokens, position, self.max_len)
        batch, length = tokens.shape
        if cache is not None:
            start = cache.start
        elif start is None:
            start = jnp.zeros((batch,), jnp.int32)
        slots = position + jnp.arange(length)
        positions = jnp.maximum(slots[None, :] - start[:, None], 0)
        keys_at = slots if cache is None else jnp.arange(cache.k.shape[2])
        visible = (keys_at[None, None, :] <= slots[None, :, None]) & (
            keys_at[None, None, :] >= start[:, None, None]
        )  # (batch, T, S)
        embed = Embed(
            c.vocab, c.d_model, name="embed_tokens", dtype=self.dtype, stream=self.stream_weights
        )
        x = embed(tokens)
        ks, vs = [], []
        for i in range(c.layers):
            layer_cache = None if cache is None else (cache.k[i], cache.v[i])
            layer = DecoderLayer(c, self.dtype, self.stream_weights, name=f"layers_{i}")
            x, layer_cache = layer(x, layer_cache, position, positions, visible)
            if cache is not None:
                ks.append(jax.lax.dynamic_slice_in_dim(layer_cache[0], position, length, 1))
                vs.append(jax.lax.dynamic_slice_in_dim(layer_cache[1], position, length, 1))
        x = RMSNorm(c.norm_eps, self.dtype, name="norm")(x)
        if c.tied:
            logits = embed.attend(x)
        else:
            head = functools.partial(Dense, use_bias=False, dtype=self.dtype)
            logits = head(c.vocab, stream=self.stream_weights, name="lm_head")(x)
        if cache is None:
            return logits, None
        # Only the new rows of every layer go into the stacked cache, in one in-place write.
        at = (0, 0, position, 0, 0)
        return logits, LMCache(
            jax.lax.dynamic_update_slice(cache.k, jnp.stack(ks), at),
            jax.lax.dynamic_update_slice(cache.v, jnp.stack(vs), at),
            cache.start,
        )
