"""COCO's BBOB-2009 random generators (``suite_bbob_legacy_code.c``), reimplemented in NumPy.

Every instance of the bbob suite is drawn from these: a lagged Park-Miller generator
(``unif``), Box-Muller normals on top of it (``gauss``), Gram-Schmidt rotations (``rotation``),
the optimum's location (``xopt``) and its value (``fopt``). The integer recurrences are exact
in Python ints, so the uniforms are bit-identical to COCO's; the rest agrees to a few ulps.
"""

from __future__ import annotations

import math

import numpy as np

_A, _M = 16807, 2147483647  # Park-Miller "minimal standard": aktseed <- 16807 aktseed mod 2^31-1
_Q, _R = 127773, 2836  # Schrage's factorisation M = A Q + R, as COCO writes the recurrence
_PI = 3.14159265358979323846  # coco_pi


def _park_miller(seed: int) -> int:
    """One step of ``seed <- A seed mod M`` by Schrage's method (no overflow in C's long)."""
    tmp = seed // _Q  # seed > 0, so C's floor of the double quotient is this integer division
    seed = _A * (seed - tmp * _Q) - _R * tmp
    return seed + _M if seed < 0 else seed


def unif(n: int, seed: int) -> np.ndarray:
    """``n`` uniforms in (0, 1) from ``seed`` (``bbob2009_unif``).

    A table of 32 draws (after 8 discarded ones) is shuffled Bays-Durham style: each output
    picks the table slot ``r // 2^26`` of the previous output and refills it.
    """
    seed = max(abs(int(seed)), 1)
    table = [0] * 32
    for i in range(39, -1, -1):
        seed = _park_miller(seed)
        if i < 32:
            table[i] = seed
    current = table[0]
    out = np.empty(n)
    for i in range(n):
        seed = _park_miller(seed)
        slot = current // 67108865
        current, table[slot] = table[slot], seed
        out[i] = current / 2.147483647e9 or 1e-99  # COCO never returns an exact zero
    return out


def gauss(n: int, seed: int) -> np.ndarray:
    """``n`` standard normals (``bbob2009_gauss``): g = √(-2 ln u_i) cos(2π u_{n+i})."""
    u = unif(2 * n, seed)
    # math's log/cos are the C library's, the ones COCO calls.
    g = np.array([math.sqrt(-2 * math.log(u[i])) * math.cos(2 * _PI * u[n + i]) for i in range(n)])
    g[g == 0.0] = 1e-99
    return g


def rotation(dimension: int, seed: int) -> np.ndarray:
    """A ``dimension``² orthogonal matrix (``bbob2009_compute_rotation``).

    Column-major normals ``B[i, j] = g[j d + i]`` made orthonormal column by column with
    (modified) Gram-Schmidt, in COCO's order.
    """
    d = dimension
    b = gauss(d * d, seed).reshape(d, d).T.copy()
    for i in range(d):
        for j in range(i):
            b[:, i] -= _dot(b[:, i], b[:, j]) * b[:, j]
        b[:, i] /= math.sqrt(_dot(b[:, i], b[:, i]))
    return b


def _dot(u: np.ndarray, v: np.ndarray) -> float:
    """Σ u_k v_k summed left to right as COCO's loop does (BLAS would reorder the sum)."""
    return float(np.cumsum(u * v)[-1])


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` with every entry summed left to right, as COCO's loops do.

    The order matters: f19 takes cos of values near 10⁶, where one ulp of its input shows.
    """
    return np.cumsum(a[:, :, None] * b[None, :, :], axis=1)[:, -1, :]


def xopt(dimension: int, seed: int) -> np.ndarray:
    """The optimum's location (``bbob2009_compute_xopt``): 8 ⌊10⁴ u⌋ / 10⁴ - 4, zero → -10⁻⁵."""
    x = 8 * np.floor(1e4 * unif(dimension, seed)) / 1e4 - 4
    x[x == 0.0] = -1e-5
    return x


def fopt(function: int, instance: int) -> float:
    """The optimal value (``bbob2009_compute_fopt``): round(100 g₁ / g₂, 2) clipped to ±1000.

    The Schaffer F7 and Büche-Rastrigin variants (18, 4) share the seed of 17 and 3.
    """
    rseed = {4: 3, 18: 17}.get(function, function) + 10000 * instance
    scaled = 100.0 * 100.0 * gauss(1, rseed)[0] / gauss(1, rseed + 1)[0]  # C's order of operations
    return min(1000.0, max(-1000.0, math.floor(scaled + 0.5) / 100.0))
