"""The 24 noiseless bbob functions as pure JAX functions ``f(x, data) -> value``.

``x`` has shape ``(..., d)`` (any leading axes: a population) and ``data`` is the dict of
``instances.instance_data``; the value has shape ``(...)`` and the dtype of ``x`` (float64
under ``jax.enable_x64``, float32 otherwise: the instance data is cast to it). Each function
follows COCO's chain of transformations in COCO's order, so that in float64 it agrees with
``cocoex`` to rounding. Notation (Hansen et al., "Real-parameter black-box optimization
benchmarking 2009: noiseless functions definitions"): ``R`` and ``Q`` rotations, ``Λ^α`` the
diagonal ``α^(i / (2(d-1)))``, ``T_osz`` and ``T_asy^β`` the oscillation and asymmetry maps,
``f_pen(x) = Σ max(0, |x_i| - 5)²`` the boundary penalty, ``f_opt`` the optimal value.

Where COCO writes ``pow(exp(a), 0.1)`` (in ``T_osz``) we write the same number as
``x exp(0.049 (sin a₁ + sin a₂))``, which neither overflows in float32 nor loses accuracy.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxes.tasks.bbob.instances import diagonal

TWO_PI = 2.0 * 3.14159265358979323846  # coco_two_pi


def _prepare(x, data):
    """``x`` as a floating array and every instance array in its dtype."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    return x, {name: jnp.asarray(value, x.dtype) for name, value in data.items()}


def _ratio(d: int) -> np.ndarray:
    """i / (d - 1) for i = 0..d-1."""
    return np.arange(d) / (d - 1.0)


def _mat(m, x):
    """``M x`` for every row of ``x`` (full precision: no TF32 on accelerators)."""
    return jnp.matmul(x, m.T, precision=jax.lax.Precision.HIGHEST)


def t_osz(x):
    """T_osz(x) = sign(x) exp(x̂ + 0.049 (sin c₁x̂ + sin c₂x̂)) elementwise, x̂ = log|x|.

    (c₁, c₂) = (10, 7.9) for x > 0 and (5.5, 3.1) for x < 0; T_osz(0) = 0.
    """
    t = jnp.log(jnp.where(x != 0, jnp.abs(x), 1.0)) / 0.1
    wave = jnp.where(x > 0, jnp.sin(t) + jnp.sin(0.79 * t), jnp.sin(0.55 * t) + jnp.sin(0.31 * t))
    return x * jnp.exp(0.049 * wave)


def t_asy(x, beta: float):
    """T_asy^β(x)_i = x_i^(1 + β i/(d-1) √x_i) where x_i > 0, else x_i."""
    coefficient = jnp.asarray(beta * np.arange(x.shape[-1]) / (x.shape[-1] - 1.0), x.dtype)
    positive = jnp.where(x > 0, x, 1.0)
    return jnp.where(x > 0, positive ** (1.0 + coefficient * jnp.sqrt(positive)), x)


def f_pen(x):
    """``Σ max(0, |x_i| - 5)²``: zero inside ``[-5, 5]^d``."""
    return jnp.sum(jnp.maximum(jnp.abs(x) - 5.0, 0.0) ** 2, axis=-1)


def _rastrigin(z):
    """10 (d - Σ cos 2πz_i) + ‖z‖²."""
    return 10.0 * (z.shape[-1] - jnp.sum(jnp.cos(TWO_PI * z), -1)) + jnp.sum(z * z, -1)


def _rosenbrock(z):
    """Σ 100 (z_i² - z_{i+1})² + (z_i - 1)² over i < d."""
    a, b = z[..., :-1], z[..., 1:]
    return 100.0 * jnp.sum((a * a - b) ** 2, -1) + jnp.sum((a - 1.0) ** 2, -1)


def _const(values, x):
    return jnp.asarray(values, x.dtype)


def sphere(x, data):
    """f1: ‖x - x_opt‖² + f_opt."""
    x, p = _prepare(x, data)
    return jnp.sum((x - p["xopt"]) ** 2, -1) + p["fopt"]


def ellipsoid_separable(x, data):
    """f2: Σ 10^(6 i/(d-1)) z_i² + f_opt, z = T_osz(x - x_opt)."""
    x, p = _prepare(x, data)
    z = t_osz(x - p["xopt"])
    return jnp.sum(_const(diagonal(x.shape[-1], 1e6), x) * z * z, -1) + p["fopt"]


def rastrigin_separable(x, data):
    """f3: Rastrigin of z = Λ^10 T_asy^0.2(T_osz(x - x_opt)), + f_opt."""
    x, p = _prepare(x, data)
    z = _const(diagonal(x.shape[-1], math.sqrt(10.0)), x) * t_asy(t_osz(x - p["xopt"]), 0.2)
    return _rastrigin(z) + p["fopt"]


