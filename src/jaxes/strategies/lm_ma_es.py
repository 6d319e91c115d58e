"""LM-MA-ES (Loshchilov, Glasmachers & Beyer 2019, "Large scale black-box optimization by
limited-memory matrix adaptation", IEEE TEVC 23(2), algorithm 1): MA-ES with its ``d × d``
matrix replaced by ``m`` direction vectors, O(d·m) memory and time a member, for d up to 10⁶.

Members are ``x_i = m + σ T z_i`` on the flattened params, ``T = A_k ⋯ A_1``,
``A_j = (1 - c_{d,j}) I + c_{d,j} p_j p_jᵀ`` over the ``k = min(t, m)`` vectors in use after
``t`` updates: ``samplers.FullSampler`` with ``A = samplers.Paths(p, c_d)``, kept as its
vectors (``times``: the population as ``s z + V K Vᵀ z``, O(d·m²) a call; ``solve`` by
Sherman-Morrison for rounded members, O(d·m) each; a vector not in use has rate 0,
``A_j = I``). Each ``p_j`` is an evolution path of the selected ``z`` at its own rate; σ
follows the path ``p_σ``. The mean's update is a centre-of-mass displacement, as in ``ma_es``
(``recombination``): ``m' = m + c_m (M - m)``.

The paper's constants, for ``λ = P``, ``μ = ⌊λ/2⌋``, ``w_k ∝ ln(μ + 1/2) - ln k``:
``m = 4 + ⌊3 ln d⌋``, ``c_σ = 2λ/d``, ``c_{d,j} = 1/(1.5^{j-1} d)``, ``c_{c,j} = λ/(4^{j-1} d)``,
``p_j ← (1 - c_{c,j}) p_j + √(μ_eff c_{c,j} (2 - c_{c,j})) Σ w_i z_i`` (``p_σ`` alike at
``c_σ``), ``σ ← σ exp(c_σ/2 (‖p_σ‖²/d - 1))``. Departures, for small ``d`` only (above 1 a
path flips sign and ``√(c (2 - c))`` is undefined): ``c_σ`` and each ``c_{c,j}`` capped at 1,
``c_{d,j}`` at 1/2 (no ``A_j`` singular); none binds once ``d >= 2λ``. σ's log change is
clipped to ±1 and floored, as in ``cma_es``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxes import shaping as shaping_lib
from jaxes import trees
from jaxes.checks import check_int
from jaxes.strategies import settings
from jaxes.strategies.cma_constants import default_population_size, effective_mass, elite_weights
from jaxes.strategies.core import Rule, build
from jaxes.strategies.ma_es import MAEstimate, check_settings, cumulate, recombination
from jaxes.strategies.samplers import FullSampler, Paths, unflat
from jaxes.strategies.state import StrategyState, state_dataclass
from jaxes.types import Strategy


@state_dataclass
class LMMAState(StrategyState):
    """LM-MA-ES's state: everything that changes between generations.

    Attributes:
      sigma: the global step size ``σ``.
      paths: the ``m`` direction vectors ``p_j`` (``m × d``, over the flattened params).
      path_sigma: the evolution path ``p_σ`` (flat).
      updates: how many updates were applied (``t``: the first ``min(t, m)`` vectors are used).
    """

    strategy = "lm_ma_es"
    sigma: jax.Array
    paths: jax.Array
    path_sigma: jax.Array
    updates: jax.Array


class Constants(NamedTuple):
    """LM-MA-ES's constants for ``d`` coordinates (the module's docstring)."""

    mu_eff: float
    c_sigma: float
    c_d: np.ndarray
    c_c: np.ndarray


def constants(d: int, population_size: int, weights, memory_size: int) -> Constants:
    """The paper's constants, capped for small ``d`` (the module's docstring).

    Example:
      >>> k = constants(100, 17, elite_weights(8), 3)
      >>> round(k.c_sigma, 2), k.c_d.round(5).tolist(), k.c_c.round(5).tolist()
      (0.34, [0.01, 0.00667, 0.00444], [0.17, 0.0425, 0.01062])
    """
    j = np.arange(memory_size, dtype=np.float64)
    return Constants(
        effective_mass(weights),
        min(1.0, 2.0 * population_size / d),
        np.minimum(0.5, 1.0 / (1.5**j * d)),
        np.minimum(1.0, population_size / (4.0**j * d)),
    )


def lm_ma_es(
    population_size: int,
    sigma=0.5,
    elite_size: int | None = None,
    learning_rate=1.0,
    *,
    elite_ratio=None,
    memory_size: int | None = None,
    sigma_floor=None,
    track_best: bool = True,
) -> Strategy:
    """LM-MA-ES: ``m`` direction vectors in place of MA-ES's ``d × d`` matrix.

    Args:
      population_size: ``λ = P`` (>= 2); the paper's default is ``4 + ⌊3 ln d⌋``.
      sigma: the initial step size ``σ0`` (> 0).
      elite_size, elite_ratio: ``μ`` as for ``ma_es`` (``None``: ``P // 2``).
      learning_rate: ``c_m`` (> 0); 1 (the paper's) puts the new mean on the centre of mass.
      memory_size: ``m`` (an int >= 1); ``None``: the paper's ``4 + ⌊3 ln d⌋``.
      sigma_floor, track_best: as for ``ma_es`` (the best member's recipe: an ``m × d`` copy).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> es = lm_ma_es(population_size=8, sigma=0.5)
      >>> state = es.init(jax.random.key(0), jnp.ones(3))
      >>> population, state = jax.jit(es.ask)(jax.random.key(1), state)
      >>> state, info = jax.jit(es.tell)(state, -jnp.sum(population**2, axis=1))
      >>> state.paths.shape, bool(jnp.sum(state.params**2) < 3.0)
      ((7, 3), True)
    """
    p, sigma0, c_m = check_settings("lm_ma_es", population_size, sigma, learning_rate, sigma_floor)
    mu = settings.elite_count(p, elite_size, elite_ratio) or p // 2
    if memory_size is not None:
        memory_size = check_int("memory_size", memory_size, 1)
    weights_of = shaping_lib.recombination_weights(mu)

    def constants_of(d: int) -> Constants:
        m = default_population_size(d) if memory_size is None else memory_size
        return constants(d, p, elite_weights(mu), m)

    def init(master):
        d, dtype = trees.num_params(master), trees.state_dtype(master)
        m = len(constants_of(d).c_d)
        own = {
            "sigma": jnp.asarray(sigma0, dtype),
            "paths": jnp.zeros((m, d), dtype),
            "path_sigma": jnp.zeros((d,), dtype),
            "updates": jnp.zeros((), jnp.int32),
        }
        return own, (own["sigma"], Paths(own["paths"], jnp.zeros((m,), dtype)))

    def scale(state):
        m, d = state.paths.shape
        in_use = jnp.arange(m) < state.updates
        rates = jnp.where(in_use, jnp.asarray(constants_of(d).c_d, state.paths.dtype), 0.0)
        return state.sigma, Paths(state.paths, rates)

    estimate = recombination(weights_of)

    def update(state, est: MAEstimate):
        sample, w = est.sample, est.stats.weights
        k = constants_of(sample.z.shape[1])
        z_w = w @ sample.z
        step = c_m * state.sigma * scale(state)[1].times(w @ sample.z)  # Σ w y = T Σ w z
        path_sigma = cumulate(state.path_sigma, k.c_sigma, k.mu_eff, z_w)
        c_c = jnp.asarray(k.c_c, z_w.dtype)[:, None]
        paths = cumulate(state.paths, c_c, k.mu_eff, z_w[None, :])
        ratio = jnp.sum(jnp.square(path_sigma)) / z_w.shape[0]  # ‖p_σ‖²/d
        change = jnp.clip(k.c_sigma / 2 * (ratio - 1), -1.0, 1.0)
        sigma = settings.floor_sigma(state.sigma * jnp.exp(change), sigma_floor)
        state = state.replace(
            sigma=sigma, paths=paths, path_sigma=path_sigma, updates=state.updates + 1
        )
        return unflat(step, state.params), state

    return build(
        Rule(init, scale, estimate, update),
        LMMAState,
        FullSampler(p),
        rank_based=True,  # recombination weights by rank
        track_best=track_best,
    )
