"""Sequence models: low-rank ES generations of a transformer against plain batched decoding,
and XLA's memory plan of one generation of a ~1B-parameter bfloat16 transformer.

The model is `jaxes.tasks.transformer.Transformer` (every projection an `nn.Dense`, a
functional KV cache); sequences are decoded by `jaxes.tasks.sequence.generate` (one prefill,
then a `lax.scan` of one-token steps through the cache), greedily. The reward of a sequence is
the share of its generated tokens equal to token 1 (any reward on tokens would do: only the
decoding is timed). A member's fitness is the mean reward over its `--batch` prompts (the same
prompts for every member, as `jaxes.tasks.sequence.sequence_task` draws them).

Part "throughput" (float32 model, `--d-model 256 --layers 4 --heads 4 --vocab 64`, prompts
of 16 tokens, 32 decode steps, 4 prompts per member by default), per population size P:

  plain         `generate` of P x batch distinct prompts by the unperturbed model
                (`model.apply`), one jitted call: the inference an ES generation is compared
                with (the same number of sequences, the same decoding code).
  plain int8    the same with the weight-only int8 model (`jaxes.factored.int8.quantize` of the
                params, run by `jaxes.factored.apply(model, int8 params, None, ...)`): what
                int8 itself costs here.
  lowrank r=R   one ES generation, jitted and donated: `es.ask` ->
                `jaxes.factored.evaluate(es, state, fitness)` (all P members vmapped, each
                `generate`-ing its batch with `factored.apply(model, centre, delta, ...)`, i.e.
                x W + (x A) Bᵀ in every Dense) -> `es.tell`. `jaxes.open_es(P, 0.01,
                noise=jaxes.noise.lowrank(R), track_best=False)`, Adam(1e-3).
  lowrank int8 r=R  the same with `factored.evaluate(..., quantize=True)` (int8 centre).
  task r=1      the same generation as `jaxes.step.generation_step(es, sequence_task(...))`
                (the task's `evaluate_factored`), a cross-check of the hand-written one (at
                the smallest P only).

At each P every program is compiled first (not timed) and called once to warm up; then
`--repeats` rounds call each program once in turn (interleaved, so a change in the shared
machine's load falls on all of them alike), each call ended by `jax.block_until_ready`; the
median wall seconds are reported, with the median process CPU seconds. Throughput fraction
= plain s / ES s (the same P x batch sequences), also in CPU seconds (less disturbed by other
processes on the cores); "eval only" rows (--eval-rows) time `factored.evaluate` alone.
Before the timed part the script may wait (`--quiet-load`, `--quiet-until`) for the machine's
1-minute load average to fall below a threshold; the load is recorded either way.

Targets (this CPU): lowrank r=1 and r=4 throughput fraction >= 50% at P = 16, >= 80% at
P = 256; the int8-base rows are reported against float32 plain inference (no target).

Part "plan": XLA's memory plan of one ES generation of a bfloat16 transformer at P = 256,
compiled and never run: the params abstract (`jax.eval_shape` of `model.init`: float32,
the model built with `dtype=jnp.bfloat16`, so each layer rounds its weight where it reads
it; with `--plan-weights bfloat16` cast to bfloat16, a rounded copy of the master), the
model built with `stream_weights=True` (each layer's weights converted once its input
exists; `--no-plan-stream-weights`: XLA converts them when it likes), the state
abstract (`jax.eval_shape` of `es.init`); `jax.jit(generation,
donate_argnums=0).lower(state, key, prompts).compile().memory_analysis()`. The generation is
ask -> `factored.evaluate(..., chunk_size=--plan-chunk)` (members vmapped a chunk at a time
under `lax.map`) on a short decode (`--plan-batch` prompts of `--plan-prompt` tokens, then
`--plan-steps` tokens) -> tell, with `jaxes.open_es(256, 0.01, noise=jaxes.noise.lowrank(1),
optimizer=jaxes.optim.clipup(0.01), track_best=False)`: the state holds the float32 master
copy (4 bytes/param) and ClipUp's velocity (4 bytes/param). Reported:

  live bytes    argument + output + temp - alias (the donated state counted once)
  beyond        live - master (4 N) - optimizer state (4 N): what a generation needs besides
                the two float32 copies any ES with this optimizer holds; target <= 3 N.
  parts         (unless --no-plan-breakdown) the plans of ask, evaluate and tell compiled
                alone (ask and tell donating the state), to say where the bytes go; a part's
                "beyond" is temp + output - alias, the bytes it needs besides its arguments.
                With --plan-buffers N, each part's N largest temp buffers too (shape, bytes
                per param and the JAX operation that made it, read from the buffer
                assignment XLA dumps to a temporary folder).

Model sizes (vocab 32000, 4 x MLP, learned positions, untied head):
  125M   d_model  768, 12 layers, 12 heads
  350M   d_model 1024, 24 layers, 16 heads
  1B     d_model 2048, 18 layers, 16 heads   (~1.04e9 parameters)
  tiny   d_model   64,  2 layers,  4 heads, vocab 64 (--quick)

Run:
  .venv/bin/python benchmarks/sequence.py                 # both parts (~15 min on 2 cores)
  .venv/bin/python benchmarks/sequence.py --parts plan --plan-sizes 1B
  .venv/bin/python benchmarks/sequence.py --parts plan --plan-sizes 1B --plan-buffers 8
  .venv/bin/python benchmarks/sequence.py --quick         # tiny sizes, P = 8, r = 1 (minutes)
Writes benchmarks/results/sequence.json (sequence_quick.json with --quick, or --out) and
prints tables.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import statistics
import sys
import tempfile
import time

import _buffers
import _driver as driver
from _common import machine_info, write_results

SIGMA = 0.01
LEARNING_RATE = 1e-3
TARGET_TOKEN = 1
TARGETS = {16: 0.5, 256: 0.8}  # P -> throughput fraction target (lowrank, float32 base)
TARGET_BEYOND_BYTES_PER_PARAM = 3.0
PLAN_POPULATION = 256
PLAN_SIZES = {
    "tiny": {"vocab": 64, "d_model": 64, "layers": 2, "heads": 4},
    "125M": {"vocab": 32000, "d_model": 768, "layers": 12, "heads": 12},
    "350M": {"vocab": 32000, "d_model": 1024, "layers": 24, "heads": 16},
    "1B": {"vocab": 32000, "d_model": 2048, "layers": 18, "heads": 16},
}
GIB = 2**30


class Clock:
    """Wall and process-CPU seconds of a block."""

    def __enter__(self):
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.wall0
        self.cpu = time.process_time() - self.cpu0


def log(message: str) -> None:
    print(f"  [sequence] {message}", file=sys.stderr, flush=True)


def reward(prompts, generated):
    """The share of generated tokens equal to TARGET_TOKEN, per sequence."""
    import jax.numpy as jnp

    del prompts
    return jnp.mean((generated == TARGET_TOKEN).astype(jnp.float32), axis=1)


# --------------------------------------------------------------------------------------------
# Part 1: throughput.
# --------------------------------------------------------------------------------------------


def make_model(cfg: dict):
    from jaxes.tasks.transformer import Transformer

    return Transformer(
        vocab=cfg["vocab"],
        d_model=cfg["d_model"],
        heads=cfg["heads"],
        layers=cfg["layers"],
        mlp=4,
        max_len=cfg["prompt"] + cfg["steps"],
    )


def count_params(params) -> int:
    import jax

    return sum(int(x.size) for x in jax.tree.leaves(params))


def time_interleaved(pending: list[tuple], repeats: int) -> list[dict]:
    """Times every `(row, call, args[, donates])` of `pending` in rounds: each called once to
    warm up, then `repeats` rounds calling each once in turn, so a change of the machine's
    load falls on all of them alike. A call that donates its first argument returns its
    replacement first. Per call: the warm-up's seconds, every sample and their medians."""
    import jax

    def once(entry):
        _, call, args, *donates = entry
        out = jax.block_until_ready(call(*args))
        if donates and donates[0]:
            args[0] = out[0]

    warmups, clocks = [], [[] for _ in pending]
    for entry in pending:
        with Clock() as c:
            once(entry)
        warmups.append(c.wall)
        log(f"{entry[0]['method']}: warm-up {c.wall:.2f} s")
    loads = []
    for _ in range(repeats):
        loads.append(os.getloadavg()[0])
        for entry, samples in zip(pending, clocks, strict=True):
            with Clock() as c:
                once(entry)
            samples.append(c)
    return [
        {
            "warmup_s": warm,
            "seconds": [c.wall for c in samples],
            "cpu_seconds": [c.cpu for c in samples],
            "s": statistics.median(c.wall for c in samples),
            "cpu_s": statistics.median(c.cpu for c in samples),
            "round_loads": loads,
        }
        for warm, samples in zip(warmups, clocks, strict=True)
    ]


