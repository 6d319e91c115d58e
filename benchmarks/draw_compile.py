"""XLA compile seconds of a scanned block of generations, the persistent cache off.

What the written-out threefry (`jaxes.noise.threefry`) did to compile time: JAX rolls its
threefry loop on the CPU to keep compiles short, so writing the rounds out could have cost
compile time. For open_es, snes, sep_cma_es and pgpe (P = 64) on the sphere task at d = 10
and 100,000, this compiles `lax.scan` of 10 `generation_step`s once each (the first compile of
each program: nothing is reused) and prints the seconds and their total.

Run (compare two commits from two checkouts, or with the runner's CPU option):
  .venv/bin/python benchmarks/draw_compile.py
  XLA_FLAGS=--xla_cpu_use_fusion_emitters=false .venv/bin/python benchmarks/draw_compile.py
"""

from __future__ import annotations

import time

import jax

import jaxes
from jaxes.step import generation_step
from jaxes.tasks.functions import function_task
from jaxes.training import init_state

STRATEGIES = ("open_es", "snes", "sep_cma_es", "pgpe")
DIMS = (10, 100_000)


def compile_seconds(name: str, d: int) -> float:
    es, task = getattr(jaxes, name)(64, 0.1), function_task("sphere", d)
    step = generation_step(es, task)
    lowered = jax.jit(lambda ts: jax.lax.scan(lambda c, _: step(c), ts, None, length=10)).lower(
        init_state(es, task, seed=0)
    )
    start = time.perf_counter()
    lowered.compile()
    return time.perf_counter() - start


def main() -> None:
    jax.config.update("jax_enable_compilation_cache", False)
    total = 0.0
    for name in STRATEGIES:
        for d in DIMS:
            seconds = compile_seconds(name, d)
            total += seconds
            print(f"{name:10s} d = {d:>7,}: {seconds:5.2f} s")
    print(f"total {total:.2f} s")


if __name__ == "__main__":
    main()
