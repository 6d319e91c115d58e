"""Regimes: jaxes at its defaults against evosax 0.3.2, ms per generation over d, P and call style.

What it measures: for each strategy pair, dimension d and population P (a "cell"), the
milliseconds one generation takes, for jaxes and for evosax in the same process (one fresh
child process per cell, so memory never accumulates and every ratio compares two programs run
side by side on one machine). Each (library, style) is compiled (its first call) and run for
two more warm-up generations; then N generations are timed as a block (N adaptive: enough for
the block to take ~0.3 s, at least 3 and at most 50), each generation ended by
`jax.block_until_ready` on the state. The two libraries' blocks alternate, three rounds, so a
change in the machine's load falls on both alike; the reported time is the median
per-generation time over the 3 blocks. ratio = evosax ms / jaxes ms: above 1, jaxes is faster.
(evosax's state changes type after its first generation, so its second call compiles again;
the warm-up absorbs it, and each row records its warm-up times.)

Strategy pairs (σ = 0.05 everywhere; the fitness is the sum of squares: jaxes maximises, so it
gets `-sum(x**2)`; evosax minimises, so it gets `sum(x**2)`; the params are one flat float32
vector `jnp.ones(d)`):
  open_es      `jaxes.open_es(P, sigma=0.05, learning_rate=0.01)` vs evosax `Open_ES`
               (antithetic, centered ranks, `optax.adam(0.01)`, constant σ schedule).
  snes         `jaxes.snes(P, sigma=0.05)` vs evosax `SNES` (std_init = 0.05).
  sep_cma_es   `jaxes.sep_cma_es(P, sigma=0.05)` vs evosax `Sep_CMA_ES` (std_init = 0.05).
jaxes runs at its defaults otherwise (noise source, memory budget, track_best); evosax too.

Call styles:
  separate           `ask = jax.jit(es.ask)`, `tell = jax.jit(es.tell)`, no donation; a
                     generation is ask, `jax.jit(jax.vmap(f))(population)`, tell: how evosax's
                     README and most research code call a strategy.
  separate_donated   the same with the state donated to ask and to tell.
  fused              one `jax.jit` of a whole generation (ask, fitness, tell), state donated.
  generation_step    jaxes only: `jax.jit(jaxes.step.generation_step(es,
                     function_task("sphere", d)), donate_argnums=0)` on
                     `jaxes.training.init_state(es, task, 0)`; its ratio is against evosax's
                     fused generation (evosax's fastest whole-generation program). The task's
                     start is recorded per cell (`step_start`; 1.0 at the time of writing).

Also measured:
  init    jitted `init` of a 10-d state for each selected jaxes strategy and its evosax
          counterpart: ms per call after compiling, median over 50 calls, and the state's bytes.
  seeds   a 64-seed run of open_es vs Open_ES at d=10, P=16: one `jax.jit` of a function that
          vmaps over 64 keys `init`, then `lax.scan` over 1,000 generations of ask, fitness,
          tell; seconds per call after compiling (median of 3) and the bytes of the state it
          returns (the sum of `nbytes` over its leaves).

Parts (`--parts`, instead of the grid; one child, for the first of --strategies, --dims and
--pops, by default snes, d = 10, P = 16): where a small generation's time goes. First the
top-level kernels and the outputs of each library's `jax.jit(tell)` (a small call pays per
launch and per returned array) and each state's leaves; then µs per call, not donated and
donated, of `ask`, `tell`, `tell` returning its state only (its info left to dead-code
elimination) or its info stacked into one array, and `jax.jit(lambda state: state)` (what a
call costs for the leaves alone), each called 100 times to warm up, then 1,000 times in a
block, each call ended by `jax.block_until_ready`, the blocks of all parts alternating, median
of 5 rounds; then µs per generation of separate calls left to run asynchronously (2,000 a
block, blocked on at the end) with each of those `tell`s, and of jaxes's `generation_step`
one generation a call, returning its metrics, the metrics stacked, or none. Printed as tables
and written to benchmarks/results/regimes_parts.json (or `--out`).

Targets (printed after the table):
  jaxes >= 1.0x evosax in every cell and style, >= 3.0x where d·P >= 10^7;
  init of a 10-d state <= 1 ms for every jaxes strategy;
  the 64-seed run >= 1.0x evosax's same program.

Run:
  .venv/bin/python benchmarks/regimes.py            # the full grid, 3 pairs (about an hour)
  .venv/bin/python benchmarks/regimes.py --quick    # d in {10, 1000}, P=16, open_es only,
                                                    # a 50-generation seeds run (~2 min)
  .venv/bin/python benchmarks/regimes.py --strategies snes --dims 1000 100000 --pops 64
  .venv/bin/python benchmarks/regimes.py --parts    # snes, d = 10, P = 16, part by part
  .venv/bin/python benchmarks/regimes.py --parts --strategies open_es --dims 100 --pops 64
  XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \\
    .venv/bin/python benchmarks/regimes.py --parts  # XLA:CPU on one thread
Results are printed as a table and written as JSON to `--out` (default
benchmarks/results/regimes.json, or regimes_quick.json with `--quick`).
"""

