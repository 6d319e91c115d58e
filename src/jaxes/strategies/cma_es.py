"""CMA-ES (Hansen 2016, "The CMA Evolution Strategy: A Tutorial"): (μ/μ_w, λ) with weighted
recombination, cumulative step-size adaptation, rank-one and rank-μ covariance updates, and
(by default) active negative weights, as pycma.

Members are ``x_i = m + σ B D z_i`` on the flattened params, ``z_i`` drawn from the ``ask``
key and ``i`` (``_full``). The mean's update is a centre-of-mass displacement: the masses are
the positive recombination weights (summing to one), so ``Σ w_i x_i = M`` and
``m' = m + c_m (M - m)``; the negative weights of active CMA only shrink ``C`` along the
worst members. The eigendecomposition ``C = B D² Bᵀ`` is refreshed lazily, every
``max(1, ⌊1 / (10 d (c_1 + c_μ))⌋)`` generations, so its ``O(d³)`` cost is spread over
``O(d/λ)`` generations as in pycma; between refreshes members are sampled (and ``p_σ``
whitened) with the last ``B`` and ``D``.

Memory: ``init`` refuses a ``d`` whose six ``d × d`` matrices at the peak of a donated ``tell``
exceed ``covariance_budget`` (2 GiB by default: ``d`` = 9,459 in float32, 6,688 in float64) and
names the largest that fits (``xnes`` and ``ma_es`` alike). The six are measured: XLA's
``memory_analysis`` of a donated ``tell`` at ``d = 1000`` is 3.01 d² floats of state and
3.05 d² of temporaries (``tests/test_cma_es.py`` asserts it); an undonated ``tell`` holds three
more for its output.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxes import centroid
from jaxes import shaping as shaping_lib
from jaxes.checks import check_positive
from jaxes.strategies import termination
from jaxes.strategies.base import EstimateStats
from jaxes.strategies.cma_constants import Weights, stall_indicator, step_size, weights
from jaxes.strategies.core import Rule, build
from jaxes.strategies.samplers import (
    DEFAULT_COVARIANCE_BUDGET,
    FullSampler,
    Population,
    Sample,
    check_dimension,
    unflat,
)
from jaxes.strategies.settings import (
    check_fixed_sigma,
    check_population_size,
    elite_count,
)
from jaxes.strategies.state import StrategyState, state_dataclass
from jaxes.types import Strategy


@state_dataclass
class CMAState(StrategyState):
    """CMA-ES's state: everything that changes between generations.

    Attributes:
      sigma: the global step size ``σ``.
      covariance: ``C`` (``d × d``, over the flattened params).
      axes: ``B``, the eigenvectors of ``C`` at the last refresh (columns).
      scales: ``D``, the square roots of ``C``'s eigenvalues at that refresh.
      path_sigma: the conjugate evolution path ``p_σ`` (flat).
      path_c: the evolution path ``p_c`` (flat).
      refreshed: the generation ``B`` and ``D`` were last computed at.
      history: recent best and median fitness (termination).
    """

    strategy = "cma_es"
    sigma: jax.Array
    covariance: jax.Array
    axes: jax.Array
    scales: jax.Array
    path_sigma: jax.Array
    path_c: jax.Array
    refreshed: jax.Array
    history: termination.History


class CMAEstimate(NamedTuple):
    """CMA-ES's estimate: the recombination displacement and its stats, and what the update
    reads: the rebuilt sample and the positive and negative (active) weights by rank."""

    direction: object
    stats: EstimateStats
    sample: Sample
    w_pos: jax.Array
    w_neg: jax.Array


def cma_es(
    population_size: int,
    sigma=0.5,
    elite_size: int | None = None,
    learning_rate=1.0,
    *,
    elite_ratio=None,
    active: bool = True,
    sigma_floor=None,
    covariance_budget: int = DEFAULT_COVARIANCE_BUDGET,
    track_best: bool = True,
) -> Strategy:
    """CMA-ES with a full covariance over the flattened params.

    Args:
      population_size: ``λ = P`` (>= 2); Hansen's default is
        ``cma_constants.default_population_size(d) = 4 + ⌊3 ln d⌋``.
      sigma: the initial step size ``σ0`` (> 0): about a quarter of the search range.
      elite_size: ``μ``, the members recombined; ``None`` is ``λ // 2`` with the tutorial's
        weights.
      learning_rate: ``c_m`` (> 0); 1 puts the new mean on the centre of mass.
      elite_ratio: ``μ`` as a share ``r`` of the population, ``μ = max(1, ⌊r·P⌋)`` with
        ``0 < r <= 1`` (evosax's setting), in place of ``elite_size``.
      active: negative weights for the worst members in the covariance update (active CMA,
        pycma's default).
      sigma_floor: σ never goes below it (> 0); ``None``: ``default_sigma_floor`` of the dtype.
      covariance_budget: bytes the ``d × d`` matrices may take (six at the peak of a donated
        ``tell``: ``C``, ``B``, the best member's scale and the update's work space); ``init``
        refuses a ``d`` beyond it and names the largest that fits (2 GiB: ``d`` = 9,459 in
        float32, 6,688 in float64).
      track_best: keep what rebuilds the best member seen (one more ``d × d`` matrix).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> es = cma_es(population_size=8, sigma=0.5)
      >>> state = es.init(jax.random.key(0), jnp.ones(3))
      >>> population, state = jax.jit(es.ask)(jax.random.key(1), state)
      >>> state, info = jax.jit(es.tell)(state, -jnp.sum(population**2, axis=1))
      >>> bool(jnp.sum(state.params**2) < 3.0), bool(info.stop)
      (True, False)
    """
    p = check_population_size(population_size, antithetic=False)
    elite_size = elite_count(p, elite_size, elite_ratio)
    check_fixed_sigma(sigma, "cma_es")
    sigma0 = check_positive("sigma", sigma)
    if sigma_floor is not None:
        check_positive("sigma_floor", sigma_floor)
    c_m = check_positive("learning_rate", learning_rate)
    cache: dict[int, Weights] = {}

    def constants(d: int) -> Weights:
        if d not in cache:
            cache[d] = weights(d, p, elite_size, active)
        return cache[d]

    budget = int(covariance_budget)

    def init(master):
        d, dtype = check_dimension(master, "cma_es", budget)
        own = {
            "sigma": jnp.asarray(sigma0, dtype),
            "covariance": jnp.eye(d, dtype=dtype),
            "axes": jnp.eye(d, dtype=dtype),
            "scales": jnp.ones((d,), dtype),
            "path_sigma": jnp.zeros((d,), dtype),
            "path_c": jnp.zeros((d,), dtype),
            "refreshed": jnp.zeros((), jnp.int32),
            "history": termination.empty_history(termination.windows(d, p)[1], dtype),
        }
        return own, (own["sigma"], jnp.eye(d, dtype=dtype))

    def factor(state):
        return state.sigma, state.axes * state.scales[None, :]

    def estimate(state, fitness, population: Population) -> CMAEstimate:
        """The recombination displacement ``M - m = σ y_w``; the masses are the positive
        weights by rank, so ``M`` is the centre of mass of the best ``μ``."""
        sample = population.sample
        w = constants(sample.z.shape[1])
        dtype = sample.z.dtype
        w_pos = shaping_lib.rank_weights(w.positive)(fitness).astype(dtype)
        w_neg = shaping_lib.rank_weights(w.negative)(fitness).astype(dtype)
        stats = EstimateStats(w_pos + w_neg, w_pos, population.moments(w_pos), state.sigma)
        return CMAEstimate(centroid.centre_of_mass(stats.moments), stats, sample, w_pos, w_neg)

    def update(state, est: CMAEstimate):
        w = constants(est.sample.z.shape[1])
        step, state = cma_update(state, est.sample, est.w_pos, est.w_neg, w, c_m, sigma_floor)
        return unflat(step, state.params), state

    finish = termination.finisher(p, sigma0, _geometry)
    return build(
        Rule(init, factor, estimate, update, finish=finish),
        CMAState,
        FullSampler(p),
        rank_based=True,
        track_best=track_best,
    )


def cma_update(state, sample: Sample, w_pos, w_neg, w: Weights, c_m, sigma_floor):
    """The mean's (flat) step and the state with the new σ, ``C``, paths and
    eigendecomposition."""
    k = w.rates
    d = sample.z.shape[1]
    dtype = sample.z.dtype
    y_w = w_pos @ sample.y  # (M - m)/σ
    z_w = w_pos @ sample.z
    step = c_m * state.sigma * y_w
    path_sigma = (1 - k.c_sigma) * state.path_sigma + math.sqrt(
        k.c_sigma * (2 - k.c_sigma) * k.mu_eff
    ) * (state.axes @ z_w)
    ps_norm = jnp.linalg.norm(path_sigma)
    h_sigma = stall_indicator(ps_norm, state.generation, d, k, dtype)
    path_c = (1 - k.c_c) * state.path_c + h_sigma * math.sqrt(k.c_c * (2 - k.c_c) * k.mu_eff) * y_w
    # Active CMA: a negative weight is rescaled by d / ‖C^{-1/2} y_i‖² = d / ‖z_i‖², so a
    # long bad step cannot shrink C more than a short one.
    sq = jnp.sum(jnp.square(sample.z), axis=1)
    w_cov = w_pos + w_neg * d / jnp.maximum(sq, jnp.finfo(dtype).tiny)
    rank_mu = (sample.y * w_cov[:, None]).T @ sample.y
    stalled = (1 - h_sigma) * k.c_c * (2 - k.c_c)
    total = float(w.positive.sum() + w.negative.sum())
    covariance = (
        (1 + k.c_1 * stalled - k.c_1 - k.c_mu * total) * state.covariance
        + k.c_1 * jnp.outer(path_c, path_c)
        + k.c_mu * rank_mu
    )
    covariance = (covariance + covariance.T) / 2
    refresh = state.generation + 1 - state.refreshed >= w.eigen_gap
    axes, scales = jax.lax.cond(
        refresh,
        lambda: eigen(covariance),
        lambda: (state.axes, state.scales),
    )
    return step, state.replace(
        sigma=step_size(state.sigma, ps_norm, k, sigma_floor),  # change clipped at e^±1
        covariance=covariance,
        axes=axes,
        scales=scales,
        path_sigma=path_sigma,
        path_c=path_c,
        refreshed=jnp.where(refresh, state.generation + 1, state.refreshed),
    )


def eigen(covariance: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(B, D)`` with ``C = B D² Bᵀ``; eigenvalues clipped at the dtype's tiny so D > 0."""
    values, vectors = jnp.linalg.eigh(covariance)
    return vectors, jnp.sqrt(jnp.maximum(values, jnp.finfo(values.dtype).tiny))


def _geometry(state: CMAState) -> termination.Geometry:
    """The shape of ``C = B D² Bᵀ`` pycma's termination criteria read."""
    return termination.Geometry(
        axes=state.axes * state.scales[None, :],
        axis_lengths=state.scales,
        variances=jnp.diagonal(state.covariance),
        path_c=state.path_c,
    )
