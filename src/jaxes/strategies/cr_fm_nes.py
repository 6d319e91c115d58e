"""CR-FM-NES (Nomura & Ono, "Fast Moving Natural Evolution Strategy for High-Dimensional
Problems", IEEE CEC 2022, arXiv:2201.11422): natural-gradient ascent on a Gaussian of covariance
``σ² D (I + v vᵀ) D``, ``D`` diagonal: O(d) memory. Defaults: the paper's (``default_constants``).

Members are mirrored pairs, ``x = m + σ D (I + v vᵀ)^{1/2} z`` with ``z_{2k+1} = -z_{2k}``, on
the flattened params: ``Diagonal`` cannot express ``vᵀ z`` (it mixes coordinates), so they are
``samplers.FullSampler``'s, antithetic, with a ``samplers.RestrictedShape`` for its matrix.
``v`` starts ``N(0, I/d)`` from ``init``'s key, ``D = 1``; ``w``: the rank weights (log ranks):

- ``p_σ ← (1 - c_σ) p_σ + √(c_σ (2 - c_σ) μ_eff) Σ w_i z_i``; while ``‖p_σ‖ ≥ χ_d`` (moving)
  ``w_i`` becomes ``ŵ_i e^{α‖z_i‖}/Σ_j ŵ_j e^{α‖z_j‖} - 1/λ`` and ``η_σ = 1``, else ``η_σ``
  is ``η_stag`` (``‖p_σ‖ ≥ χ_d/10``) or ``η_conv``;
- ``m ← m + η_m Σ w_i δ_i = m + η_m (M - c)``, a centre-of-mass step (``Population.moments``);
- ``p_c ← (1 - c_c) p_c + √(c_c (2 - c_c) μ_eff) Σ w_i δ_i / σ``;
- ``v``, ``D`` step along the restricted natural gradient (``natural_gradient``) of the
  ``y_i = D⁻¹ δ_i/σ`` at rates ``η_B w_i`` and of ``p_c/D`` at ``c_1`` (< 0 below d = 5, as
  in the paper); then ``D`` is scaled to ``det(D (I + v vᵀ)^{1/2}) = 1``;
- ``σ ← σ exp(η_σ/2 · Σ w_i (‖z_i‖² - d)/d)``.

On rotated ill-conditioned problems at small ``λ`` and ``d`` (a rotated cigar or ellipsoid,
``d = λ = 10``) ``v`` can grow without bound, as in the authors' ``crfmnes`` and evosax's
``CR_FM_NES``; a step that would make ``D`` non-positive or overflow keeps ``D`` and ``v``.
"""

from __future__ import annotations

import collections
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxes import centroid
from jaxes import noise as noise_lib
from jaxes import shaping as shaping_lib
from jaxes.checks import check_int, check_positive
from jaxes.strategies.base import EstimateStats
from jaxes.strategies.core import Rule, build
from jaxes.strategies.samplers import FullSampler, Population, RestrictedShape, flat
from jaxes.strategies.settings import check_fixed_sigma, floor_sigma
from jaxes.strategies.state import StrategyState, state_dataclass
from jaxes.types import Strategy


@state_dataclass
class CRFMNESState(StrategyState):
    """CR-FM-NES's state: the step size ``σ``, ``D`` (``diagonal``) and ``v`` (members are
    ``m + σ D (I + v vᵀ)^{1/2} z``) and the paths ``p_σ``, ``p_c``: vectors of size ``d``."""

    strategy = "cr_fm_nes"
    sigma: jax.Array
    diagonal: jax.Array
    v: jax.Array
    path_sigma: jax.Array
    path_c: jax.Array


Constants = collections.namedtuple(
    "Constants", "mu_eff c_sigma c_c c_1 chi eta_stag eta_conv eta_b alpha"
)


def h_inverse(d: int) -> float:
    """The ``a > 0`` with ``(1 + a²) e^{a²/2}/0.24 - 10 = d`` (bisection), ``h⁻¹(d)``.

    Example:
      >>> round(h_inverse(10), 4)
      1.1801
    """
    low, high = 0.0, 8.0  # h(8) > 10^15: above any d an array holds
    for _ in range(100):
        a = (low + high) / 2
        low, high = (a, high) if (1 + a * a) * math.exp(a * a / 2) < 0.24 * (10 + d) else (low, a)
    return (low + high) / 2


