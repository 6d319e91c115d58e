"""The constants both CMA-ES variants use, and the two rules they share: the stall indicator
``h_σ`` and cumulative step-size adaptation.

``cma_es`` (a full covariance) and ``sep_cma_es`` (a diagonal one) take the same learning
rates, pycma's (``cma.evolution_strategy``, version 4; ``tests/test_cma_es.py`` compares them),
which are Hansen's tutorial's (table 1) except for ``c_σ = (μ_eff + 2)/(d + μ_eff + 3)``,
capped at ``1/2`` (the tutorial: ``d + μ_eff + 5``) and the ``1/4`` in ``c_μ``'s numerator.
Departures from pycma, each with its reason:

* ``sep_cma_es`` scales ``c_1`` and ``c_μ`` by ``(d + 2)/3``: the published sep-CMA-ES (Ros
  & Hansen 2008), whose rates are derived and measured there, not pycma's later, unpublished
  ``CMA_diagonal`` formulas (``c_1 = 1/(d + 2√d + μ_eff/d)`` and a ``c_μ`` of the same shape).
* The stall indicator is the tutorial's ``‖p_σ‖/√(1 - (1 - c_σ)^{2(g+1)}) < (1.4 +
  2/(d + 1)) χ_d`` (written with the norm ``tell`` already has); pycma tests the squared
  length against ``d (2 + 4/(d + 1))``. The two length thresholds agree to within 1.1 % for
  every ``d >= 2`` (4.3 % at ``d = 1``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxes.strategies.settings import floor_sigma


class Rates(NamedTuple):
    """The learning rates of (sep-)CMA-ES for ``d`` coordinates and ``μ_eff``."""

    mu_eff: float
    c_sigma: float
    d_sigma: float
    c_c: float
    c_1: float
    c_mu: float
    chi_n: float


class Weights(NamedTuple):
    """CMA-ES's recombination weights by rank (best first) and the learning rates they give."""

    positive: np.ndarray
    negative: np.ndarray
    rates: Rates
    eigen_gap: int


def default_population_size(d: int) -> int:
    """Hansen's default ``λ = 4 + ⌊3 ln d⌋``.

    Example:
      >>> default_population_size(10), default_population_size(1000)
      (10, 24)
    """
    return 4 + int(math.floor(3 * math.log(d)))


def rates(d: int, mu_eff: float, diagonal: bool = False) -> Rates:
    """pycma's rates for ``d`` coordinates (the module's docstring lists the departures);
    ``diagonal`` scales ``c_1`` and ``c_μ`` by ``(d + 2)/3`` (Ros & Hansen 2008).

    Example:
      >>> r = rates(10, 3.1672)
      >>> round(r.c_sigma, 4), round(r.c_1, 5), round(r.c_mu, 5)
      (0.3196, 0.01528, 0.02355)
      >>> round(rates(10, 3.1672, diagonal=True).c_mu, 5)
      0.0942
    """
    c_sigma = min(0.5, (mu_eff + 2.0) / (d + mu_eff + 3.0))
    d_sigma = 1.0 + 2.0 * max(0.0, math.sqrt((mu_eff - 1.0) / (d + 1.0)) - 1.0) + c_sigma
    c_c = (4.0 + mu_eff / d) / (d + 4.0 + 2.0 * mu_eff / d)
    c_1 = 2.0 / ((d + 1.3) ** 2 + mu_eff)
    c_mu = min(1.0 - c_1, 2.0 * (0.25 + mu_eff - 2.0 + 1.0 / mu_eff) / ((d + 2.0) ** 2 + mu_eff))
    if diagonal:
        scale = (d + 2.0) / 3.0
        c_1 = min(1.0, scale * c_1)
        c_mu = min(1.0 - c_1, scale * c_mu)
    chi_n = math.sqrt(d) * (1.0 - 1.0 / (4.0 * d) + 1.0 / (21.0 * d * d))
    return Rates(mu_eff, c_sigma, d_sigma, c_c, c_1, c_mu, chi_n)


