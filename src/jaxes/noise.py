"""Perturbations rebuilt from keys, never stored.

Member ``i`` of a population is ``θ + s_i σ ε_{j(i)}``. With antithetic pairs ``j = i // 2`` and
``s_i = +1, -1, +1, -1, ...``; without them ``j = i`` and ``s_i = +1``. Each base perturbation
``ε_j`` is a pure function of ``(noise_state, fold_in(key, j))``, so ``ask``, ``member`` and
``tell`` on any device or host rebuild exactly the same numbers from the same key (Salimans et
al. 2017): only fitness values ever need to travel.

Two sources of ``ε``:
  * ``gaussian()``: fresh N(0, I) draws from JAX's counter-based PRNG.
  * ``noise_table(size)``: a fixed table of N(0, 1) floats made once at ``init``; ``ε_j`` is the
    window of length ``dim(θ)`` at a key-derived offset. Reading a window is much cheaper than
    drawing normals, at the cost of correlated (shifted) windows.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxes.types import Params, PRNGKey

NoiseState = Any


class NoiseSource(NamedTuple):
    """Where base perturbations come from.

    Attributes:
      init: ``init(key, params) -> noise_state`` (``None`` for a stateless source).
      sample: ``sample(noise_state, key, params) -> eps``, one float32 pytree shaped like
        ``params`` with N(0, 1) entries.
      name: a short label for logs.
    """

    init: Callable[[PRNGKey, Params], NoiseState]
    sample: Callable[[NoiseState, PRNGKey, Params], Params]
    name: str


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
        dtype = jnp.result_type(leaf)
        if not jnp.issubdtype(dtype, jnp.floating):
            raise ValueError(
                f"params: leaf {jax.tree_util.keystr(path) or '<root>'} has dtype {dtype}; "
                "evolution strategies perturb floating arrays only (float32, bfloat16, ...)"
            )
    return jax.tree.map(lambda x: jnp.asarray(x, dtype=jnp.result_type(x)), params)


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


def gaussian() -> NoiseSource:
    """N(0, I) perturbations drawn from the key (one draw for all leaves together).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> src = gaussian()
      >>> eps = src.sample(src.init(jax.random.key(0), {"w": jnp.zeros(3)}), jax.random.key(1),
      ...                  {"w": jnp.zeros(3)})
      >>> eps["w"].shape
      (3,)
    """

    def init(key, params):
        del key, params
        return None

    def sample(noise_state, key, params):
        del noise_state
        # One flat draw split over the leaves: one RNG kernel to compile, however many leaves.
        return unflatten_like(jax.random.normal(key, (num_params(params),), jnp.float32), params)

    return NoiseSource(init, sample, "gaussian")


def noise_table(size: int = 2**24) -> NoiseSource:
    """A shared table of ``size`` N(0, 1) float32 values; ``ε_j`` is one window of it.

    The table is made at ``init`` from its key and lives in the strategy state (``size * 4``
    bytes). It must hold at least one window, i.e. ``size >= num_params(params)``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> src = noise_table(1000)
      >>> table = src.init(jax.random.key(0), {"w": jnp.zeros(10)})
      >>> table.shape
      (1000,)
    """
    if not isinstance(size, int | np.integer) or isinstance(size, bool) or size < 1:
        raise ValueError(f"noise_table_size: expected a positive int, got {size!r}")

    def init(key, params):
        dim = num_params(params)
        if dim > size:
            raise ValueError(
                f"noise_table_size: the table ({size} floats) is smaller than one perturbation "
                f"({dim} parameters); use noise_table_size >= {dim}"
            )
        return jax.random.normal(key, (size,), jnp.float32)

    def sample(table, key, params):
        dim = num_params(params)
        offset = jax.random.randint(key, (), 0, table.shape[0] - dim + 1)
        return unflatten_like(jax.lax.dynamic_slice(table, (offset,), (dim,)), params)

    return NoiseSource(init, sample, "table")


def perturb(params: Params, sigma, eps: Params, sign) -> Params:
    """``params + sign * sigma * eps`` leaf by leaf, computed in float32, cast back to each leaf.

    ``sigma`` is a scalar or a pytree like ``params`` (per-coordinate σ).

    Example:
      >>> import jax.numpy as jnp
      >>> params, eps = {"w": jnp.zeros(2)}, {"w": jnp.array([1.0, -2.0])}
      >>> perturb(params, 0.5, eps, -1.0)["w"].tolist()
      [-0.5, 1.0]
      >>> perturb(params, {"w": jnp.array([1.0, 0.25])}, eps, 1.0)["w"].tolist()
      [1.0, -0.5]
    """
    sigmas = broadcast_like(sigma, params)
    return jax.tree.map(
        lambda x, s, e: (x.astype(jnp.float32) + sign * (s * e)).astype(x.dtype),
        params,
        sigmas,
        eps,
    )


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


@dataclasses.dataclass(frozen=True)
class Perturbations:
    """The static recipe mapping ``(noise_state, key, i)`` to member ``i``'s perturbation.

    Attributes:
      source: the ``NoiseSource`` of base perturbations.
      population_size: ``P``.
      antithetic: pair members as ``(+ε, -ε)`` (``P`` must then be even).
      batch_size: how many base perturbations ``sums`` rebuilds at once; ``None`` rebuilds all
        of them in one ``vmap`` (fastest, ``P/2 × dim`` floats of memory).
    """

    source: NoiseSource
    population_size: int
    antithetic: bool = True
    batch_size: int | None = None

    @property
    def num_base(self) -> int:
        """How many independent ``ε_j`` one population uses."""
        return self.population_size // 2 if self.antithetic else self.population_size

    def base(self, noise_state, key, j, like: Params) -> Params:
        """Base perturbation ``ε_j`` (float32 pytree like ``like``)."""
        return self.source.sample(noise_state, jax.random.fold_in(key, j), like)

    def _members_of_base(self, noise_state, key, j, params, sigma) -> Params:
        """The members built from ``ε_j``: leading axis 2 (antithetic) or 1."""
        eps = self.base(noise_state, key, j, params)
        signs = jnp.array([1.0, -1.0] if self.antithetic else [1.0], jnp.float32)
        return jax.vmap(lambda s: perturb(params, sigma, eps, s))(signs)

    def member(self, noise_state, key, i, params: Params, sigma) -> Params:
        """Member ``i`` alone; bit-identical to row ``i`` of ``population``."""
        j, slot = (i // 2, i % 2) if self.antithetic else (i, 0)
        group = self._members_of_base(noise_state, key, j, params, sigma)
        return jax.tree.map(lambda g: g[slot], group)

    def population(self, noise_state, key, params: Params, sigma) -> Params:
        """All ``P`` members, interleaved ``+ε_0, -ε_0, +ε_1, ...`` when antithetic."""
        groups = jax.vmap(lambda j: self._members_of_base(noise_state, key, j, params, sigma))(
            jnp.arange(self.num_base)
        )
        return jax.tree.map(lambda g: g.reshape((self.population_size,) + g.shape[2:]), groups)

    def sums(self, noise_state, key, like: Params, coeffs: jax.Array) -> Params:
        """``Σ_i coeffs[k, i] s_i ε_{j(i)}`` for each row ``k``: float32 leaves shaped ``(K, ...)``.

        Antithetic pairs are folded first (``(c_{2j} - c_{2j+1}) ε_j``), so a coefficient row
        that is constant over the population sums to exactly zero.
        """
        return self.sums_and_squares(noise_state, key, like, coeffs, None)[0]

    def sums_and_squares(
        self, noise_state, key, like: Params, coeffs: jax.Array, square_coeffs: jax.Array | None
    ) -> tuple[Params, Params | None]:
        """``sums`` and, from the same regenerated noise, ``Σ_i square_coeffs[k, i] ε_{j(i)}²``.

        Strategies that adapt a per-coordinate σ need the weighted second moments; a pair's
        members share ``ε_j²``, so their square coefficients are added (not subtracted).
        ``square_coeffs=None`` skips the squares (the second result is then ``None``).
        """
        coeffs = self._fold(jnp.asarray(coeffs, jnp.float32), sign=-1.0)
        rows = [coeffs]
        if square_coeffs is not None:
            rows.append(self._fold(jnp.asarray(square_coeffs, jnp.float32), sign=1.0))
        n = self.num_base
        batch = n if self.batch_size is None else min(self.batch_size, n)
        n_chunks = -(-n // batch)
        padded = n_chunks * batch
        # Padding indices carry zero coefficients, so their noise never counts.
        rows = [jnp.pad(c, ((0, 0), (0, padded - n))) for c in rows]

        def weighted(c, e):
            return jnp.tensordot(c, e, axes=(1, 0), precision=jax.lax.Precision.HIGHEST)

        def chunk_sum(start):
            idx = start + jnp.arange(batch)
            eps = jax.vmap(lambda j: self.base(noise_state, key, j, like))(idx)
            parts = [jax.lax.dynamic_slice_in_dim(c, start, batch, axis=1) for c in rows]
            out = [jax.tree.map(lambda e, c=parts[0]: weighted(c, e), eps)]
            if len(parts) > 1:
                out.append(jax.tree.map(lambda e, c=parts[1]: weighted(c, jnp.square(e)), eps))
            return out

        if n_chunks == 1:
            total = chunk_sum(0)
        else:

            def body(acc, start):
                return jax.tree.map(jnp.add, acc, chunk_sum(start)), None

            zeros = [
                jax.tree.map(
                    lambda x, k=c.shape[0]: jnp.zeros((k,) + jnp.shape(x), jnp.float32), like
                )
                for c in rows
            ]
            total, _ = jax.lax.scan(body, zeros, jnp.arange(n_chunks) * batch)
        return total[0], (total[1] if len(total) > 1 else None)

    def _fold(self, coeffs: jax.Array, sign: float) -> jax.Array:
        """Per-member coefficients ``(K, P)`` to per-base ones ``(K, num_base)``."""
        if coeffs.ndim != 2 or coeffs.shape[1] != self.population_size:
            raise ValueError(
                f"coeffs: expected shape (K, {self.population_size}), got {coeffs.shape}"
            )
        if self.antithetic:
            return coeffs[:, 0::2] + sign * coeffs[:, 1::2]
        return coeffs
