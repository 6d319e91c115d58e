"""How members are drawn from a state, in the two families, and the ``Population`` view of
the members the last ``ask`` drew, which a strategy's ``estimate`` reads in both.

- ``Diagonal``: member ``i`` is ``θ + scale ⊙ s_i ε_{j(i)}`` with ``ε`` from a ``jaxes.noise``
  recipe (``Perturbations``) and ``scale`` σ or a σ per coordinate: OpenAI-ES, PGPE, SNES,
  ARS, sep-CMA-ES. ``tell`` rebuilds the population's moments from the noise.
- ``FullSampler``: member ``i`` is ``m + σ A z_i`` on the *flattened* params, ``scale = (σ, A)``
  with a ``d × d`` matrix ``A`` (CMA-ES, xNES) or a transform kept as its parts, with
  ``times`` and ``solve`` (``RestrictedShape``: ``D (I + v vᵀ)^{1/2}``, CR-FM-NES). ``z_i``
  is drawn from the ``ask`` key and the index alone (threefry: drawn alone it is
  bit-identical to its row), or with antithetic pairs ``z_{2k+1} = -z_{2k}`` from index
  ``k``, so ``tell`` rebuilds every ``z_i``; the product ``A z_i`` rounds as its batch does,
  so a member built alone can differ from its row of ``ask``'s population in the last bit.

Every member is a pure function of the state, the key and its index.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from jaxes import centroid, trees
from jaxes import noise as noise_lib
from jaxes.noise import threefry
from jaxes.strategies.settings import NoiseSettings, make_perturbations
from jaxes.strategies.state import is_rounded_state

# The d × d matrices at the peak of a donated ``tell`` (XLA's memory_analysis at d = 1000:
# the state's C, B and the best member's scale, 3.01 d², and the update's temporaries, 3.05 d²
# for CMA-ES; xNES keeps one fewer), the covariance budget's unit.
MATRICES = 6
DEFAULT_COVARIANCE_BUDGET = 2**31


class Sample(NamedTuple):
    """The population the last ``ask`` drew by ``FullSampler``, rebuilt: ``z`` (``(P, d)``,
    standard normal) and ``y = z Aᵀ`` (the displacements in units of σ: ``x_i = m + σ y_i``)."""

    z: jax.Array
    y: jax.Array


@dataclasses.dataclass(frozen=True)
class Population:
    """The members the last ``ask`` drew, as a strategy's ``estimate`` reads them.

    Attributes:
      size: ``P``.
      moments: ``moments(masses, squares=False, keep_factors=False)``, the population's
        ``centroid.PopulationMoments`` for the ``(P,)`` masses: ``Σ m_i δ_i`` and ``Σ δ_i``
        (with ``squares`` also ``Σ m_i δ_i²`` and ``Σ δ_i²``), ``δ_i`` the displacement member
        ``i`` had, as pytrees like the params (a low-rank leaf's sums stay factors with
        ``keep_factors``, for an optimizer that takes them).
      sample: ``FullSampler``'s rebuilt ``Sample`` (``None`` for ``Diagonal``).
    """

    size: int
    moments: Callable[..., centroid.PopulationMoments]
    sample: Sample | None = None


def flat(params) -> jax.Array:
    """The params as one vector (the master dtype they share)."""
    return ravel_pytree(params)[0]


def unflat(vector: jax.Array, like):
    """``vector`` (``(d,)``) shaped as the pytree ``like``, in ``like``'s dtypes."""
    return ravel_pytree(like)[1](vector)


def check_dimension(master, strategy: str, budget: int) -> tuple[int, Any]:
    """``(d, dtype)`` of the flattened params, whose ``d × d`` matrices must fit
    ``covariance_budget``; else say the largest ``d`` that does."""
    theta = flat(master)
    d, dtype = theta.shape[0], theta.dtype
    itemsize = jnp.dtype(dtype).itemsize
    need = MATRICES * d * d * itemsize
    if need > budget:
        largest = int((budget / (MATRICES * itemsize)) ** 0.5)
        raise ValueError(
            f"params: {strategy} keeps d × d matrices, and d = {d} needs about "
            f"{need / 2**30:.3g} GiB, above covariance_budget={budget} bytes (the largest d it "
            f"fits in {jnp.dtype(dtype).name} is {largest}); use sep_cma_es or snes (diagonal) "
            f"for this many parameters, or raise covariance_budget"
        )
    return d, dtype