def bueche_rastrigin(x, data):
    """f4: Rastrigin of z = s ⊙ y, y = T_osz(x - x_opt), + 100 f_pen(x) + f_opt.

    s_i = 10^(i/(2(d-1))), times 10 where y_i > 0 and i is even (0-based).
    """
    x, p = _prepare(x, data)
    y = t_osz(x - p["xopt"])
    s = _const(diagonal(x.shape[-1], math.sqrt(10.0)), x)
    even = jnp.asarray(np.arange(x.shape[-1]) % 2 == 0)
    z = jnp.where((y > 0) & even, 10.0 * s, s) * y
    return _rastrigin(z) + p["fopt"] + 100.0 * f_pen(x)


def linear_slope(x, data):
    """f5: Σ 5|s_i| - s_i z_i + f_opt, s_i = sign(x_opt,i) 10^(i/(d-1)).

    x_opt is a corner ±5 of the box; z_i = x_i, or x_opt,i once x_i x_opt,i >= 25 (past it).
    """
    x, p = _prepare(x, data)
    xopt = p["xopt"]  # the corner ±5
    size = _const(diagonal(x.shape[-1], 10.0), x)
    s = jnp.where(xopt > 0, size, -size)
    z = jnp.where(x * xopt < 25.0, x, xopt)
    return jnp.sum(5.0 * jnp.abs(s) - s * z, -1) + p["fopt"]


def attractive_sector(x, data):
    """f6: T_osz(Σ (s_i z_i)²)^0.9 + f_opt, z = R Λ^10 Q (x - x_opt).

    s_i = 100 where z_i x_opt,i > 0 (the sector towards x_opt), else 1.
    """
    x, p = _prepare(x, data)
    z = _mat(p["M"], x - p["xopt"])
    v = jnp.sum(jnp.where(p["xopt"] * z > 0, 1e4 * z * z, z * z), -1)
    return t_osz(v) ** 0.9 + p["fopt"]


def step_ellipsoid(x, data):
    """f7: ``0.1 max(|ẑ_1|/10⁴, Σ 10^(2i/(d-1)) (R z̃)_i²) + f_pen(x) + f_opt``.

    ``ẑ = Λ^10 Q (x - x_opt)``; ``z̃_i = ⌊ẑ_i + ½⌋`` where ``|ẑ_i| > ½``, else ``⌊10 ẑ_i + ½⌋ / 10``.
    """
    x, p = _prepare(x, data)
    d = x.shape[-1]
    c = _const(np.sqrt(np.array([math.pow(10.0, i / (d - 1.0)) for i in range(d)])), x)
    zhat = _mat(c[:, None] * p["Q"], x - p["xopt"])
    ztilde = jnp.where(
        jnp.abs(zhat) > 0.5, jnp.floor(zhat + 0.5), jnp.floor(10.0 * zhat + 0.5) / 10.0
    )
    z = _mat(p["R"], ztilde)
    value = jnp.sum(_const(diagonal(d, 100.0), x) * z * z, -1)
    return 0.1 * jnp.maximum(jnp.abs(zhat[..., 0]) * 1.0e-4, value) + f_pen(x) + p["fopt"]


def rosenbrock(x, data):
    """f8: Rosenbrock of z = max(1, √d/8)(x - x_opt) + 1, + f_opt."""
    x, p = _prepare(x, data)
    c = max(1.0, math.sqrt(x.shape[-1]) / 8.0)
    return _rosenbrock(c * (x - p["xopt"]) + 1.0) + p["fopt"]


def rosenbrock_rotated(x, data):
    """f9: Rosenbrock of z = max(1, √d/8) R x + ½, + f_opt (``M`` holds the scaled R)."""
    x, p = _prepare(x, data)
    return _rosenbrock(_mat(p["M"], x) + 0.5) + p["fopt"]


def ellipsoid(x, data):
    """f10: Σ 10^(6 i/(d-1)) z_i² + f_opt, z = T_osz(R (x - x_opt))."""
    x, p = _prepare(x, data)
    z = t_osz(_mat(p["R"], x - p["xopt"]))
    return jnp.sum(_const(diagonal(x.shape[-1], 1e6), x) * z * z, -1) + p["fopt"]


def discus(x, data):
    """f11: 10⁶ z_1² + Σ_{i>1} z_i² + f_opt, z = T_osz(R (x - x_opt))."""
    x, p = _prepare(x, data)
    z = t_osz(_mat(p["R"], x - p["xopt"]))
    return 1.0e6 * z[..., 0] ** 2 + jnp.sum(z[..., 1:] ** 2, -1) + p["fopt"]


