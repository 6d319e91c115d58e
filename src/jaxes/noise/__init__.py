"""Perturbations rebuilt from keys, never stored.

Member ``i`` of a population is ``θ + s_i σ ε_{j(i)}``, rounded to each leaf's own dtype. With
antithetic pairs ``j = i // 2`` and ``s_i = +1, -1, +1, -1, ...``; without them ``j = i`` and
``s_i = +1``. Each base perturbation ``ε_j`` is a pure function of
``(noise_state, fold_in(key, j))``, so ``ask``, ``member`` and ``tell`` on any device or host
rebuild exactly the same numbers from the same key (Salimans et al. 2017): only fitness values
ever need to travel.

Keys: whatever key the caller passes (a typed key of any ``jax_default_prng_impl``, or raw
``uint32`` data), ``noise_key`` turns it into one threefry key, and every draw below uses
threefry. Threefry is a pure function of key and counter, so a member built alone, inside
``vmap`` or on another device is bit-identical to its row of the population; ``rbg`` keys are
not (their bits depend on the batch they are drawn in).

Sources of ``ε``:
  * ``auto(size, bases)`` (the default): ``gaussian_together`` for a population of fewer than
    ``2**14`` noise values, ``noise_table`` above, so no state carries a buffer that does not
    grow with the problem.
  * ``noise_table(size, bases)``: a table of N(0, 1) floats drawn once at ``init``, sized to
    the problem (``table_size``); ``ε_j`` is read as windows of it, one per block of
    ``min(d, size // 2)`` coordinates, so a model of any size reads its noise instead of
    drawing it (Salimans et al.'s shared table).
  * ``gaussian()``: fresh N(0, I) draws (threefry) for every perturbation;
    ``gaussian_together(bases)``: one draw for a whole (small) population.
  * ``jaxes.lowrank.lowrank(r)``: rank-``r`` products ``A Bᵀ/√r`` for matrices, kept as
    factors where it pays (``factors``/``combine``, ``Perturbations.displacement``).

Memory: a ``Perturbations`` recipe carries a ``memory_budget`` in bytes. ``eval_chunk`` and
``tell_chunk`` are how many members (bases) fit in it, so evaluation and the rebuild in
``tell`` never hold the whole ``P × d`` population.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxes.checks import check_int
from jaxes.trees import broadcast_like, is_rounded, master_dtype, num_params, unflatten_like
from jaxes.types import Params, PRNGKey

NoiseState = Any
_HIGHEST = jax.lax.Precision.HIGHEST
# Up to this many bases per chunk ``moments`` sums with unrolled multiply-adds, not a dot.
_FUSED_MAX_BATCH = 4
# A chunk of rebuilt noise up to this size is summed with one dot (it stays in cache).
_DOT_MAX_BYTES = 4 * 2**20
# From this many parameters on, a population reads its table windows one base at a time.
_SLICED_MIN_PARAMS = 2**12
# 64 MiB of members (evaluation) or of rebuilt noise (tell) in flight at once.
DEFAULT_MEMORY_BUDGET = 64 * 2**20


class NoiseSource(NamedTuple):
    """Where base perturbations come from.

    Attributes:
      init: ``init(key, params) -> noise_state`` (``None`` for a stateless source).
      sample: ``sample(noise_state, key, j, params) -> eps``: base perturbation ``ε_j`` of the
        population drawn with ``key`` (a threefry key), one float32 pytree shaped like
        ``params`` with N(0, 1) entries.
      name: a short label for logs.
      gaussian: whether ``ε`` is N(0, I) (approximately, for the table), so that strategy
        terms derived for Gaussian samples (σ and covariance updates) hold for it.
      factors: ``factors(noise_state, key, j, params)``, for a source that keeps ``ε`` in a
        cheaper form: a pytree like ``params`` whose leaves are arrays or factored
        stand-ins (``jaxes.lowrank.LowRank``) that ``sample`` multiplies out; ``None``.
      combine: with ``factors``, ``combine(coeffs, stacked) -> [Σ_b coeffs[k, b] ε_b]``
        for one leaf's factors stacked over bases (``coeffs`` is ``(K, batch)``), so that
        ``tell`` sums the population without multiplying it out.
    """

    init: Callable[[PRNGKey, Params], NoiseState]
    sample: Callable[[NoiseState, PRNGKey, Any, Params], Params]
    name: str
    gaussian: bool = True
    factors: Callable[[NoiseState, PRNGKey, Any, Params], Params] | None = None
    combine: Callable[[jax.Array, Any], list] | None = None


class Table(NamedTuple):
    """The noise table (a ``noise_state``). It is a pure function of the strategy's init key
    and the problem's size, so checkpoints leave it out and rebuild it."""

    values: jax.Array


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
        out = jax.random.fold_in(out, words[w])
    return out


