"""Per-call cost, part by part: one strategy's jitted `ask`, `tell` and a state round trip
against evosax's, at a small d and P where a generation is well under a millisecond.

What it measures, in one process: first, the top-level kernels of each library's compiled
`tell` (a small call pays per launch); then `jax.jit(es.ask)`, `jax.jit(es.tell)` (jaxes) and
`jax.jit(E.ask)`, `jax.jit(E.tell)` (evosax), each with and without the state donated, and
`jax.jit(lambda state: state)` on each library's state (what a call costs for its leaves
alone), and each `tell` jitted to return its state only (what its diagnostics cost) or its
info stacked into one array (what eleven outputs cost over one); last, whole generations of
separate calls left to run asynchronously, as `benchmarks/regimes.py` times them, with each
of those three `tell`s, and `generation_step` likewise with its metrics, stacked or left
out. Every part is called 100 times to warm up, then 1,000 times in a
timed block ended by `jax.block_until_ready` on each call; the blocks of all parts alternate,
5 rounds, and the median µs per call is printed. `benchmarks/regimes.py` times whole
generations; this script says which part of a small one costs what.

Run:
  .venv/bin/python benchmarks/call_parts.py                 # snes, d = 10, P = 16
  .venv/bin/python benchmarks/call_parts.py --strategy open_es --d 100 --P 64
  XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \\
    .venv/bin/python benchmarks/call_parts.py              # XLA:CPU on one thread
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
import warnings

import jax
import jax.numpy as jnp
import optax
from evosax import algorithms

import jaxes
from jaxes.step import generation_step
from jaxes.tasks.functions import function_task
from jaxes.training import init_state

EVOSAX = {"open_es": "Open_ES", "snes": "SNES", "sep_cma_es": "Sep_CMA_ES"}


def libraries(strategy: str, d: int, population: int):
    """``(jaxes strategy, evosax strategy, its params, its state after one generation)``."""
    x0 = jnp.ones(d)
    if strategy == "open_es":
        es = jaxes.open_es(population, 0.05, learning_rate=0.01)
        extra = {"optimizer": optax.adam(0.01)}
    else:
        es = getattr(jaxes, strategy)(population, 0.05)
        extra = {}
    ev = getattr(algorithms, EVOSAX[strategy])(population_size=population, solution=x0, **extra)
    params = ev.default_params
    key = jax.random.key(1)
    state = ev.init(jax.random.key(0), x0, params)
    members, state = ev.ask(key, state, params)
    state, _ = ev.tell(key, members, jnp.sum(members**2, axis=1), state, params)
    return es, ev, params, state


def parts(strategy: str, d: int, population: int, donate: bool) -> dict:
    """The parts to time, each a function of no arguments that runs one call."""
    es, ev, ev_params, ev_state = libraries(strategy, d, population)
    key = jax.random.key(1)
    donated = {"donate_argnums": 0} if donate else {}
    j_ask = jax.jit(lambda s, k: es.ask(k, s), **donated)
    j_tell = jax.jit(es.tell, **donated)
    e_ask = jax.jit(lambda s, k: ev.ask(k, s, ev_params), **donated)
    e_tell = jax.jit(lambda s, k, x, f: ev.tell(k, x, f, s, ev_params), **donated)
    # tell without its diagnostics: what the outputs beyond the state cost a call.
    j_tell_state = jax.jit(lambda s, f: es.tell(s, f)[0], **donated)
    j_tell_stacked = jax.jit(lambda s, f: stacked_info(es.tell(s, f)), **donated)
    e_tell_state = jax.jit(lambda s, k, x, f: ev.tell(k, x, f, s, ev_params)[0], **donated)
    same = jax.jit(lambda s: s, **donated)
    held = {"jaxes": es.init(jax.random.key(0), jnp.ones(d)), "evosax": ev_state}
    members = {  # drawn without donation, so the held states stay valid
        "jaxes": es.ask(key, held["jaxes"])[0],
        "evosax": ev.ask(key, held["evosax"], ev_params)[0],
    }
    fitness = {
        "jaxes": -jnp.sum(members["jaxes"] ** 2, axis=1),
        "evosax": jnp.sum(members["evosax"] ** 2, axis=1),
    }

    def call(lib, fn):
        def run():
            held[lib] = jax.block_until_ready(fn(held[lib]))

        return run

    return {
        "jaxes ask": call("jaxes", lambda s: j_ask(s, key)[1]),
        "evosax ask": call("evosax", lambda s: e_ask(s, key)[1]),
        "jaxes tell": call("jaxes", lambda s: j_tell(s, fitness["jaxes"])[0]),
        "evosax tell": call(
            "evosax", lambda s: e_tell(s, key, members["evosax"], fitness["evosax"])[0]
        ),
        "jaxes tell, state out": call("jaxes", lambda s: j_tell_state(s, fitness["jaxes"])),
        "jaxes tell, info stacked": call("jaxes", lambda s: j_tell_stacked(s, fitness["jaxes"])[0]),
        "evosax tell, state out": call(
            "evosax", lambda s: e_tell_state(s, key, members["evosax"], fitness["evosax"])
        ),
        "jaxes state round trip": call("jaxes", same),
        "evosax state round trip": call("evosax", same),
    }


def stacked_info(told):
    """``(state, info)`` with the info's scalars in one float32 array: one output, not eleven."""
    state, info = told
    return state, jnp.stack([jnp.asarray(x, jnp.float32) for x in info])


def median_us(loops: dict, rounds: int, count: int) -> dict:
    """Median µs per unit of each ``loop(n)`` (``n`` units: generations or calls), each warmed
    up with 100 units, the loops alternating."""
    times = {name: [] for name in loops}
    for _ in range(rounds):
        for name, loop in loops.items():
            loop(100)
            begin = time.perf_counter()
            loop(count)
            times[name].append((time.perf_counter() - begin) / count * 1e6)
    return {name: statistics.median(t) for name, t in times.items()}


