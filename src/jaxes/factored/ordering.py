"""Values kept bit for bit but computed after another value exists: a data tie that orders
XLA's schedule where nothing else does.

XLA computes a value as soon as its operands exist. A weight that nothing in a loop changes
is converted once, ahead of the loop (loop-invariant code motion), and values that depend on
nothing are started together (XLA:CPU's default scheduler): either way every converted weight
is held at once. Selecting a value under a condition that XLA cannot know is true until
``done`` exists moves its computation, and any convert fused into it, after ``done``.

XLA:CPU widens bfloat16 values to float32 for nearly every operation, the select included,
and that widening reads nothing but the value: it is still hoisted or started early. On the
CPU the tie orders float32 values (a float32 master that a layer rounds to bfloat16 where it
reads it), not bfloat16 ones.

Example:
  >>> import jax, jax.numpy as jnp
  >>> w, x = jnp.arange(3.0), jnp.ones((4, 2))
  >>> bool(jnp.array_equal(after(w, x), w))
  True
  >>> jax.vmap(lambda x: x @ after(w[:2], x))(x).shape  # w stays one (2,) vector inside
  (4,)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap


def _true_after(done) -> jax.Array:
    """``True``, computed from the first element ``d`` of every array leaf of ``done`` as a
    float (XLA folds an integer's ``0 · d``): ``d · 0`` is ±0 or NaN, and XLA folds neither
    ``0 · d`` for floats nor the test. (A PRNG key leaf is not read: it has no number.)"""
    firsts = [
        jnp.ravel(x)[0].astype(jnp.float32)
        for x in jax.tree.leaves(done)
        if jnp.size(x) > 0 and not jax.dtypes.issubdtype(jnp.result_type(x), jax.dtypes.prng_key)
    ]
    if not firsts:
        shapes = jax.tree.map(jnp.shape, done)
        raise ValueError(f"done: expected at least one element in an array, got {shapes}")
    zero = sum(firsts[1:], firsts[0]) * 0
    return (zero == 0) | jnp.isnan(zero)


def _tie(tree, done):
    # A select, not a product with one: XLA:CPU flushes subnormal products to zero. A flag's
    # other value is its negation: ``where(keep, False, False)`` would fold to a constant.
    keep = _true_after(done)

    def tie(x):
        other = ~x if jnp.result_type(x) == jnp.bool_ else jnp.zeros((), jnp.result_type(x))
        return jnp.where(keep, x, other)

    return jax.tree.map(tie, tree)


@custom_vmap
def _batched_tie(tree, done):
    return _tie(tree, done)


@_batched_tie.def_vmap
def _tie_rule(axis_size, in_batched, tree, done):
    # The tie reads one element of ``done``, so it need not batch ``tree``: a weight shared by
    # every member stays one weight.
    del axis_size
    return _tie(tree, done), in_batched[0]


@jax.custom_jvp
def after(tree, done):
    """``tree`` (arrays), every leaf the same bits, computed after ``done`` (an array with an
    element, or a pytree of them: after every one).

    Under ``vmap`` a leaf is batched only where it was (a tie to a batched ``done`` reads its
    first element across the batch). Differentiates as the identity in ``tree``, zero in
    ``done``.
    """
    return _batched_tie(tree, done)


@after.defjvp
def _after_jvp(primals, tangents):
    tree, done = primals
    return after(tree, done), tangents[0]