def record_row(rows: list[dict], base: dict, row: dict) -> None:
    """Appends `base | row` (with the load now) to `rows` and logs it."""
    row = base | row | {"load": os.getloadavg()[0]}
    rows.append(row)
    log(
        f"P={row['P']} {row['method']}: {row['s']:.3f} s (CPU {row['cpu_s']:.2f} s), "
        f"compile {row['compile_s']:.1f} s, load {row['load']:.2f}"
    )


def throughput_rows(cfg: dict, populations: list[int], ranks: list[int], args) -> list[dict]:
    """Every (P, method) of part 1, timed in this process."""
    import jax
    import jax.numpy as jnp

    import jaxes
    from jaxes import factored
    from jaxes.factored import int8
    from jaxes.step import TrainState, generation_step
    from jaxes.tasks.sequence import generate, sequence_task

    model = make_model(cfg)
    steps, batch = cfg["steps"], cfg["batch"]

    def init_params(key):
        return model.init(key, jnp.zeros((1, 1), jnp.int32))["params"]

    params = init_params(jax.random.key(0))
    n_params = count_params(params)
    prompts = jax.random.randint(jax.random.key(1), (batch, cfg["prompt"]), 0, cfg["vocab"])
    rows = []

    def member_fitness(apply_fn, batch_prompts):
        cache = model.init_cache(batch_prompts.shape[0], jnp.float32)
        tokens = generate(apply_fn, cache, batch_prompts, steps)
        return jnp.mean(reward(batch_prompts, tokens))

    def plain(params, all_prompts):
        def apply_fn(tokens, cache, position):
            return model.apply({"params": params}, tokens, cache, position)

        cache = model.init_cache(all_prompts.shape[0], jnp.float32)
        tokens = generate(apply_fn, cache, all_prompts, steps)
        return reward(all_prompts, tokens).reshape(-1, batch).mean(axis=1)

    def plain_int8(qparams, all_prompts):
        def apply_fn(tokens, cache, position):
            return factored.apply(model, qparams, None, tokens, cache, position)

        cache = model.init_cache(all_prompts.shape[0], jnp.float32)
        tokens = generate(apply_fn, cache, all_prompts, steps)
        return reward(all_prompts, tokens).reshape(-1, batch).mean(axis=1)

    def es_functions(es, quantize: bool):
        def fitness(centre, delta):
            def apply_fn(tokens, cache, position):
                return factored.apply(model, centre, delta, tokens, cache, position)

            return member_fitness(apply_fn, prompts)

        def evaluate(state):
            return factored.evaluate(es, state, fitness, quantize=quantize)

        def generation(state, key):
            _, state = es.ask(key, state)
            fit = evaluate(state)
            state, info = es.tell(state, fit)
            return state, info.fitness_mean

        def asked(state, key):
            return es.ask(key, state)[1]

        return evaluate, generation, asked

    for P in populations:
        all_prompts = jax.random.randint(
            jax.random.key(2), (P * batch, cfg["prompt"]), 0, cfg["vocab"]
        )
        base = {"P": P, "sequences": P * batch}
        record = functools.partial(record_row, rows, base)

        pending = []  # (row, compiled, args, donates its first argument), timed together
        with Clock() as c:
            compiled = jax.jit(plain).lower(params, all_prompts).compile()
        pending.append(({"method": "plain", "compile_s": c.wall}, compiled, [params, all_prompts]))

        if args.int8:
            qparams = int8.quantize(params)
            with Clock() as c:
                compiled = jax.jit(plain_int8).lower(qparams, all_prompts).compile()
            row = {"method": "plain int8", "compile_s": c.wall}
            pending.append((row, compiled, [qparams, all_prompts]))

        variants = [(r, False) for r in ranks] + ([(r, True) for r in ranks] if args.int8 else [])
        for rank, quantize in variants:
            es = jaxes.open_es(
                P,
                SIGMA,
                learning_rate=LEARNING_RATE,
                noise=jaxes.noise.lowrank(rank),
                track_best=False,
            )
            evaluate, generation, asked = es_functions(es, quantize)
            name = f"lowrank{' int8' if quantize else ''} r={rank}"
            key = jax.random.key(3)
            state = es.init(jax.random.key(4), params)
            with Clock() as c:
                gen_c = jax.jit(generation, donate_argnums=0).lower(state, key).compile()
            row = {"method": name, "rank": rank, "int8": quantize, "compile_s": c.wall}
            pending.append((row, gen_c, [state, key], True))
            if args.eval_rows:
                asked_state = jax.jit(asked)(es.init(jax.random.key(4), params), key)
                with Clock() as c:
                    eval_c = jax.jit(evaluate).lower(asked_state).compile()
                row = {
                    "method": f"{name} (eval only)",
                    "rank": rank,
                    "int8": quantize,
                    "compile_s": c.wall,
                }
                pending.append((row, eval_c, [asked_state]))

        if args.task_row and min(populations) == P:
            es = jaxes.open_es(
                P, SIGMA, learning_rate=LEARNING_RATE, noise="lowrank", track_best=False
            )
            task = sequence_task(model, init_params, prompts, reward, steps, chunk_size=P)
            ts = TrainState(
                es.init(jax.random.key(4), params),
                task.init(None),
                jax.random.key(5),
                jnp.zeros((), jnp.int32),
            )
            step = generation_step(es, task)
            with Clock() as c:
                step_c = jax.jit(step, donate_argnums=0).lower(ts).compile()
            row = {
                "method": "task r=1 (generation_step)",
                "rank": 1,
                "int8": False,
                "compile_s": c.wall,
            }
            pending.append((row, step_c, [ts], True))

        for row, timing in zip(
            [x[0] for x in pending], time_interleaved(pending, args.repeats), strict=True
        ):
            record(row | timing)

    for row in rows:
        plain_row = next(r for r in rows if r["P"] == row["P"] and r["method"] == "plain")
        row["throughput_fraction"] = plain_row["s"] / row["s"]
        row["throughput_fraction_cpu"] = plain_row["cpu_s"] / row["cpu_s"]
        row["sequences_per_s"] = row["sequences"] / row["s"]
    for row in rows:
        row["params"] = n_params
    return rows


