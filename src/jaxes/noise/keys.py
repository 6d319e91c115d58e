"""The keys every perturbation is drawn from.

Whatever key the caller passes (a typed key of any ``jax_default_prng_impl``, or raw
``uint32`` data), ``noise_key`` turns it into one threefry key, and every draw uses threefry.
Threefry is a pure function of key and counter, so a member built alone, inside ``vmap`` or on
another device is bit-identical to its row of the population; ``rbg`` keys are not (their
bits depend on the batch they are drawn in).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxes.noise import threefry


def noise_key(key) -> jax.Array:
    """A typed threefry key made from any key: typed keys of any PRNG implementation, or raw
    ``uint32`` key data. Threefry keys pass through unchanged.

    Example:
      >>> import jax
      >>> k = noise_key(jax.random.key(0, impl="rbg"))
      >>> str(jax.random.key_impl(k)), k.shape
      ('threefry2x32', ())
      >>> bool(noise_key(jax.random.PRNGKey(3)) == jax.random.key(3))  # raw threefry data
      True
    """
    if hasattr(key, "dtype") and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != ():
            raise ValueError(
                f"key: expected one PRNG key, got a batch of shape {key.shape}; vmap over "
                "the keys to run several"
            )
        if str(jax.random.key_impl(key)) == "threefry2x32":
            return key
        data = jax.random.key_data(key)
    else:
        data = jnp.asarray(key)
        if data.dtype != jnp.uint32 or data.ndim != 1:
            raise ValueError(
                f"key: expected one PRNG key (jax.random.key) or raw uint32 key data of one "
                f"key (1-D), got {data.dtype} of shape {data.shape}"
            )
    if data.shape[-1] == 2 and data.ndim == 1:
        return jax.random.wrap_key_data(data, impl="threefry2x32")
    # Fold every word into one threefry key: the same words give the same key everywhere.
    words = data.reshape(-1)
    out = jax.random.wrap_key_data(words[:2], impl="threefry2x32")
    for w in range(2, words.shape[0]):
        out = threefry.fold_in(out, words[w])
    return out


def base_key(key, j) -> jax.Array:
    """The key base perturbation ``j`` of the population drawn with ``key`` is drawn from.

    Example:
      >>> import jax
      >>> bool(base_key(jax.random.key(1), 2) == jax.random.fold_in(jax.random.key(1), 2))
      True
    """
    return threefry.fold_in(noise_key(key), j)