from __future__ import annotations

import functools
import json
import math
import os
import statistics
import sys
import time
import warnings

import _driver as driver
from _children import quiet_import, spawn_all
from _common import machine_info, write_results
from asktell import evosax_open_es

SIGMA = 0.05
LEARNING_RATE = 0.01  # open_es only; snes and sep_cma_es run at their own defaults
STRATEGIES = ("open_es", "snes", "sep_cma_es")
EVOSAX_NAMES = {"open_es": "Open_ES", "snes": "SNES", "sep_cma_es": "Sep_CMA_ES"}
STYLES = ("separate", "separate_donated", "fused", "generation_step")
JAXES_ONLY = ("generation_step",)
DIMS = (10, 100, 1_000, 10_000, 100_000, 1_000_000)
POPS = (16, 64, 256)
QUICK_DIMS, QUICK_POPS, QUICK_STRATEGIES = (10, 1_000), (16,), ("open_es",)

WARMUP_GENS = 2
MIN_BLOCK_S = 0.3
MIN_GENS, MAX_GENS = 3, 5000  # a block of tiny generations still lasts MIN_BLOCK_S
BLOCKS = 3
INIT_DIM, INIT_CALLS = 10, 50
SEEDS, SEEDS_DIM, SEEDS_POP = 64, 10, 16
SEEDS_GENS, QUICK_SEEDS_GENS = 1_000, 50
SEEDS_REPEATS = 3

BIG_CELL = 10**7  # d·P from which the target is 3x
TARGET_RATIO, TARGET_BIG_RATIO = 1.0, 3.0
TARGET_INIT_MS = 1.0


# --------------------------------------------------------------------------------------------
# The two libraries, behind one shape: init(key) -> state and generation(state, keys) -> state,
# where keys is an (ask key, tell key) pair; jaxes needs only the first.
# --------------------------------------------------------------------------------------------


def jaxes_strategy(name: str, p: int):
    import jaxes

    if name == "open_es":
        return jaxes.open_es(p, sigma=SIGMA, learning_rate=LEARNING_RATE)
    return getattr(jaxes, name)(p, sigma=SIGMA)


def evosax_strategy(name: str, d: int, p: int):
    """The evosax counterpart and its params; Open_ES as benchmarks/asktell.py builds it."""
    import jax.numpy as jnp
    from evosax import algorithms

    if name == "open_es":
        es = evosax_open_es(d, p)
        return es, es.default_params
    es = getattr(algorithms, EVOSAX_NAMES[name])(population_size=p, solution=jnp.zeros(d))
    # SNES and Sep-CMA-ES take their initial σ from the params, not the constructor.
    return es, es.default_params.replace(std_init=SIGMA)


def jaxes_fitness(x):
    import jax.numpy as jnp

    return -jnp.sum(jnp.square(x))


def evosax_fitness(x):
    import jax.numpy as jnp

    return jnp.sum(jnp.square(x))


