"""PES and NRES against autodiff on an unrolled meta-problem (issue 62).

Gradient descent on a small quadratic with a learned log step size θ = log η, unrolled
T = 100 steps in truncations of K = 10, each of P = 8 particles keeping its own inner state
(``jaxes.tasks.unrolled``). Over many seeds, each strategy's estimate summed over one unroll
(θ held) is compared with ``jax.grad`` through the whole unroll: PES's and NRES's are
unbiased, truncated ES's (fresh noise each truncation, no sums) is not.

Run: python examples/unrolled_gradients.py [--quick]
"""

from __future__ import annotations

import argparse
import math
import os

import jax
import numpy as np

import jaxes
from jaxes.tasks.unrolled import step_size_task, unroll_estimate

# Optional speed-up: reuse compiled programs across runs (the test suite and `make` set this).
if os.environ.get("JAXES_CACHE_DIR"):
    jax.config.update("jax_compilation_cache_dir", os.environ["JAXES_CACHE_DIR"])


def main(seeds: int, population: int = 8, sigma: float = 0.01) -> None:
    task = step_size_task(population)  # T = 100, K = 10, log η = -4
    theta = task.init_params(None)
    gradient = float(jax.grad(task.meta_loss)(theta, None)[0])
    made = {
        "pes": jaxes.pes(population, sigma),
        "nres": jaxes.nres(population, sigma),
        "truncated_es": jaxes.open_es(population, sigma, fitness_shaping="raw"),
    }

    @jax.jit
    def estimates(keys):
        # The ascent direction of fitness = -loss: minus it estimates the meta-loss's gradient.
        return {
            name: jax.vmap(lambda k, es=es: -unroll_estimate(es, task, theta, k)[0])(keys)
            for name, es in made.items()
        }

    z = {}
    for name, values in estimates(jax.random.split(jax.random.key(0), seeds)).items():
        values = np.asarray(values, np.float64)
        mean, se = values.mean(), values.std(ddof=1) / math.sqrt(seeds)
        z[name] = (mean - gradient) / se
        print(
            f"{name:>12}: estimate {mean:8.3f}  autodiff {gradient:8.3f}  "
            f"s.e. {se:.3f}  z {z[name]:+.2f}"
        )
    unbiased = abs(z["pes"]) < 3 and abs(z["nres"]) < 3
    print(
        f"pes and nres within 3 s.e. of autodiff: {unbiased}; truncated ES "
        f"{abs(z['truncated_es']):.0f} s.e. away over {seeds} seeds"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 seeds instead of 2000")
    main(300 if parser.parse_args().quick else 2000)