def default_constants(d: int, p: int) -> Constants:
    """The paper's constants for dimension ``d`` and population ``λ = p``."""
    raw = np.maximum(0.0, np.log(p / 2 + 1) - np.log(np.arange(1.0, p + 1)))
    mu_eff = float(1.0 / np.sum(np.square(raw / raw.sum())))
    c1_cma = 2.0 / ((d + 1.3) ** 2 + mu_eff)
    return Constants(
        mu_eff=mu_eff,
        c_sigma=(mu_eff + 2.0) / (d + mu_eff + 5.0),
        c_c=(4.0 + mu_eff / d) / (d + 4.0 + 2.0 * mu_eff / d),
        c_1=c1_cma * (d - 5) / 6,
        chi=math.sqrt(d) * (1.0 - 1.0 / (4 * d) + 1.0 / (21 * d * d)),
        eta_stag=math.tanh((0.024 * p + 0.7 * d + 20.0) / (d + 12.0)),
        eta_conv=2.0 * math.tanh((0.025 * p + 0.75 * d + 10.0) / (d + 4.0)),
        eta_b=math.tanh((min(0.02 * p, 3.0 * math.log(d)) + 5.0) / (0.23 * d + 25.0)),
        alpha=h_inverse(d) * min(1.0, math.sqrt(p / d)),
    )


# What estimate returns and update reads: direction, stats, sample, p_σ, regime, constants.
Estimated = collections.namedtuple("Estimated", "direction stats sample path_sigma moving k")