class Library:
    """One library's strategy for one cell, as plain functions of (state, keys)."""

    def __init__(self, lib: str, name: str, d: int, p: int):
        import jax.numpy as jnp

        self.lib, self.name, self.d = lib, name, d
        x0 = jnp.ones(d, jnp.float32)
        if lib == "jaxes":
            es = self.es = jaxes_strategy(name, p)
            self.init = lambda key: es.init(key, x0)
            self.ask = es.ask
            self.tell = es.tell
            self.fitness = jaxes_fitness
            self.ask_state_arg, self.tell_state_arg = 1, 0
        else:
            es, params = evosax_strategy(name, d, p)
            self.init = lambda key: es.init(key, x0, params)
            self.ask = lambda key, state: es.ask(key, state, params)
            self.tell = lambda key, population, fitness, state: es.tell(
                key, population, fitness, state, params
            )
            self.fitness = evosax_fitness
            # In evosax's own signatures, ask(key, state, params), tell(key, pop, fit, state,
            # params); the lambdas above keep the state at the same positions.
            self.ask_state_arg, self.tell_state_arg = 1, 3

    def tell_args(self, keys, population, fitness, state) -> tuple:
        """`tell`'s arguments in this library's order."""
        if self.lib == "jaxes":
            return state, fitness
        return keys[1], population, fitness, state

    def full_tell(self, tell, keys, population, fitness, state):
        """`tell` (jitted or not) with the arguments in this library's order; the state only."""
        return tell(*self.tell_args(keys, population, fitness, state))[0]

    def generation(self, state, keys):
        """ask, fitness, tell: the body of the fused style and of the seeds run."""
        import jax

        population, state = self.ask(keys[0], state)
        fitness = jax.vmap(self.fitness)(population)
        return self.full_tell(self.tell, keys, population, fitness, state)

    def separate(self, donate: bool):
        """A generation as three jitted calls from Python, the state donated or not."""
        import jax

        ask = jax.jit(self.ask, donate_argnums=self.ask_state_arg if donate else ())
        tell = jax.jit(self.tell, donate_argnums=self.tell_state_arg if donate else ())
        fitness = jax.jit(jax.vmap(self.fitness))

        def generation(state, keys):
            population, state = ask(keys[0], state)
            return self.full_tell(tell, keys, population, fitness(population), state)

        return generation

    def program(self, style: str):
        """(initial state, generation(state, keys) -> state) for `style`; extra facts."""
        import jax

        if style == "generation_step":
            return self.generation_step()
        state = jax.jit(self.init)(jax.random.key(0))
        if style == "fused":
            return state, jax.jit(self.generation, donate_argnums=0), {}
        return state, self.separate(donate=style == "separate_donated"), {}

    def generation_step(self):
        import jax
        import numpy as np

        from jaxes.step import generation_step
        from jaxes.tasks.functions import function_task
        from jaxes.training import init_state

        task = function_task("sphere", self.d)
        step = jax.jit(generation_step(self.es, task), donate_argnums=0)
        start = np.unique(np.asarray(task.init_params(jax.random.key(0)))).tolist()[:4]
        return init_state(self.es, task, 0), lambda ts, keys: step(ts)[0], {"step_start": start}


# --------------------------------------------------------------------------------------------
# Timing.
# --------------------------------------------------------------------------------------------


def generation_keys(seed: int, n: int) -> list:
    """n (ask, tell) key pairs as separate arrays, made before the clock starts so that no
    key splitting or indexing is timed."""
    import jax

    return [tuple(jax.random.split(k)) for k in jax.random.split(jax.random.key(seed), n)]


class Loop:
    """One library's generations in one style: compiled, warmed up, then timed in blocks."""

    def __init__(self, state, generation):
        import jax

        self.state, self.generation, self.blocks_run = state, generation, 0
        keys = generation_keys(10_000, 1 + WARMUP_GENS)
        start = time.perf_counter()
        self.state = jax.block_until_ready(generation(self.state, keys[0]))
        self.compile_s = time.perf_counter() - start
        # A state whose types change after one generation (a weakly typed scalar made strong)
        # compiles again on the second call: the warm-up generations absorb that.
        self.warmup_s = []
        for k in keys[1:]:
            start = time.perf_counter()
            self.state = jax.block_until_ready(generation(self.state, k))
            self.warmup_s.append(time.perf_counter() - start)
        estimate = max(self.warmup_s[-1], 1e-9)  # the last warm-up sizes the blocks
        self.gens = min(MAX_GENS, max(MIN_GENS, math.ceil(MIN_BLOCK_S / estimate)))

    def block(self) -> float:
        """Times `self.gens` generations; returns seconds per generation."""
        import jax

        self.blocks_run += 1
        keys = generation_keys(self.blocks_run, self.gens)
        start = time.perf_counter()
        for k in keys:
            self.state = jax.block_until_ready(self.generation(self.state, k))
        return (time.perf_counter() - start) / self.gens


def alternate(blocks: dict, rounds: int) -> dict[str, list[float]]:
    """Runs each library's block in turn, `rounds` times, so drift in the machine's load hits
    both alike; returns each library's timings."""
    times = {lib: [] for lib in blocks}
    for _ in range(rounds):
        for lib, block in blocks.items():
            times[lib].append(block())
    return times


def measure_style(libs: dict[str, Library], style: str) -> dict:
    """Both libraries (jaxes only for generation_step) in one style: ms per generation."""
    loops, out = {}, {}
    for lib, library in libs.items():
        if lib == "evosax" and style in JAXES_ONLY:
            continue
        try:
            state, generation, extra = library.program(style)
            loops[lib] = Loop(state, generation)
            out[lib] = extra
        except Exception as error:  # one failure must not lose the rest of the cell
            out[lib] = {"error": f"{type(error).__name__}: {error}"}
    times = alternate({lib: loop.block for lib, loop in loops.items()}, BLOCKS)
    for lib, loop in loops.items():
        out[lib] |= {
            "ms": statistics.median(times[lib]) * 1e3,
            "block_ms": [t * 1e3 for t in times[lib]],
            "gens_per_block": loop.gens,
            "compile_and_first_call_s": loop.compile_s,
            "warmup_s": loop.warmup_s,
        }
    return out


