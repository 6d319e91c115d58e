"""Where jaxes' start-up goes on a Brax task: XLA compile seconds of each piece of a block.

The block `jaxes train` runs first is `EVAL_EVERY` generations fused with `lax.scan` plus a
noise-free evaluation of the centre, compiled as one program. This script compiles, each in a
fresh process with the persistent compilation cache off (so nothing is reused):

- `block`: the whole block (`training.block_runner`), what training compiles;
- `train_scan`: the same block without the evaluation;
- `evaluation`: the evaluation alone (`task.evaluate_policy`);
- `generation`: one generation (`step.generation_step`);
- `rollout`: one population rollout alone (`task.evaluate` on `P` members);

and reports lowering (jaxpr → StableHLO) and XLA compile seconds for each, with the settings
of `benchmarks/brax_vs_brax_es.py` (inverted_pendulum, spring, 200-step episodes, P = 64,
(32, 32) MLP, 8 evaluation episodes). Every piece is compiled twice, in interleaved fresh
processes: with the XLA options the runner compiles with (`jaxes.training.compilation.CPU_OPTIONS`,
given to the child as XLA_FLAGS) and with XLA's defaults; each child also times `--calls`
calls (5 by default) of its program, so the two can be compared at run time too. The
difference `block - train_scan` is what the evaluation adds to the program; `train_scan -
generation` what fusing generations adds.

Run:
  .venv/bin/python benchmarks/compile_profile.py            # writes results/compile_profile.json
  .venv/bin/python benchmarks/compile_profile.py --repeats 3
  .venv/bin/python benchmarks/compile_profile.py --env hopper --pieces train_scan --calls 3
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import _driver as driver
from _children import quiet_import, spawn
from _common import machine_info, write_json
from brax_vs_brax_es import jaxes_xla_flags

PIECES = ("block", "train_scan", "evaluation", "generation", "rollout")
OPTIONS = ("jaxes", "xla_defaults")


def run_child(spec: dict) -> dict:
    return compile_piece(**spec)


def compile_piece(piece: str, env: str | None, calls: int) -> dict:
    """Lowers and compiles `piece` on `env`'s preset (None: brax_vs_brax_es' settings), then
    times `calls` calls of it."""
    jax = quiet_import("brax.envs", "jaxes.app.train", fresh_compiles=True)
    from brax_vs_brax_es import jaxes_config

    from jaxes import training
    from jaxes.app.build import build
    from jaxes.app.config import TrainConfig
    from jaxes.step import generation_step
    from jaxes.strategies import centre

    strategy, task = build(jaxes_config(0, 100) if env is None else TrainConfig.make(env=env))
    state = training.init_state(strategy, task, 0)
    key = training.eval_key(0, 5)
    length = 5

    def train_scan(ts):
        step = generation_step(strategy, task)
        return jax.lax.scan(lambda c, _: step(c), ts, None, length=length)

    def evaluation(ts, key):
        return task.evaluate_policy(key, centre(ts.strategy_state), ts.task_state)

    def rollout(ts, key):
        members = strategy.members(ts.strategy_state, 0, strategy.population_size)
        return task.evaluate(key, members, ts.task_state)

    fns = {
        "block": (training.block_runner(strategy, task, length), (state, key)),
        "train_scan": (jax.jit(train_scan), (state,)),
        "evaluation": (jax.jit(evaluation), (state, key)),
        "generation": (jax.jit(generation_step(strategy, task)), (state,)),
        "rollout": (jax.jit(rollout), (state, key)),
    }
    fn, args = fns[piece]
    start = time.perf_counter()
    lowered = fn.lower(*args)
    lowered_at = time.perf_counter()
    compiled = lowered.compile()
    done = time.perf_counter()
    # A fresh copy of the inputs per call, made before the clock starts: "block" donates them.
    inputs = [jax.tree.map(lambda x: x.copy(), args) for _ in range(calls + 1)]
    jax.block_until_ready(compiled(*inputs.pop()))
    clock = time.perf_counter()
    for _ in range(calls):
        out = compiled(*inputs.pop())
    jax.block_until_ready(out)
    run_s = (time.perf_counter() - clock) / calls
    return {
        "lower_s": round(lowered_at - start, 3),
        "compile_s": round(done - lowered_at, 3),
        "run_s": round(run_s, 4),
    }


def parse_args(argv: list[str]):
    parser = driver.parser(__doc__, results="compile_profile[_ENV]")
    parser.add_argument("--repeats", type=int, default=1, help="fresh processes per piece")
    parser.add_argument("--env", help="an env's preset (`jaxes train --env ENV`) instead")
    parser.add_argument("--pieces", default=",".join(PIECES), help="comma-separated")
    parser.add_argument("--calls", type=int, default=5, help="timed calls per program")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.repeats < 1:
        parser.error("--calls and --repeats: expected ints >= 1")
    args.pieces = args.pieces.split(",")
    unknown = sorted(set(args.pieces) - set(PIECES))
    if unknown:
        parser.error(f"--pieces: unknown {unknown}; allowed: {list(PIECES)}")
    name = "compile_profile" + (f"_{args.env}" if args.env else "")
    args.out = args.out or driver.results_path(name)
    return args


def run(args, argv: list[str]) -> None:
    info = machine_info(argv)
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    rows = {}
    for piece in args.pieces:
        runs = {name: [] for name in OPTIONS}
        for _ in range(args.repeats):
            for name in OPTIONS:
                spec = {"piece": piece, "env": args.env, "calls": args.calls}
                flags = {"jaxes": jaxes_xla_flags(), "xla_defaults": ""}[name]
                done = spawn(__file__, spec, 900, env={**env, "XLA_FLAGS": flags})
                if done.result is None:
                    raise RuntimeError(f"{spec}: the child failed: {done.error}")
                runs[name].append(done.result)
        rows[piece] = {
            name: {
                field: statistics.median(r[field] for r in runs[name])
                for field in ("lower_s", "compile_s", "run_s")
            }
            | {"runs": runs[name]}
            for name in OPTIONS
        }
        ours, xla = rows[piece]["jaxes"], rows[piece]["xla_defaults"]
        print(f"{piece:>12}: lower {ours['lower_s']:5.2f} s, compile {ours['compile_s']:6.2f} s "
              f"(XLA defaults {xla['compile_s']:6.2f} s, ratio "
              f"{ours['compile_s'] / xla['compile_s']:.2f}), run {1e3 * ours['run_s']:7.1f} ms "
              f"(defaults {1e3 * xla['run_s']:7.1f} ms)", flush=True)  # fmt: skip
    write_json(args.out, {"machine": info, "env": args.env or "brax_vs_brax_es", "pieces": rows})


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, run_child, run)
