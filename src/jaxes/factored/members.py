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
  >>> es = jaxes.open_es(4, sigma=0.1, noise=jaxes.noise.lowrank(rank=2))
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

import logging
from collections.abc import Callable, Mapping
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxes import evaluation, trees
from jaxes.factored import int8 as quantized
from jaxes.factored import terms as layer_terms
from jaxes.factored.int8 import is_int8
from jaxes.factored.lowrank import is_factored
from jaxes.types import Params, Strategy


def matmul(x: jax.Array, w: jax.Array, delta, precision=None) -> jax.Array:
    """``x @ (w + delta)`` without forming ``w + delta`` when ``delta`` is factored.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jaxes.factored.lowrank import LowRank
      >>> a, b = jax.random.normal(jax.random.key(0), (2, 4, 1))
      >>> x, w = jnp.ones((2, 4)), jnp.eye(4)
      >>> bool(jnp.allclose(matmul(x, w, LowRank(a, b)), x @ (w + a @ b.T), atol=1e-5))
      True
    """
    if is_factored(delta):
        term = layer_terms.low_rank_term(x, delta, precision)
        return jnp.matmul(x, w, precision=precision) + term
    return jnp.matmul(x, w + delta, precision=precision)


def member(params: Params, delta: Params) -> Params:
    """``params + delta``, the member itself (a reference for tests, or for a model that cannot
    take factors): each leaf computed in float32 and rounded to its dtype, except a factored
    leaf, which is kept exact in float32 (``round(θ) + A Bᵀ``, what ``apply`` evaluates)."""

    return jax.tree.map(_add, params, delta, is_leaf=is_factored)


def _add(x, d):
    """One leaf of ``member``: ``x + d`` in float32, rounded to ``x``'s dtype unless ``d`` is
    factored (then exact, in float32); an ``Int8`` ``x`` is dequantized first."""
    x = x.dequantize() if is_int8(x) else jnp.asarray(x)
    wide = x.astype(trees.master_dtype(x.dtype))
    if is_factored(d):
        return wide + d.dense().astype(wide.dtype)
    return (wide + d.astype(wide.dtype)).astype(x.dtype)


def _at(tree, path: tuple[str, ...]):
    """The subtree of nested mappings at ``path`` (``None`` if there is none)."""
    for name in path:
        if not isinstance(tree, Mapping) or name not in tree:
            return None
        tree = tree[name]
    return tree


class _Plan(NamedTuple):
    """What ``apply`` does at each served layer: the ``(layer path, weight name)`` of layers
    that add their factored term (``terms``) and of ``nn.Dense`` layers that run their int8
    kernel (``int8``)."""

    terms: frozenset
    int8: frozenset


def _served(module, variables, params, delta, args, kwargs, method) -> _Plan:
    """Which layers take their weight's factored term or int8 kernel, found by tracing the
    model once abstractly (``eval_shape``: nothing runs). A factored leaf that no layer takes
    is added dense, and says so once (``_log_dense``)."""
    terms, int8, refused = set(), set(), {}

    def record(next_fun, call_args, call_kwargs, context):
        name = layer_terms.weight_name(context)
        if name is not None:
            path = tuple(context.module.path)
            d = _at(delta, path + (name,))
            w = _at(params, path + (name,))
            x = call_args[0]
            runs_int8 = is_int8(w) and (d is None or is_factored(d))
            if runs_int8 and layer_terms.int8_call(context, x, w) is not None:
                int8.add((path, name))
            if is_factored(d):
                if layer_terms.term(context, x, d) is not None:
                    terms.add((path, name))
                else:
                    refused[(path, name)] = _why_not(context.module)
        return next_fun(*call_args, **call_kwargs)

    def run():
        with nn.intercept_methods(record):
            return module.apply(
                _placeholders(variables, params, frozenset()), *args, method=method, **kwargs
            )

    jax.eval_shape(run)
    for path, d in jax.tree_util.tree_flatten_with_path(delta, is_leaf=is_factored)[0]:
        names = _names(path)
        at = (names[:-1], names[-1])
        if is_factored(d) and at not in terms:
            _log_dense("/".join(str(n) for n in names), refused.get(at))
    return _Plan(frozenset(terms), frozenset(int8))


def _why_not(layer) -> str:
    """What keeps a served layer from taking its factored term."""
    kind = type(layer).__name__
    if isinstance(layer, nn.Conv):
        return f"an nn.{kind} with {layer_terms.conv_unsupported(layer)}"
    if isinstance(layer, nn.DenseGeneral):
        return f"an nn.{kind} that contracts other than its inputs' trailing axes"
    return f"an nn.{kind}"


_logger = logging.getLogger("jaxes")
_LOGGED: set[str] = set()


def _log_dense(where: str, why: str | None) -> None:
    """One line, once per process, for a factored leaf that is added dense: each member's
    copy of it is built, which is correct but costs what the factored form saves."""
    reason = why or "no Dense, DenseGeneral, Conv or Embed layer reads it"
    line = (
        f"jaxes.factored: {where} takes its low-rank displacement dense ({reason}); each "
        "member's copy of it is built"
    )
    if line not in _LOGGED:
        _LOGGED.add(line)
        _logger.warning(line)


def _names(path) -> tuple:
    return tuple(getattr(k, "key", getattr(k, "name", None)) for k in path)