def measure_cell(spec: dict) -> dict:
    """Every style of one (strategy, d, P), both libraries in this process."""
    import gc

    libs = {
        lib: Library(lib, spec["strategy"], spec["d"], spec["P"]) for lib in ("jaxes", "evosax")
    }
    styles = {}
    for style in spec["styles"]:
        styles[style] = measure_style(libs, style)
        gc.collect()  # the last style's states and populations go before the next allocates
        print(f"  {spec['strategy']} d={spec['d']:,} P={spec['P']} {style} done", file=sys.stderr)
    return spec | {"styles": styles}


def ms_per_call(fn, calls: int) -> tuple[float, float]:
    """(compile + first call in s, median ms per call after it over `calls` calls)."""
    import jax

    start = time.perf_counter()
    jax.block_until_ready(fn())
    compile_s = time.perf_counter() - start
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        seconds.append(time.perf_counter() - start)
    return compile_s, statistics.median(seconds) * 1e3


def state_bytes(tree) -> int:
    import jax

    return sum(leaf.nbytes for leaf in jax.tree.leaves(tree))


def measure_init(spec: dict) -> dict:
    """Jitted init of a 10-d state for each strategy and its evosax counterpart."""
    import jax

    rows = []
    for name in spec["strategies"]:
        row = {"strategy": name}
        for lib in ("jaxes", "evosax"):
            init = jax.jit(Library(lib, name, INIT_DIM, SEEDS_POP).init)
            key = jax.random.key(0)
            compile_s, ms = ms_per_call(lambda init=init, key=key: init(key), INIT_CALLS)
            row[lib] = {
                "ms": ms,
                "compile_and_first_call_s": compile_s,
                "state_bytes": state_bytes(init(key)),
            }
        rows.append(row)
    return spec | {"rows": rows, "d": INIT_DIM, "P": SEEDS_POP, "calls": INIT_CALLS}


def seeds_program(library: Library, gens: int):
    """jit(vmap over keys of: init, then lax.scan of `gens` generations)."""
    import jax

    def one_seed(key):
        init_key, run_key = jax.random.split(key)

        def body(state, key):
            return library.generation(state, jax.random.split(key)), None

        state, _ = jax.lax.scan(body, library.init(init_key), jax.random.split(run_key, gens))
        return state

    return jax.jit(jax.vmap(one_seed))


def measure_seeds(spec: dict) -> dict:
    """The 64-seed run, open_es vs Open_ES, the two alternating call by call."""
    import jax

    keys = jax.random.split(jax.random.key(0), SEEDS)
    blocks, out = {}, {}
    for lib in ("jaxes", "evosax"):
        program = seeds_program(Library(lib, "open_es", SEEDS_DIM, SEEDS_POP), spec["gens"])
        start = time.perf_counter()
        final = jax.block_until_ready(program(keys))
        out[lib] = {
            "compile_and_first_call_s": time.perf_counter() - start,
            "state_bytes": state_bytes(final),
        }
        del final  # a jaxes state may hold gigabytes; two alive at once would double that

        def block(program=program):
            start = time.perf_counter()
            jax.block_until_ready(program(keys))  # dropped at once, as `final` above
            return time.perf_counter() - start

        blocks[lib] = block
    times = alternate(blocks, SEEDS_REPEATS)
    for lib in blocks:
        out[lib] |= {"s": statistics.median(times[lib]), "call_s": times[lib]}
    out["ratio"] = out["evosax"]["s"] / out["jaxes"]["s"]
    return spec | out | {"seeds": SEEDS, "d": SEEDS_DIM, "P": SEEDS_POP}


# --------------------------------------------------------------------------------------------
# --parts: where one small generation's time goes, part by part (one child). The grid above
# times whole generations; this says which part of a small one costs what.
# --------------------------------------------------------------------------------------------

PARTS = {"strategy": "snes", "d": 10, "P": 16}
PARTS_WARMUP = 100  # calls (or generations) before each timed block
PARTS_COUNTS = {"calls": 1_000, "gens": 2_000, "rounds": 5}
QUICK_PARTS_COUNTS = {"calls": 100, "gens": 200, "rounds": 1}
# What a top-level instruction of a compiled program launches: a small call pays per launch.
LAUNCHES = (" fusion(", " custom-call(", " copy(", " while(", " conditional(", " dot(", " sort(")


def kernels(compiled) -> int:
    """The kernels a compiled program launches at its top level, whatever their size."""
    text = compiled.as_text()
    entry = text[text.index("\nENTRY") :].split("\n}\n")[0]
    return sum(any(op in line for op in LAUNCHES) for line in entry.splitlines())


