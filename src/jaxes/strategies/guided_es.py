"""Guided ES (Maheswaranathan et al. 2019): random search stretched along surrogate gradients.

Members are antithetic pairs ``θ ± ε_j`` on the flattened params, ``ε = σ (√(α/d) z₁ +
√((1-α)/k) U z₂)``, ``z₁ ~ N(0, I_d)`` and ``z₂ ~ N(0, I_k)`` drawn from the ``ask`` key and
the pair, ``U`` (``d × k``) an orthonormal basis of the last ``k`` surrogate gradients:
``E[ε εᵀ] = σ² ((α/d) I + ((1-α)/k) U Uᵀ)``. The paper's estimate ``g = β/(2σ²N) Σ_j
(f⁺_j - f⁻_j) ε_j`` over the ``N = P/2`` pairs is a centre-of-mass displacement: with shaped
fitness ``w`` and masses ``m = w - min w``, ``Σ_j (w⁺_j - w⁻_j) ε_j = P m̄ (M - c)``, so
``g = β (m̄/σ²)(M - c)``, OpenAI-ES's on these members (``fitness_shaping="raw"``: ``f⁺ - f⁻``).

The user gives the surrogate gradient between a ``tell`` and the next ``ask``, ``state =
guide(state, gradient)``; with ``past_steps=True`` (``jaxes train``'s) each applied ``tell``
gives its own step ``θ' - θ`` (Meier et al. 2019's past descent directions). ``basis`` keeps
``U``, newest first, each column what its direction adds to the newer ones (Gram-Schmidt) or
zeros. With ``k'`` columns filled the subspace term is ``√((1-α)/k') U z₂``; with none,
members are plain ES at ``α = 1``, ``ε = σ z₁/√d``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax

from jaxes import centroid, shaping, trees
from jaxes.checks import check_int, check_positive, is_traced
from jaxes.strategies import _tell, settings
from jaxes.strategies.base import EstimateStats
from jaxes.strategies.core import Estimate, Rule, build
from jaxes.strategies.samplers import FullSampler, Population, Sample, flat, standard_normal
from jaxes.strategies.state import StrategyState, is_rounded_state, state_dataclass
from jaxes.types import Params, Strategy


@state_dataclass
class GuidedESState(StrategyState):
    """Guided ES's state: ``opt_state`` (optax's) and ``basis``, ``U`` (``d × k``, newest first)."""

    strategy = "guided_es"
    opt_state: optax.OptState
    basis: jax.Array


def orthonormal(columns: jax.Array) -> jax.Array:
    """Gram-Schmidt (twice), in order: each column becomes the unit vector along what it adds
    to those before it, or zeros (under ``1e-4`` of its norm, or not finite).

    Example:
      >>> u = orthonormal(jnp.array([[2.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]))
      >>> u.tolist()
      [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]
    """
    out = []
    for j in range(columns.shape[1]):
        v = size = columns[:, j]
        for _ in range(2):
            for u in out:
                v = v - jnp.sum(u * v) * u
        norm, size = jnp.sqrt(jnp.sum(v * v)), jnp.sqrt(jnp.sum(size * size))
        keep = jnp.isfinite(norm) & (norm > 1e-4 * size)
        out.append(jnp.where(keep, v / jnp.where(keep, norm, 1.0), 0.0))
    return jnp.stack(out, axis=1)


def guide(state: GuidedESState, gradient) -> GuidedESState:
    """``state`` with ``gradient`` (a pytree like the params: a surrogate of the fitness's
    gradient, either sign) as ``basis``'s newest direction; a non-finite one adds nothing.

    Example:
      >>> import jax, jax.numpy as jnp, jaxes
      >>> es = jaxes.guided_es(8, sigma=0.1, subspace_dims=2)
      >>> state = es.init(jax.random.key(0), {"w": jnp.zeros(3)})
      >>> state = guide(state, {"w": jnp.array([0.0, 3.0, 0.0])})
      >>> state.basis.T.tolist()
      [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]
    """
    if not isinstance(state, GuidedESState):
        raise ValueError(f"state: guide takes a GuidedESState, got {type(state).__name__}")
    if jax.tree.map(jnp.shape, gradient) != jax.tree.map(jnp.shape, state.params):
        raise ValueError("gradient: expected a pytree with the params' structure and shapes")
    g = flat(jax.tree.map(lambda v, x: jnp.asarray(v, x.dtype), gradient, state.params))
    columns = jnp.concatenate([g[:, None], state.basis[:, :-1]], axis=1)
    return state.replace(basis=orthonormal(columns))


@dataclasses.dataclass(frozen=True)
class GuidedSampler(FullSampler):
    """``FullSampler`` with ``scale = (σ, (a, B))``, ``a = √(α/d)`` and ``B = √((1-α)/k) U``:
    member ``i`` is ``θ ± σ (a z₁ + B z₂)`` from ``(z₁, z₂)`` of pair ``i // 2``."""

    antithetic: bool = True

    def _y(self, key, i, shape) -> tuple[jax.Array, jax.Array]:
        """``z = ±(z₁, z₂)`` of member ``i`` side by side (``d + k``), and ``y = a z₁ + B z₂``."""
        (a, b), (d, k) = shape, shape[1].shape
        sign = (1 - 2 * (jnp.asarray(i) % 2)).astype(b.dtype)
        z = sign * standard_normal(key, i // 2, d + k, b.dtype)
        return z, a * z[:d] + jnp.sum(b * z[d:], axis=1)

    def _flat_displacement(self, state, i, scale) -> jax.Array:
        return scale[0] * self._y(state.key, i, scale[1])[1]

    def _sample(self, state, scale) -> Sample:
        """``z`` and ``y = ε/σ`` of every member; rounded members are read back, ``(x - θ)/σ``."""
        index = jnp.arange(self.population_size)
        z, y = jax.vmap(lambda i: self._y(state.key, i, scale[1]))(index)
        if is_rounded_state(state):

            def evaluated(i):
                return flat(trees.cast_like(self.member(state, i, scale), state.params))

            y = (jax.vmap(evaluated)(index) - flat(state.params)) / scale[0]
        return Sample(z, y)


def guided_es(
    population_size: int,
    sigma=0.05,
    learning_rate=0.03,
    *,
    alpha=0.5,
    beta=1.0,
    subspace_dims: int = 1,
    past_steps: bool = False,
    optimizer: optax.GradientTransformation | None = None,
    fitness_shaping="centered_rank",
    sigma_floor=None,
    track_best: bool = True,
) -> Strategy:
    """Guided ES: antithetic members in ``σ² ((α/d) I + ((1-α)/k) U Uᵀ)``, ``U`` from ``guide``.

    Args:
      population_size: ``P = 2N`` (even).
      sigma: the paper's ``σ``, the length of a perturbation (each coordinate's is about
        ``σ √(α/d)``): a constant > 0 or an optax schedule of the generation.
      learning_rate: Adam's step size (> 0, or an optax schedule) without ``optimizer``.
      alpha: ``α`` in ``[0, 1]``, the share of the variance in the full space.
      beta: ``β`` > 0, the estimate's scale.
      subspace_dims: ``k``, the surrogate gradients spanning the subspace, ``1 <= k <= d``.
      past_steps: after each applied update, ``guide`` with its step (a static bool).
      optimizer: any optax transformation on θ (default ``optax.adam(learning_rate)``).
      fitness_shaping, sigma_floor, track_best: as in ``jaxes.strategies``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> es = guided_es(population_size=8, sigma=0.3, learning_rate=0.1)
      >>> state = es.init(jax.random.key(0), {"x": jnp.ones(3)})
      >>> state = guide(state, {"x": -2.0 * jnp.ones(3)})  # a surrogate gradient
      >>> population, state = es.ask(jax.random.key(1), state)
      >>> state, info = es.tell(state, -jnp.sum(population["x"] ** 2, axis=1))
      >>> bool(jnp.sum(state.params["x"] ** 2) < 3.0), bool(info.applied)
      (True, True)
    """
    p = settings.check_population_size(population_size, antithetic=True)
    alpha = check_positive("alpha", alpha, allow_zero=True)
    if not is_traced(alpha) and alpha > 1:
        raise ValueError(f"alpha: expected a number in [0, 1], got {alpha!r}")
    beta = check_positive("beta", beta)
    k = check_int("subspace_dims", subspace_dims, 1)
    optimizer = settings.check_optimizer(
        optimizer, lambda: optax.adam(settings.check_learning_rate(learning_rate))
    )
    shape_fitness = shaping.get_shaping(fitness_shaping)
    sigma_of, initial_sigma = settings.scheduled_sigma(sigma, sigma_floor)

    def shape(basis):  # (a, B): α = 1 while no column is filled
        filled = jnp.sum(jnp.any(basis != 0, axis=0))
        a = jnp.sqrt(jnp.where(filled > 0, alpha, 1.0) / basis.shape[0])
        b = jnp.sqrt((1.0 - alpha) / jnp.maximum(filled, 1))
        return a.astype(basis.dtype), (b * basis).astype(basis.dtype)

    def init(master: Params):
        d = flat(master).shape[0]
        if k > d:
            raise ValueError(f"subspace_dims: expected an int in [1, d = {d}], got {k}")
        basis = jnp.zeros((d, k), trees.state_dtype(master))
        own = {"opt_state": optimizer.init(master), "basis": basis}
        return own, (initial_sigma(master), shape(basis))

    def estimate(state: GuidedESState, fitness, population: Population) -> Estimate:
        sig, weights = sigma_of(state), shape_fitness(fitness)
        mass = centroid.masses(weights)
        moments = population.moments(mass)
        direction = jax.tree.map(lambda g: beta * g, centroid.displacement_update(moments, sig))
        return Estimate(direction, EstimateStats(weights, mass, moments, sig))

    def update(state: GuidedESState, est: Estimate):
        step, opt_state = _tell.optimizer_step(optimizer, state, est.direction)
        state = guide(state, step) if past_steps else state  # θ' - θ = step: the newest
        return step, state.replace(opt_state=opt_state)

    return build(
        Rule(init, lambda state: (sigma_of(state), shape(state.basis)), estimate, update),
        GuidedESState,
        GuidedSampler(p),
        rank_based=settings.is_rank_shaping(fitness_shaping),
        track_best=track_best,
    )
