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
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxes import centroid
from jaxes import shaping as shaping_lib
from jaxes.checks import check_int, check_positive
from jaxes.strategies import _full, termination
from jaxes.strategies._settings import (
    check_fixed_sigma,
    check_population_size,
    default_sigma_floor,
)
from jaxes.strategies._spec import Estimate
from jaxes.strategies.base import StrategyInfo, state_type
from jaxes.strategies.sep_cma_es import stall_indicator
from jaxes.types import Strategy

CMAState = state_type(
    "CMAState",
    "CMA-ES's state: everything that changes between generations.",
    [
        ("sigma", jax.Array, "the global step size ``σ``."),
        ("covariance", jax.Array, "``C`` (``d × d``, over the flattened params)."),
        ("axes", jax.Array, "``B``, the eigenvectors of ``C`` at the last refresh (columns)."),
        ("scales", jax.Array, "``D``, the square roots of ``C``'s eigenvalues at that refresh."),
        ("path_sigma", jax.Array, "the conjugate evolution path ``p_σ`` (flat)."),
        ("path_c", jax.Array, "the evolution path ``p_c`` (flat)."),
        ("refreshed", jax.Array, "the generation ``B`` and ``D`` were last computed at."),
        ("history", termination.History, "recent best and median fitness (termination)."),
    ],
    __name__,
)

CMAInfo = termination.TerminationInfo


class Weights(NamedTuple):
    """CMA-ES's recombination weights by rank (best first) and the learning rates they give."""

    positive: np.ndarray
    negative: np.ndarray
    mu_eff: float
    c_sigma: float
    d_sigma: float
    c_c: float
    c_1: float
    c_mu: float
    chi_n: float
    eigen_gap: int


def default_population_size(d: int) -> int:
    """Hansen's default ``λ = 4 + ⌊3 ln d⌋``.

    Example:
      >>> default_population_size(10), default_population_size(1000)
      (10, 24)
    """
    return 4 + int(math.floor(3 * math.log(d)))


def weights(d: int, population_size: int, elite_size: int | None = None, active=True) -> Weights:
    """The tutorial's defaults (its table 1, with pycma's ``c_σ`` and ``c_μ``):
    ``w'_k = ln((λ+1)/2) - ln k``, the best ``μ``
    normalised to sum to one; the rest (active CMA) scaled to
    ``min(1 + c_1/c_μ, 1 + 2μ⁻_eff/(μ_eff + 2), (1 - c_1 - c_μ)/(d c_μ))`` in absolute sum.

    Example:
      >>> w = weights(10, 10)
      >>> round(float(w.positive.sum()), 6), round(w.mu_eff, 3), w.eigen_gap
      (1.0, 3.167, 1)
    """
    lam = population_size
    mu = lam // 2 if elite_size is None else elite_size
    k = np.arange(1, lam + 1, dtype=np.float64)
    raw = math.log((lam + 1) / 2) - np.log(k)
    if elite_size is not None:  # the log weights of μ = elite_size, as pycma's CMA_mu
        raw = math.log(mu + 0.5) - np.log(k)
    pos = np.where(k <= mu, np.maximum(raw, 0.0), 0.0)
    pos = pos / pos.sum()
    mu_eff = 1.0 / float(np.sum(pos**2))
    neg_raw = np.where(k > mu, np.minimum(raw, 0.0), 0.0)
    # pycma's c_σ and c_μ (the tutorial has d + μ_eff + 5, and no 1/4 in c_μ).
    c_sigma = min(0.5, (mu_eff + 2.0) / (d + mu_eff + 3.0))
    d_sigma = 1.0 + 2.0 * max(0.0, math.sqrt((mu_eff - 1.0) / (d + 1.0)) - 1.0) + c_sigma
    c_c = (4.0 + mu_eff / d) / (d + 4.0 + 2.0 * mu_eff / d)
    c_1 = 2.0 / ((d + 1.3) ** 2 + mu_eff)
    c_mu = min(1.0 - c_1, 2.0 * (0.25 + mu_eff - 2.0 + 1.0 / mu_eff) / ((d + 2.0) ** 2 + mu_eff))
    negative = np.zeros(lam)
    if active and np.any(neg_raw < 0):
        mu_eff_neg = float(np.sum(neg_raw) ** 2 / np.sum(neg_raw**2))
        bounds = [1.0 + 2.0 * mu_eff_neg / (mu_eff + 2.0)]
        if c_mu > 0:
            bounds += [1.0 + c_1 / c_mu, (1.0 - c_1 - c_mu) / (d * c_mu)]
        negative = neg_raw * min(bounds) / float(np.sum(np.abs(neg_raw)))
    chi_n = math.sqrt(d) * (1.0 - 1.0 / (4.0 * d) + 1.0 / (21.0 * d * d))
    eigen_gap = max(1, int(1.0 / (10.0 * d * (c_1 + c_mu))))
    return Weights(pos, negative, mu_eff, c_sigma, d_sigma, c_c, c_1, c_mu, chi_n, eigen_gap)