def cr_fm_nes(
    population_size: int, sigma=0.5, learning_rate=1.0, *, sigma_floor=None, track_best=True
) -> Strategy:
    """CR-FM-NES over the flattened params.

    Args:
      population_size: ``λ`` (even, >= 2); ``4 + ⌊3 ln d⌋`` rounded up to even is usual.
      sigma: the initial step size ``σ0`` (> 0).
      learning_rate: ``η_m`` (> 0), the mean's step size (the paper's 1).
      sigma_floor, track_best: as in ``jaxes.strategies``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> es = cr_fm_nes(population_size=8, sigma=0.5)
      >>> state = es.init(jax.random.key(0), jnp.ones(3))
      >>> population, state = jax.jit(es.ask)(jax.random.key(1), state)
      >>> state, info = jax.jit(es.tell)(state, -jnp.sum(population**2, axis=1))
      >>> bool(jnp.sum(state.params**2) < 3.0)
      True
    """
    # Longer than 60 lines because the Rule's four functions are closures over the settings.
    p = check_int("population_size", population_size, 2)
    if p % 2:
        raise ValueError(f"population_size: cr_fm_nes needs an even population (pairs ±z), got {p}")
    check_fixed_sigma(sigma, "cr_fm_nes")
    sigma0 = check_positive("sigma", sigma)
    eta_m = check_positive("learning_rate", learning_rate)
    sigma_floor = None if sigma_floor is None else check_positive("sigma_floor", sigma_floor)

    def init(master):  # v = 0 here; init_with_v draws it
        z = jnp.zeros_like(flat(master))
        own = dict(sigma=jnp.asarray(sigma0, z.dtype), diagonal=z + 1, v=z, path_sigma=z, path_c=z)
        return own, (own["sigma"], RestrictedShape(z + 1, z))

    def scale(state):
        return state.sigma, RestrictedShape(state.diagonal, state.v)

    def estimate(state, fitness, population: Population):
        z = population.sample.z
        k = default_constants(z.shape[1], p)
        u = shaping_lib.log_rank_utilities(fitness).astype(z.dtype)
        kick = math.sqrt(k.c_sigma * (2 - k.c_sigma) * k.mu_eff)
        path_sigma = (1 - k.c_sigma) * state.path_sigma + kick * (u @ z)
        moving = jnp.linalg.norm(path_sigma) >= k.chi
        norms = jnp.linalg.norm(z, axis=1)  # ŵ_i e^{α‖z_i‖}, scaled by e^{-α max‖z‖}
        far = centroid.masses(u) * jnp.exp(k.alpha * (norms - jnp.max(norms)))
        far = far / jnp.maximum(jnp.sum(far), jnp.finfo(far.dtype).tiny)  # 0 if all tie
        weights = jnp.where(moving, far - 1.0 / p, u)
        masses = centroid.masses(weights)
        m, low = population.moments(masses), jnp.min(weights)  # Σ w_i δ_i = Σ m_i δ_i + low Σ δ_i
        direction = jax.tree.map(lambda a, b: a + low * b, m.mass_moment, m.displacement_sum)
        stats = EstimateStats(weights, masses, m, state.sigma)
        return Estimated(direction, stats, population.sample, path_sigma, moving, k)

    def update(state, est):
        z, w, d, k = est.sample.z, est.stats.weights, est.sample.z.shape[1], est.k
        kick = math.sqrt(k.c_c * (2 - k.c_c) * k.mu_eff)
        path_c = (1 - k.c_c) * state.path_c + kick * flat(est.direction) / state.sigma
        ys = jnp.concatenate([est.sample.y, path_c[None]]) / state.diagonal
        rates = jnp.concatenate([k.eta_b * w, jnp.full((1,), k.c_1, w.dtype)])
        s, t = natural_gradient(ys, state.v)
        v = state.v + (rates @ t) / jnp.linalg.norm(state.v)
        diagonal = state.diagonal * (1 + rates @ s)
        log_det = jnp.mean(jnp.log(diagonal)) + jnp.log1p(v @ v) / (2 * d)
        ok = jnp.isfinite(log_det)  # else D <= 0 or an overflow (a diverged v): D and v stay
        diagonal = jnp.where(ok, diagonal / jnp.exp(log_det), state.diagonal)
        stagnant = jnp.linalg.norm(est.path_sigma) >= 0.1 * k.chi
        eta_sigma = jnp.where(est.moving, 1.0, jnp.where(stagnant, k.eta_stag, k.eta_conv))
        g_sigma = w @ (jnp.sum(jnp.square(z), axis=1) - d) / d
        sigma = floor_sigma(state.sigma * jnp.exp(eta_sigma / 2 * g_sigma), sigma_floor)
        state = state.replace(sigma=sigma.astype(state.sigma.dtype), v=jnp.where(ok, v, state.v))
        state = state.replace(diagonal=diagonal, path_sigma=est.path_sigma, path_c=path_c)
        return jax.tree.map(lambda x: eta_m * x, est.direction), state

    rule, sampler = Rule(init, scale, estimate, update), FullSampler(p, antithetic=True)
    es = build(rule, CRFMNESState, sampler, rank_based=True, track_best=track_best)

    def init_with_v(key, params):
        state = es.init(key, params)
        draw = jax.random.fold_in(noise_lib.noise_key(key), 0x7E)  # apart from the asks' keys
        v = jax.random.normal(draw, state.v.shape, state.v.dtype)
        return state.replace(v=v / math.sqrt(state.v.size))

    return es._replace(init=init_with_v)


def natural_gradient(y: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The paper's ``s`` (``D``'s) and ``t`` (``v``'s) terms of each row of ``y`` (``(n, d)``)."""
    n2, vbar = v @ v, v / jnp.linalg.norm(v)
    vv, gamma = jnp.square(vbar), 1.0 + n2
    alpha = jnp.minimum(1, jnp.sqrt(n2**2 + (2 * gamma - jnp.sqrt(gamma)) / jnp.max(vv)) / (2 + n2))
    ip = (y @ vbar)[:, None]
    t = y * ip - 0.5 * (jnp.square(ip) + gamma) * vbar
    b = -(1 - alpha**2) * n2**2 / gamma + 2 * alpha**2
    h = 2.0 - (b + 2 * alpha**2) * vv
    s = jnp.square(y) - (n2 / gamma) * ip * (y * vbar) - 1.0
    s = s - (alpha / gamma) * ((2 + n2) * t * vbar - n2 * (t @ vbar)[:, None] * vv)
    hv = vv / h
    s = s / h - (b / (1 + b * (hv @ vv))) * (s @ hv)[:, None] * hv
    t = t - alpha * ((2 + n2) * s * vbar - (s @ vv)[:, None] * vbar)
    return s, t