def bent_cigar(x, data):
    """f12: z_1² + 10⁶ Σ_{i>1} z_i² + f_opt, z = R T_asy^0.5(R (x - x_opt))."""
    x, p = _prepare(x, data)
    z = _mat(p["R"], t_asy(_mat(p["R"], x - p["xopt"]), 0.5))
    return z[..., 0] ** 2 + 1.0e6 * jnp.sum(z[..., 1:] ** 2, -1) + p["fopt"]


def sharp_ridge(x, data):
    """f13: z_1² + 100 √(Σ_{i>1} z_i²) + f_opt, z = R Λ^10 Q (x - x_opt)."""
    x, p = _prepare(x, data)
    z = _mat(p["M"], x - p["xopt"])
    return 100.0 * jnp.sqrt(jnp.sum(z[..., 1:] ** 2, -1)) + z[..., 0] ** 2 + p["fopt"]


def different_powers(x, data):
    """f14: ``√(Σ |z_i|^(2 + 4i/(d-1))) + f_opt``, ``z = R (x - x_opt)``."""
    x, p = _prepare(x, data)
    z = _mat(p["R"], x - p["xopt"])
    exponent = _const(2.0 + 4.0 * np.arange(x.shape[-1]) / (x.shape[-1] - 1.0), x)
    return jnp.sqrt(jnp.sum(jnp.abs(z) ** exponent, -1)) + p["fopt"]


def rastrigin_rotated(x, data):
    """f15: Rastrigin of z = R Λ^10 Q T_asy^0.2(T_osz(R (x - x_opt))), + f_opt."""
    x, p = _prepare(x, data)
    y = t_asy(t_osz(_mat(p["R"], x - p["xopt"])), 0.2)
    return _rastrigin(_mat(p["M"], y)) + p["fopt"]


def weierstrass(x, data):
    """f16: 10 (Σ_i Σ_k 2^-k cos(2π 3^k (z_i + ½)) / d - f₀)³ + 10/d f_pen(x) + f_opt, k < 12.

    z = R Λ^(1/100) Q T_osz(R (x - x_opt)); f₀ = Σ_k 2^-k cos(π 3^k) makes z = 0 optimal.
    """
    x, p = _prepare(x, data)
    d = x.shape[-1]
    z = _mat(p["M"], t_osz(_mat(p["R"], x - p["xopt"])))
    a, b = 0.5 ** np.arange(12.0), 3.0 ** np.arange(12.0)
    f0 = sum(a[k] * math.cos(TWO_PI * b[k] * 0.5) for k in range(12))
    waves = jnp.cos((TWO_PI * (z + 0.5))[..., None] * _const(b, x)) * _const(a, x)
    return 10.0 * (jnp.sum(waves, (-2, -1)) / d - f0) ** 3 + 10.0 / d * f_pen(x) + p["fopt"]


def schaffers(x, data):
    """f17, f18: (Σ_{i<d} √s_i (1 + sin²(50 s_i^0.2)) / (d-1))² + 10 f_pen(x) + f_opt.

    s_i = √(z_i² + z_{i+1}²), z = Λ^c Q T_asy^0.5(R (x - x_opt)) with c = 10 (f17) or 1000
    (f18); ``M`` holds Λ^c Q.
    """
    x, p = _prepare(x, data)
    z = _mat(p["M"], t_asy(_mat(p["R"], x - p["xopt"]), 0.5))
    s = z[..., :-1] ** 2 + z[..., 1:] ** 2
    terms = s**0.25 * (1.0 + jnp.sin(50.0 * s**0.1) ** 2)
    return (jnp.sum(terms, -1) / (x.shape[-1] - 1.0)) ** 2 + p["fopt"] + 10.0 * f_pen(x)


def griewank_rosenbrock(x, data):
    """f19: 10 + 10 Σ_{i<d} (s_i/4000 - cos s_i)/(d-1) + f_opt.

    s_i = 100 (z_i² - z_{i+1})² + (1 - z_i)², z = max(1, √d/8) R x + ½ (``M`` holds the
    scaled R).
    """
    x, p = _prepare(x, data)
    z = _mat(p["M"], x) + 0.5
    a, b = z[..., :-1], z[..., 1:]
    s = 100.0 * (a * a - b) ** 2 + (1.0 - a) ** 2
    return 10.0 + 10.0 * jnp.sum(s / 4000.0 - jnp.cos(s), -1) / (x.shape[-1] - 1.0) + p["fopt"]


