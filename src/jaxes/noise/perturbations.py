"""Perturbations rebuilt from keys, never stored.

Member ``i`` of a population is ``θ + s_i σ ε_{j(i)}``, rounded to each leaf's own dtype. With
antithetic pairs ``j = i // 2`` and ``s_i = +1, -1, +1, -1, ...``; without them ``j = i`` and
``s_i = +1``. ``ε_j`` comes from a ``NoiseSource`` (``jaxes.noise.sources``) as a pure function
of ``(noise_state, fold_in(key, j))``, so a member built alone, inside ``vmap`` or on another
device is bit-identical to its row of the population.

A leaf narrower than float32 (bfloat16, float16) whose noise the source keeps factored
(low-rank) is the exception: its member is the *rounded centre plus the exact displacement*,
``round(θ) + s_i σ ε``, held in float32. The rounding offset ``round(θ) - θ`` is the same for
every member, so the population is centred on ``round(θ)`` and the update estimates the
gradient there; ``jaxes.factored`` evaluates such a member as ``x round(W) + (x A) Bᵀ`` without
ever rounding the low-rank term. Any other narrow leaf's member is ``round(θ + s_i σ ε)``, and
its displacement is the one it really had. A ``Perturbations`` recipe builds members
(``member``, ``members``, ``population``, ``displacement``), sizes chunks to its memory budget
(``jaxes.noise.budget``) and sums the population's displacements (``moments``, in
``jaxes.noise.moments``).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from jaxes.factored.lowrank import is_factored
from jaxes.noise import budget
from jaxes.noise import moments as moments_lib
from jaxes.noise.keys import noise_key
from jaxes.noise.sources import NoiseSource, Table
from jaxes.trees import broadcast_like, is_rounded, master_dtype, num_params
from jaxes.types import Params

# From this many parameters on, a population reads its table windows one base at a time.
_SLICED_MIN_PARAMS = 2**12


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

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jaxes.noise import auto
      >>> pert = Perturbations(auto(bases=4), population_size=8)
      >>> params = {"w": jnp.zeros(3)}
      >>> state = pert.source.init(jax.random.key(0), params)
      >>> pop = pert.population(state, jax.random.key(1), params, 0.1)
      >>> one = pert.member(state, jax.random.key(1), 5, params, 0.1)
      >>> pop["w"].shape, bool(jnp.all(pop["w"][5] == one["w"]))
      ((8, 3), True)
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

    def factored_leaves(self, noise_state, params: Params) -> list[bool]:
        """Per leaf of ``params``, whether the source keeps its perturbation factored."""
        leaves = jax.tree.leaves(params)
        if self.source.factors is None:
            return [False] * len(leaves)
        shapes = jax.eval_shape(
            lambda key: self.source.factors(noise_state, key, 0, params), jax.random.key(0)
        )
        return [is_factored(x) for x in jax.tree.structure(params).flatten_up_to(shapes)]

    def member_dtypes(self, noise_state, params: Params, dtypes: Params | None) -> Params:
        """The dtypes members are built in: each leaf's own, except a narrow leaf with factored
        noise, whose member (``round(θ) + δ``, exact) is held in its master dtype."""
        dtypes = params if dtypes is None else dtypes
        treedef = jax.tree.structure(params)
        out = [
            jnp.zeros((), master_dtype(t.dtype)) if f and is_rounded(t.dtype) else t
            for t, f in zip(
                jax.tree.leaves(dtypes), self.factored_leaves(noise_state, params), strict=True
            )
        ]
        return treedef.unflatten(out)

    def centre(self, noise_state, params: Params, dtypes: Params | None) -> Params:
        """What members are built around: ``θ``, with every narrow leaf whose member is
        ``round(θ) + δ`` rounded first (in the master dtype)."""
        dtypes = params if dtypes is None else dtypes
        built = self.member_dtypes(noise_state, params, dtypes)
        return jax.tree.map(
            lambda x, t, b: x.astype(t.dtype).astype(x.dtype) if b.dtype != t.dtype else x,
            params,
            dtypes,
            built,
        )

    def eval_chunk(
        self,
        params: Params,
        dtypes: Params | None = None,
        members: int = 0,
        factored: bool = False,
    ) -> int:
        """Members evaluated at once: the largest divisor of ``members`` (default ``P``) whose
        members (in their dtype, plus their float32 noise) fit in the budget. ``factored``:
        members are evaluated as their displacements from a shared centre (a source with
        factors), so each holds its factors and dense leaves only (float32)."""
        if factored and self.source.factors is not None:
            shapes = jax.eval_shape(lambda: self.source.factors(None, jax.random.key(0), 0, params))
            unit = sum(math.prod(x.shape) * 4 for x in jax.tree.leaves(shapes))
        else:
            built = self.member_dtypes(None, params, dtypes)
            unit = budget.member_bytes(params, built)
        fit = budget.units_in_budget(self.memory_budget, "member", unit)
        return budget.largest_divisor_at_most(members or self.population_size, fit)

    def tell_chunk(self, params: Params, dtypes: Params | None, squares: bool) -> int:
        """Base perturbations ``moments`` rebuilds at once."""
        if self.batch_size is not None:
            return min(self.batch_size, self.num_base)
        per_base = budget.noise_bytes(params, dtypes, squares)
        return budget.bases_per_chunk(self.memory_budget, per_base, self.num_base)

    def base(self, noise_state, key, j, like: Params) -> Params:
        """Base perturbation ``ε_j`` (float32 pytree like ``like``)."""
        return self.source.sample(noise_state, noise_key(key), j, like)

    def _factor_chunk(self, noise_state, key, params) -> int:
        """Bases whose factors ``moments`` holds at once, under the memory budget."""
        if self.batch_size is not None:
            return min(self.batch_size, self.num_base)
        shapes = jax.eval_shape(lambda: self.source.factors(noise_state, noise_key(key), 0, params))
        per_base = sum(math.prod(x.shape) * 4 for x in jax.tree.leaves(shapes))
        fit = budget.units_in_budget(self.memory_budget, "perturbation", per_base)
        return min(fit, self.num_base)

    def _members_of_base(self, noise_state, key, j, params, sigma, dtypes) -> Params:
        """The members built from ``ε_j``: leading axis 2 (antithetic) or 1.

        ``member`` and ``population`` both build members here, with the sign as a runtime
        multiplication: ``θ + s (σ ε)`` rounds the same whether or not XLA fuses the product
        into a multiply-add, so a member built alone is bit-identical to its row.
        """
        eps = self.base(noise_state, key, j, params)
        signs = jnp.array([1.0, -1.0] if self.antithetic else [1.0], jnp.float32)
        centre = self.centre(noise_state, params, dtypes)
        built = self.member_dtypes(noise_state, params, dtypes)
        return jax.vmap(lambda s: perturb(centre, sigma, eps, s, built))(signs)

    def member(self, noise_state, key, i, params: Params, sigma, dtypes=None) -> Params:
        """Member ``i`` alone; bit-identical to row ``i`` of ``population``."""
        j, slot = (i // 2, i % 2) if self.antithetic else (i, 0)
        group = self._members_of_base(noise_state, key, j, params, sigma, dtypes)
        return jax.tree.map(lambda g: g[slot], group)

    def displacement(self, noise_state, key, i, params: Params, sigma, dtypes=None) -> Params:
        """Member ``i``'s displacement from ``centre`` (float32): ``s_i σ ε_{j(i)}``, with the
        source's factored leaves kept factored (``sigma`` and the sign folded into their first
        factor, so a factored leaf needs one σ for the whole leaf). A leaf whose member is
        rounded (``round(θ + δ)``) gets the displacement it really had from the rounded
        centre, ``round(θ + δ) - round(θ)``, so ``round(θ) + δ`` rounds back to the member."""
        j, slot = (i // 2, i % 2) if self.antithetic else (i, 0)
        sign = jnp.where(slot == 0, 1.0, -1.0).astype(jnp.float32)
        if self.source.factors is None:
            eps = self.source.sample(noise_state, noise_key(key), j, params)
        else:
            eps = self.source.factors(noise_state, noise_key(key), j, params)
        treedef = jax.tree.structure(params)
        sig = treedef.flatten_up_to(broadcast_like(sigma, params))
        built = jax.tree.leaves(self.member_dtypes(noise_state, params, dtypes))
        out = []
        for path_leaf, s, e, t in zip(
            jax.tree_util.tree_leaves_with_path(params),
            sig,
            treedef.flatten_up_to(eps),
            built,
            strict=True,
        ):
            scale = sign * jnp.asarray(s, jnp.float32)
            if isinstance(e, jax.Array):
                if is_rounded(t.dtype):
                    theta = path_leaf[1].astype(jnp.float32)
                    rounded = perturb(theta, s, e, sign, t).astype(jnp.float32)
                    out.append(rounded - theta.astype(t.dtype).astype(jnp.float32))
                else:
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
        paired_rows: tuple[int, ...] = (),
        keep_factors: bool = False,
    ) -> tuple[list[Params], list[Params] | None]:
        """``Σ_i coeffs[k, i] δ_i`` and ``Σ_i square_coeffs[k, i] δ_i²`` for each row ``k``, with
        ``δ_i`` the displacement member ``i`` had: a list of ``K`` master-dtype pytrees each.

        For float32 members ``δ_i = s_i σ ε_{j(i)}``; pairs are folded first
        (``(c_{2j} - c_{2j+1}) ε_j``), so a constant coefficient row sums to exactly zero.
        Members rounded to a narrower dtype (bfloat16) had ``δ_i = x_i - θ``, computed in
        float32 from the rebuilt member, so the sums describe what was evaluated. The noise is
        rebuilt ``tell_chunk`` bases at a time; each row is its own running sum, so no
        ``(K, d)`` block is ever sliced or copied.

        ``paired_rows`` names rows whose two coefficients of each antithetic pair are equal
        (a row of ones): a leaf whose members were not rounded then sums to exactly zero for
        them, and gets zeros without a running sum. Rounding is decided per leaf, so in a
        tree of bfloat16 matrices with low-rank noise and bfloat16 biases only the biases
        (rounded) sum such a row, and the matrices' factors are contracted as they are.

        ``keep_factors`` (first moments of a source with factors): a factored leaf's sums are
        not multiplied out but returned as ``jaxes.factored.lowrank.LowRank`` factors, every
        base side by side (a zero row as factors of rank 0); dense leaves are summed as without
        it.

        Example:
          >>> import jax, jax.numpy as jnp
          >>> from jaxes.noise import gaussian
          >>> pert = Perturbations(gaussian(), population_size=4)
          >>> coeffs = jnp.array([[1.0, 1.0, 1.0, 1.0], [1.0, -1.0, 0.0, 0.0]])
          >>> sums, _ = pert.moments(None, jax.random.key(1), jnp.zeros(3), 0.5, coeffs)
          >>> sums[0].tolist()  # a constant row: each pair cancels exactly
          [0.0, 0.0, 0.0]
          >>> eps = pert.base(None, jax.random.key(1), 0, jnp.zeros(3))
          >>> bool(jnp.allclose(sums[1], 2 * 0.5 * eps))  # (+δ_0) - (-δ_0)
          True
        """
        return moments_lib.moments(
            self,
            noise_state,
            key,
            params,
            sigma,
            coeffs,
            square_coeffs,
            dtypes,
            paired_rows,
            keep_factors,
        )