class Paths(NamedTuple):
    """``T = A_k ⋯ A_1``, ``A_j = (1 - c_j) I + c_j p_j p_jᵀ``: ``vectors`` (``m × d``), ``rates``
    (LM-MA-ES's transform; a vector at rate 0 is ``A_j = I``).

    Example:
      >>> t = Paths(jnp.array([[1.0, 0.0], [1.0, 1.0]]), jnp.array([0.5, 0.25]))
      >>> y = t.times(jnp.array([1.0, 2.0]))
      >>> y.tolist(), [round(x, 6) for x in t.solve(y).tolist()]
      ([1.25, 1.25], [1.0, 2.0])
    """

    vectors: jax.Array
    rates: jax.Array

    def times(self, z: jax.Array) -> jax.Array:
        """``T z``. Rows ``(rows, d)`` (members: a population, a chunk, one member alone) go
        through ``T = s I + V K Vᵀ`` (``compact``), two products with the vectors, where
        applying the ``A_j`` in turn reads every row ``2m`` times (at d = 10⁵ and m = 38 rows
        12-17 times slower, float64 and float32, on a 2-core EPYC). One vector ``(d,)`` (a
        ``tell``'s weighted sum) goes through the ``A_j`` in turn, without the ``m²·d`` work of
        the Gram matrix."""
        if z.ndim == 2:
            s, k = self.compact()
            return s * z + ((z @ self.vectors.T) @ k.T) @ self.vectors

        def factor(y, pair):
            v, c = pair
            return (1 - c) * y + c * jnp.sum(y * v, axis=-1, keepdims=True) * v, None

        return jax.lax.scan(factor, z, (self.vectors, self.rates))[0]

    def compact(self) -> tuple[jax.Array, jax.Array]:
        """``(s, K)`` with ``T = s I + V K Vᵀ`` (``V``'s columns the vectors): from
        ``A_j T_{j-1}``, ``s_j = (1 - c_j) s_{j-1}``, ``K_j = (1 - c_j) K_{j-1}`` with row ``j``
        set to ``c_j (gᵀ K_{j-1} + s_{j-1} e_jᵀ)``, ``g = Vᵀ p_j`` (the Gram matrix's row)."""
        v, c = self.vectors, self.rates
        m, gram = v.shape[0], v @ v.T

        def step(carry, j):
            s, k = carry
            row = c[j] * (gram[j] @ k + s * (jnp.arange(m) == j))
            return (s * (1 - c[j]), (1 - c[j]) * k + (jnp.arange(m) == j)[:, None] * row), None

        start = (jnp.ones((), v.dtype), jnp.zeros((m, m), v.dtype))
        return jax.lax.scan(step, start, jnp.arange(m))[0]

    def solve(self, y: jax.Array) -> jax.Array:
        """``T⁻¹ y``, ``A_k`` first, each ``A_j⁻¹`` by Sherman-Morrison."""

        def factor(x, pair):
            v, c = pair
            shrink = c / (1 - c + c * jnp.sum(v * v))
            return (x - shrink * jnp.sum(x * v, axis=-1, keepdims=True) * v) / (1 - c), None

        return jax.lax.scan(factor, y, (self.vectors, self.rates), reverse=True)[0]


class RestrictedShape(NamedTuple):
    """``A = diag(D) (I + v vᵀ)^{1/2}``, the square root of CR-FM-NES's covariance
    ``D (I + v vᵀ) D`` (times σ²), kept as its two vectors: O(d) memory.

    With ``s = √(1 + ‖v‖²)``, ``(I + v vᵀ)^{1/2} = I + v vᵀ/(1 + s)`` (its square is
    ``I + v vᵀ``) and its inverse is ``I - v vᵀ/(s (1 + s))``; neither divides by ``‖v‖``, so
    ``v = 0`` (a best-member recipe before any ``tell``) gives ``A = diag(D)``.

    Example:
      >>> a = RestrictedShape(jnp.array([1.0, 2.0]), jnp.array([0.0, 1.0]))
      >>> y = a.times(jnp.array([1.0, 1.0]))
      >>> [round(x, 4) for x in y.tolist()], [round(x, 4) for x in a.solve(y).tolist()]
      ([1.0, 2.8284], [1.0, 1.0])
    """

    diagonal: jax.Array
    v: jax.Array

    def _s(self) -> jax.Array:
        return jnp.sqrt(1.0 + jnp.sum(jnp.square(self.v)))

    def times(self, z: jax.Array) -> jax.Array:
        """``A z`` for ``z`` of shape ``(..., d)``, row by row."""
        along = jnp.sum(z * self.v, axis=-1, keepdims=True)
        return self.diagonal * (z + along * self.v / (1.0 + self._s()))

    def solve(self, y: jax.Array) -> jax.Array:
        """``A⁻¹ y`` for ``y`` of shape ``(..., d)``."""
        w = y / self.diagonal
        s = self._s()
        return w - jnp.sum(w * self.v, axis=-1, keepdims=True) * self.v / (s * (1.0 + s))


