"""Guided ES against OpenAI-ES on a quadratic with a biased surrogate gradient (issue 62).

The problem (after Maheswaranathan et al. 2019's perturbed quadratic): minimise
``L(x) = ½ ‖x‖²`` in ``d = 1000`` dimensions from ``x₀ = 1`` (``L₀ = 500``); fitness is
``-L``. Guided ES is given, before every ``ask``, the surrogate gradient
``∇L(x) + b + n``: ``b`` a fixed random bias of norm ``ρ ‖∇L(x₀)‖`` (drawn once per seed),
``n`` fresh noise of norm about ``0.5 ‖∇L(x₀)‖`` every generation. OpenAI-ES gets nothing.

Both estimate with raw fitness (the paper's ``f⁺ - f⁻``) and step with plain SGD, P = 20
members (10 antithetic pairs) a generation, 1500 generations (30,000 evaluations) at most.
OpenAI-ES: ``open_es(20, sigma=0.03)``; Guided ES: ``guided_es(20, sigma=0.03 √d, alpha,
beta=1, subspace_dims=1)``, the same spread per coordinate at ``α = 1``. Each method's
learning rate is the best of a small grid (by the median evaluations to the final target over
the seeds; the grids are in ``GRIDS``). Reported per ρ: the evaluations each method needs to
reach ``L ≤ 0.1 L₀`` and ``L ≤ 0.01 L₀`` (median, min, max over the seeds; "miss" where a
seed never did within the budget).

Run:
  .venv/bin/python benchmarks/guided_es.py            # 10 seeds, ρ in {0.25, 0.5, 1}
  .venv/bin/python benchmarks/guided_es.py --quick    # 3 seeds, ρ = 0.5, one rate each
"""

from __future__ import annotations

import math
import sys
import time

import _driver as driver
import numpy as np
from _common import machine_info, write_results

D, P, GENERATIONS, SIGMA = 1000, 20, 1500, 0.03
TARGETS = (0.1, 0.01)
NOISE = 0.5
# (method, alpha) -> learning rates tried.
GRIDS = {
    ("open_es", None): (0.005, 0.01, 0.015),
    ("guided_es", 0.5): (1.0, 2.0, 3.0),
    ("guided_es", 0.95): (5.0, 10.0, 15.0),
}
QUICK = {("open_es", None): (0.01,), ("guided_es", 0.95): (10.0,)}


def losses(method: str, alpha, lr: float, rho: float, seeds: list[int]) -> np.ndarray:
    """``L(θ_g) / L₀`` after each generation ``g``, ``(seeds, GENERATIONS)``."""
    import jax
    import jax.numpy as jnp
    import optax

    import jaxes

    x0 = jnp.ones(D)
    scale = float(jnp.linalg.norm(x0))  # ‖∇L(x₀)‖
    if method == "open_es":
        es = jaxes.open_es(P, SIGMA, optimizer=optax.sgd(lr), fitness_shaping="raw")
    else:
        es = jaxes.guided_es(
            P, SIGMA * math.sqrt(D), optimizer=optax.sgd(lr), fitness_shaping="raw",
            alpha=alpha, beta=1.0, subspace_dims=1,
        )  # fmt: skip

    def loss(x):
        return 0.5 * jnp.sum(x * x)

    def run(seed):
        bias_key, noise_key, init_key, run_key = jax.random.split(jax.random.key(seed), 4)
        bias = jax.random.normal(bias_key, (D,))
        bias = bias * (rho * scale / jnp.linalg.norm(bias))

        def generation(state, keys):
            if method == "guided_es":
                noise = NOISE * scale / math.sqrt(D) * jax.random.normal(keys[0], (D,))
                state = jaxes.guide(state, state.params + bias + noise)
            population, state = es.ask(keys[1], state)
            state, _ = es.tell(state, -jax.vmap(loss)(population))
            return state, loss(state.params) / loss(x0)

        keys = jnp.stack(
            [
                jax.random.split(noise_key, GENERATIONS),
                jax.random.split(run_key, GENERATIONS),
            ],
            axis=1,
        )
        return jax.lax.scan(generation, es.init(init_key, x0), keys)[1]

    return np.asarray(jax.jit(jax.vmap(run))(jnp.asarray(seeds)))


def evaluations_to(curve: np.ndarray, target: float) -> float:
    """Evaluations (P a generation) until ``L ≤ target L₀`` first; ``inf`` if never."""
    hit = np.nonzero(curve <= target)[0]
    return float((hit[0] + 1) * P) if hit.size else math.inf


def summary(values: list[float]) -> dict:
    finite = [v for v in values if math.isfinite(v)]
    return {
        "median": float(np.median(values)),
        "min": min(values),
        "max": max(values),
        "misses": len(values) - len(finite),
        "per_seed": values,
    }


def show(value: float) -> str:
    return "miss" if not math.isfinite(value) else f"{value:,.0f}"


def parse_args(argv: list[str]):
    quick = "3 seeds, ρ = 0.5, one rate each"
    parser = driver.parser(__doc__, quick, "guided_es", child=False)
    args = parser.parse_args(argv)
    args.out = args.out or driver.results_path("guided_es", args.quick)
    return args


def run(args, argv: list[str]) -> None:
    seeds = list(range(3 if args.quick else 10))
    rhos = (0.5,) if args.quick else (0.25, 0.5, 1.0)
    grids = QUICK if args.quick else GRIDS
    info = machine_info(argv, jax_backend=True)
    rows, lines = [], []
    lines.append(
        "| ρ | method | α | lr | evals to 0.1 L₀ (median [min, max]) | "
        "evals to 0.01 L₀ (median [min, max]) | misses |"
    )
    lines.append("|---|---|---|---|---|---|---|")
    for rho in rhos:
        for (method, alpha), rates in grids.items():
            tried = []
            for lr in rates:
                start = time.perf_counter()
                curves = losses(method, alpha, lr, rho, seeds)
                per = {t: [evaluations_to(c, t) for c in curves] for t in TARGETS}
                tried.append(
                    {
                        "lr": lr,
                        "seconds": round(time.perf_counter() - start, 1),
                        "final_loss_ratio": [float(c[-1]) for c in curves],
                        **{f"to_{t}": summary(v) for t, v in per.items()},
                    }
                )
            best = min(tried, key=lambda r: (r["to_0.01"]["median"], r["to_0.1"]["median"]))
            rows.append({"rho": rho, "method": method, "alpha": alpha, "best": best, "grid": tried})
            a, b = best["to_0.1"], best["to_0.01"]
            lines.append(
                f"| {rho} | {method} | {'' if alpha is None else alpha} | {best['lr']} | "
                f"{show(a['median'])} [{show(a['min'])}, {show(a['max'])}] | "
                f"{show(b['median'])} [{show(b['min'])}, {show(b['max'])}] | "
                f"{a['misses']}, {b['misses']} |"
            )
            print(lines[-1], file=sys.stderr, flush=True)
    settings = {
        "d": D, "population_size": P, "generations": GENERATIONS, "sigma_open_es": SIGMA,
        "sigma_guided_es": SIGMA * math.sqrt(D), "noise": NOISE, "targets": TARGETS,
        "seeds": seeds, "rhos": rhos, "grids": {f"{m}/{a}": r for (m, a), r in grids.items()},
    }  # fmt: skip
    write_results(args.out, info, [], ["\n".join(lines)], {"settings": settings, "rows": rows})


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, None, run)