# --------------------------------------------------------------------------------------------
# Part 2: the memory plan.
# --------------------------------------------------------------------------------------------


def plan_row(size: str, args) -> dict:
    """XLA's memory plan of one donated ES generation of the `size` bf16 transformer."""
    import jax
    import jax.numpy as jnp

    import jaxes
    from jaxes import factored
    from jaxes.tasks.sequence import generate

    cfg = PLAN_SIZES[size] | {"prompt": args.plan_prompt, "steps": args.plan_steps}
    model = make_model(cfg).clone(stream_weights=args.plan_stream_weights)
    if args.plan_weights == "float32":
        model = model.clone(dtype=jnp.bfloat16)
    P, chunk, batch = args.plan_population, args.plan_chunk, args.plan_batch

    abstract = jax.eval_shape(
        lambda: model.init(jax.random.key(0), jnp.zeros((1, 1), jnp.int32))["params"]
    )
    if args.plan_weights == "bfloat16":
        abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, jnp.bfloat16), abstract)
    n = count_params(abstract)
    es = jaxes.open_es(
        P,
        SIGMA,
        optimizer=jaxes.optim.clipup(0.01),
        noise=jaxes.noise.lowrank(args.plan_rank),
        track_best=False,
    )
    state = jax.eval_shape(lambda p: es.init(jax.random.key(0), p), abstract)
    key = jax.eval_shape(lambda: jax.random.key(1))
    prompts = jax.ShapeDtypeStruct((batch, cfg["prompt"]), jnp.int32)

    def fitness(centre, delta, prompts):
        def apply_fn(tokens, cache, position):
            return factored.apply(model, centre, delta, tokens, cache, position)

        cache = model.init_cache(prompts.shape[0], jnp.bfloat16)
        tokens = generate(apply_fn, cache, prompts, cfg["steps"])
        return jnp.mean(reward(prompts, tokens))

    def generation(state, key, prompts):
        _, state = es.ask(key, state)
        fit = factored.evaluate(es, state, lambda c, d: fitness(c, d, prompts), chunk_size=chunk)
        state, info = es.tell(state, fit)
        return state, info.fitness_mean

    log(f"plan {size}: {n:,} params, compiling ...")
    with Clock() as c:
        lowered = jax.jit(generation, donate_argnums=0).lower(state, key, prompts)
        compiled = lowered.compile()
    plan = driver.memory_plan(compiled)
    state_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))
    master = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state.params))
    optimizer = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state.opt_state))
    live = plan["peak_minus_alias_bytes"]
    beyond = live - master - optimizer
    parts = {}
    if args.plan_breakdown:
        # The same generation as three programs: where its bytes go.
        asked = jax.eval_shape(lambda s, k: es.ask(k, s)[1], state, key)
        fit = jax.ShapeDtypeStruct((P,), jnp.float32)

        def evaluate(state, prompts):
            return factored.evaluate(
                es, state, lambda c, d: fitness(c, d, prompts), chunk_size=chunk
            )

        def tell(state, fit):
            state, info = es.tell(state, fit)
            return state, info.fitness_mean

        def ask(state, key):
            return es.ask(key, state)[1]

        for part, fn, part_args, donate in (
            ("ask", ask, (state, key), (0,)),
            ("evaluate", evaluate, (asked, prompts), ()),
            ("tell", tell, (asked, fit), (0,)),
        ):
            with Clock() as t:
                part_plan = driver.memory_plan(
                    jax.jit(fn, donate_argnums=donate).lower(*part_args).compile()
                )
            # What the program needs besides its arguments (the state, or the parts of it it
            # reads: jit drops unused ones, so evaluate takes the master copy only, not the
            # optimizer state; plus a key, prompts or fitness): temp + output - alias.
            extra = part_plan["temp_bytes"] + part_plan["output_bytes"] - part_plan["alias_bytes"]
            parts[part] = part_plan | {
                "compile_s": t.wall,
                "beyond_bytes_per_param": extra / n,
                "temp_bytes_per_param": part_plan["temp_bytes"] / n,
            }
            log(f"plan {size} {part}: temp {part_plan['temp_bytes'] / n:.2f} bytes/param")
            if args.plan_buffers and part_plan["temp_bytes"]:
                largest = _buffers.largest_temps(args.plan_dump, part, args.plan_buffers)
                parts[part]["largest_temps"] = largest
                for value in largest:
                    log(
                        f"  {value['bytes'] / n:6.3f} bytes/param  {value['shape']:28s} "
                        f"{value['op_name'] or value['instruction']}"
                    )
    row = {
        "size": size,
        **cfg,
        "mlp": 4,
        "params": n,
        "P": P,
        "chunk": chunk,
        "batch": batch,
        "rank": args.plan_rank,
        "weights": args.plan_weights,
        "stream_weights": args.plan_stream_weights,
        "compile_s": c.wall,
        **plan,
        "state_bytes": state_bytes,
        "master_bytes": master,
        "optimizer_bytes": optimizer,
        "live_bytes": live,
        "beyond_bytes": beyond,
        "beyond_bytes_per_param": beyond / n,
        "temp_bytes_per_param": plan["temp_bytes"] / n,
        "live_gib": live / GIB,
        "live_bytes_per_param": live / n,
        "parts": parts,
    }
    log(
        f"plan {size}: compiled in {c.wall:.1f} s; live {live / GIB:.2f} GiB, "
        f"beyond master+optimizer {beyond / n:.2f} bytes/param"
    )
    return row


