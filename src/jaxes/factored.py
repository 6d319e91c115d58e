"""Members run with their perturbation applied inside the layers, never built.

With low-rank noise (``noise="lowrank"``) member ``i``'s displacement of an ``m × n`` weight
matrix is ``δ = A Bᵀ`` (``strategy.perturbation`` keeps it as the factors; σ, the sign and
``1/√r`` are in ``A``). A dense layer of the member computes

    x (W + A Bᵀ) = x W + (x A) Bᵀ,

so the population shares one ``x W`` for inputs they share (the first layer sees the same
batch in every member) and adds rank-``r`` terms: no member matrix, no ``P × m × n`` tensor.
Under ``vmap`` over members, ``x W`` with an unbatched ``x`` is computed once.

Three ways in:
  * ``matmul(x, w, delta)`` for hand-written models;
  * ``apply(module, params, delta, *args)`` for ``flax.linen`` models: every ``nn.Dense``
    adds its factored term; any other leaf's displacement (biases, a 3-D kernel, a factored
    leaf that no ``nn.Dense`` reads) is added to its parameter first, so the result is the
    member's output whatever the model holds;
  * ``evaluate(strategy, state, fitness_fn)``: fitness of every member from
    ``fitness_fn(centre, delta)``, a chunk of members at a time.

Example:
  >>> import jax, jax.numpy as jnp, jaxes
  >>> es = jaxes.open_es(4, sigma=0.1, noise="lowrank", noise_rank=2)
  >>> state = es.init(jax.random.key(0), {"w": jnp.ones((3, 5))})
  >>> _, state = es.ask(jax.random.key(1), state)
  >>> x = jnp.ones((7, 3))
  >>> def fitness(centre, delta):
  ...     return -jnp.sum(matmul(x, centre["w"], delta["w"]) ** 2)
  >>> ref = jax.vmap(lambda p: -jnp.sum((x @ p["w"]) ** 2))(jax.vmap(
  ...     lambda i: es.member(state, i))(jnp.arange(4)))
  >>> bool(jnp.allclose(evaluate(es, state, fitness), ref, rtol=1e-5))
  True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxes import evaluation
from jaxes.noise.lowrank import LowRank, dense, is_factored
from jaxes.types import Params, Strategy


def low_rank_term(x: jax.Array, delta: LowRank, precision=None) -> jax.Array:
    """``x @ (A Bᵀ)`` as ``(x A) Bᵀ``: ``x`` is ``(..., m)``, the result ``(..., n)``."""
    xa = jnp.einsum("...m,mr->...r", x, delta.a, precision=precision)
    return jnp.einsum("...r,nr->...n", xa, delta.b, precision=precision)


def matmul(x: jax.Array, w: jax.Array, delta, precision=None) -> jax.Array:
    """``x @ (w + delta)`` without forming ``w + delta`` when ``delta`` is factored.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> a, b = jax.random.normal(jax.random.key(0), (2, 4, 1))
      >>> x, w = jnp.ones((2, 4)), jnp.eye(4)
      >>> bool(jnp.allclose(matmul(x, w, LowRank(a, b)), x @ (w + a @ b.T), atol=1e-5))
      True
    """
    if is_factored(delta):
        return jnp.matmul(x, w, precision=precision) + low_rank_term(x, delta, precision)
    return jnp.matmul(x, w + delta, precision=precision)


def member(params: Params, delta: Params) -> Params:
    """``params + delta`` with every factored leaf multiplied out: the member itself (a
    reference for tests, or for a model that cannot take factors)."""
    return jax.tree.map(lambda x, d: x + d.astype(x.dtype), params, dense(delta))


def _at(tree, path: tuple[str, ...]):
    """The subtree of nested mappings at ``path`` (``None`` if there is none)."""
    for name in path:
        if not isinstance(tree, Mapping) or name not in tree:
            return None
        tree = tree[name]
    return tree


def _factored_kernel(context, delta):
    """The factored displacement of the kernel of the ``nn.Dense`` being called, if any."""
    if context.method_name != "__call__" or not isinstance(context.module, nn.Dense):
        return None
    kernel = _at(delta, tuple(context.module.path) + ("kernel",))
    return kernel if is_factored(kernel) else None


def _dense_layers(module, params, delta, args, kwargs, method) -> set[tuple[str, ...]]:
    """Paths of the ``nn.Dense`` layers that read a factored kernel, found by tracing the
    model once abstractly (``eval_shape``: nothing runs)."""
    found: set[tuple[str, ...]] = set()

    def record(next_fun, call_args, call_kwargs, context):
        if _factored_kernel(context, delta) is not None:
            found.add(tuple(context.module.path))
        return next_fun(*call_args, **call_kwargs)

    def run():
        with nn.intercept_methods(record):
            return module.apply({"params": params}, *args, method=method, **kwargs)

    jax.eval_shape(run)
    return found


def apply(module: nn.Module, params: Params, delta: Params, *args, method=None, **kwargs):
    """``module.apply({"params": params + delta}, *args, **kwargs)`` with every ``nn.Dense``
    whose kernel displacement is factored computing ``x W + (x A) Bᵀ`` instead.

    ``params`` is the model's ``"params"`` collection (the centre θ), ``delta`` a
    displacement like it (``strategy.perturbation(state, i)``).

    Example:
      >>> import flax.linen as nn, jax, jax.numpy as jnp
      >>> model = nn.Dense(3)
      >>> params = model.init(jax.random.key(0), jnp.ones(4))["params"]
      >>> a, b = jax.random.normal(jax.random.key(1), (2, 4, 1))
      >>> delta = {"kernel": LowRank(a[..., :1], b[:3]), "bias": jnp.ones(3)}
      >>> out = apply(model, params, delta, jnp.ones(4))
      >>> ref = model.apply({"params": member(params, delta)}, jnp.ones(4))
      >>> bool(jnp.allclose(out, ref, atol=1e-5))
      True
    """
    served = _dense_layers(module, params, delta, args, kwargs, method)

    def shifted(path, x, d):
        names = tuple(getattr(k, "key", getattr(k, "name", None)) for k in path)
        if is_factored(d) and names[:-1] in served and names[-1] == "kernel":
            return x
        return x + dense(d).astype(x.dtype)

    variables = {
        "params": jax.tree_util.tree_map_with_path(shifted, params, delta, is_leaf=is_factored)
    }

    def add_low_rank_term(next_fun, call_args, call_kwargs, context):
        kernel = _factored_kernel(context, delta)
        out = next_fun(*call_args, **call_kwargs)
        if kernel is None:
            return out
        term = low_rank_term(call_args[0], kernel, context.module.precision)
        return out + term.astype(out.dtype)

    with nn.intercept_methods(add_low_rank_term):
        return module.apply(variables, *args, method=method, **kwargs)


def evaluate(
    strategy: Strategy,
    state,
    fitness_fn: Callable[[Params, Params], jax.Array],
    *,
    chunk_size: int | None = None,
) -> jax.Array:
    """Fitness ``(P,)`` of the population the last ``ask`` drew, from
    ``fitness_fn(centre, delta)`` (a scalar): ``centre`` is θ, ``delta`` member ``i``'s
    displacement (``strategy.perturbation``, factored where the noise is).

    Members are ``vmap``-ed ``chunk_size`` at a time (must divide ``P``; ``None``: all at
    once, since factored members cost little memory).
    """
    if strategy.perturbation is None:
        raise ValueError("strategy: it offers no perturbation(state, i); use jaxes.evaluate")
    centre = state.params
    out = evaluation.map_members(
        strategy,
        state,
        jax.vmap(lambda delta: fitness_fn(centre, delta)),
        chunk=strategy.population_size if chunk_size is None else chunk_size,
        build=strategy.perturbation,
    )
    if jnp.ndim(out) != 2:
        raise ValueError(
            f"fitness_fn: expected a scalar fitness per member, got shape {jnp.shape(out)[2:]}"
        )
    return out.reshape(-1)