def effective_mass(positive: np.ndarray) -> float:
    """``μ_eff = 1/Σ w_i²`` of weights that sum to one."""
    return 1.0 / float(np.sum(np.asarray(positive, np.float64) ** 2))


def elite_weights(mu: int) -> np.ndarray:
    """The best ``μ``'s weights ``ln(μ + 1/2) - ln k``, normalised to sum to one (the rest get
    none: sep-CMA-ES recombines without active weights)."""
    raw = math.log(mu + 0.5) - np.log(np.arange(1, mu + 1, dtype=np.float64))
    return raw / raw.sum()


def weights(d: int, population_size: int, elite_size: int | None = None, active=True) -> Weights:
    """pycma's recombination weights: ``w'_k = ln((λ+1)/2) - ln k`` (``ln(μ + 1/2) - ln k``
    for an ``elite_size`` ``μ``, as pycma's ``CMA_mu``), the best ``μ`` normalised to sum to
    one; the rest (active CMA) scaled to ``min(1 + c_1/c_μ, 1 + 2μ⁻_eff/(μ_eff + 2),
    (1 - c_1 - c_μ)/(d c_μ))`` in absolute sum.

    Example:
      >>> w = weights(10, 10)
      >>> round(float(w.positive.sum()), 6), round(w.rates.mu_eff, 3), w.eigen_gap
      (1.0, 3.167, 1)
    """
    lam = population_size
    mu = lam // 2 if elite_size is None else elite_size
    k = np.arange(1, lam + 1, dtype=np.float64)
    raw = math.log((lam + 1) / 2) - np.log(k)
    if elite_size is not None:
        raw = math.log(mu + 0.5) - np.log(k)
    pos = np.where(k <= mu, np.maximum(raw, 0.0), 0.0)
    pos = pos / pos.sum()
    r = rates(d, effective_mass(pos))
    neg_raw = np.where(k > mu, np.minimum(raw, 0.0), 0.0)
    negative = np.zeros(lam)
    if active and np.any(neg_raw < 0):
        mu_eff_neg = float(np.sum(neg_raw) ** 2 / np.sum(neg_raw**2))
        bounds = [1.0 + 2.0 * mu_eff_neg / (r.mu_eff + 2.0)]
        if r.c_mu > 0:
            bounds += [1.0 + r.c_1 / r.c_mu, (1.0 - r.c_1 - r.c_mu) / (d * r.c_mu)]
        negative = neg_raw * min(bounds) / float(np.sum(np.abs(neg_raw)))
    eigen_gap = max(1, int(1.0 / (10.0 * d * (r.c_1 + r.c_mu))))
    return Weights(pos, negative, r, eigen_gap)


def stall_indicator(ps_norm, generation, d: int, r: Rates, dtype) -> jax.Array:
    """``h_σ``: 1 while ``‖p_σ‖`` (bias-corrected) is not too long, else 0, which stalls
    ``p_c`` so that a fast σ increase does not stretch ``C`` too."""
    g = generation.astype(dtype) + 1.0
    return (
        ps_norm / jnp.sqrt(1.0 - (1.0 - r.c_sigma) ** (2.0 * g)) < (1.4 + 2.0 / (d + 1.0)) * r.chi_n
    ).astype(dtype)


def step_size(sigma, ps_norm, r: Rates, sigma_floor):
    """Cumulative step-size adaptation: σ grows when ``‖p_σ‖`` is longer than expected under
    random selection (``χ_d``), shrinks when shorter, its log change clipped to ±1 as pycma's;
    never below the floor."""
    change = jnp.clip((r.c_sigma / r.d_sigma) * (ps_norm / r.chi_n - 1.0), -1.0, 1.0)
    return floor_sigma(sigma * jnp.exp(change), sigma_floor)
