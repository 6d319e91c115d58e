"""Quickstart: OpenAI-ES on a 100-d sphere, many generations fused into one `lax.scan`.

Run: python examples/quickstart.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp

import jaxes

# Optional speed-up: reuse compiled programs across runs (the test suite and `make` set this).
if os.environ.get("JAXES_CACHE_DIR"):
    jax.config.update("jax_compilation_cache_dir", os.environ["JAXES_CACHE_DIR"])


def sphere(params: jax.Array) -> jax.Array:
    """Fitness to maximise: minus the squared distance to the origin."""
    return -jnp.sum(params**2)


def run(generations: int, dim: int = 100, seed: int = 0):
    strategy = jaxes.open_es(population_size=64, sigma=0.05, learning_rate=0.03)

    def generation(state, key):
        population, state = strategy.ask(key, state)
        state, info = strategy.tell(state, jax.vmap(sphere)(population))
        return state, info.fitness_mean

    @jax.jit
    def train(key):
        init_key, run_key = jax.random.split(key)
        state = strategy.init(init_key, jnp.ones(dim))
        state, curve = jax.lax.scan(generation, state, jax.random.split(run_key, generations))
        return state, curve

    return train(jax.random.key(seed))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer generations")
    args = parser.parse_args()
    generations = 100 if args.quick else 500
    start = time.perf_counter()
    state, curve = run(generations)
    final = float(sphere(state.params))
    print(
        f"sphere d=100: fitness {float(curve[0]):.2f} -> {final:.4f} after {generations} "
        f"generations of P=64 ({time.perf_counter() - start:.1f} s incl. compile)"
    )


if __name__ == "__main__":
    main()
