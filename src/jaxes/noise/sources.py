"""Where base perturbations ``ε_j`` come from.

Each ``ε_j`` is a pure function of ``(noise_state, fold_in(key, j))`` (``jaxes.noise.keys``),
so ``ask``, ``member`` and ``tell`` on any device or host rebuild exactly the same numbers from
the same key (Salimans et al. 2017): only fitness values ever need to travel.

Sources:
  * ``auto(size, bases)`` (the default): ``gaussian_together`` for a population of fewer than
    ``2**14`` noise values, ``noise_table`` above, so no state carries a buffer that does not
    grow with the problem.
  * ``noise_table(size, bases)``: a table of N(0, 1) floats drawn once at ``init``, sized to
    the problem (``table_size``); ``ε_j`` is read as windows of it, one per block of
    ``min(d, size // 2)`` coordinates, so a model of any size reads its noise instead of
    drawing it (Salimans et al.'s shared table).
  * ``gaussian()``: fresh N(0, I) draws (threefry) for every perturbation;
    ``gaussian_together(bases)``: one draw for a whole (small) population.
  * ``jaxes.noise.lowrank(r)``: rank-``r`` products ``A Bᵀ/√r`` for matrices, kept as
    factors where it pays (``factors``/``combine``, ``Perturbations.displacement``).

``NOISE_SOURCES`` names the sources a strategy's ``noise=`` setting accepts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxes.checks import check_int
from jaxes.noise import threefry
from jaxes.noise.keys import base_key, noise_key
from jaxes.trees import num_params, unflatten_like
from jaxes.types import Params, PRNGKey

NoiseState = Any

# The names a strategy's ``noise=`` setting accepts (``lowrank`` is ``jaxes.noise.lowrank``).
NOISE_SOURCES = ("auto", "table", "gaussian", "lowrank")
# The word folded into a population's key for its table layout (never a base index).
_LAYOUT = 2**32 - 1


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
        stand-ins (``jaxes.factored.lowrank.LowRank``) that ``sample`` multiplies out; ``None``.
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
        flat = threefry.normal(base_key(key, j), (num_params(params),), jnp.float32)
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
    """Floats in a table sized to the problem (``noise_table(None)``): room for the
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


def read_windows(values: jax.Array, key, j, dim: int) -> jax.Array:
    """Base perturbation ``j`` of the population drawn with ``key``, ``dim`` floats read from
    the table ``values`` as ``noise_table`` lays them out (``table_layout``).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> values = jnp.arange(64.0)
      >>> eps = read_windows(values, jax.random.key(0), 3, 10)
      >>> eps.shape, bool(jnp.all(jnp.diff(eps) == 1.0))  # one window of 10 consecutive values
      ((10,), True)
    """
    block, windows = table_layout(values.shape[0], dim)
    blocks = -(-dim // block)
    start, stride = threefry.bits(threefry.fold_in(noise_key(key), _LAYOUT), (2, blocks))
    # uint32 arithmetic wraps mod 2^32, so the mask gives (a + j c) mod W exactly.
    j = jnp.asarray(j).astype(jnp.uint32)
    offsets = ((start + j * (stride | 1)) & (windows - 1)).astype(jnp.int32)
    if blocks == 1:
        return jax.lax.dynamic_slice(values, (offsets[0],), (block,))
    windows_of = jax.vmap(lambda o: jax.lax.dynamic_slice(values, (o,), (block,)))
    return windows_of(offsets).reshape(-1)[:dim]


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
        size = check_int("size", size, 2)
    bases = check_int("bases", bases, 1)

    def size_for(dim: int) -> int:
        return table_size(dim, bases) if size is None else size

    def init(key, params):
        dim = num_params(params)
        total = size_for(dim)
        if total < min(2 * dim, 2 * MIN_EXPLICIT_BLOCK):
            raise ValueError(
                f"noise_table: a table of {total} floats would repeat values inside one "
                f"perturbation of {dim} parameters; use a size >= "
                f"{min(2 * dim, 2 * MIN_EXPLICIT_BLOCK)}, or None (sized to the problem)"
            )
        # Elementwise only, so the table is bit-identical whether init runs eagerly or in jit.
        return Table(threefry.normal(noise_key(key), (total,), jnp.float32))

    def sample(table, key, j, params):
        dim = num_params(params)
        total = size_for(dim)
        if table.values.shape != (total,):
            raise ValueError(
                f"noise_state: a table of {table.values.shape[0]} floats, but this strategy "
                f"reads one of {total} for {dim} parameters; build the state with its own init"
            )
        return unflatten_like(read_windows(table.values, key, j, dim), params)

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
        block = threefry.normal(noise_key(key), (bases, num_params(params)), jnp.float32)
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