def stacked(out: tuple) -> tuple:
    """`(state, info)` with the info's leaves in one float32 array: one output, not many
    (evosax's metrics hold vectors besides scalars)."""
    import jax
    import jax.numpy as jnp

    state, info = out
    return state, jnp.concatenate([jnp.ravel(x).astype(jnp.float32) for x in jax.tree.leaves(info)])


def state_only(out: tuple) -> tuple:
    """`(state,)`: the info left to XLA's dead-code elimination."""
    return (out[0],)


def by_library(times: dict) -> dict:
    """`{(library, name): µs}` as `{library: {name: µs}}`."""
    out = {}
    for (lib, name), us in times.items():
        out.setdefault(lib, {})[name] = us
    return out


def us_per_unit(loops: dict, count: int, rounds: int) -> dict:
    """Median µs per unit of each `loop(n)` (n calls or generations): each warmed up with
    PARTS_WARMUP units, then `count` timed, the loops alternating, `rounds` times."""

    def timed(loop) -> float:
        loop(PARTS_WARMUP)
        start = time.perf_counter()
        loop(count)
        return (time.perf_counter() - start) / count * 1e6

    times = alternate(
        {name: functools.partial(timed, loop) for name, loop in loops.items()}, rounds
    )
    return {name: statistics.median(t) for name, t in times.items()}


def one_generation(library: Library) -> tuple:
    """(state after one generation, key, population, fitness): a state past its first
    generation (evosax's changes type there) and the arguments of a `tell` on it."""
    import jax

    key = jax.random.key(1)
    state = jax.jit(library.generation)(jax.jit(library.init)(jax.random.key(0)), (key, key))
    population, _ = jax.jit(library.ask)(key, state)  # not donated: `state` stays valid
    return state, key, population, jax.vmap(library.fitness)(population)


def tell_program(library: Library) -> dict:
    """`jax.jit(tell)`'s top-level kernels and outputs (each a buffer a call allocates and
    hands back) and the state's leaves."""
    import jax

    state, key, population, fitness = one_generation(library)
    lowered = jax.jit(library.tell).lower(
        *library.tell_args((key, key), population, fitness, state)
    )
    return {
        "kernels": kernels(lowered.compile()),
        "outputs": len(jax.tree.leaves(lowered.out_info)),
        "state_leaves": len(jax.tree.leaves(state)),
    }


def part_calls(library: Library, donate: bool) -> dict:
    """Each part of a generation as `run(n)`: n jitted calls, each blocked on, that carry one
    held state (each call's replaces it, so a donated one is never read again): `ask`,
    `tell`, `tell` returning its state only or its info stacked, and a state round trip
    (what a call costs for the state's leaves alone)."""
    import jax

    held, key, population, fitness = one_generation(library)
    ask = jax.jit(library.ask, donate_argnums=library.ask_state_arg if donate else ())

    def jit_tell(out):
        def tell(*args):
            return out(library.tell(*args))

        return jax.jit(tell, donate_argnums=library.tell_state_arg if donate else ())

    def told(tell):
        return lambda state: tell(*library.tell_args((key, key), population, fitness, state))[0]

    calls = {
        "ask": lambda state: ask(key, state)[1],
        "tell": told(jit_tell(lambda out: out)),
        "tell, state out": told(jit_tell(state_only)),
        "tell, info stacked": told(jit_tell(stacked)),
        "state round trip": jax.jit(lambda state: state, donate_argnums=0 if donate else ()),
    }

    def repeat(call, n: int) -> None:
        nonlocal held
        for _ in range(n):
            held = jax.block_until_ready(call(held))

    return {name: functools.partial(repeat, call) for name, call in calls.items()}


def generation_loops(library: Library, gens: int) -> dict:
    """`run(n)`: n generations of separate jitted calls (ask, fitness, tell) left to run
    asynchronously, blocked on once at the end, with `tell` returning its info, the info
    stacked, or the state only."""
    import jax

    ask, fitness = jax.jit(library.ask), jax.jit(jax.vmap(library.fitness))
    start = jax.jit(library.init)(jax.random.key(0))
    keys = generation_keys(1, max(gens, PARTS_WARMUP))
    tells = {
        "info": jax.jit(library.tell),
        "info stacked": jax.jit(lambda *args: stacked(library.tell(*args))),
        "state only": jax.jit(lambda *args: state_only(library.tell(*args))),
    }

    def loop(tell, n: int) -> None:
        state = start
        for k in keys[:n]:
            population, state = ask(k[0], state)
            state = library.full_tell(tell, k, population, fitness(population), state)
        jax.block_until_ready(state)

    return {name: functools.partial(loop, tell) for name, tell in tells.items()}


