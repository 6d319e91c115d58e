"""jaxes.cr_fm_nes against the authors' own CR-FM-NES, one generation at a time on the same members.

The authors' code is `crfmnes` 1.0.0 (Nomura & Ono).

Along a jaxes run (float64, σ0 = 2 from the origin, λ = 4 + ⌊3 ln d⌋ made even) on a rotated
ellipsoid of condition 1e6, every generation: the authors' `CRFMNES` is given jaxes's state
before the `tell` (m, σ, v, D, p_σ, p_c) and, through `numpy.random.randn`, the z that jaxes's
members were drawn with (recovered from the members: z = A⁻¹ (x - m)/σ), runs
`one_iteration()`, and every field is compared with jaxes's `tell`. It reports the largest
relative error of each field over the run and which σ regimes (moving, not) were visited.

evosax 0.3.2's `CR_FM_NES` is given the same state, members and fitness (its `tell`, with its
own fitness shaping), and its fields are compared with the authors' the same way
(`evosax_max_relative_error`): what evosax's version changes in the algorithm, measured. Then
again with the two changes of `_crfm_authors` (`evosax_as_authors_max_relative_error`): the
authors' weights, not clipped at 0 in `tell`, and the authors' `μ_eff`.

Needs `crfmnes` (not a dependency of jaxes; it imports numpy only):
  .venv/bin/pip install --no-deps --target /tmp/crfmnes_ref crfmnes==1.0.0
  .venv/bin/python benchmarks/cr_fm_nes_reference.py --crfmnes /tmp/crfmnes_ref
Writes benchmarks/results/cr_fm_nes_reference.json (or `--out`).
"""

from __future__ import annotations

import contextlib
import sys

import _crfm_authors
import _driver as driver
import numpy as np
from _common import machine_info, write_results

FIELDS = {"m": "params", "sigma": "sigma", "v": "v", "D": "diagonal", "ps": "path_sigma"}
FIELDS |= {"pc": "path_c"}


def evosax_tell(d: int, lam: int, authors: bool = False):
    """evosax's `CR_FM_NES` `tell`, jitted, from a jaxes state and its members' z:
    `tell(state, population, z, fitness) -> dict` of the authors' field names (`authors`:
    with the two changes of `_crfm_authors`)."""
    import jax
    import jax.numpy as jnp
    from evosax.algorithms import CR_FM_NES

    if authors:
        es, params = _crfm_authors.authors(lam, d, jnp.float64)
    else:
        es = CR_FM_NES(population_size=lam, solution=jnp.zeros(d, jnp.float64))
        params = es.default_params

    def tell(*args):
        with _crfm_authors.unclipped() if authors else contextlib.nullcontext():
            return traced(*args)

    @jax.jit
    def traced(state, population, z, fitness):
        v = state.v
        s = jnp.sqrt(1 + v @ v)
        mine = es.init(jax.random.key(0), jnp.zeros(d, jnp.float64), params).replace(
            mean=state.params,
            std=state.sigma,
            p_std=state.path_sigma,
            p_c=state.path_c,
            D=state.diagonal,
            v=v,
            z=z,
            y=z + (s - 1) * jnp.outer(z @ v, v) / (v @ v),  # (I + v vᵀ)^½ z
        )
        new, _ = es.tell(jax.random.key(0), population, fitness, mine, params)
        return {
            "m": new.mean,
            "sigma": new.std,
            "v": new.v,
            "D": new.D,
            "ps": new.p_std,
            "pc": new.p_c,
        }

    return tell