def schwefel(x, data):
    """f20: ``0.01 (418.9828872724339 - Σ w_i sin √|w_i| / d + Σ max(0, |w_i| - 500)²) + f_opt``.

    ``x̂ = 2 sign(x_opt) ⊙ x``; ``ẑ_1 = x̂_1``, ``ẑ_i = x̂_i + ¼ (x̂_{i-1} - 2|x_opt,i-1|)``;
    ``w = 100 (Λ^10 (ẑ - 2|x_opt|) + 2|x_opt|)``.
    """
    x, p = _prepare(x, data)
    twice = 2.0 * jnp.abs(p["xopt"])
    y = 2.0 * jnp.where(p["xopt"] < 0, -x, x)
    zhat = jnp.concatenate([y[..., :1], y[..., 1:] + 0.25 * (y[..., :-1] - twice[:-1])], -1)
    lam = _const(np.array([math.pow(10.0, 0.5 * r) for r in _ratio(x.shape[-1])]), x)
    w = 100.0 * (lam * (zhat - twice) + twice)
    penalty = jnp.sum(jnp.maximum(jnp.abs(w) - 500.0, 0.0) ** 2, -1)
    total = jnp.sum(w * jnp.sin(jnp.sqrt(jnp.abs(w))), -1)
    return 0.01 * (penalty + 418.9828872724339 - total / x.shape[-1]) + p["fopt"]


def gallagher(x, data):
    """f21, f22: T_osz(10 - max_k h_k exp(-‖R x - y_k‖²_{C_k} / (2d)))² + f_pen(x) + f_opt.

    Peak k has height h_k, centre y_k and diagonal conditioning C_k (``scales``).
    """
    x, p = _prepare(x, data)
    diff = _mat(p["R"], x)[..., None, :] - p["centres"]
    distance = jnp.sum(p["scales"] * diff * diff, -1)
    peak = jnp.max(p["heights"] * jnp.exp(-0.5 / x.shape[-1] * distance), -1)
    return t_osz(10.0 - jnp.maximum(peak, 0.0)) ** 2 + f_pen(x) + p["fopt"]


def katsuura(x, data):
    """f23: 10/d² (Π_i (1 + i t_i)^(10/d^1.2) - 1) + f_pen(x) + f_opt.

    ``t_i = Σ_{j=1..32} |2^j z_i - [2^j z_i]| / 2^j``, ``z = R Λ^100 Q (x - x_opt)``, ``i``
    1-based, ``[·]`` rounding half up.
    """
    x, p = _prepare(x, data)
    d = x.shape[-1]
    z = _mat(p["M"], x - p["xopt"])
    powers = _const(2.0 ** np.arange(1.0, 33.0), x)
    scaled = z[..., None] * powers
    t = jnp.sum(jnp.abs(scaled - jnp.floor(scaled + 0.5)) / powers, -1)
    factors = (1.0 + _const(np.arange(1.0, d + 1.0), x) * t) ** (10.0 / math.pow(d, 1.2))
    return 10.0 / d / d * (jnp.prod(factors, -1) - 1.0) + p["fopt"] + f_pen(x)


def lunacek_bi_rastrigin(x, data):
    """f24: min(Σ (x̂_i - μ₀)², d + s Σ (x̂_i - μ₁)²) + 10 (d - Σ cos 2πz_i) + 10⁴ f_pen(x) + f_opt.

    x̂ = 2 sign(x_opt) ⊙ x, z = R Λ^100 Q (x̂ - μ₀), μ₀ = 2.5, s = 1 - 1/(2√(d+20) - 8.2),
    μ₁ = -√((μ₀² - 1)/s).
    """
    x, p = _prepare(x, data)
    d = x.shape[-1]
    s = 1.0 - 0.5 / (math.sqrt(d + 20.0) - 4.1)
    mu0, mu1 = 2.5, -math.sqrt((2.5 * 2.5 - 1.0) / s)
    xhat = jnp.where(p["xopt"] < 0, -(2.0 * x), 2.0 * x)
    scale = _const(diagonal(d, 10.0), x)
    z = _mat(p["R"], _mat(scale[:, None] * p["Q"], xhat - mu0))
    sphere0 = jnp.sum((xhat - mu0) ** 2, -1)
    sphere1 = 1.0 * d + s * jnp.sum((xhat - mu1) ** 2, -1)
    rastrigin = 10.0 * (d - jnp.sum(jnp.cos(TWO_PI * z), -1))
    return jnp.minimum(sphere0, sphere1) + rastrigin + 1e4 * f_pen(x) + p["fopt"]


FUNCTIONS: dict[int, Callable] = {
    1: sphere,
    2: ellipsoid_separable,
    3: rastrigin_separable,
    4: bueche_rastrigin,
    5: linear_slope,
    6: attractive_sector,
    7: step_ellipsoid,
    8: rosenbrock,
    9: rosenbrock_rotated,
    10: ellipsoid,
    11: discus,
    12: bent_cigar,
    13: sharp_ridge,
    14: different_powers,
    15: rastrigin_rotated,
    16: weierstrass,
    17: schaffers,
    18: schaffers,
    19: griewank_rosenbrock,
    20: schwefel,
    21: gallagher,
    22: gallagher,
    23: katsuura,
    24: lunacek_bi_rastrigin,
}