def base_key(key, j) -> jax.Array:
    """The key base perturbation ``j`` of the population drawn with ``key`` is drawn from."""
    return jax.random.fold_in(noise_key(key), j)


def gaussian() -> NoiseSource:
    """N(0, I) perturbations drawn from the key (one threefry draw for all leaves together).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> src = gaussian()
      >>> like = {"w": jnp.zeros(3)}
      >>> src.sample(src.init(jax.random.key(0), like), jax.random.key(1), 0, like)["w"].shape
      (3,)
    """

    def init(key, params):
        del key, params
        return None

    def sample(noise_state, key, j, params):
        del noise_state
        # One flat draw split over the leaves: one RNG kernel to compile, however many leaves.
        flat = jax.random.normal(base_key(key, j), (num_params(params),), jnp.float32)
        return unflatten_like(flat, params)

    return NoiseSource(init, sample, "gaussian")


# The largest table a problem is given (64 MiB), and the fewest window starts of a small one
# (its sample mean and variance, shared by every window, are then off by at most ~0.5 %).
MAX_TABLE_SIZE = 2**24
MIN_TABLE_WINDOWS = 2**16
# An explicit table smaller than twice the problem must still hold windows this long.
MIN_EXPLICIT_BLOCK = 2**19


def _power_of_two_at_most(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def table_size(dim: int, bases: int = 1) -> int:
    """Floats in a table sized to the problem (``noise_table_size=None``): room for the
    smallest power of two ``W >= max(2d, bases, 2**16)`` of window starts, each followed by
    ``d`` values, at most ``2**24`` floats (64 MiB) in all.

    Example:
      >>> table_size(10), table_size(10, bases=2**17), table_size(100_000), table_size(10**9)
      (65545, 131081, 362143, 16777216)
    """
    windows = 1 << (max(2 * dim, bases, MIN_TABLE_WINDOWS) - 1).bit_length()
    return min(MAX_TABLE_SIZE, windows + dim - 1)


def table_layout(size: int, dim: int) -> tuple[int, int]:
    """``(block, windows)`` for ``dim`` coordinates read from a table of ``size`` floats:
    blocks of ``min(d, size // 2)`` consecutive coordinates, each the window of the table
    starting at one of the first ``windows`` positions (a power of two).

    Example:
      >>> table_layout(65545, 10), table_layout(2**24, 10**9)
      ((10, 65536), (8388608, 8388608))
    """
    block = min(dim, size // 2)
    return block, _power_of_two_at_most(size - block + 1)


def noise_table(size: int | None = None, bases: int = 1) -> NoiseSource:
    """A table of N(0, 1) float32 values sized to the problem; ``ε_j`` is read from windows.

    The table is drawn at ``init`` and lives in the strategy state; checkpoints rebuild it
    from its key instead of storing it. Its size is ``table_size(d, bases)`` (about ``3d``
    floats, at least ``2**16`` and at most ``2**24``), so an undonated ``jax.jit(ask)``
    copies a table that grows with the problem, never 64 MiB for a small one; ``size``
    fixes it instead. The table's own sample mean and variance (off by about ``1/√size``)
    are shared by every window.

    A perturbation of ``d`` coordinates is cut into blocks of ``min(d, size // 2)``
    consecutive coordinates (``table_layout``); block ``k`` of base ``j`` is the window
    starting at ``(a_k + j c_k) mod W``, with ``a_k`` and an odd ``c_k`` drawn from the
    population's key and ``W`` a power of two. So each window start is uniform, the blocks of
    one base are independent, and no two bases of one population (up to ``W`` of them) read
    the same window: a population never holds the same perturbation twice.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> src = noise_table()
      >>> src.init(jax.random.key(0), {"w": jnp.zeros(10)}).values.shape
      (65545,)
    """
    if size is not None:
        size = check_int("noise_table_size", size, 2)
    bases = check_int("bases", bases, 1)

    def size_for(dim: int) -> int:
        return table_size(dim, bases) if size is None else size

    def init(key, params):
        dim = num_params(params)
        total = size_for(dim)
        if total < min(2 * dim, 2 * MIN_EXPLICIT_BLOCK):
            raise ValueError(
                f"noise_table_size: a table of {total} floats would repeat values inside one "
                f"perturbation of {dim} parameters; use noise_table_size >= "
                f"{min(2 * dim, 2 * MIN_EXPLICIT_BLOCK)}, or None (sized to the problem)"
            )
        # Elementwise only, so the table is bit-identical whether init runs eagerly or in jit.
        return Table(jax.random.normal(key, (total,), jnp.float32))

    def sample(table, key, j, params):
        dim = num_params(params)
        total = size_for(dim)
        if table.values.shape != (total,):
            raise ValueError(
                f"noise_state: a table of {table.values.shape[0]} floats, but this strategy "
                f"reads one of {total} for {dim} parameters; build the state with its own init"
            )
        block, windows = table_layout(total, dim)
        blocks = -(-dim // block)
        start, stride = jax.random.bits(jax.random.fold_in(noise_key(key), _LAYOUT), (2, blocks))
        # uint32 arithmetic wraps mod 2^32, so the mask gives (a + j c) mod W exactly.
        j = jnp.asarray(j).astype(jnp.uint32)
        offsets = ((start + j * (stride | 1)) & (windows - 1)).astype(jnp.int32)
        if blocks == 1:
            flat = jax.lax.dynamic_slice(table.values, (offsets[0],), (block,))
        else:
            windows_of = jax.vmap(lambda o: jax.lax.dynamic_slice(table.values, (o,), (block,)))
            flat = windows_of(offsets).reshape(-1)[:dim]
        return unflatten_like(flat, params)

    return NoiseSource(init, sample, "table")


# Below this many noise values per population (bases × d), drawing them from keys costs less
# than carrying a table of 2**16 floats from call to call.
AUTO_GAUSSIAN_VALUES = 2**14


def gaussian_together(bases: int) -> NoiseSource:
    """N(0, I) perturbations of a whole population drawn at once: ``ε_j`` is row ``j`` of one
    ``(bases, d)`` threefry draw from the population's key. One random kernel per ``ask`` or
    ``tell`` instead of one per base and one to derive their keys; a member built alone
    draws the whole (small) block too, so it is bit-identical to its row.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> src, like = gaussian_together(4), jnp.zeros(3)
      >>> rows = jax.random.normal(jax.random.key(1), (4, 3))
      >>> bool(jnp.all(src.sample(None, jax.random.key(1), 2, like) == rows[2]))
      True
    """
    bases = check_int("bases", bases, 1)

    def init(key, params):
        del key, params
        return None

    def sample(noise_state, key, j, params):
        del noise_state
        block = jax.random.normal(noise_key(key), (bases, num_params(params)), jnp.float32)
        return unflatten_like(block[j], params)

    return NoiseSource(init, sample, "gaussian")


def auto(size: int | None = None, bases: int = 1) -> NoiseSource:
    """The source by size: ``gaussian_together(bases)`` for a population of fewer than
    ``2**14`` noise values (``bases × d``), where drawing them costs least and the state stays
    a few kB; ``noise_table(size, bases)`` otherwise, where reading beats drawing by far.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> src = auto(bases=8)
      >>> src.init(jax.random.key(0), jnp.zeros(10)) is None  # 80 values: drawn
      True
      >>> src.init(jax.random.key(0), jnp.zeros(10_000)).values.shape  # 80,000: a table
      (75535,)
    """
    draws, table = gaussian_together(bases), noise_table(size, bases)

    def pick(params) -> NoiseSource:
        return draws if num_params(params) * bases < AUTO_GAUSSIAN_VALUES else table

    def init(key, params):
        return pick(params).init(key, params)

    def sample(noise_state, key, j, params):
        return pick(params).sample(noise_state, key, j, params)

    return NoiseSource(init, sample, "auto")


# The word folded into a population's key for its table layout (never a base index).
_LAYOUT = 2**32 - 1

# The names a strategy's ``noise=`` setting accepts (``lowrank`` is ``jaxes.noise.lowrank``).
NOISE_SOURCES = ("auto", "table", "gaussian", "lowrank")


def perturb(params: Params, sigma, eps: Params, sign, dtypes: Params | None = None) -> Params:
    """``params + sign * sigma * eps`` leaf by leaf, computed in float32 (the master dtype) and
    rounded to ``dtypes`` (a pytree of arrays whose dtypes the members take; default: each
    leaf's own dtype).

    ``sigma`` is a scalar or a pytree like ``params`` (per-coordinate σ).

    Example:
      >>> import jax.numpy as jnp
      >>> params, eps = {"w": jnp.zeros(2)}, {"w": jnp.array([1.0, -2.0])}
      >>> perturb(params, 0.5, eps, -1.0)["w"].tolist()
      [-0.5, 1.0]
      >>> perturb(params, {"w": jnp.array([1.0, 0.25])}, eps, 1.0)["w"].tolist()
      [1.0, -0.5]
      >>> perturb(params, 0.5, eps, 1.0, {"w": jnp.zeros((), jnp.bfloat16)})["w"].dtype
      dtype(bfloat16)
    """
    sigmas = broadcast_like(sigma, params)
    dtypes = params if dtypes is None else dtypes
    return jax.tree.map(
        lambda x, s, e, t: (x.astype(master_dtype(x.dtype)) + sign * (s * e)).astype(t.dtype),
        params,
        sigmas,
        eps,
        dtypes,
    )


def largest_divisor_at_most(n: int, limit: int) -> int:
    """The largest divisor of ``n`` that is ``<= limit`` (at least 1).

    Example:
      >>> largest_divisor_at_most(256, 100), largest_divisor_at_most(30, 7)
      (64, 6)
    """
    limit = max(1, min(n, limit))
    return max(k for k in range(1, limit + 1) if n % k == 0)


def member_bytes(params: Params, dtypes: Params | None = None) -> int:
    """Bytes one member holds while it is evaluated: itself in its dtypes (default: the
    params' own) plus its float32 noise."""
    dtypes = params if dtypes is None else dtypes
    return sum(
        math.prod(jnp.shape(x)) * (4 + jnp.dtype(t.dtype).itemsize)
        for x, t in zip(jax.tree.leaves(params), jax.tree.leaves(dtypes), strict=True)
    )


def check_memory_budget(memory_budget) -> int | None:
    """``None`` (the default budget) or a number of bytes >= 1."""
    return None if memory_budget is None else check_int("memory_budget", memory_budget, 1)


@dataclasses.dataclass(frozen=True)
class Perturbations:
    """The static recipe mapping ``(noise_state, key, i)`` to member ``i``'s perturbation.

    Attributes:
      source: the ``NoiseSource`` of base perturbations.
      population_size: ``P``.
      antithetic: pair members as ``(+ε, -ε)`` (``P`` must then be even).
      batch_size: how many base perturbations ``moments`` rebuilds at once; ``None`` chooses
        from ``memory_budget``.
      memory_budget: bytes of members or rebuilt noise in flight at once; ``None`` is
        ``DEFAULT_MEMORY_BUDGET`` (and at least one member, however big). An explicit budget
        must hold at least one member.
    """

    source: NoiseSource
    population_size: int
    antithetic: bool = True
    batch_size: int | None = None
    memory_budget: int | None = None

    @property
    def num_base(self) -> int:
        """How many independent ``ε_j`` one population uses."""
        return self.population_size // 2 if self.antithetic else self.population_size

    def _fit(self, what: str, unit_bytes: int) -> int:
        """How many units of ``unit_bytes`` the budget holds (an explicit budget: >= 1)."""
        budget = DEFAULT_MEMORY_BUDGET if self.memory_budget is None else self.memory_budget
        count = budget // max(unit_bytes, 1)
        if count < 1 and self.memory_budget is not None:
            raise ValueError(
                f"memory_budget: {self.memory_budget} bytes cannot hold one {what} "
                f"({unit_bytes} bytes); use memory_budget >= {unit_bytes} or None"
            )
        return max(int(count), 1)

    def eval_chunk(self, params: Params, dtypes: Params | None = None, members: int = 0) -> int:
        """Members evaluated at once: the largest divisor of ``members`` (default ``P``) whose
        members (in their dtype, plus their float32 noise) fit in the budget."""
        return largest_divisor_at_most(
            members or self.population_size, self._fit("member", member_bytes(params, dtypes))
        )

    def tell_chunk(self, params: Params, dtypes: Params | None, squares: bool) -> int:
        """Base perturbations ``moments`` rebuilds at once."""
        if self.batch_size is not None:
            return min(self.batch_size, self.num_base)
        dtypes = params if dtypes is None else dtypes
        per_base = sum(
            math.prod(jnp.shape(x)) * 4 * (1 + squares)
            for x, t in zip(jax.tree.leaves(params), jax.tree.leaves(dtypes), strict=True)
        )
        batch = min(self._fit("perturbation", per_base), self.num_base)
        if batch * per_base > _DOT_MAX_BYTES:
            # Too big for the cache: sum a few bases at a time with fused multiply-adds, so the
            # noise is read once from the table and never written back.
            return min(batch, _FUSED_MAX_BATCH)
        return batch

    def base(self, noise_state, key, j, like: Params) -> Params:
        """Base perturbation ``ε_j`` (float32 pytree like ``like``)."""
        return self.source.sample(noise_state, noise_key(key), j, like)

    def _factor_chunk(self, noise_state, key, params) -> int:
        """Bases whose factors ``moments`` holds at once, under the memory budget."""
        if self.batch_size is not None:
            return min(self.batch_size, self.num_base)
        shapes = jax.eval_shape(lambda: self.source.factors(noise_state, noise_key(key), 0, params))
        per_base = sum(math.prod(x.shape) * 4 for x in jax.tree.leaves(shapes))
        return min(self._fit("perturbation", per_base), self.num_base)

    def _members_of_base(self, noise_state, key, j, params, sigma, dtypes) -> Params:
        """The members built from ``ε_j``: leading axis 2 (antithetic) or 1.

        ``member`` and ``population`` both build members here, with the sign as a runtime
        multiplication: ``θ + s (σ ε)`` rounds the same whether or not XLA fuses the product
        into a multiply-add, so a member built alone is bit-identical to its row.
        """
        eps = self.base(noise_state, key, j, params)
        signs = jnp.array([1.0, -1.0] if self.antithetic else [1.0], jnp.float32)
        return jax.vmap(lambda s: perturb(params, sigma, eps, s, dtypes))(signs)

    def member(self, noise_state, key, i, params: Params, sigma, dtypes=None) -> Params:
        """Member ``i`` alone; bit-identical to row ``i`` of ``population``."""
        j, slot = (i // 2, i % 2) if self.antithetic else (i, 0)
        group = self._members_of_base(noise_state, key, j, params, sigma, dtypes)
        return jax.tree.map(lambda g: g[slot], group)

    def displacement(self, noise_state, key, i, params: Params, sigma) -> Params:
        """Member ``i``'s displacement ``s_i σ ε_{j(i)}`` (float32), with the source's factored
        leaves kept factored (``sigma`` and the sign folded into their first factor, so a
        factored leaf needs one σ for the whole leaf). For a source without factors it is the
        dense ``s_i σ ε``."""
        j, slot = (i // 2, i % 2) if self.antithetic else (i, 0)
        sign = jnp.where(slot == 0, 1.0, -1.0).astype(jnp.float32)
        if self.source.factors is None:
            eps = self.source.sample(noise_state, noise_key(key), j, params)
        else:
            eps = self.source.factors(noise_state, noise_key(key), j, params)
        treedef = jax.tree.structure(params)
        sig = treedef.flatten_up_to(broadcast_like(sigma, params))
        out = []
        for path_leaf, s, e in zip(
            jax.tree_util.tree_leaves_with_path(params),
            sig,
            treedef.flatten_up_to(eps),
            strict=True,
        ):
            scale = sign * jnp.asarray(s, jnp.float32)
            if isinstance(e, jax.Array):
                out.append(scale * e)
                continue
            if jnp.ndim(scale) != 0:
                raise ValueError(
                    f"sigma: a factored displacement needs one σ per leaf, but leaf "
                    f"{jax.tree_util.keystr(path_leaf[0])} has a σ per coordinate (pgpe, "
                    "snes); build members with member() instead"
                )
            out.append(e._replace(a=scale * e.a))
        return treedef.unflatten(out)

    def members(
        self, noise_state, key, first, count: int, params: Params, sigma, dtypes=None
    ) -> Params:
        """Members ``first .. first + count - 1`` (leading axis ``count``), each bit-identical to
        ``member``. With antithetic pairs, an even ``first`` (it may be traced) and an even
        ``count``, each pair is built from one read of its noise."""
        if self.antithetic and count % 2 == 0:
            j = first // 2 + jnp.arange(count // 2)
            groups = jax.vmap(
                lambda b: self._members_of_base(noise_state, key, b, params, sigma, dtypes)
            )(j)
            return jax.tree.map(lambda g: g.reshape((count,) + g.shape[2:]), groups)
        return jax.vmap(lambda i: self.member(noise_state, key, i, params, sigma, dtypes))(
            first + jnp.arange(count)
        )

    def population(self, noise_state, key, params: Params, sigma, dtypes=None) -> Params:
        """All ``P`` members, interleaved ``+ε_0, -ε_0, +ε_1, ...`` when antithetic (one draw
        per pair)."""

        def group(j):
            return self._members_of_base(noise_state, key, j, params, sigma, dtypes)

        bases = jnp.arange(self.num_base)
        if isinstance(noise_state, Table) and num_params(params) >= _SLICED_MIN_PARAMS:
            # One base after another (lax.map): each table window is then a contiguous
            # dynamic slice instead of one big element-wise gather, which is slow on CPU.
            groups = jax.lax.map(group, bases)
        else:
            # Drawn noise, or short windows: all at once (a loop costs more per step).
            groups = jax.vmap(group)(bases)
        return jax.tree.map(lambda g: g.reshape((self.population_size,) + g.shape[2:]), groups)

    def moments(
        self,
        noise_state,
        key,
        params: Params,
        sigma,
        coeffs: jax.Array,
        square_coeffs: jax.Array | None = None,
        dtypes: Params | None = None,
    ) -> tuple[list[Params], list[Params] | None]:
        """``Σ_i coeffs[k, i] δ_i`` and ``Σ_i square_coeffs[k, i] δ_i²`` for each row ``k``, with
        ``δ_i`` the displacement member ``i`` had: a list of ``K`` master-dtype pytrees each.

        For float32 members ``δ_i = s_i σ ε_{j(i)}``; pairs are folded first
        (``(c_{2j} - c_{2j+1}) ε_j``), so a constant coefficient row sums to exactly zero.
        Members rounded to a narrower dtype (bfloat16) had ``δ_i = x_i - θ``, computed in
        float32 from the rebuilt member, so the sums describe what was evaluated. The noise is
        rebuilt ``tell_chunk`` bases at a time; each row is its own running sum, so no
        ``(K, d)`` block is ever sliced or copied.
        """
        dtypes = params if dtypes is None else dtypes
        groups = [self._check(coeffs)]
        if square_coeffs is not None:
            groups.append(self._check(square_coeffs))
        plus = [c[:, 0::2] if self.antithetic else c for c in groups]
        minus = [c[:, 1::2] if self.antithetic else None for c in groups]
        folded = [
            p if m is None else p + sign * m
            for p, m, sign in zip(plus, minus, (-1.0, 1.0), strict=False)
        ]
        leaves, treedef = jax.tree.flatten(params)
        sig = treedef.flatten_up_to(broadcast_like(sigma, params))
        rounded = [is_rounded(t.dtype) for t in jax.tree.leaves(dtypes)]
        out_dtypes = [t.dtype for t in jax.tree.leaves(dtypes)]
        coeff_dtype = groups[0].dtype
        acc = [jnp.promote_types(coeff_dtype, master_dtype(t)) for t in out_dtypes]
        n = self.num_base
        # Factors are summed as they are (one contraction per leaf) where nothing needs the
        # dense ε: no squares, and no rounded member whose realised displacement counts.
        factored = self.source.combine is not None and square_coeffs is None and not any(rounded)
        if factored:
            batch = self._factor_chunk(noise_state, key, params)
        else:
            batch = self.tell_chunk(params, dtypes, square_coeffs is not None)
        n_chunks = -(-n // batch)
        padded = n_chunks * batch

        # Padding bases carry zero coefficients, so their noise never counts.
        def pad(c):
            return None if c is None else jnp.pad(c, ((0, 0), (0, padded - n)))

        plus, minus, folded = ([pad(c) for c in cs] for cs in (plus, minus, folded))

        def weighted(c, e):
            """``[Σ_b c[k, b] e[b] for k]``."""
            if batch > _FUSED_MAX_BATCH:
                out = jnp.tensordot(c, e, axes=(1, 0), precision=_HIGHEST)
                return [out[k] for k in range(c.shape[0])]
            # A few bases at a time (a big model): unrolled multiply-adds that XLA fuses with
            # reading the noise and adding into the running sums, so no chunk is stored.
            return [sum(c[k, b] * e[b] for b in range(len(e))) for k in range(c.shape[0])]

        def per_base(fn, e):
            """``fn`` of a stacked block of bases, or of each base in a list of them."""
            return [fn(b) for b in e] if isinstance(e, list) else fn(e)

        def chunk_sums(start):
            def take(c):
                return None if c is None else jax.lax.dynamic_slice_in_dim(c, start, batch, 1)

            cp, cm, cf = ([take(c) for c in cs] for cs in (plus, minus, folded))
            if factored:
                stacked = jax.vmap(
                    lambda j: treedef.flatten_up_to(
                        self.source.factors(noise_state, noise_key(key), j, params)
                    )
                )(start + jnp.arange(batch))
                return [[self.source.combine(cf[0], f)] for f in stacked]
            if batch > _FUSED_MAX_BATCH:
                idx = start + jnp.arange(batch)
                eps = jax.vmap(
                    lambda j: treedef.flatten_up_to(self.base(noise_state, key, j, params))
                )(idx)
            else:
                # A few bases, each its own slice of the table: XLA reads them inside the fused
                # multiply-adds below (a vmap would gather them into a stored block first).
                draws = [
                    treedef.flatten_up_to(self.base(noise_state, key, start + b, params))
                    for b in range(batch)
                ]
                eps = [list(leaf) for leaf in zip(*draws, strict=True)]
            out = []
            for x, s, e, r, t in zip(leaves, sig, eps, rounded, out_dtypes, strict=True):
                if not r:
                    sums = [weighted(cf[0], e)]
                    if len(cf) > 1:
                        sums.append(weighted(cf[1], per_base(jnp.square, e)))
                    out.append(sums)
                    continue
                theta = x.astype(jnp.float32)

                def realised(sign, x=theta, s=s, e=e, t=t):
                    def one(b):
                        member = x + jnp.float32(sign) * (s * b)
                        return member.astype(t).astype(jnp.float32) - x

                    return per_base(one, e)

                def add(a, b):
                    return [u + v for u, v in zip(a, b, strict=True)]

                d_plus = realised(1.0)
                sums = [weighted(cp[0], d_plus)]
                if len(cp) > 1:
                    sums.append(weighted(cp[1], per_base(jnp.square, d_plus)))
                if self.antithetic:
                    d_minus = realised(-1.0)
                    sums[0] = add(sums[0], weighted(cm[0], d_minus))
                    if len(cm) > 1:
                        sums[1] = add(sums[1], weighted(cm[1], per_base(jnp.square, d_minus)))
                out.append(sums)
            return out

        if n_chunks == 1:
            total = chunk_sums(0)
        else:
            zeros = [
                [[jnp.zeros(jnp.shape(x), a)] * c.shape[0] for c in folded]
                for x, a in zip(leaves, acc, strict=True)
            ]

            def body(acc, start):
                return jax.tree.map(jnp.add, acc, chunk_sums(start)), None

            total, _ = jax.lax.scan(body, zeros, jnp.arange(n_chunks) * batch)
        # Nominal leaves summed ε; scale by σ (and σ² for squares) once, at the end.
        kinds = []
        for kind in range(len(groups)):
            rows = []
            for k in range(groups[kind].shape[0]):
                row = []
                for parts, s, r, x, a in zip(total, sig, rounded, leaves, acc, strict=True):
                    scale = jnp.asarray(1.0 if r else s, a)
                    scale = scale if kind == 0 or r else jnp.square(scale)
                    row.append((parts[kind][k] * scale).astype(master_dtype(x.dtype)))
                rows.append(treedef.unflatten(row))
            kinds.append(rows)
        return kinds[0], (kinds[1] if len(kinds) > 1 else None)

    def _check(self, coeffs) -> jax.Array:
        coeffs = jnp.asarray(coeffs)
        # Never narrower than float32, never narrowed: float64 masses give float64 sums.
        coeffs = coeffs.astype(jnp.promote_types(coeffs.dtype, jnp.float32))
        if coeffs.ndim != 2 or coeffs.shape[1] != self.population_size:
            raise ValueError(
                f"coeffs: expected shape (K, {self.population_size}), got {coeffs.shape}"
            )
        return coeffs