# --------------------------------------------------------------------------------------------
# The parent.
# --------------------------------------------------------------------------------------------


def wait_for_quiet(threshold: float, until: str | None) -> dict:
    """Sleeps until the 1-minute load is below `threshold` or it is `until` (HH:MM UTC)."""
    import datetime

    start = time.perf_counter()
    deadline = None
    if until:
        now = datetime.datetime.now(datetime.UTC)
        hour, minute = (int(x) for x in until.split(":"))
        deadline = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    while os.getloadavg()[0] >= threshold:
        if deadline is None or datetime.datetime.now(datetime.UTC) >= deadline:
            break
        time.sleep(15)
    load = os.getloadavg()[0]
    return {
        "threshold": threshold,
        "until_utc": until,
        "waited_s": time.perf_counter() - start,
        "load_1min_at_start": load,
        "quiet": load < threshold,
    }


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def throughput_table(rows: list[dict]) -> str:
    body = [
        [
            str(r["P"]),
            str(r["sequences"]),
            r["method"],
            f"{r['s']:.3f}",
            f"{r['cpu_s']:.2f}",
            f"{r['sequences_per_s']:.0f}",
            pct(r["throughput_fraction"]),
            pct(r["throughput_fraction_cpu"]),
            f"{r['load']:.2f}",
        ]
        for r in rows
    ]
    return driver.markdown_table(
        "P | sequences | method | median s | CPU s | sequences/s | throughput fraction | "
        "fraction (CPU s) | load",
        "rrlrrrrrr",
        body,
    )