def step_loops(library: Library) -> dict:
    """`run(n)`: n calls of jaxes's `generation_step` (sphere, state donated, left to run
    asynchronously) returning its metrics dict, the metrics stacked, or none."""
    import jax

    from jaxes.step import generation_step
    from jaxes.tasks.functions import function_task
    from jaxes.training import init_state

    task = function_task("sphere", library.d)
    step = generation_step(library.es, task)
    steps = {
        "metrics": jax.jit(step, donate_argnums=0),
        "metrics stacked": jax.jit(lambda ts: stacked(step(ts)), donate_argnums=0),
        "no metrics": jax.jit(lambda ts: state_only(step(ts)), donate_argnums=0),
    }

    def loop(fn, n: int) -> None:
        ts = init_state(library.es, task, seed=0)
        for _ in range(n):
            ts = fn(ts)[0]
        jax.block_until_ready(ts)

    return {name: functools.partial(loop, fn) for name, fn in steps.items()}


def measure_parts(spec: dict) -> dict:
    """Each library's `tell` program, its parts per call (not donated, donated) and whole
    generations of separate calls; jaxes's `generation_step` one generation a call."""
    counts = spec["counts"]
    libs = {
        lib: Library(lib, spec["strategy"], spec["d"], spec["P"]) for lib in ("jaxes", "evosax")
    }
    out = {"tell_program": {lib: tell_program(library) for lib, library in libs.items()}}
    for key, donate in (("calls", False), ("calls_donated", True)):
        loops = {
            (lib, part): run
            for lib, library in libs.items()
            for part, run in part_calls(library, donate).items()
        }
        out[key] = by_library(us_per_unit(loops, counts["calls"], counts["rounds"]))
    loops = {
        (lib, name): run
        for lib, library in libs.items()
        for name, run in generation_loops(library, counts["gens"]).items()
    }
    out["generations"] = by_library(us_per_unit(loops, counts["gens"], counts["rounds"]))
    out["generation_step"] = us_per_unit(
        step_loops(libs["jaxes"]), counts["gens"], counts["rounds"]
    )
    return spec | out


def run_child(spec: dict) -> dict:
    # Keep XLA's C++ logging and JAX's Python warnings (e.g. unusable donations) off stderr,
    # which the parent copies to the terminal as progress.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
    quiet_import("evosax", "optax", "jaxes")
    measure = {
        "cell": measure_cell,
        "init": measure_init,
        "seeds": measure_seeds,
        "parts": measure_parts,
    }[spec["kind"]]
    return measure(spec)


# --------------------------------------------------------------------------------------------
# Parent: spawn the children, tabulate, write JSON.
# --------------------------------------------------------------------------------------------


def ratio(cell: dict, style: str) -> float | None:
    """evosax ms / jaxes ms (generation_step: against evosax's fused generation)."""
    styles = cell.get("styles", {})
    base = "fused" if style in JAXES_ONLY else style
    jaxes_ms = styles.get(style, {}).get("jaxes", {}).get("ms")
    evosax_ms = styles.get(base, {}).get("evosax", {}).get("ms")
    return None if jaxes_ms is None or evosax_ms is None else evosax_ms / jaxes_ms


def add_ratios(cell: dict) -> dict:
    for style, result in cell.get("styles", {}).items():
        result["ratio"] = ratio(cell, style)
    return cell


def fmt(value, spec: str = ".3f") -> str:
    return "n/a" if value is None else format(value, spec)


def cell_columns(cell: dict, style: str) -> list[str]:
    if "styles" not in cell:
        return ["error"] + [""] * (2 if style not in JAXES_ONLY else 1)
    result = cell["styles"].get(style, {})
    cols = [fmt(result.get("jaxes", {}).get("ms"))]
    if style not in JAXES_ONLY:
        cols.append(fmt(result.get("evosax", {}).get("ms")))
    return cols + [fmt(result.get("ratio"), ".2f")]


def format_table(cells: list[dict], styles: list[str]) -> str:
    head = ["strategy", "d", "P"]
    for style in styles:
        if style in JAXES_ONLY:
            head += [f"{style} jaxes ms", f"{style} ratio (vs evosax fused)"]
        else:
            head += [f"{style} jaxes ms", f"{style} evosax ms", f"{style} ratio"]
    head.append("CPU taken by others")
    rows = []
    for cell in cells:
        cols = [cell["strategy"], f"{cell['d']:,}", str(cell["P"])]
        for style in styles:
            cols += cell_columns(cell, style)
        cols.append(f"{cell.get('other_cpu_share', 0.0):.0%}")
        rows.append(cols)
    return driver.markdown_table(" | ".join(head), "l" + "r" * (len(head) - 1), rows)


