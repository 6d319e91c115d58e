"""Pytree utilities the strategies share: validating params, their dtypes and sizes."""

from __future__ import annotations

import math
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from jaxes.factored.lowrank import is_factored, square_norm
from jaxes.types import Params


def check_params(params: Params) -> Params:
    """``params`` as strongly typed arrays; ``ValueError`` unless a non-empty pytree of floats.

    Weak types are dropped so that the state a strategy returns has the same types as the one
    it was given, and jitted ``ask``/``tell`` never retrace.

    Example:
      >>> import jax.numpy as jnp
      >>> p = check_params({"w": 1.0, "b": jnp.zeros(2, jnp.bfloat16)})
      >>> p["w"].dtype, p["w"].weak_type, p["b"].dtype
      (dtype('float32'), False, dtype(bfloat16))
      >>> check_params({"w": jnp.arange(3)})  # doctest: +ELLIPSIS
      Traceback (most recent call last):
        ...
      ValueError: params: leaf ['w'] has dtype int32; evolution strategies perturb floating ...
    """
    leaves = jax.tree.leaves(params)
    if not leaves:
        raise ValueError("params: expected a pytree with at least one array leaf, got an empty one")
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        name = jax.tree_util.keystr(path) or "<root>"
        dtype = jnp.result_type(leaf)
        if not jnp.issubdtype(dtype, jnp.floating):
            raise ValueError(
                f"params: leaf {name} has dtype {dtype}; "
                "evolution strategies perturb floating arrays only (float32, bfloat16, ...)"
            )
        if math.prod(jnp.shape(leaf)) == 0:
            raise ValueError(
                f"params: leaf {name} has shape {jnp.shape(leaf)}, with no entries to perturb; "
                "drop it from the pytree"
            )
        if not isinstance(leaf, jax.core.Tracer) and not _all_finite(leaf):
            raise ValueError(f"params: leaf {name} has non-finite entries (NaN or inf)")
    return jax.tree.map(lambda x: jnp.asarray(x, dtype=jnp.result_type(x)), params)


def _all_finite(leaf) -> bool:
    # Reduced where the leaf lives (one bool reaches the host, not the params), and eagerly even
    # when a concrete leaf is closed over by a function being traced.
    with jax.ensure_compile_time_eval():
        return bool(jnp.all(jnp.isfinite(leaf)))


def master_dtype(dtype) -> jnp.dtype:
    """The dtype θ and every strategy state are kept in: at least float32.

    Example:
      >>> import jax.numpy as jnp
      >>> master_dtype(jnp.bfloat16), master_dtype(jnp.float32)
      (dtype('float32'), dtype('float32'))
    """
    return jnp.promote_types(dtype, jnp.float32)


def state_dtype(params: Params) -> jnp.dtype:
    """The dtype of a strategy's scalars (σ, step-size paths, fitness records): the widest
    master dtype of the params, so float64 params (under ``jax_enable_x64``) keep every
    strategy scalar in float64 and anything narrower keeps float32.

    Example:
      >>> import jax.numpy as jnp
      >>> state_dtype({"w": jnp.zeros(2, jnp.bfloat16), "b": jnp.zeros(1)})
      dtype('float32')
    """
    return jnp.result_type(*(master_dtype(jnp.result_type(x)) for x in jax.tree.leaves(params)))


def is_rounded(dtype) -> bool:
    """Whether members of this dtype are coarser than their float32 master copy, so that the
    displacement a member really had (``x_i - θ``) differs from the nominal ``σ ε``."""
    return master_dtype(dtype) != jnp.dtype(dtype)


def cast_like(params: Params, dtypes: Params) -> Params:
    """``params`` with each leaf cast to the dtype of ``dtypes``' leaf (a pytree like it).

    Example:
      >>> import jax.numpy as jnp
      >>> cast_like({"w": jnp.ones(2)}, {"w": jnp.zeros((), jnp.bfloat16)})["w"].dtype
      dtype(bfloat16)
    """
    return jax.tree.map(lambda x, t: jnp.asarray(x).astype(t.dtype), params, dtypes)


def num_params(params: Params) -> int:
    """Total number of scalars in ``params``.

    Example:
      >>> import jax.numpy as jnp
      >>> num_params({"w": jnp.zeros((3, 2)), "b": jnp.zeros(2)})
      8
    """
    return sum(math.prod(jnp.shape(leaf)) for leaf in jax.tree.leaves(params))