def _placeholders(variables, params, int8_paths: frozenset):
    """``variables`` with ``params`` as their params collection, every ``Int8`` leaf
    dequantized except those the int8 forward reads (kept as the int8 values)."""

    def leaf(path, x):
        if not is_int8(x):
            return x
        names = _names(path)
        return x.values if (names[:-1], names[-1]) in int8_paths else x.dequantize()

    out = dict(variables)
    out["params"] = jax.tree_util.tree_map_with_path(leaf, params, is_leaf=is_int8)
    return out


def _split_variables(params, delta):
    """flax's ``{"params": ..., other collections}`` or the params collection alone, with the
    delta like either: ``(variables, params, delta)``."""
    if isinstance(params, Mapping) and "params" in params:
        variables, params = dict(params), params["params"]
        if isinstance(delta, Mapping) and set(delta) == {"params"}:
            delta = delta["params"]
    else:
        variables = {}
    return variables, params, delta


def apply(module: nn.Module, params, delta, *args, method=None, **kwargs):
    """``module.apply(variables with params + delta, *args, **kwargs)``, evaluated factored.

    ``params`` is the centre θ: the model's ``"params"`` collection, or the variables flax's
    ``module.init`` returns (``{"params": ..., ...}``; other collections pass through).
    Leaves may be ``Int8`` (``jaxes.factored.int8.quantize``). ``delta`` is a displacement like
    the params (``strategy.perturbation(state, i)``), or ``None`` for the centre itself.

    * Every ``nn.Dense``, ``nn.DenseGeneral`` (contracting the inputs' trailing axes) and
      ``nn.Embed`` (lookup and ``attend``) whose weight's displacement is factored adds its
      low-rank term, computed and summed in float32 — ``x W + (x A) Bᵀ`` — so no member matrix
      is formed; a narrow (bfloat16) ``W`` is used as it is, rounded once, and the term is
      exact.
    * Every ``nn.Dense`` whose kernel is ``Int8`` runs the quantised forward
      ``(x @ values) * scale``; other layers read an ``Int8`` weight dequantized.
    * Any other leaf's displacement is added to its parameter first (in float32, rounded to
      the leaf's dtype; a factored one kept exact in float32), so the result is the member's
      output whatever the model holds.

    Example:
      >>> import flax.linen as nn, jax, jax.numpy as jnp
      >>> from jaxes.factored.lowrank import LowRank
      >>> model = nn.Dense(3)
      >>> variables = model.init(jax.random.key(0), jnp.ones(4))
      >>> a, b = jax.random.normal(jax.random.key(1), (2, 4, 1))
      >>> delta = {"kernel": LowRank(a[..., :1], b[:3]), "bias": jnp.ones(3)}
      >>> out = apply(model, variables, delta, jnp.ones(4))
      >>> ref = model.apply({"params": member(variables["params"], delta)}, jnp.ones(4))
      >>> bool(jnp.allclose(out, ref, atol=1e-5))
      True
    """
    variables, params, delta = _split_variables(params, delta)
    jax.tree_util.tree_map_with_path(quantized.check_leaf, params, is_leaf=is_int8)
    if delta is None:
        delta = jax.tree.map(lambda x: None, params, is_leaf=is_int8)
    plan = _served(module, variables, params, delta, args, kwargs, method)

    def shifted(path, x, d):
        names = (_names(path)[:-1], _names(path)[-1])
        if d is None or (is_factored(d) and names in plan.terms):
            return x
        return _add(x, d)

    moved = jax.tree_util.tree_map_with_path(
        shifted, params, delta, is_leaf=lambda x: is_int8(x) or is_factored(x) or x is None
    )

    def served_call(next_fun, call_args, call_kwargs, context):
        at = (tuple(context.module.path), layer_terms.weight_name(context))
        if at not in plan.terms and at not in plan.int8:
            return next_fun(*call_args, **call_kwargs)
        x = call_args[0]
        if at in plan.int8:
            out = layer_terms.int8_call(context, x, _at(params, at[0] + (at[1],)))
        else:
            out = next_fun(*call_args, **call_kwargs)
        if at not in plan.terms:
            return out
        # The term is summed in float32 and the layer's output keeps its own dtype.
        term = layer_terms.term(context, x, _at(delta, at[0] + (at[1],)))
        return (out.astype(jnp.float32) + term.astype(jnp.float32)).astype(out.dtype)

    with nn.intercept_methods(served_call):
        return module.apply(
            _placeholders(variables, moved, plan.int8), *args, method=method, **kwargs
        )


def evaluate(
    strategy: Strategy,
    state,
    fitness_fn: Callable[[Params, Params], jax.Array],
    *,
    chunk_size: int | None = None,
    quantize: bool = False,
) -> jax.Array:
    """Fitness ``(P,)`` of the population the last ``ask`` drew, from
    ``fitness_fn(centre, delta)`` (a scalar): ``centre`` is θ in the params' dtypes
    (``jaxes.centre``; with ``quantize``, every matrix as ``Int8`` with per-channel scales,
    ``jaxes.factored.int8.quantize``), ``delta`` member ``i``'s displacement from it
    (``strategy.perturbation``, factored where the noise is). Pass both to ``apply``.

    Members are ``vmap``-ed ``chunk_size`` at a time (must divide ``P``; ``None``: all at
    once, since factored members cost little memory).
    """
    if strategy.perturbation is None:
        raise ValueError("strategy: it offers no perturbation(state, i); use jaxes.evaluate")
    centre = trees.cast_like(state.params, state.dtypes)
    if quantize:
        centre = quantized.quantize(centre)
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