def cma_es(
    population_size: int,
    sigma=0.5,
    elite_size: int | None = None,
    learning_rate=1.0,
    *,
    active: bool = True,
    sigma_floor=None,
    covariance_budget: int = _full.DEFAULT_COVARIANCE_BUDGET,
    track_best: bool = True,
) -> Strategy:
    """CMA-ES with a full covariance over the flattened params.

    Args:
      population_size: ``λ = P`` (>= 2); Hansen's default is
        ``default_population_size(d) = 4 + ⌊3 ln d⌋``.
      sigma: the initial step size ``σ0`` (> 0): about a quarter of the search range.
      elite_size: ``μ``, the members recombined; ``None`` is ``λ // 2`` with the tutorial's
        weights.
      learning_rate: ``c_m`` (> 0); 1 puts the new mean on the centre of mass.
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
    if elite_size is not None:
        check_int("elite_size", elite_size, 1, p)
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

    def init(d: int, dtype):
        _, length = termination.windows(d, p)
        return {
            "sigma": jnp.asarray(sigma0, dtype),
            "covariance": jnp.eye(d, dtype=dtype),
            "axes": jnp.eye(d, dtype=dtype),
            "scales": jnp.ones((d,), dtype),
            "path_sigma": jnp.zeros((d,), dtype),
            "path_c": jnp.zeros((d,), dtype),
            "refreshed": jnp.zeros((), jnp.int32),
            "history": termination.empty_history(length, dtype),
        }

    def factor(state):
        return state.sigma, state.axes * state.scales[None, :]

    def estimate(state, fitness, sample: _full.Sample) -> Estimate:
        """The recombination displacement ``M - m = σ y_w``; the masses are the positive
        weights by rank, so ``M`` is the centre of mass of the best ``μ``."""
        w = constants(sample.z.shape[1])
        dtype = sample.z.dtype
        w_pos = shaping_lib.rank_weights(w.positive)(fitness).astype(dtype)
        w_neg = shaping_lib.rank_weights(w.negative)(fitness).astype(dtype)
        stats = _full.population_stats(state, sample, w_pos + w_neg, w_pos, state.sigma)
        return Estimate(centroid.centre_of_mass(stats.moments), stats, aux=(sample, w_pos, w_neg))

    def update(state, est: Estimate):
        sample, w_pos, w_neg = est.aux
        return cma_update(
            state, sample, w_pos, w_neg, constants(sample.z.shape[1]), c_m, sigma_floor
        )

    def info(state, base: StrategyInfo, told):
        d = state.path_c.shape[0]
        criteria, condition = termination.check(
            history=state.history,
            fitness=state.fitness,
            informative=base.applied | ~told,
            mean=_full.flat(state.params),
            sigma=state.sigma,
            sigma0=sigma0,
            axes=state.axes * state.scales[None, :],
            axis_lengths=state.scales,
            variances=jnp.diagonal(state.covariance),
            path_c=state.path_c,
            generation=state.generation,
            tolfun_window=termination.windows(d, p)[0],
        )
        return termination.report(base, criteria, condition, told)

    spec = _full.FullSpec(
        name="cma_es",
        state_type=CMAState,
        population_size=p,
        rank_based=True,
        init=init,
        factor=factor,
        estimate=estimate,
        update=update,
        info=info,
        record=lambda state, fitness, when: state._replace(
            history=termination.record(state.history, fitness, when)
        ),
        covariance_budget=int(covariance_budget),
    )
    return _full.build(spec, track_best)


def cma_update(state, sample: _full.Sample, w_pos, w_neg, k: Weights, c_m, sigma_floor):
    """The mean's (flat) step and the new σ, ``C``, paths and eigendecomposition."""
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
    total = float(k.positive.sum() + k.negative.sum())
    covariance = (
        (1 + k.c_1 * stalled - k.c_1 - k.c_mu * total) * state.covariance
        + k.c_1 * jnp.outer(path_c, path_c)
        + k.c_mu * rank_mu
    )
    covariance = (covariance + covariance.T) / 2
    refresh = state.generation + 1 - state.refreshed >= k.eigen_gap
    axes, scales = jax.lax.cond(
        refresh,
        lambda: eigen(covariance),
        lambda: (state.axes, state.scales),
    )
    changes = {
        "sigma": step_size(state.sigma, ps_norm, k, sigma_floor),  # change clipped at e^±1
        "covariance": covariance,
        "axes": axes,
        "scales": scales,
        "path_sigma": path_sigma,
        "path_c": path_c,
        "refreshed": jnp.where(refresh, state.generation + 1, state.refreshed),
    }
    return step, changes


def step_size(sigma, ps_norm, k: Weights, sigma_floor):
    """Cumulative step-size adaptation, its log change clipped to ±1 as pycma's; never below
    the floor."""
    change = jnp.clip((k.c_sigma / k.d_sigma) * (ps_norm / k.chi_n - 1.0), -1.0, 1.0)
    floor = default_sigma_floor(sigma.dtype) if sigma_floor is None else sigma_floor
    return jnp.maximum(sigma * jnp.exp(change), jnp.asarray(floor, sigma.dtype))


def eigen(covariance: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(B, D)`` with ``C = B D² Bᵀ``; eigenvalues clipped at the dtype's tiny so D > 0."""
    values, vectors = jnp.linalg.eigh(covariance)
    return vectors, jnp.sqrt(jnp.maximum(values, jnp.finfo(values.dtype).tiny))