def time_loops(strategy: str, d: int, population: int, rounds: int = 5, gens: int = 2000):
    """µs per generation of separate `ask`, fitness and `tell` calls left to run asynchronously
    (as `regimes.py` times them), with `tell` returning its info, the info stacked, or none."""
    es = libraries(strategy, d, population)[0]
    ask = jax.jit(lambda s, k: es.ask(k, s))
    fit = jax.jit(jax.vmap(lambda x: -jnp.sum(x**2)))
    tells = {
        "info": jax.jit(es.tell),
        "info stacked": jax.jit(lambda s, f: stacked_info(es.tell(s, f))),
        "state only": jax.jit(lambda s, f: (es.tell(s, f)[0], None)),
    }
    start_state = es.init(jax.random.key(0), jnp.ones(d))
    keys = jax.random.split(jax.random.key(1), gens)

    def loop(tell, n):
        state = start_state
        for i in range(n):
            population, state = ask(state, keys[i])
            state, _ = tell(state, fit(population))
        jax.block_until_ready(state)

    return median_us(
        {name: functools.partial(loop, tell) for name, tell in tells.items()}, rounds, gens
    )


def time_steps(strategy: str, d: int, population: int, rounds: int = 5, gens: int = 2000):
    """µs per call of `jaxes.step.generation_step` (sphere task, state donated, calls left to
    run asynchronously) returning its metrics dict, the metrics stacked into one array, or
    none: what its fifteen scalar metrics cost a call made one generation at a time."""
    es = libraries(strategy, d, population)[0]
    task = function_task("sphere", d)
    step = generation_step(es, task)

    def stacked(ts):
        ts, metrics = step(ts)
        return ts, jnp.stack([jnp.asarray(v, jnp.float32) for v in metrics.values()])

    steps = {
        "metrics": jax.jit(step, donate_argnums=0),
        "metrics stacked": jax.jit(stacked, donate_argnums=0),
        "no metrics": jax.jit(lambda ts: (step(ts)[0], None), donate_argnums=0),
    }

    def loop(fn, n):
        ts = init_state(es, task, seed=0)
        for _ in range(n):
            ts, _ = fn(ts)
        jax.block_until_ready(ts)

    return median_us(
        {name: functools.partial(loop, fn) for name, fn in steps.items()}, rounds, gens
    )


def time_parts(calls: dict, rounds: int = 5, block: int = 1000) -> dict:
    """Median µs per call of each part, the parts' blocks alternating."""

    def repeat(run, n):
        for _ in range(n):
            run()

    loops = {name: functools.partial(repeat, run) for name, run in calls.items()}
    return median_us(loops, rounds, block)


def kernels(compiled) -> int:
    """The kernels a compiled program launches at its top level (fusions, library calls,
    copies, loops): what a small call pays per launch whatever their size."""
    text = compiled.as_text()
    entry = text[text.index("\nENTRY") :].split("\n}\n")[0]
    launches = (
        " fusion(",
        " custom-call(",
        " copy(",
        " while(",
        " conditional(",
        " dot(",
        " sort(",
    )
    return sum(any(op in line for op in launches) for line in entry.splitlines())


def tell_programs(strategy: str, d: int, population: int) -> tuple[tuple[int, int], ...]:
    """``(top-level kernels, outputs)`` of ``jax.jit(tell)`` for jaxes and for evosax: each
    output is a buffer a call allocates and hands back as an array."""
    es, ev, ev_params, ev_state = libraries(strategy, d, population)
    key, fitness = jax.random.key(1), jnp.zeros(population)
    _, state = es.ask(key, es.init(jax.random.key(0), jnp.ones(d)))
    members, ev_asked = ev.ask(key, ev_state, ev_params)
    ours = jax.jit(es.tell).lower(state, fitness)
    theirs = jax.jit(ev.tell).lower(key, members, fitness, ev_asked, ev_params)
    return tuple(
        (kernels(lowered.compile()), len(jax.tree.leaves(lowered.out_info)))
        for lowered in (ours, theirs)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--strategy", choices=sorted(EVOSAX), default="snes")
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--P", type=int, default=16)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # donated buffers a call cannot reuse
    es, _, _, ev_state = libraries(args.strategy, args.d, args.P)
    leaves = len(jax.tree.leaves(es.init(jax.random.key(0), jnp.ones(args.d))))
    (our_kernels, our_outputs), (their_kernels, their_outputs) = tell_programs(
        args.strategy, args.d, args.P
    )
    print(
        f"{args.strategy}, d = {args.d}, P = {args.P}: state leaves jaxes {leaves}, "
        f"evosax {len(jax.tree.leaves(ev_state))}; a jitted tell's top-level kernels jaxes "
        f"{our_kernels}, evosax {their_kernels}; its outputs jaxes {our_outputs}, evosax "
        f"{their_outputs}"
    )
    for donate in (False, True):
        print("donated" if donate else "not donated")
        for name, us in time_parts(parts(args.strategy, args.d, args.P, donate)).items():
            print(f"  {name:24s} {us:8.1f} µs")
    print("a generation of separate calls, not blocked between them; tell returning")
    for name, us in time_loops(args.strategy, args.d, args.P).items():
        print(f"  {name:24s} {us:8.1f} µs")
    print("generation_step, one generation a call, returning")
    for name, us in time_steps(args.strategy, args.d, args.P).items():
        print(f"  {name:24s} {us:8.1f} µs")


if __name__ == "__main__":
    main()