def plan_table(rows: list[dict]) -> str:
    body = [
        [
            r["size"],
            f"{r['params']:,}",
            f"{r['d_model']} x {r['layers']}",
            str(r["P"]),
            str(r["chunk"]),
            f"{r['argument_bytes'] / GIB:.2f}",
            f"{r['output_bytes'] / GIB:.2f}",
            f"{r['temp_bytes'] / GIB:.2f}",
            f"{r['alias_bytes'] / GIB:.2f}",
            f"{r['live_gib']:.2f}",
            f"{r['beyond_bytes_per_param']:.2f}",
            *[
                f"{r['parts'][p]['temp_bytes_per_param']:.2f}" if p in r["parts"] else ""
                for p in ("evaluate", "tell")
            ],
            f"{r['compile_s']:.0f}",
        ]
        for r in rows
    ]
    return driver.markdown_table(
        "size | params | d_model x layers | P | chunk | arguments GiB | outputs GiB | "
        "temp GiB | aliased GiB | live GiB | beyond master+opt bytes/param | "
        "evaluate alone: temp bytes/param | tell alone: temp bytes/param | compile s",
        "lrlrrrrrrrrrrr",
        body,
    )


def target_lines(rows: list[dict], plans: list[dict]) -> list[str]:
    lines = []
    for r in rows:
        target = TARGETS.get(r["P"])
        if r["method"].startswith("lowrank") and "eval only" not in r["method"]:
            if r["int8"] or target is None:
                lines.append(
                    f"P={r['P']} {r['method']}: throughput fraction {pct(r['throughput_fraction'])}"
                    " vs float32 plain (no target)"
                )
                continue
            verdict = "met" if r["throughput_fraction"] >= target else "MISSED"
            lines.append(
                f"P={r['P']} {r['method']}: throughput fraction {pct(r['throughput_fraction'])} "
                f"(target >= {pct(target)}): {verdict}"
            )
    for p in plans:
        value = p["beyond_bytes_per_param"]
        verdict = "met" if value <= TARGET_BEYOND_BYTES_PER_PARAM else "MISSED"
        lines.append(
            f"plan {p['size']} ({p['params']:,} params, bf16, {p['weights']} weights, "
            f"P={p['P']}): "
            f"{value:.2f} bytes/param beyond master + optimizer "
            f"(target <= {TARGET_BEYOND_BYTES_PER_PARAM:g}): {verdict}"
        )
    return lines


