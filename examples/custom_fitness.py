"""Your own fitness function: fit a one-hidden-layer network to data with ES, no gradients.

This is the simplest way to use jaxes, without a ``Task``: the parameters are a plain dict
pytree, and each generation is ``ask`` → ``jax.vmap`` of your fitness over the population →
``tell``, with every generation fused into one ``jax.jit`` + ``lax.scan``. The network fits
``y = sin(2x) + noise``; ``jax.grad`` is never called, so the same loop works for a fitness
that is not differentiable (a simulator, a count, a ``round``).

Run:
  python examples/custom_fitness.py [--quick] [--strategy open_es|pgpe|snes|ars|sep_cma_es]

It prints ``final loss L (start S) ...``: the mean squared error of the centre parameters on
the data after the last generation and before the first.
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

HIDDEN = 16

# Each strategy's step sizes differ in meaning (Adam's rate, ClipUp's step, SNES's η_μ, ...),
# so each gets settings that work for this problem rather than one shared value.
STRATEGIES = {
    "open_es": lambda p: jaxes.open_es(p, sigma=0.05, learning_rate=0.03),
    "pgpe": lambda p: jaxes.pgpe(p, sigma=0.05, learning_rate=0.05),
    "snes": lambda p: jaxes.snes(p, sigma=0.1, learning_rate=1.0),
    "ars": lambda p: jaxes.ars(p, sigma=0.05, learning_rate=0.03),
    "sep_cma_es": lambda p: jaxes.sep_cma_es(p, sigma=0.1),
}


def make_data(key, n: int = 64):
    x = jnp.linspace(-2.0, 2.0, n)[:, None]
    y = jnp.sin(2.0 * x) + 0.05 * jax.random.normal(key, x.shape)
    return x, y


def init_params(key) -> dict:
    # Any pytree of float arrays is a valid ES parameter set; nothing is flattened by hand.
    k1, k2 = jax.random.split(key)
    return {
        "hidden": {"w": jax.random.normal(k1, (1, HIDDEN)), "b": jnp.zeros(HIDDEN)},
        "out": {"w": 0.1 * jax.random.normal(k2, (HIDDEN, 1)), "b": jnp.zeros(1)},
    }


def predict(params: dict, x: jax.Array) -> jax.Array:
    h = jnp.tanh(x @ params["hidden"]["w"] + params["hidden"]["b"])
    return h @ params["out"]["w"] + params["out"]["b"]


def loss(params: dict, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((predict(params, x) - y) ** 2)


def train(strategy_name: str, population_size: int, generations: int, seed: int = 0):
    """Returns (final params, loss of the centre per generation, loss at the start)."""
    strategy = STRATEGIES[strategy_name](population_size)
    data_key, params_key, init_key, run_key = jax.random.split(jax.random.key(seed), 4)
    x, y = make_data(data_key)

    def fitness(params):
        return -loss(params, x, y)  # jaxes maximises fitness

    def generation(state, key):
        population, state = strategy.ask(key, state)  # every leaf gets a leading axis P
        state, _ = strategy.tell(state, jax.vmap(fitness)(population))
        return state, loss(state.params, x, y)

    @jax.jit
    def run(params):
        # The data are closed over: constants of the compiled program, not per-call inputs.
        state = strategy.init(init_key, params)
        keys = jax.random.split(run_key, generations)
        state, curve = jax.lax.scan(generation, state, keys)
        return state.params, curve, loss(params, x, y)

    return run(init_params(params_key))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer generations (a test run)")
    parser.add_argument("--strategy", choices=sorted(STRATEGIES), default="open_es")
    parser.add_argument("--population", type=int, default=64)
    parser.add_argument("--generations", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    generations = args.generations or (300 if args.quick else 2000)
    start = time.perf_counter()
    params, curve, start_loss = train(args.strategy, args.population, generations, args.seed)
    final = float(curve[-1])
    seconds = time.perf_counter() - start
    n_params = sum(leaf.size for leaf in jax.tree.leaves(params))
    print(
        f"{args.strategy}, P={args.population}, {n_params} params, {generations} generations: "
        f"final loss {final:.4f} (start {float(start_loss):.4f}) in {seconds:.1f} s incl. compile"
    )


if __name__ == "__main__":
    main()
