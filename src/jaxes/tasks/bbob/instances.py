"""The data of one bbob problem (function, dimension, instance), as COCO 2.8 builds it. NumPy.

``instance_data(f, d, i)`` returns the float64 arrays that ``functions.FUNCTIONS[f]`` reads:
always ``xopt`` (the optimum's location, for every function) and ``fopt`` (its value), and per
function the rotations ``R`` (seed + 10⁶) and ``Q`` (seed), a precomputed affine map ``M``,
or Gallagher's peaks. Everything is drawn from the legacy generators with COCO's seeds:

* the seed is ``f + 10000 i`` (``coco_get_bbob_problem``; the bbob instance number is used as
  it is, there is no remapping in COCO 2.8), except f4 and f18, which reuse the seeds of f3
  and f17 (``rseed_3``, ``rseed_17``), for ``fopt`` too;
* ``xopt`` comes from ``legacy.xopt(d, seed)`` except where a function says otherwise: f4
  takes its odd coordinates (1-based) positive, f5 moves it to the corner ±5, f8 scales it by
  3/4, f9 and f19 put it where their affine map gives all ones, f12 draws it with
  seed + 10⁶, f20 uses ±4.2096874637 / 2, f21/f22 the first peak, f24 ±μ₀/2 = ±1.25 with
  the signs of ``gauss(d, seed)``.
"""

from __future__ import annotations

import math

import numpy as np

from jaxes.tasks.bbob import legacy

Data = dict[str, np.ndarray]


def rseed(function: int, instance: int) -> int:
    """COCO's seed of a bbob problem: ``f + 10000 i``, with f4 → 3 and f18 → 17."""
    return {4: 3, 18: 17}.get(function, function) + 10000 * instance


def diagonal(dimension: int, base: float) -> np.ndarray:
    """``base^(k / (d - 1))`` for k = 0..d-1, the Λ diagonals (Λ^α has base √α)."""
    return np.array([math.pow(base, k / (dimension - 1.0)) for k in range(dimension)])


def _rotated(dimension: int, seed: int, base: float) -> np.ndarray:
    """``R diag(base^(k/(d-1))) Q``, summed as COCO does (``R[i, k] λ_k Q[k, j]``)."""
    r = legacy.rotation(dimension, seed + 1000000)
    q = legacy.rotation(dimension, seed)
    return legacy.matmul(r * diagonal(dimension, base), q)


def _common(function: int, dimension: int, instance: int) -> tuple[int, Data]:
    seed = rseed(function, instance)
    return seed, {
        "xopt": legacy.xopt(dimension, seed),
        "fopt": np.float64(legacy.fopt(function, instance)),
    }


def _separable(function, dimension, instance):  # f1, f2, f3
    return _common(function, dimension, instance)[1]


def _bueche_rastrigin(function, dimension, instance):  # f4
    data = _common(function, dimension, instance)[1]
    data["xopt"][::2] = np.abs(data["xopt"][::2])
    return data


def _linear_slope(function, dimension, instance):  # f5: the optimum is the corner ±5
    data = _common(function, dimension, instance)[1]
    data["xopt"] = np.where(data["xopt"] < 0.0, -5.0, 5.0)
    return data


def _one_rotation(function, dimension, instance):  # f10, f11, f14
    seed, data = _common(function, dimension, instance)
    data["R"] = legacy.rotation(dimension, seed + 1000000)
    return data


def _bent_cigar(function, dimension, instance):  # f12: xopt drawn with the rotation's seed
    seed, data = _common(function, dimension, instance)
    data["xopt"] = legacy.xopt(dimension, seed + 1000000)
    data["R"] = legacy.rotation(dimension, seed + 1000000)
    return data


def _conditioned(base: float, with_r: bool):
    """f6, f13, f23 (``M = R Λ Q``) and f15, f16 (also ``R`` for the first rotation)."""

    def build(function, dimension, instance):
        seed, data = _common(function, dimension, instance)
        data["M"] = _rotated(dimension, seed, base)
        if with_r:
            data["R"] = legacy.rotation(dimension, seed + 1000000)
        return data

    return build


def _two_rotations(function, dimension, instance):  # f7
    seed, data = _common(function, dimension, instance)
    data["R"] = legacy.rotation(dimension, seed + 1000000)
    data["Q"] = legacy.rotation(dimension, seed)
    return data


def _schaffers(condition: float):  # f17, f18: M = Λ Q (rows of Q scaled), then R first
    def build(function, dimension, instance):
        seed, data = _common(function, dimension, instance)
        scale = diagonal(dimension, math.sqrt(condition))
        data["M"] = scale[:, None] * legacy.rotation(dimension, seed)
        data["R"] = legacy.rotation(dimension, seed + 1000000)
        return data

    return build


