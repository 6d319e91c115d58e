"""Threefry draws with the hash's rounds written out, bit-identical to ``jax.random``'s.

JAX lowers its threefry hash on CPU as a rolled loop of five iterations, to keep compile times
short. At the sizes of a small population each iteration is a dozen kernels and copies, and
those cost more than the hashing: the loop was most of the gap to evosax in a 10-parameter
``tell`` (``benchmarks/regimes.py --parts``). With the twenty rounds written out, XLA fuses a whole
draw into one elementwise kernel on every backend.

The bits are the ones ``jax.random`` gives the same threefry key under
``jax_threefry_partitionable`` (JAX's default): counter ``i`` of a draw of shape ``s`` is the
flat index of its element, ``fold_in(k, j)`` hashes the counter ``(0, j)``, and a 32-bit word is
the xor of the hash's two outputs. Where that mapping does not hold (the flag turned off, a key
of another PRNG implementation or raw key data, a batch of keys outside ``vmap``, a draw of 2³²
values or more, whose counters need a high word), these functions call ``jax.random`` itself:
they always return what ``jax.random`` returns.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

# Threefry-2x32 with 20 rounds (Salmon et al. 2011): rotation constants of the even and odd
# blocks of four rounds, and the parity word of the key schedule.
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)
_LARGEST_DRAW = 2**32


def _rotate_left(x: jax.Array, r: int) -> jax.Array:
    return jax.lax.shift_left(x, np.uint32(r)) | jax.lax.shift_right_logical(x, np.uint32(32 - r))


def _hash_2x32(k1, k2, x1, x2) -> tuple[jax.Array, jax.Array]:
    """Threefry-2x32 of the counter words ``(x1, x2)`` under the key ``(k1, k2)`` (uint32)."""
    schedule = (k1, k2, k1 ^ k2 ^ _PARITY)
    x1, x2 = x1 + schedule[0], x2 + schedule[1]
    for block in range(5):
        for r in _ROTATIONS[block % 2]:
            x1 = x1 + x2
            x2 = _rotate_left(x2, r) ^ x1
        x1 = x1 + schedule[(block + 1) % 3]
        x2 = x2 + schedule[(block + 2) % 3] + np.uint32(block + 1)
    return x1, x2


def _written_out(key, size: int = 1) -> bool:
    """Whether the written-out hash gives ``jax.random``'s bits for ``size`` values from this
    key: one typed threefry key, partitionable counters, fewer than 2³² values."""
    return (
        bool(jax.config.jax_threefry_partitionable)
        and jnp.issubdtype(getattr(key, "dtype", None), jax.dtypes.prng_key)
        and jnp.ndim(key) == 0
        and str(jax.random.key_impl(key)) == "threefry2x32"
        and size < _LARGEST_DRAW
    )


def _words(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    data = jax.random.key_data(key)
    return data[..., 0], data[..., 1]


def fold_in(key: jax.Array, data) -> jax.Array:
    """``jax.random.fold_in(key, data)``.

    Example:
      >>> import jax
      >>> k = jax.random.key(3)
      >>> ours, theirs = fold_in(k, 7), jax.random.fold_in(k, 7)
      >>> bool((jax.random.key_data(ours) == jax.random.key_data(theirs)).all())
      True
    """
    if not _written_out(key):
        return jax.random.fold_in(key, data)
    k1, k2 = _words(key)
    b1, b2 = _hash_2x32(k1, k2, jnp.zeros((), jnp.uint32), jnp.asarray(data, dtype=jnp.uint32))
    return jax.random.wrap_key_data(jnp.stack([b1, b2]), impl="threefry2x32")


def split(key: jax.Array, num: int = 2) -> jax.Array:
    """``jax.random.split(key, num)``."""
    if not _written_out(key):
        return jax.random.split(key, num)
    k1, k2 = _words(key)
    b1, b2 = _hash_2x32(k1, k2, jnp.zeros((num,), jnp.uint32), jnp.arange(num, dtype=jnp.uint32))
    return jax.random.wrap_key_data(jnp.stack([b1, b2], axis=1), impl="threefry2x32")


def _bits(key: jax.Array, width: int, shape: tuple[int, ...]) -> jax.Array:
    k1, k2 = _words(key)
    counter = jax.lax.iota(jnp.uint32, math.prod(shape)).reshape(shape)
    b1, b2 = _hash_2x32(k1, k2, jnp.zeros(shape, jnp.uint32), counter)
    if width == 64:
        wide = jnp.uint64
        return jax.lax.shift_left(b1.astype(wide), wide(32)) | b2.astype(wide)
    word = b1 ^ b2
    return word if width == 32 else word.astype(jnp.dtype(f"uint{width}"))


def bits(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """``jax.random.bits(key, shape)`` (uint32)."""
    shape = tuple(shape)
    if not _written_out(key, math.prod(shape)):
        return jax.random.bits(key, shape)
    return _bits(key, 32, shape)


def normal(key: jax.Array, shape: tuple[int, ...], dtype=jnp.float32) -> jax.Array:
    """``jax.random.normal(key, shape, dtype)`` for a real ``dtype``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> k = jax.random.key(0)
      >>> bool(jnp.all(normal(k, (4, 3)) == jax.random.normal(k, (4, 3))))
      True
    """
    shape = tuple(shape)
    if not (_written_out(key, math.prod(shape)) and jnp.issubdtype(dtype, jnp.floating)):
        return jax.random.normal(key, shape, dtype)  # and its errors, for a dtype it refuses
    dtype = jnp.dtype(dtype)
    # jax.random.uniform on [nextafter(-1, 0), 1), then √2 erf⁻¹, as jax.random.normal does.
    info = jnp.finfo(dtype)
    width = info.bits if info.nmant >= 8 else 8  # as jax.random.uniform draws them
    word = _bits(key, width, shape).astype(jnp.dtype(f"uint{info.bits}"))
    one = np.array(1.0, dtype)
    mantissa = jax.lax.shift_right_logical(word, np.array(width - info.nmant, word.dtype))
    unit = jax.lax.bitcast_convert_type(mantissa | one.view(word.dtype), dtype) - one
    low = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype))
    u = jnp.maximum(low, unit * (one - low) + low)
    return np.array(np.sqrt(2), dtype) * jax.lax.erf_inv(u)