def parse_args(argv: list[str]):
    quick = "tiny sizes, P = 8, r = 1 (a few minutes on 2 shared cores)"
    parser = driver.parser(__doc__, quick, "sequence", timeout=None)
    parser.add_argument("--parts", nargs="+", choices=("throughput", "plan"))
    parser.add_argument("--populations", type=driver.comma_list(int), help="default 16,256")
    parser.add_argument("--ranks", type=driver.comma_list(int), help="default 1,4")
    parser.add_argument("--repeats", type=int, help="timed calls after a warm-up (default 5)")
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=16, help="prompt tokens")
    parser.add_argument("--steps", type=int, default=32, help="generated tokens")
    parser.add_argument("--batch", type=int, default=4, help="prompts per member")
    parser.add_argument("--no-int8", dest="int8", action="store_false", help="skip int8 rows")
    parser.add_argument("--eval-rows", action="store_true", help="also time evaluation alone")
    parser.add_argument(
        "--no-task-row", dest="task_row", action="store_false", help="skip generation_step"
    )
    parser.add_argument("--quiet-load", type=float, default=0.0, help="wait for load below")
    parser.add_argument("--quiet-until", help="HH:MM UTC: stop waiting then")
    parser.add_argument("--plan-sizes", type=driver.comma_list(str), help="default 125M,350M,1B")
    parser.add_argument("--plan-population", type=int, default=PLAN_POPULATION)
    parser.add_argument("--plan-chunk", type=int, default=16)
    parser.add_argument("--plan-batch", type=int, default=4)
    parser.add_argument("--plan-prompt", type=int, default=16)
    parser.add_argument("--plan-steps", type=int, default=16)
    parser.add_argument("--plan-rank", type=int, default=1)
    parser.add_argument(
        "--plan-weights",
        choices=("bfloat16", "float32"),
        default="float32",
        help="the dtype of the weights the model reads: float32 (the master, each weight "
        "rounded by its layer), or bfloat16 (a rounded copy of the master); it computes "
        "in bfloat16 either way",
    )
    parser.add_argument(
        "--plan-stream-weights",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="build the model with stream_weights=True: each layer's weights are converted "
        "once its input exists, not the whole model's ahead of the decode loop",
    )
    parser.add_argument(
        "--no-plan-breakdown",
        dest="plan_breakdown",
        action="store_false",
        help="skip the plans of ask, evaluate and tell alone",
    )
    parser.add_argument(
        "--plan-buffers",
        type=int,
        default=0,
        metavar="N",
        help="also list each part's N largest temp buffers (from XLA's dumped buffer assignment)",
    )
    args = parser.parse_args(argv)
    if args.plan_buffers < 0:
        parser.error(f"--plan-buffers: expected a count >= 0, got {args.plan_buffers}")
    args.plan_dump = None
    if args.plan_buffers:
        args.plan_dump = tempfile.mkdtemp(prefix="jaxes-plan-")
        _buffers.enable(args.plan_dump)
    args.parts = args.parts or ["throughput", "plan"]
    if args.quick:
        args.d_model, args.layers, args.heads, args.prompt, args.steps = 64, 2, 4, 4, 4
        args.batch = 2
        args.populations = args.populations or [8]
        args.ranks = args.ranks or [1]
        args.repeats = args.repeats or 1
        args.plan_sizes = args.plan_sizes or ["tiny"]
        args.plan_population, args.plan_chunk = 8, 4
    args.populations = args.populations or [16, 256]
    args.ranks = args.ranks or [1, 4]
    args.repeats = args.repeats or 5
    args.plan_sizes = args.plan_sizes or ["125M", "350M", "1B"]
    unknown = [s for s in args.plan_sizes if s not in PLAN_SIZES]
    if unknown:
        parser.error(f"--plan-sizes: unknown {unknown}; choose from {list(PLAN_SIZES)}")
    args.out = args.out or driver.results_path("sequence", args.quick)
    return args