def _rosenbrock(function, dimension, instance):  # f8
    data = _common(function, dimension, instance)[1]
    data["xopt"] = data["xopt"] * 0.75
    return data


def _rosenbrock_rotated(function, dimension, instance):  # f9, f19: z = c R x + 1/2
    seed = rseed(function, instance)
    r = legacy.rotation(dimension, seed)
    c = max(1.0, math.sqrt(dimension) / 8.0)
    # z = 1 at x = Rᵀ 1 / (2c); COCO writes this sum for both (f19's equals it for d <= 64).
    return {
        "xopt": r.sum(axis=0) / (2.0 * c),
        "fopt": np.float64(legacy.fopt(function, instance)),
        "M": c * r,
    }


def _schwefel(function, dimension, instance):  # f20
    seed = rseed(function, instance)
    signs = np.where(legacy.unif(dimension, seed) < 0.5, -1.0, 1.0)
    return {"xopt": signs * 0.5 * 4.2096874637, "fopt": np.float64(legacy.fopt(function, instance))}


def _gallagher(peaks: int):  # f21 (101 peaks), f22 (21)
    def build(function, dimension, instance):
        d, seed = dimension, rseed(function, instance)
        b, c, first = (10.0, 5.0, math.sqrt(1000.0)) if peaks == 101 else (9.8, 4.9, 1000.0)
        # Peak k >= 1 has condition 1000^(π(k-1)/(n-2)) and height 1.1 + 8 (k-1)/(n-2), with
        # π the order that sorts n-1 uniforms (COCO's qsort on distinct values).
        order = np.argsort(legacy.unif(peaks - 1, seed), kind="stable")
        conditions = [first] + [
            math.pow(1000.0, order[k] / (peaks - 2.0)) for k in range(peaks - 1)
        ]
        heights = [10.0] + [k / (peaks - 2.0) * (9.1 - 1.1) + 1.1 for k in range(peaks - 1)]
        scales = np.empty((peaks, d))
        for k in range(peaks):
            rank = np.argsort(legacy.unif(d, seed + 1000 * k), kind="stable")
            scales[k] = np.power(conditions[k], rank / (d - 1.0) - 0.5)
        r = legacy.rotation(d, seed)
        points = b * legacy.unif(d * peaks, seed).reshape(peaks, d) - c
        # Peak k sits at R y_k in the rotated space, the global one at 0.8 R y_0.
        centres = legacy.matmul(points, r.T)
        centres[0] *= 0.8
        return {
            "xopt": 0.8 * points[0],
            "fopt": np.float64(legacy.fopt(function, instance)),
            "R": r,
            "centres": centres,
            "scales": scales,
            "heights": np.array(heights),
        }

    return build


def _lunacek(function, dimension, instance):  # f24
    seed, data = _common(function, dimension, instance)
    data["xopt"] = np.where(legacy.gauss(dimension, seed) < 0.0, -1.25, 1.25)
    data["R"] = legacy.rotation(dimension, seed + 1000000)
    data["Q"] = legacy.rotation(dimension, seed)
    return data


_BUILDERS = {
    1: _separable,
    2: _separable,
    3: _separable,
    4: _bueche_rastrigin,
    5: _linear_slope,
    6: _conditioned(math.sqrt(10.0), with_r=False),
    7: _two_rotations,
    8: _rosenbrock,
    9: _rosenbrock_rotated,
    10: _one_rotation,
    11: _one_rotation,
    12: _bent_cigar,
    13: _conditioned(math.sqrt(10.0), with_r=False),
    14: _one_rotation,
    15: _conditioned(math.sqrt(10.0), with_r=True),
    16: _conditioned(1.0 / math.sqrt(100.0), with_r=True),
    17: _schaffers(10.0),
    18: _schaffers(1000.0),
    19: _rosenbrock_rotated,
    20: _schwefel,
    21: _gallagher(101),
    22: _gallagher(21),
    23: _conditioned(math.sqrt(100.0), with_r=False),
    24: _lunacek,
}


def instance_data(function: int, dimension: int, instance: int) -> Data:
    """The float64 arrays of bbob problem (function, dimension, instance); see the module doc.

    Example:
      >>> data = instance_data(1, 2, 1)
      >>> data["xopt"].round(4).tolist(), float(data["fopt"])
      ([0.2528, -1.1568], 79.48)
    """
    return _BUILDERS[function](function, dimension, instance)
