"""A user-written `jax.pmap` training loop with jaxes: the population split over devices.

Run: python examples/pmap_loop.py [--quick]

On a machine without accelerators the script asks XLA for 4 CPU devices (unless XLA_FLAGS
already sets a count), so the split is real even there. It prints the fitness of the centre
before and after, and whether every device ended with the same parameters.
"""

from __future__ import annotations

import argparse
import os

# jax.pmap needs several devices; XLA can fake them on a CPU, but only if told before jax is
# imported. GPU and TPU backends ignore this flag.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    ).strip()

import jax
import jax.numpy as jnp
import numpy as np

import jaxes
from jaxes import parallel, training
from jaxes.tasks.functions import function_task

# Optional speed-up: reuse compiled programs across runs (the test suite and `make` set this).
if os.environ.get("JAXES_CACHE_DIR"):
    jax.config.update("jax_compilation_cache_dir", os.environ["JAXES_CACHE_DIR"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer generations")
    args = parser.parse_args()
    n = jax.local_device_count()
    # A small noise table (256 KiB instead of 64 MiB): every pmap step copies the replicated
    # state per device, and with 4 fake CPU devices on 2 cores the 64 MiB copies starved XLA's
    # thread pool until a collective timed out (it aborted 1 run in 3 here). Real devices don't
    # share one pool; there the default table is fine.
    strategy = jaxes.open_es(
        population_size=8 * n, sigma=0.05, learning_rate=0.05, noise_table_size=2**16
    )
    task = function_task("sphere", dim=50)
    # Each device evaluates P/n members; only fitness is gathered across devices.
    pstep = jax.pmap(
        parallel.local_step(strategy, task, n, "devices"), axis_name="devices", donate_argnums=0
    )
    state = training.init_state(strategy, task, seed=0)
    start = float(task.evaluate_policy(None, state.strategy_state.params, None)[0])
    state = jax.tree.map(lambda x: jnp.stack([x] * n), state)
    for _ in range(50 if args.quick else 300):
        state, metrics = pstep(state)
    # Read each device's own copy (x.addressable_shards): indexing a pmapped array (x[0]) runs
    # a program across every device, which XLA's CPU runtime can stall on when there are more
    # (fake) devices than cores.
    copies = [
        [np.asarray(shard.data)[0] for shard in x.addressable_shards]
        for x in jax.tree.leaves(state.strategy_state.params)
    ]
    same = all(all(np.array_equal(c, leaf[0]) for c in leaf) for leaf in copies)
    params = jax.tree.unflatten(
        jax.tree.structure(state.strategy_state.params), [leaf[0] for leaf in copies]
    )
    final = float(task.evaluate_policy(None, params, None)[0])
    print(
        f"{n} devices, P={strategy.population_size}: fitness {start:.2f} -> {final:.2f}; "
        f"replicas identical: {same}"
    )


if __name__ == "__main__":
    main()
