"""``jaxes.factored.ordering.after``: the same bits, later; unbatched under ``vmap``; the
identity for ``grad``. Its effect on XLA's memory plan is tested where it is used
(test_sequence's streamed decode, test_factored_tell's one product at a time)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxes.factored.ordering import after

TREE = {
    "w": jnp.array([[1.5, -0.0], [jnp.nan, jnp.inf]]),
    "narrow": jnp.array([3.0, -jnp.inf, 1e-40], jnp.bfloat16),
    "next_to_one": np.array([np.nextafter(1.0, 2.0)], np.float32),
}


def bits(x):
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}")


@pytest.mark.parametrize("done", [jnp.ones(3), jnp.array([jnp.nan]), jnp.array([-jnp.inf])])
def test_every_leaf_keeps_its_bits_and_dtype_whatever_done_holds(done):
    out = jax.jit(after)(TREE, done)
    for got, want in zip(jax.tree.leaves(out), jax.tree.leaves(TREE), strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(bits(got), bits(want))


def test_flags_integers_and_a_tree_of_done_keep_their_bits():
    # done as a pytree (every leaf is waited on; a key leaf is skipped), and a constant flag,
    # which a select against False would fold away (test_tell: a donated tell's `pending`).
    tree = {"flag": jnp.zeros((), bool), "flags": jnp.array([True, False]), "n": jnp.arange(3)}
    done = {"x": jnp.array([jnp.inf]), "k": jax.random.key(0), "i": jnp.int32(-2)}
    out = jax.jit(lambda: after(tree, done))()
    for got, want in zip(jax.tree.leaves(out), jax.tree.leaves(tree), strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="done: expected at least one element"):
        after(tree, {"k": jax.random.key(0)})


def test_a_weight_tied_to_a_batched_input_stays_one_weight():
    w = jnp.arange(6.0).reshape(3, 2)

    def layer(x):
        return x @ after(w, x)

    # Batched, the product would be (4, 3, 2): one weight per member.
    jaxpr = jax.make_jaxpr(jax.vmap(layer))(jnp.ones((4, 3)))
    shapes = {v.aval.shape for e in jaxpr.jaxpr.eqns for v in e.outvars}
    assert (4, 3, 2) not in shapes
    x = jnp.arange(12.0).reshape(4, 3)
    np.testing.assert_array_equal(jax.jit(jax.vmap(layer))(x), x @ w)
    batched = jax.vmap(lambda w, x: after(w, x))(jnp.stack([w, 2 * w]), x[:2])
    np.testing.assert_array_equal(batched, jnp.stack([w, 2 * w]))


def test_grad_is_the_identity_in_the_tree_and_zero_in_done():
    w, x = jnp.array([1.0, -2.0]), jnp.array([3.0, 4.0])
    gw, gx = jax.grad(lambda w, x: jnp.sum(after(w, x) ** 2 * x), argnums=(0, 1))(w, x)
    np.testing.assert_array_equal(gw, 2 * w * x)
    np.testing.assert_array_equal(gx, w**2)  # only the direct use of x


@pytest.mark.parametrize("done", [jnp.ones(3), jnp.arange(3), jnp.ones(3, bool)])
def test_the_tie_survives_xla_for_a_done_of_any_dtype(done):
    # XLA folds an integer's d * 0, and then the select, and the order is lost.
    compiled = jax.jit(after).lower(jnp.arange(6.0), done).compile().as_text()
    assert "select" in compiled


def test_an_empty_done_is_a_clear_error():
    with pytest.raises(ValueError, match="done: expected at least one element"):
        after(jnp.ones(2), jnp.ones((0, 3)))
