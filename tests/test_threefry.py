"""jaxes.noise.threefry: the same bits as jax.random, drawn without XLA:CPU's rolled loop."""

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxes
from jaxes.noise import threefry

KEYS = [
    jax.random.key(0),
    jax.random.key(7),
    jax.random.wrap_key_data(jnp.array([3, 2**32 - 1], jnp.uint32)),
]
SHAPES = [(), (1,), (7,), (4, 3), (3, 5, 2)]


def as_bits(x):
    return np.asarray(x).reshape(-1).view(np.uint8)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
def test_normal_is_jax_random_normal_bit_for_bit(dtype):
    for key in KEYS:
        for shape in SHAPES:
            expected = as_bits(jax.random.normal(key, shape, dtype))
            np.testing.assert_array_equal(as_bits(threefry.normal(key, shape, dtype)), expected)
    jitted = jax.jit(lambda k: threefry.normal(k, (16, 10), dtype))
    np.testing.assert_array_equal(
        as_bits(jitted(KEYS[1])), as_bits(jax.random.normal(KEYS[1], (16, 10), dtype))
    )


def test_bits_fold_in_and_split_are_jax_randoms():
    for key in KEYS:
        for shape in SHAPES:
            np.testing.assert_array_equal(threefry.bits(key, shape), jax.random.bits(key, shape))
        for data in [0, 1, 12345, 2**32 - 1]:
            np.testing.assert_array_equal(
                jax.random.key_data(threefry.fold_in(key, data)),
                jax.random.key_data(jax.random.fold_in(key, data)),
            )
        for num in [1, 2, 5]:
            np.testing.assert_array_equal(
                jax.random.key_data(threefry.split(key, num)),
                jax.random.key_data(jax.random.split(key, num)),
            )


def test_a_vmapped_draw_over_keys_is_each_keys_own():
    keys = jax.random.split(KEYS[0], 6)
    ours = jax.vmap(lambda j: threefry.normal(threefry.fold_in(KEYS[1], j), (5,)))(jnp.arange(6))
    theirs = jax.vmap(lambda j: jax.random.normal(jax.random.fold_in(KEYS[1], j), (5,)))(
        jnp.arange(6)
    )
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(
        jax.vmap(lambda k: threefry.normal(k, (3,)))(keys),
        jax.vmap(lambda k: jax.random.normal(k, (3,)))(keys),
    )


def test_what_it_does_not_write_out_is_jax_randoms_own_answer():
    raw = jax.random.PRNGKey(3)  # raw uint32 key data
    np.testing.assert_array_equal(threefry.normal(raw, (4,)), jax.random.normal(raw, (4,)))
    rbg = jax.random.key(3, impl="rbg")
    np.testing.assert_array_equal(threefry.normal(rbg, (4,)), jax.random.normal(rbg, (4,)))
    np.testing.assert_array_equal(
        threefry.normal(KEYS[0], (2,), jnp.complex64),
        jax.random.normal(KEYS[0], (2,), jnp.complex64),
    )
    with pytest.raises(ValueError, match="dtype"):
        threefry.normal(KEYS[0], (2,), jnp.int32)


def test_without_partitionable_threefry_it_is_still_jax_random():
    jax.config.update("jax_threefry_partitionable", False)
    try:
        key = KEYS[1]
        np.testing.assert_array_equal(threefry.normal(key, (4, 3)), jax.random.normal(key, (4, 3)))
        np.testing.assert_array_equal(threefry.bits(key, (9,)), jax.random.bits(key, (9,)))
    finally:
        jax.config.update("jax_threefry_partitionable", True)


def test_a_small_tell_compiles_without_a_loop():
    """What the module is for: XLA:CPU gets no while loop (one per threefry draw before)."""
    es = jaxes.snes(16, 0.05)
    state = jax.eval_shape(
        lambda: es.ask(jax.random.key(1), es.init(jax.random.key(0), jnp.ones(10)))[1]
    )
    text = jax.jit(es.tell).lower(state, jax.ShapeDtypeStruct((16,), jnp.float32)).as_text()
    assert "stablehlo.while" not in text
    if jax.default_backend() == "cpu":  # JAX rolls the loop on the CPU only
        rolled = jax.jit(lambda k: jax.random.normal(k, (16, 10))).lower(KEYS[0]).as_text()
        assert "stablehlo.while" in rolled


def test_float64_normal_is_jax_random_normal_bit_for_bit():
    # float64 draws take 64-bit words: checked in a process with x64 on (a test process
    # cannot turn it on for itself without changing every other test's dtypes).
    script = textwrap.dedent(
        """
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        from jaxes.noise import threefry
        for seed, shape in ((0, (7,)), (3, (5, 4)), (11, (1,))):
            k = jax.random.key(seed)
            ours = jax.jit(lambda k: threefry.normal(k, shape, jnp.float64))(k)
            assert ours.dtype == jnp.float64
            assert bool(jnp.all(ours == jax.random.normal(k, shape, jnp.float64))), shape
        print("ok")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