def unflatten_like(flat: jax.Array, params: Params) -> Params:
    """Splits a flat vector into a pytree shaped like ``params`` (leaf order of ``jax.tree``).

    Example:
      >>> import jax.numpy as jnp
      >>> tree = unflatten_like(jnp.arange(5.0), {"w": jnp.zeros((1, 3)), "b": jnp.zeros(2)})
      >>> tree["b"].tolist(), tree["w"].tolist()  # dict leaves in sorted key order
      ([0.0, 1.0], [[2.0, 3.0, 4.0]])
    """
    leaves, treedef = jax.tree.flatten(params)
    sizes = [math.prod(jnp.shape(x)) for x in leaves]
    parts = jnp.split(flat, np.cumsum(sizes)[:-1].tolist()) if len(sizes) > 1 else [flat]
    return treedef.unflatten([p.reshape(jnp.shape(x)) for p, x in zip(parts, leaves, strict=True)])


def broadcast_like(value, params: Params) -> Params:
    """``value`` if it is already a pytree like ``params``, else ``value`` at every leaf.

    Example:
      >>> import jax.numpy as jnp
      >>> params = {"a": jnp.zeros(2), "b": jnp.zeros(3)}
      >>> broadcast_like(0.1, params)
      {'a': 0.1, 'b': 0.1}
      >>> broadcast_like({"a": 1.0, "b": 2.0}, params)
      {'a': 1.0, 'b': 2.0}
    """
    if jax.tree.structure(value) == jax.tree.structure(params) and jax.tree.leaves(value):
        return value
    return jax.tree.map(lambda _: value, params)


def tree_norm(tree) -> jax.Array:
    """Euclidean norm of all leaves together (a ``jaxes.factored.lowrank.LowRank`` leaf from its
    factors).

    Example:
      >>> import jax.numpy as jnp
      >>> float(tree_norm({"a": jnp.array([3.0]), "b": jnp.array([[4.0]])}))
      5.0
    """
    leaves = jax.tree.leaves(tree, is_leaf=is_factored)
    return jnp.sqrt(sum(square_norm(x) for x in leaves))


def is_key(x) -> bool:
    """Whether ``x`` is an array of typed PRNG keys.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> is_key(jax.random.key(0)), is_key(jax.random.PRNGKey(0)), is_key(jnp.zeros(2))
      (True, False, False)
    """
    return hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def unwrap_keys(tree):
    """Typed PRNG keys replaced by their raw ``uint32`` data.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> raw = unwrap_keys({"key": jax.random.key(0), "x": jnp.ones(2)})
      >>> raw["key"].dtype, raw["x"].tolist()
      (dtype('uint32'), [1.0, 1.0])
    """
    return jax.tree.map(lambda x: jax.random.key_data(x) if is_key(x) else x, tree)


def rewrap_keys(tree, like):
    """Raw key data turned back into typed keys wherever ``like`` holds keys.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> tree = {"key": jax.random.key(0), "x": jnp.ones(2)}
      >>> raw_data = unwrap_keys(tree)["key"]
      >>> back = rewrap_keys(unwrap_keys(tree), tree)
      >>> is_key(back["key"]), bool(jnp.all(jax.random.key_data(back["key"]) == raw_data))
      (True, True)
    """
    return jax.tree.map(
        lambda x, ref: (
            jax.random.wrap_key_data(x, impl=jax.random.key_impl(ref)) if is_key(ref) else x
        ),
        tree,
        like,
    )


def merged(searched, frozen):
    """The nested dicts ``searched`` and ``frozen`` as one tree (``frozen`` ``None``:
    ``searched`` as it is): a model's params, of which a search moves only some.

    Example:
      >>> merged({"a": {"w": 1}}, {"a": {"b": 2}, "c": 3})
      {'a': {'w': 1, 'b': 2}, 'c': 3}
    """
    if frozen is None:
        return searched
    if not isinstance(searched, Mapping) or not isinstance(frozen, Mapping):
        raise ValueError("frozen: expected nested dicts beside the searched params")
    out = dict(searched)
    for name, value in frozen.items():
        out[name] = merged(out[name], value) if name in out else value
    return out