def _times(a, z: jax.Array) -> jax.Array:
    """``A z`` (rows of ``z``) for a matrix or a transform kept as its parts: a pytree with
    ``times(z)`` and ``solve(y)`` on rows (``RestrictedShape``)."""
    if hasattr(a, "times"):
        return a.times(z)
    return a @ z if z.ndim == 1 else z @ a.T


def standard_normal(key: jax.Array, i, d: int, dtype) -> jax.Array:
    """``z_i``: drawn from the ``ask`` key and the index alone (threefry).

    ``jax.random`` itself, not ``noise.threefry``: with the draw written out, XLA:CPU schedules
    the best member's ``d × d`` copy after the update and a donated ``tell`` peaks one matrix
    higher (cma_es at d = 400: 7.08 d² floats against 6.11, tests/test_cma_es.py)."""
    return jax.random.normal(jax.random.fold_in(key, i), (d,), dtype)


@dataclasses.dataclass(frozen=True)
class Diagonal:
    """The per-coordinate family: member ``i`` is ``θ + scale ⊙ s_i ε_{j(i)}`` with ``ε`` from a
    ``jaxes.noise`` recipe (``Perturbations``); ``scale`` is σ, or a σ per coordinate."""

    perturbations: noise_lib.Perturbations

    @property
    def population_size(self) -> int:
        return self.perturbations.population_size

    @property
    def antithetic(self) -> bool:
        return self.perturbations.antithetic

    def start(self, key, master):
        """``(noise_state, key of the first ask)`` from ``init``'s key."""
        table_key, ask_key = threefry.split(noise_lib.noise_key(key))
        return self.perturbations.source.init(table_key, master), ask_key

    def population(self, state, scale):
        return self.perturbations.population(
            state.noise_state, state.key, state.params, scale, state.dtypes
        )

    def member(self, state, i, scale):
        """Member ``i`` (a valid index) in the params' dtypes."""
        return self.perturbations.member(
            state.noise_state, state.key, i, state.params, scale, state.dtypes
        )

    def members(self, state, first, count: int, scale):
        return self.perturbations.members(
            state.noise_state, state.key, first, count, state.params, scale, state.dtypes
        )

    def displacement(self, state, i, scale):
        """Member ``i``'s displacement from ``jaxes.centre(state)``: factored where the noise
        is; for a rounded member, the displacement it really had from the rounded centre."""
        return self.perturbations.displacement(
            state.noise_state, state.key, i, state.params, scale, state.dtypes
        )

    def eval_chunk(self, state, members: int, factored: bool) -> int:
        return self.perturbations.eval_chunk(state.params, state.dtypes, members, factored)

    def told(self, state, scale) -> Population:
        """The population the last ``ask`` drew (``state.key``), its moments rebuilt from the
        noise in one pass (``Perturbations.moments``). With antithetic pairs ``Σ δ_i`` is
        exactly zero for each leaf whose members were not rounded, and is not rebuilt for it
        (``paired_rows``)."""
        perturbations = self.perturbations

        def moments(mass, squares: bool = False, keep_factors: bool = False):
            both = jnp.stack([mass, jnp.ones_like(mass)])
            sums, square_sums = perturbations.moments(
                state.noise_state,
                state.key,
                state.params,
                scale,
                both,
                both if squares else None,
                state.dtypes,
                paired_rows=(1,),
                keep_factors=keep_factors,
            )
            return centroid.PopulationMoments(
                total_mass=jnp.sum(mass),
                count=perturbations.population_size,
                mass_moment=sums[0],
                displacement_sum=sums[1],
                mass_square_moment=None if square_sums is None else square_sums[0],
                square_sum=None if square_sums is None else square_sums[1],
            )

        return Population(perturbations.population_size, moments)