def compare(ref, d: int, generations: int, seed: int) -> dict:
    import jax
    import jax.numpy as jnp

    import jaxes

    rng = np.random.default_rng(seed)
    rotation, _ = np.linalg.qr(rng.standard_normal((d, d)))
    scales = 10.0 ** (6 * np.arange(d) / (d - 1))

    def f(x):  # rows of x, minimised
        return np.sum(scales * (np.asarray(x) @ rotation.T) ** 2, axis=-1)

    lam = 4 + int(3 * np.log(d))
    lam += lam % 2
    es = jaxes.cr_fm_nes(lam, sigma=2.0)
    ask, tell = jax.jit(es.ask), jax.jit(es.tell)
    state = es.init(jax.random.key(seed), jnp.full(d, 3.0))
    worst, moving = dict.fromkeys(FIELDS, 0.0), set()
    evosax = {"evosax": evosax_tell(d, lam), "evosax_as_authors": evosax_tell(d, lam, True)}
    others = {name: dict.fromkeys(FIELDS, 0.0) for name in evosax}
    for g in range(generations):
        population, state = ask(jax.random.key(1000 + g), state)
        new, _ = tell(state, -jnp.asarray(f(population)))
        m, sigma = np.asarray(state.params), float(state.sigma)
        diagonal, v = np.asarray(state.diagonal), np.asarray(state.v)
        w = (np.asarray(population) - m) / (sigma * diagonal)  # (I + v vᵀ)^½ z
        s = np.sqrt(1 + v @ v)
        z = w - np.outer(w @ v, v) / (s * (1 + s))
        other = ref.CRFMNES(d, lambda x: float(f(x.ravel())), m[:, None].copy(), sigma, lam)
        other.v, other.D = v[:, None].copy(), diagonal[:, None].copy()
        other.ps = np.asarray(state.path_sigma)[:, None].copy()
        other.pc = np.asarray(state.path_c)[:, None].copy()
        half = z[0::2].T.copy()
        draw, np.random.randn = np.random.randn, lambda *shape, half=half: half
        try:
            other.one_iteration()  # draws z_half with randn, then members z_half, -z_half
        finally:
            np.random.randn = draw
        moving.add(bool(np.linalg.norm(other.ps) >= other.chiN))
        fitness = jnp.asarray(f(population))
        told = {
            name: tell(state, population, jnp.asarray(z), fitness) for name, tell in evosax.items()
        }
        for theirs, mine in FIELDS.items():
            b = np.ravel(getattr(other, theirs))
            worst[theirs] = max(worst[theirs], relative(np.asarray(getattr(new, mine)), b))
            for name, fields in told.items():
                error = relative(np.asarray(fields[theirs]), b)
                others[name][theirs] = max(others[name][theirs], error)
        state = new
    return {
        "d": d,
        "lambda": lam,
        "generations": generations,
        "max_relative_error": worst,
        **{f"{name}_max_relative_error": errors for name, errors in others.items()},
        "regimes": sorted("moving" if r else "not moving" for r in moving),
        "f_at_end": float(np.min(f(population))),
    }


def relative(a, b) -> float:
    """The largest difference of `a` from `b`, relative to `b`'s largest entry."""
    a, b = np.ravel(a), np.ravel(b)
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-300))


def parse_args(argv: list[str]):
    parser = driver.parser(__doc__, None, "cr_fm_nes_reference", child=False)
    parser.add_argument("--crfmnes", help="a folder holding the crfmnes package (pip --target)")
    parser.add_argument("--dims", type=driver.comma_list(int), default="3,10,40")
    parser.add_argument("--generations", type=int, default=300)
    args = parser.parse_args(argv)
    args.out = args.out or driver.results_path("cr_fm_nes_reference")
    return args


def run(args, argv: list[str]) -> None:
    import jax

    # Both sides in float64, so that what differs is the algorithm, not the rounding.
    jax.config.update("jax_enable_x64", True)
    if args.crfmnes:
        sys.path.insert(0, args.crfmnes)
    import crfmnes.alg as ref

    info = machine_info(argv, ("jax", "jaxlib", "numpy", "crfmnes", "evosax"))
    rows = [compare(ref, d, args.generations, 0) for d in args.dims]
    lines = [
        f"d = {r['d']}, λ = {r['lambda']}, {r['generations']} generations "
        f"({', '.join(r['regimes'])}): "
        + ", ".join(f"{k} {e:.1e}" for k, e in r["max_relative_error"].items())
        + f"; evosax up to {max(r['evosax_max_relative_error'].values()):.1e}, with the two "
        f"changes {max(r['evosax_as_authors_max_relative_error'].values()):.1e}"
        for r in rows
    ]
    write_results(args.out, info, [], lines, {"rows": rows})


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, None, run)