def format_init(init: dict) -> str:
    if "rows" not in init:
        return f"init: {init.get('status', 'error')}: {init.get('error', '')[:300]}"
    lines = [
        f"init of a {init['d']}-d state (median of {init['calls']} calls after compiling):",
        "| strategy | jaxes ms | evosax ms | jaxes state bytes | evosax state bytes | target |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for row in init["rows"]:
        j, e = row["jaxes"], row["evosax"]
        verdict = "met" if j["ms"] <= TARGET_INIT_MS else "NOT met"
        lines.append(
            f"| {row['strategy']} | {j['ms']:.3f} | {e['ms']:.3f} | {j['state_bytes']:,} | "
            f"{e['state_bytes']:,} | <= {TARGET_INIT_MS:g} ms: {verdict} |"
        )
    return "\n".join(lines)


def format_seeds(seeds: dict) -> str:
    if "ratio" not in seeds:
        return f"seeds: {seeds.get('status', 'error')}: {seeds.get('error', '')[:300]}"
    j, e = seeds["jaxes"], seeds["evosax"]
    verdict = "met" if seeds["ratio"] >= TARGET_RATIO else "NOT met"
    return (
        f"{seeds['seeds']}-seed run, open_es vs Open_ES, d={seeds['d']} P={seeds['P']}, "
        f"{seeds['gens']} generations in one jit(vmap(init + scan)) (median of "
        f"{SEEDS_REPEATS} calls):\n"
        f"  jaxes {j['s']:.3f} s, state {j['state_bytes']:,} bytes; "
        f"evosax {e['s']:.3f} s, state {e['state_bytes']:,} bytes; "
        f"ratio {seeds['ratio']:.2f} (target >= {TARGET_RATIO:g}: {verdict})"
    )


def format_parts(parts: dict) -> str:
    """`--parts`' tables: µs per call of each part, per generation of separate calls, per
    `generation_step` call, after the `tell` programs' sizes."""
    if "tell_program" not in parts:
        return f"parts: {parts.get('status', 'error')}: {parts.get('error', '')[:300]}"
    program = parts["tell_program"]
    lines = [
        f"{parts['strategy']}, d = {parts['d']}, P = {parts['P']}: a jitted tell's top-level "
        f"kernels jaxes {program['jaxes']['kernels']}, evosax {program['evosax']['kernels']}; "
        f"its outputs jaxes {program['jaxes']['outputs']}, evosax {program['evosax']['outputs']}; "
        f"state leaves jaxes {program['jaxes']['state_leaves']}, "
        f"evosax {program['evosax']['state_leaves']}",
        "",
    ]
    calls, donated = parts["calls"], parts["calls_donated"]
    rows = [
        [part, *(f"{d[lib][part]:.1f}" for d in (calls, donated) for lib in ("jaxes", "evosax"))]
        for part in calls["jaxes"]
    ]
    head = "µs per call | jaxes | evosax | jaxes, donated | evosax, donated"
    lines += [driver.markdown_table(head, "lrrrr", rows), ""]
    gens = parts["generations"]
    rows = [
        [name, f"{gens['jaxes'][name]:.1f}", f"{gens['evosax'][name]:.1f}"]
        for name in gens["jaxes"]
    ]
    head = "µs per generation of separate calls, tell returning | jaxes | evosax"
    lines += [driver.markdown_table(head, "lrr", rows), ""]
    rows = [[name, f"{us:.1f}"] for name, us in parts["generation_step"].items()]
    lines.append(
        driver.markdown_table("µs per generation_step call, returning | jaxes", "lr", rows)
    )
    return "\n".join(lines)


def summary_line(cells: list[dict], styles: list[str]) -> str:
    """Cells (strategy, d, P, style) below 1.0x, and big cells (d·P >= 1e7) below 3.0x."""
    misses, big_misses, counted, big_counted = {}, {}, 0, 0
    for cell in cells:
        big = cell["d"] * cell["P"] >= BIG_CELL
        for style in styles:
            value = ratio(cell, style)
            if value is None:
                continue
            counted += 1
            big_counted += big
            if value < TARGET_RATIO:
                misses[style] = misses.get(style, 0) + 1
            if big and value < TARGET_BIG_RATIO:
                big_misses[style] = big_misses.get(style, 0) + 1
    return (
        f"misses (ratio < {TARGET_RATIO:g}): {sum(misses.values())} of {counted} cells"
        f"{by_style(misses)}; d·P >= 1e7 below {TARGET_BIG_RATIO:g}: "
        f"{sum(big_misses.values())} of {big_counted}{by_style(big_misses)}"
    )


def by_style(counts: dict[str, int]) -> str:
    return " (" + ", ".join(f"{k} {v}" for k, v in counts.items()) + ")" if counts else ""


def parse_args(argv: list[str]):
    quick = (
        "d in {10, 1000}, P=16, open_es only, a 50-generation seeds run (with --parts: "
        "blocks of 100 calls and 200 generations, one round)"
    )
    parser = driver.parser(__doc__, quick, "regimes", timeout=1800)
    parser.add_argument("--dims", type=int, nargs="+", help=f"dimensions (default {DIMS})")
    parser.add_argument("--pops", type=int, nargs="+", help=f"population sizes (default {POPS})")
    parser.add_argument("--strategies", nargs="+", choices=STRATEGIES, help="default: all")
    parser.add_argument("--styles", nargs="+", choices=STYLES, help="default: all")
    parser.add_argument(
        "--parts",
        action="store_true",
        help="instead of the grid: a small generation part by part, for the first of "
        f"--strategies, --dims and --pops (default {PARTS['strategy']}, d = {PARTS['d']}, "
        f"P = {PARTS['P']}), into regimes_parts.json",
    )
    args = parser.parse_args(argv)
    args.out = args.out or driver.results_path(
        "regimes_parts" if args.parts else "regimes", args.quick
    )
    return args


def plan(args) -> list[dict]:
    """The children to run: one per cell, then init, then the seeds run; with `--parts`, one."""
    if args.parts:
        first = {"strategy": args.strategies, "d": args.dims, "P": args.pops}
        chosen = {k: v[0] if v else PARTS[k] for k, v in first.items()}
        counts = QUICK_PARTS_COUNTS if args.quick else PARTS_COUNTS
        return [{"kind": "parts", **chosen, "counts": counts}]
    dims = args.dims or (QUICK_DIMS if args.quick else DIMS)
    pops = args.pops or (QUICK_POPS if args.quick else POPS)
    strategies = args.strategies or (QUICK_STRATEGIES if args.quick else STRATEGIES)
    styles = [s for s in STYLES if s in (args.styles or STYLES)]
    specs = [
        {"kind": "cell", "strategy": name, "d": d, "P": p, "styles": styles}
        for name in strategies
        for d in dims
        for p in pops
    ]
    specs.append({"kind": "init", "strategies": list(strategies)})
    if "open_es" in strategies:
        specs.append({"kind": "seeds", "gens": QUICK_SEEDS_GENS if args.quick else SEEDS_GENS})
    return specs


def run_parts(args, info: dict, specs: list[dict]) -> None:
    """`--parts`: its one child, its tables, its JSON."""
    rows = spawn_all(__file__, specs, args.timeout, json.dumps, lambda r: r.get("status", "ok"))
    warns = [f"parts child failed: {r['status']}" for r in rows if "status" in r]
    warns += driver.shared_cpu_warnings(rows)
    texts = [format_parts(rows[0])]
    write_results(args.out, info, warns, texts, {"parts": rows[0]}, show_machine=False)


def run(args, argv: list[str]) -> None:
    start = time.perf_counter()
    info = machine_info(argv, ("jax", "jaxlib", "evosax", "optax"), jax_backend=True)
    specs = plan(args)
    if args.parts:
        run_parts(args, info, specs)
        return
    results = spawn_all(__file__, specs, args.timeout, json.dumps, lambda r: r.get("status", "ok"))
    cells = [add_ratios(r) for r in results if r["kind"] == "cell"]
    init = next(r for r in results if r["kind"] == "init")
    seeds = next((r for r in results if r["kind"] == "seeds"), None)
    styles = specs[0]["styles"] if cells else []
    warns = [f"{r['kind']} child failed: {r['status']}" for r in results if "status" in r]
    table = format_table(cells, styles)
    lines = [format_init(init)] + ([format_seeds(seeds)] if seeds else [])
    lines.append(summary_line(cells, styles))
    settings = {
        "sigma": SIGMA,
        "open_es": f"jaxes.open_es(P, sigma={SIGMA}, learning_rate={LEARNING_RATE}) vs "
        f"Open_ES(antithetic, centered ranks, optax.adam({LEARNING_RATE}))",
        "snes": f"jaxes.snes(P, sigma={SIGMA}) vs SNES(std_init={SIGMA})",
        "sep_cma_es": f"jaxes.sep_cma_es(P, sigma={SIGMA}) vs Sep_CMA_ES(std_init={SIGMA})",
        "x0": 1.0,
        "warmup_generations": WARMUP_GENS,
        "block": f">= {MIN_BLOCK_S} s, {MIN_GENS}..{MAX_GENS} generations, median of {BLOCKS}",
        "ratio": "evosax ms / jaxes ms; generation_step against evosax fused",
    }
    payload = {"settings": settings, "cells": cells, "init": init, "seeds": seeds}
    payload |= {"table": table, "summary": lines, "wall_s": time.perf_counter() - start}
    warns += driver.shared_cpu_warnings(results)
    write_results(args.out, info, warns, [table, "\n".join(lines)], payload, show_machine=False)


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, run_child, run)