@dataclasses.dataclass(frozen=True)
class FullSampler:
    """Members ``m + σ A z_i`` on the flattened params, for ``scale = (σ, A)`` (``A`` a matrix
    or a transform with ``times`` and ``solve``, as ``RestrictedShape``): ``z_i`` from the
    ``ask`` key and the index alone, so ``tell`` rebuilds every ``z_i`` (``told``); with
    ``antithetic`` pairs ``z_{2k+1} = -z_{2k}`` (the population interleaved
    ``+z_0, -z_0, +z_1, …``, as ``Diagonal``'s)."""

    population_size: int
    antithetic: bool = False

    def _z(self, key, i, d: int, dtype) -> jax.Array:
        if not self.antithetic:
            return standard_normal(key, i, d, dtype)
        sign = jnp.asarray(1 - 2 * (i % 2), dtype)
        return sign * standard_normal(key, i // 2, d, dtype)

    def start(self, key, master):
        return None, noise_lib.noise_key(key)

    def displacement(self, state, i, scale) -> jax.Array:
        """``σ A z_i`` shaped as the params (master dtype). Refused for members rounded to a
        narrower dtype: their displacement is not ``σ A z_i``."""
        if is_rounded_state(state):
            raise ValueError(
                "perturbation: members of params narrower than float32 are rounded, so their "
                "displacement is not σAz; build them with member() instead"
            )
        return unflat(self._flat_displacement(state, i, scale), state.params)

    def _flat_displacement(self, state, i, scale) -> jax.Array:
        sigma, a = scale
        theta = flat(state.params)
        z = self._z(state.key, i, theta.shape[0], theta.dtype)
        if hasattr(a, "times"):  # as a row, as members builds it (Paths: the compact form)
            return sigma * a.times(z[None])[0]
        return sigma * (a @ z)

    def member(self, state, i, scale):
        x = flat(state.params) + self._flat_displacement(state, i, scale)
        return trees.cast_like(unflat(x, state.params), state.dtypes)

    def members(self, state, first, count: int, scale):
        index = first + jnp.arange(count)
        sigma, a = scale
        if not hasattr(a, "times"):  # a matrix: member by member, as it has always rounded
            return jax.vmap(lambda i: self.member(state, i, scale))(index)
        # A transform kept as parts takes the rows at once (Paths: its compact form).
        theta = flat(state.params)
        z = jax.vmap(lambda i: self._z(state.key, i, theta.shape[0], theta.dtype))(index)
        x = theta + sigma * a.times(z)
        return jax.vmap(lambda row: trees.cast_like(unflat(row, state.params), state.dtypes))(x)

    def population(self, state, scale):
        return self.members(state, 0, self.population_size, scale)

    def eval_chunk(self, state, members: int, factored: bool) -> int:
        return members or self.population_size  # no memory budget: all at once

    def told(self, state, scale) -> Population:
        """Every ``z_i`` and ``y_i`` of the last ``ask``, from its key, and their moments as
        pytrees. Members rounded to a narrower dtype are read back (``y_i = (x_i - m)/σ``,
        ``z_i = A⁻¹ y_i``), so the update sees the members that were evaluated."""
        sigma, a = scale
        sample = self._sample(state, scale)

        def moments(mass, squares: bool = False, keep_factors: bool = False):
            del keep_factors  # the moments of a flat sample are dense
            if hasattr(a, "times") and not squares and not is_rounded_state(state):
                # First moments are linear in z: a transform kept as parts (LM-MA-ES's m
                # factors) costs P times less on the two sums than on every member. A
                # matrix's product with every member is one matmul, kept as it rounds.
                sums = jnp.stack([mass.astype(sample.z.dtype) @ sample.z, sample.z.sum(0)])
                moment, total = (unflat(x, state.params) for x in sigma * jax.vmap(a.times)(sums))
                return centroid.PopulationMoments(
                    jnp.sum(mass), self.population_size, moment, total, None, None
                )
            deltas = jax.vmap(lambda y: unflat(sigma * y, state.params))(sample.y)
            return centroid.moments(deltas, mass, squares)

        return Population(self.population_size, moments, sample)

    def _sample(self, state, scale) -> Sample:
        sigma, a = scale
        theta = flat(state.params)
        index = jnp.arange(self.population_size)
        if is_rounded_state(state):

            def evaluated(i):
                return flat(trees.cast_like(self.member(state, i, scale), state.params))

            y = (jax.vmap(evaluated)(index) - theta) / sigma
            if hasattr(a, "solve"):
                return Sample(a.solve(y), y)
            return Sample(jnp.linalg.solve(a, y.T).T, y)
        z = jax.vmap(lambda i: self._z(state.key, i, theta.shape[0], theta.dtype))(index)
        return Sample(z, _times(a, z))


def diagonal(
    noise, memory_budget, population_size: int, antithetic: bool, gaussian_term: str | None = None
) -> Diagonal:
    """The ``Diagonal`` sampler of a per-coordinate strategy's ``noise`` and ``memory_budget``
    keywords; ``gaussian_term`` names the term derived for Gaussian ``ε`` only (non-Gaussian
    noise is then refused), or ``None``."""
    settings = NoiseSettings(noise, memory_budget)
    return Diagonal(make_perturbations(settings, population_size, antithetic, gaussian_term))
