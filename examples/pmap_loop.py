"""A user-written `jax.pmap` training loop with jaxes: the population split over devices.

Run: python examples/pmap_loop.py [--quick]

On a machine without accelerators the script asks XLA for 4 CPU devices (unless XLA_FLAGS
already sets a count), so the split is real even there. It prints the population's mean fitness
every 25 generations, then the fitness of the centre before and after, and whether every
device ended with the same parameters.
"""

from __future__ import annotations

import argparse
import os

import jax
import jax.numpy as jnp
import numpy as np

import jaxes
from jaxes import parallel, training
from jaxes.tasks.functions import function_task

# jax.pmap needs several devices. On a CPU, XLA fakes them if told before JAX starts:
# use_cpu_cores(4) asks for 4 unless XLA_FLAGS already sets a count. GPUs and TPUs ignore it.
parallel.use_cpu_cores(4)

# Optional speed-up: reuse compiled programs across runs (the test suite and `make` set this).
if os.environ.get("JAXES_CACHE_DIR"):
    jax.config.update("jax_compilation_cache_dir", os.environ["JAXES_CACHE_DIR"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer generations")
    args = parser.parse_args()
    n = jax.local_device_count()
    # A small noise table (256 KiB instead of 64 MiB): each device holds its own copy, and on
    # 4 fake CPU devices sharing 2 cores the default's copies add about 1 s to the quick run.
    strategy = jaxes.open_es(
        population_size=8 * n, sigma=0.05, learning_rate=0.05, noise=jaxes.noise.noise_table(2**16)
    )
    task = function_task("sphere", dim=50)
    # Each device evaluates P/n members; only fitness is gathered across devices.
    pstep = jax.pmap(
        parallel.local_step(strategy, task, n, "devices"), axis_name="devices", donate_argnums=0
    )
    state = training.init_state(strategy, task, seed=0)
    start = float(task.evaluate_policy(None, state.strategy_state.params, None)[0])
    state = jax.tree.map(lambda x: jnp.stack([x] * n), state)
    for generation in range(1, (50 if args.quick else 300) + 1):
        state, metrics = pstep(state)
        # Reading the metrics waits for this generation's step. On CPU devices a loop must wait
        # now and then: XLA's CPU client deadlocks once it has 32 steps queued per device
        # (jaxes.parallel says why), and without the wait this loop queued 300 and hung.
        if generation % 25 == 0:
            print(f"generation {generation}: mean fitness {float(metrics['fitness_mean'][0]):.2f}")
    leaves = [np.asarray(x) for x in jax.tree.leaves(state.strategy_state.params)]
    same = all(all(np.array_equal(c, leaf[0]) for c in leaf) for leaf in leaves)
    params = jax.tree.map(lambda x: x[0], state.strategy_state.params)
    final = float(task.evaluate_policy(None, params, None)[0])
    print(
        f"{n} devices, P={strategy.population_size}: fitness {start:.2f} -> {final:.2f}; "
        f"replicas identical: {same}"
    )


if __name__ == "__main__":
    main()
