"""A user-written `jax.shard_map` training loop with jaxes: the population split over devices.

Run: python examples/shard_map_loop.py [--quick]

Each device builds and scores only its own members (`strategy.member`); the fitness values are
gathered with `jaxes.parallel.gather_members`, and every device runs the same `tell`. The whole
run is one `lax.scan` inside `shard_map`, with JAX's check of varying manual axes left on (its
default). On a machine without accelerators the script asks XLA for 4 CPU devices (unless
XLA_FLAGS already sets a count). It prints the progress, then runs the same loop on one device
and prints how far apart the two runs' parameters ended.

They are bit-identical with --quick. The split changes only how many members one `jax.vmap`
scores at a time, and XLA may round a batched sum differently (by an ulp) for another batch
size; rank-based fitness shaping hides that until two members' fitness values come that close,
so after a few hundred generations the runs drift apart as two seeds of one run would.
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

import jaxes
from jaxes import parallel
from jaxes.parallel import gather_members

# The split needs several devices. On a CPU, XLA fakes them if told before JAX starts:
# use_cpu_cores(4) asks for 4 unless XLA_FLAGS already sets a count. GPUs and TPUs ignore it.
parallel.use_cpu_cores(4)

# Optional speed-up: reuse compiled programs across runs (the test suite and `make` set this).
if os.environ.get("JAXES_CACHE_DIR"):
    jax.config.update("jax_compilation_cache_dir", os.environ["JAXES_CACHE_DIR"])

POPULATION = 32  # divisible by 1, 2, 4 and 8 devices
DIM = 200


def fitness_fn(params: jax.Array) -> jax.Array:
    """Fitness to maximise: minus the squared distance to 0.5 in every coordinate."""
    return -jnp.sum((params - 0.5) ** 2)


def run(devices, generations: int, seed: int = 0):
    """The whole run on ``devices``: the final state and the mean fitness per generation."""
    n = len(devices)
    mesh = Mesh(np.asarray(devices), ("d",))
    # A small noise table (256 KiB instead of 64 MiB): every device holds the state whole, and
    # fake CPU devices share one thread pool. Real devices are fine with the default.
    strategy = jaxes.open_es(
        POPULATION, sigma=0.05, learning_rate=0.05, noise=jaxes.noise.noise_table(2**16)
    )
    share = POPULATION // n

    def train(state, keys):  # runs once per device; state and keys are the same on all
        first = jax.lax.axis_index("d") * share  # this device's first member

        def generation(state, key):
            _, state = strategy.ask(key, state)  # the population ask builds is unused here
            mine = first + jnp.arange(share)
            fitness = jax.vmap(lambda i: fitness_fn(strategy.member(state, i)))(mine)
            # All P values, typed as the same on every device. A plain
            # jax.lax.all_gather(fitness, "d", tiled=True) moves the same floats but types them
            # as varying, and the scan below would refuse the carry.
            state, info = strategy.tell(state, gather_members(fitness, "d"))
            return state, info.fitness_mean

        return jax.lax.scan(generation, state, keys)

    loop = jax.jit(
        jax.shard_map(train, mesh=mesh, in_specs=PartitionSpec(), out_specs=PartitionSpec())
    )
    init_key, run_key = jax.random.split(jax.random.key(seed))
    state = strategy.init(init_key, jnp.zeros(DIM))
    return loop(state, jax.random.split(run_key, generations))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer generations")
    args = parser.parse_args()
    generations = 60 if args.quick else 300
    devices = jax.devices()
    devices = devices[: max(k for k in (1, 2, 4, 8) if k <= len(devices))]
    start = time.perf_counter()
    state, curve = run(devices, generations)
    curve = np.asarray(curve)
    for g in range(0, generations, generations // 5):
        print(f"generation {g + 1:4d}: mean fitness {curve[g]:9.3f}")
    elapsed = time.perf_counter() - start
    # Every device holds the same state; read one copy (a host array) of each run.
    params = np.asarray(state.params)
    one, _ = run(devices[:1], generations)
    diff = float(np.max(np.abs(params - np.asarray(one.params))))
    first, final = float(fitness_fn(jnp.zeros(DIM))), float(fitness_fn(params))
    print(
        f"{len(devices)} devices, P={POPULATION}: centre's fitness {first:.2f} -> {final:.2f}"
        f" ({elapsed:.1f} s incl. compile); 1 device's params: max diff {diff:.1e}"
    )


if __name__ == "__main__":
    main()