def run(args, argv: list[str]) -> None:
    info = machine_info(argv, ("jax", "jaxlib", "flax", "optax"), jax_backend=True)
    start = time.perf_counter()
    cfg = {
        "vocab": args.vocab,
        "d_model": args.d_model,
        "layers": args.layers,
        "heads": args.heads,
        "mlp": 4,
        "prompt": args.prompt,
        "steps": args.steps,
        "batch": args.batch,
    }
    payload: dict = {"throughput_model": cfg}
    rows, plans, printed, warnings = [], [], [], []
    if "plan" in args.parts:
        plans = [plan_row(size, args) for size in args.plan_sizes]
        payload["plans"] = plans
        one_b = [p for p in plans if p["size"] == "1B"]
        if one_b:  # issue 42's headline number, under the name it asks for
            payload["bytes_per_param_beyond_master"] = one_b[0]["beyond_bytes_per_param"]
        printed.append(plan_table(plans))
    if "throughput" in args.parts:
        quiet = wait_for_quiet(args.quiet_load, args.quiet_until)
        payload["quiet"] = quiet
        if args.quiet_load and not quiet["quiet"]:
            warnings.append(
                f"the 1-minute load was {quiet['load_1min_at_start']:.2f} when the timed part "
                f"started (wanted < {args.quiet_load:g}): other processes shared the 2 cores"
            )
        rows = throughput_rows(cfg, args.populations, args.ranks, args)
        payload["throughput"] = rows
        printed.append(throughput_table(rows))
    targets = target_lines(rows, plans)
    printed.append("\n".join(targets))
    payload["targets"] = targets
    payload["settings"] = {
        "sigma": SIGMA,
        "learning_rate": LEARNING_RATE,
        "reward": f"share of generated tokens == {TARGET_TOKEN}",
        "repeats": args.repeats,
        "warmup_calls": 1,
        "plan_population": args.plan_population,
        "plan_chunk": args.plan_chunk,
        "plan_batch": args.plan_batch,
        "plan_prompt": args.plan_prompt,
        "plan_steps": args.plan_steps,
        "plan_rank": args.plan_rank,
        "plan_weights": args.plan_weights,
        "plan_stream_weights": args.plan_stream_weights,
        "plan_strategy": "jaxes.open_es(P, 0.01, optimizer=jaxes.optim.clipup(0.01), "
        f"noise=jaxes.noise.lowrank(r), track_best=False), {args.plan_weights} params",
        "beyond_formula": "(argument + output + temp - alias - master - optimizer) / params",
        "time_total_s": time.perf_counter() - start,
    }
    write_results(args.out, info, warnings, printed, payload)


def run_and_clean(args, argv: list[str]) -> None:
    """``run``, then the XLA dump ``--plan-buffers`` read (hundreds of MB at 1B) removed."""
    try:
        run(args, argv)
    finally:
        if args.plan_dump:
            shutil.rmtree(args.plan_dump, ignore_errors=True)


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, None, run_and_clean)
