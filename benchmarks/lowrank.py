"""Low-rank ES perturbations against plain inference: seconds per generation, XLA's memory plan.

The model: `layers` square dense layers of one width (no biases), h <- tanh(h @ W), applied to
each member's own fixed batch of N(0, 1) inputs (`--batch` rows per member, default 16, drawn
once); the fitness is -mean(output²). Weights start N(0, 1/width). The shapes per size (the
widest of 4096, 2048, 1024, 512, 256 giving at least 3.5 layers, then the nearest count):

  10M   10 x (1024 x 1024)   10,485,760 parameters   P = 16
  50M   12 x (2048 x 2048)   50,331,648              P = 16
  100M   6 x (4096 x 4096)  100,663,296              P = 16
  200M  12 x (4096 x 4096)  201,326,592              P = 8
  1M     4 x ( 512 x  512)    1,048,576 (--quick)    P = 8

P is the same for every method at a size (`--population`; default 16, or 8 where 16 float32
members would exceed 7 GB, so the materialised population stays at 6.4 GB at 100M and 200M).
OpenAI-ES with antithetic pairs, σ = 0.01, Adam(1e-3), `track_best=False`. Methods:

  materialised  (a) full rank, `jaxes.open_es(P, σ, noise="gaussian")`: `population, state =
                es.ask(key, state)`, fitness `jax.vmap(member_fitness)(population, inputs)`
                (P members of d floats in memory), `es.tell`.
  lean          (b) the same strategy, members rebuilt a chunk at a time under its
                `memory_budget` (64 MiB: one member at a time from 10M parameters up):
                `jaxes.evaluation.map_members(es, state, batch_fn, build=...)` with `build`
                returning (member i, i) so that member i reads inputs[i] (`jaxes.evaluate`
                hands `fitness_fn` the params only). The population of `ask` is dead code.
  lowrank r=R   (c) `jaxes.open_es(P, σ, noise=jaxes.noise.lowrank(R))`, never materialised:
                `map_members(..., chunk=P, build=lambda s, i: (es.perturbation(s, i), i))`,
                which is `jaxes.factored.evaluate` passing the member index too, each layer
                `jaxes.factored.matmul(h, W, delta)` = h W + (h A) Bᵀ; `tell` sums the
                factors with one contraction per layer.
  inference     (d) the unperturbed model on the same P x batch inputs: one (P·batch, width)
                batch through the layers, as plainly written. XLA:CPU compiles all its layers
                into one YNN fusion.
  inference_split  the same, plus an exact zero per layer (a column of h times a runtime 0)
                that XLA cannot fuse, so each layer is its own GEMM as in the low-rank forward.
                On this CPU this is the faster reference; the targets are judged against the
                faster of the two.

Measured, per (size, method), in a fresh child process:
  plan          `jax.jit(generation, donate_argnums=0).lower(state, key, inputs).compile()
                .memory_analysis()`: argument, output, temp and alias bytes; "peak" is
                argument + temp + output (the donated state counted twice: in and out), and
                "peak - alias" counts it once. Deterministic. Also the plans of ask, the
                evaluation and tell alone, and the YNN fusions and copies each program runs.
                A method needing more than 90% of MemAvailable is skipped (a row says so).
  split         ask, evaluation and tell as three jitted calls (ask and tell donating the
                state), each ended by `jax.block_until_ready`: 1 warm-up generation, then the
                median of `--repeats` (the eval-only and tell-only seconds).
  generation    one jitted, donated ask + evaluate + tell: 1 warm-up call, then the median of
                `--repeats` calls (seconds per generation, wall clock; also the process's
                CPU seconds, which other processes on the machine disturb less).
  A measurement whose warm-up call took `--max-seconds` (20) or more uses that call as its
  only sample, and one whose warm-up took t only max(1, --max-seconds // t) more calls, so the
  full-rank methods at 100M-200M (tens of seconds a generation on 2 cores) fit the default
  run's time; every row says how many samples it has. Inference is one call (no ES).
  The lean path first times members 0 and 1 alone (the same `lax.map` over one-member
  chunks); when P of them would take more than `--lean-budget` (60) s, the row is an
  estimate, P x that member's seconds + one timed tell, marked "estimated" and "~" (on this
  CPU one member at 100M parameters takes ~20 s inside the loop, see the JSON).
  For low-rank models of P·d <= 2e8 the child also checks the factored fitness against the
  dense members `es.member` builds (`check_max_rel_diff`).

Throughput is member-forward passes per second: P / seconds. Ratios against inference:
  gen/inf   (P / s per generation) / (P / s of inference) = inference s / generation s
  eval/inf  inference s / evaluation-only s
  materialised s/gen / this: full rank (a) s per generation over this row's
  CPU gen/best-inf, CPU eval/best-inf: gen/inf and eval/inf in the processes' CPU seconds,
            against the reference with fewer of them (a check on wall-clock ratios taken
            while other processes share the cores)

Targets (this CPU): lowrank r=1 throughput >= 50% of inference's; full rank (materialised)
s/gen / low-rank s/gen >= 10x at 100M parameters.

Run:
  .venv/bin/python benchmarks/lowrank.py            # 10M, 100M, 200M (~15 min on 2 cores)
  .venv/bin/python benchmarks/lowrank.py --sizes 50M --population 16 --batch 32
  .venv/bin/python benchmarks/lowrank.py --sizes 100M --methods inference_split lowrank
  .venv/bin/python benchmarks/lowrank.py --quick    # 1M parameters (< 1 min)
Writes benchmarks/results/lowrank-<backend>.json (lowrank-<backend>_quick.json with --quick,
or `--out`; backend "cpu" or "gpu", from the children) and prints a table.
"""

from __future__ import annotations

import math
import os
import re
import statistics
import sys
import time

import _driver as driver
from _children import guarded, spawn_all
from _common import machine_info, write_results

SIGMA = 0.01
LEARNING_RATE = 1e-3  # Adam; small against weights of scale 1/sqrt(width)
WIDTHS = (4096, 2048, 1024, 512, 256)
MIN_LAYERS = 3.5
DEFAULT_SIZES = "10M,100M,200M"
QUICK_SIZES = "1M"
QUICK_RANKS = "1,16"
DEFAULT_RANKS = "1,4,16"
DEFAULT_BATCH = 16
MEMORY_HEADROOM = 0.9
POPULATION_BYTES = 7 * 10**9  # the materialised population's bytes that the default P allows
GIB = 2**30
TARGET_LOWRANK_SHARE = 0.5  # lowrank r=1 throughput / inference throughput
TARGET_SPEEDUP = 10.0  # full-rank s/gen / low-rank s/gen at 100M
TARGET_SIZE = 100_000_000


# --------------------------------------------------------------------------------------------
# Configurations.
# --------------------------------------------------------------------------------------------


def parse_size(text: str) -> dict:
    """ "100M" -> {"size": "100M", "n": ..., "width": 4096, "layers": 6, "params": ...}."""
    name = text.strip().upper()
    n = driver.parse_count(name, "10M, 100M")
    width = next((w for w in WIDTHS if n / w**2 >= MIN_LAYERS), WIDTHS[-1])
    layers = max(1, round(n / width**2))
    return {"size": name, "n": n, "width": width, "layers": layers, "params": layers * width**2}


def default_population(params: int) -> int:
    """16, or 8 where 16 float32 members would take more than POPULATION_BYTES."""
    return 16 if 16 * 4 * params <= POPULATION_BYTES else 8


METHODS = ("inference", "inference_split", "lowrank", "lean", "materialised")


def methods_for(ranks: list[int]) -> list[dict]:
    return (
        [{"method": "inference"}, {"method": "inference_split"}]
        + [{"method": "lowrank", "rank": r} for r in ranks]
        + [{"method": "lean"}, {"method": "materialised"}]
    )


def label(r: dict) -> str:
    return f"lowrank r={r['rank']}" if r["method"] == "lowrank" else r["method"]


# --------------------------------------------------------------------------------------------
# Child: one (size, method) in a fresh process.
# --------------------------------------------------------------------------------------------


def progress(spec: dict, message: str) -> None:
    print(f"  [{spec['size']} {label(spec)} P={spec['P']}] {message}", file=sys.stderr, flush=True)


_ITEMSIZE = {"f64": 8, "f32": 4, "s32": 4, "u32": 4, "bf16": 2, "f16": 2, "s8": 1, "u8": 1}


def fusion_count(compiled) -> dict:
    """What the entry computation of a compiled program runs (from `as_text()`): how many YNN
    (GEMM library) fusions, and how many copies of arrays of 1 MiB or more and their bytes."""
    text = compiled.as_text()
    entry = text[text.index("ENTRY") :].splitlines()
    copies, copy_bytes = 0, 0
    for line in entry:
        if " copy(" not in line:
            continue
        match = re.search(r"= (\w+)\[([\d,]*)\]", line)
        if match is None:
            continue
        size = _ITEMSIZE.get(match.group(1), 4) * math.prod(
            int(x) for x in match.group(2).split(",") if x
        )
        if size >= 2**20:
            copies, copy_bytes = copies + 1, copy_bytes + size
    return {
        "ynn_fusions": sum(" fusion(" in x and "ynn_fusion" in x.split("=")[0] for x in entry),
        "big_copies": copies,
        "big_copy_bytes": copy_bytes,
    }


def build_model(spec: dict):
    """(params, inputs, names) from numpy's generator (fast on CPU), seed 0."""
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    width, layers = spec["width"], spec["layers"]
    names = [f"w{i:02d}" for i in range(layers)]
    scale = np.float32(1 / math.sqrt(width))
    params = {}
    for name in names:
        w = rng.standard_normal((width, width), dtype=np.float32)
        w *= scale
        params[name] = jnp.asarray(w)
        del w
    inputs = jnp.asarray(rng.standard_normal((spec["P"], spec["batch"], width), dtype=np.float32))
    return params, inputs, names


def make_functions(spec: dict, names: list[str]):
    """The method's (es, ask_fn, eval_fn, tell_fn, generation); ask_fn(state, key) ->
    (state, what eval_fn reads besides the state: the population or None)."""
    import jax
    import jax.numpy as jnp

    import jaxes
    from jaxes import factored
    from jaxes.evaluation import map_members

    P = spec["P"]

    def forward(params, h):
        for name in names:
            h = jnp.tanh(jnp.matmul(h, params[name]))
        return h

    def member_fitness(params, x):
        return -jnp.mean(jnp.square(forward(params, x)))

    if spec["method"] == "inference":

        def inference(params, inputs):
            p, b, w = inputs.shape
            out = forward(params, inputs.reshape(p * b, w)).reshape(p, b, w)
            return -jnp.mean(jnp.square(out), axis=(1, 2))

        return None, None, inference, None, None

    if spec["method"] == "inference_split":
        # XLA:CPU compiles the plain MLP above into one YNN fusion of all its layers; adding
        # an exact zero that it cannot fuse (a column of h times 0) keeps one GEMM per layer,
        # the structure the low-rank forward compiles to.
        def inference_split(params, inputs):
            h = inputs
            zero = jnp.zeros((), h.dtype) * inputs[0, 0, 0]  # a runtime 0, not a constant
            for name in names:
                h = jnp.tanh(jnp.einsum("pbm,mn->pbn", h, params[name]) + h[:, :, :1] * zero)
            return -jnp.mean(jnp.square(h), axis=(1, 2))

        return None, None, inference_split, None, None

    if spec["method"] == "lowrank":
        es = jaxes.open_es(
            P,
            SIGMA,
            learning_rate=LEARNING_RATE,
            noise=jaxes.noise.lowrank(spec["rank"]),
            track_best=False,
        )

        def lowrank_fitness(centre, delta, x):
            h = x
            for name in names:
                h = jnp.tanh(factored.matmul(h, centre[name], delta[name]))
            return -jnp.mean(jnp.square(h))

        def evaluate(state, extra, inputs):
            del extra
            centre = state.params

            def batch_fn(chunk):
                deltas, idx = chunk
                return jax.vmap(lambda d, i: lowrank_fitness(centre, d, inputs[i]))(deltas, idx)

            out = map_members(
                es, state, batch_fn, chunk=P, build=lambda s, i: (es.perturbation(s, i), i)
            )
            return out.reshape(-1)

    else:
        es = jaxes.open_es(
            P, SIGMA, learning_rate=LEARNING_RATE, noise="gaussian", track_best=False
        )
        if spec["method"] == "lean":

            def lean_members(state, inputs, count=None, chunk=None):
                def batch_fn(members_and_idx):
                    members, idx = members_and_idx
                    return jax.vmap(lambda p, i: member_fitness(p, inputs[i]))(members, idx)

                build = lambda s, i: (es.member(s, i), i)  # noqa: E731
                out = map_members(es, state, batch_fn, count=count, chunk=chunk, build=build)
                return out.reshape(-1)

            def evaluate(state, extra, inputs):
                del extra
                return lean_members(state, inputs)

            # Members 0 and 1 alone, one chunk of one member at a time: the same lax.map as
            # the whole evaluation, to price a member before running all P.
            evaluate.probe = lambda state, inputs: lean_members(state, inputs, 2, 1)

        else:

            def evaluate(state, population, inputs):
                del state
                return jax.vmap(member_fitness)(population, inputs)

    materialised = spec["method"] == "materialised"

    def ask(state, key):
        population, state = es.ask(key, state)
        return state, (population if materialised else None)

    def tell(state, fitness):
        state, info = es.tell(state, fitness)
        return state, info.fitness_mean

    def generation(state, key, inputs):
        state, extra = ask(state, key)
        return tell(state, evaluate(state, extra, inputs))

    return es, ask, evaluate, tell, generation


class Clock:
    """Wall and process-CPU seconds of a block (CPU seconds count this process's threads
    only, so they say what a call costs even while other processes share the cores)."""

    def __enter__(self):
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.wall0
        self.cpu = time.process_time() - self.cpu0


def samples_after(first: float, repeats: int, cap: float) -> int:
    """Timed calls after a warm-up call that took `first` seconds (0: the warm-up is the
    only sample)."""
    if first >= cap:
        return 0
    return min(repeats, max(1, int(cap // first)))


@guarded
def run_child(spec: dict) -> dict:
    """One (size, method): its memory plans, then its timings (see the module docstring)."""
    import jax
    import jax.numpy as jnp

    out = {"status": "ok", "backend": jax.default_backend(), "jax_devices": str(jax.devices())}
    start = time.perf_counter()
    params, inputs, names = build_model(spec)
    out["build_model_s"] = time.perf_counter() - start
    es, ask, evaluate, tell, generation = make_functions(spec, names)
    repeats, cap = spec["repeats"], spec["max_seconds"]
    P = spec["P"]

    if es is None:  # inference: one function, timed like a generation (no ES)
        start = time.perf_counter()
        compiled = jax.jit(evaluate).lower(params, inputs).compile()
        out["compile_s"] = time.perf_counter() - start
        out["plan"] = out["eval_plan"] = driver.memory_plan(compiled)
        out["fusions"] = fusion_count(compiled)
        with Clock() as warm:
            fitness = jax.block_until_ready(compiled(params, inputs))
        clocks = []
        for _ in range(samples_after(warm.wall, repeats, cap)):
            with Clock() as c:
                fitness = jax.block_until_ready(compiled(params, inputs))
            clocks.append(c)
        out["gen_samples"] = len(clocks)
        clocks = clocks or [warm]
        for part in ("gen", "eval"):
            out[f"{part}_seconds"] = [c.wall for c in clocks]
            out[f"{part}_s"] = statistics.median(out[f"{part}_seconds"])
            out[f"{part}_cpu_s"] = statistics.median(c.cpu for c in clocks)
        out["warmup_s"] = warm.wall
        out["fitness_mean"] = float(jnp.mean(fitness))
        out["peak_rss_mib"] = driver.peak_rss_mib()
        return out

    state = es.init(jax.random.key(0), params)
    del params  # the state holds these very arrays (float32 params are not copied)
    keys = jax.random.split(jax.random.key(1), 64)
    abstract = jax.eval_shape(lambda: state)

    # The memory plans (deterministic), before anything of the members' size is allocated.
    start = time.perf_counter()
    gen_c = jax.jit(generation, donate_argnums=0).lower(abstract, keys[0], inputs).compile()
    out["compile_s"] = time.perf_counter() - start
    out["plan"] = driver.memory_plan(gen_c)
    ask_c = jax.jit(ask, donate_argnums=0).lower(abstract, keys[0]).compile()
    asked_abstract, extra_abstract = jax.eval_shape(ask, abstract, keys[0])
    eval_c = jax.jit(evaluate).lower(asked_abstract, extra_abstract, inputs).compile()
    fitness_abstract = jax.ShapeDtypeStruct((P,), jnp.float32)
    tell_c = jax.jit(tell, donate_argnums=0).lower(asked_abstract, fitness_abstract).compile()
    out["eval_plan"] = driver.memory_plan(eval_c)
    out["ask_plan"] = driver.memory_plan(ask_c)
    out["tell_plan"] = driver.memory_plan(tell_c)
    out["fusions"] = {
        "gen": fusion_count(gen_c),
        "eval": fusion_count(eval_c),
        "tell": fusion_count(tell_c),
    }
    out["compile_all_s"] = time.perf_counter() - start
    if spec["method"] == "lean":
        out["eval_chunk"] = es.eval_chunk(state, P)
    needed = max(out["plan"]["peak_minus_alias_bytes"], out["eval_plan"]["peak_bytes"])
    if spec["method"] == "materialised":
        # The split run holds the population (ask's output) and the state while evaluating.
        needed = max(
            needed, out["ask_plan"]["peak_minus_alias_bytes"] + out["eval_plan"]["temp_bytes"]
        )
    available = driver.mem_available_bytes()
    out["mem_available_at_start_gib"] = available / GIB
    out["needed_gib"] = needed / GIB
    progress(
        spec,
        f"compiled in {out['compile_all_s']:.1f} s; generation plan "
        f"{out['plan']['peak_bytes'] / GIB:.2f} GiB, needs {needed / GIB:.2f} GiB",
    )
    if not spec["force"] and needed > MEMORY_HEADROOM * available:
        why = (
            f"skipped: needs {needed / GIB:.1f} GiB (XLA plan), MemAvailable is "
            f"{available / GIB:.1f} GiB (--force runs anyway)"
        )
        progress(spec, why)
        return out | {"status": "skipped", "error": why}

    # The lean path: price two members first; when all P would take longer than
    # --lean-budget seconds, estimate the generation (P x the member's seconds + a timed tell)
    # instead of running it.
    if spec["method"] == "lean" and out["eval_chunk"] == 1 and spec["lean_budget"] > 0:
        probe_c = jax.jit(evaluate.probe).lower(asked_abstract, inputs).compile()
        asked, _ = jax.jit(ask)(state, keys[0])
        with Clock() as c:
            jax.block_until_ready(probe_c(asked, inputs))
        out["probe_member_s"], out["probe_member_cpu_s"] = c.wall / 2, c.cpu / 2
        progress(spec, f"probe: {c.wall / 2:.2f} s per member ({c.cpu / 2:.2f} CPU s)")
        if P * c.wall / 2 > spec["lean_budget"]:
            fitness = jnp.linspace(-1.0, 0.0, P, dtype=jnp.float32)
            with Clock() as t:
                _, fmean = jax.block_until_ready(tell_c(asked, fitness))
            per, per_cpu = c.wall / 2, c.cpu / 2
            out |= {
                "status": "estimated",
                "estimate": f"P x {per:.2f} s per member (members 0-1 timed) + a timed tell",
                "eval_s": P * per,
                "eval_cpu_s": P * per_cpu,
                "tell_s": t.wall,
                "tell_cpu_s": t.cpu,
                "gen_s": P * per + t.wall,
                "gen_cpu_s": P * per_cpu + t.cpu,
                "gen_samples": 0,
                "peak_rss_mib": driver.peak_rss_mib(),
            }
            progress(spec, f"estimated {out['gen_s']:.1f} s/gen (over --lean-budget): not run")
            return out
        del asked

    # Correctness of the factored path (small models only): the same fitness from dense
    # members built by the strategy.
    if spec["method"] == "lowrank" and P * spec["params"] <= 2 * 10**8:
        asked, extra = jax.jit(ask)(state, keys[0])
        got = eval_c(asked, extra, inputs)

        def dense_fitness(s, inputs):
            def one(i, x):
                h = x
                member = es.member(s, i)
                for name in names:
                    h = jnp.tanh(h @ member[name])
                return -jnp.mean(jnp.square(h))

            return jax.lax.map(lambda a: one(*a), (jnp.arange(P), inputs))

        ref = jax.jit(dense_fitness)(asked, inputs)
        scale = float(jnp.max(jnp.abs(ref)))
        out["check_max_abs_diff"] = float(jnp.max(jnp.abs(got - ref)))
        out["check_max_rel_diff"] = out["check_max_abs_diff"] / max(scale, 1e-30)
        out["check_fitness_spread"] = float(jnp.max(ref) - jnp.min(ref))
        del asked, extra, got, ref

    # Split: ask, evaluate, tell as three calls.
    def split_round(state, key):
        clocks = []
        with Clock() as c:
            state, extra = jax.block_until_ready(ask_c(state, key))
        clocks.append(c)
        with Clock() as c:
            fitness = jax.block_until_ready(eval_c(state, extra, inputs))
        clocks.append(c)
        del extra
        with Clock() as c:
            state, fmean = jax.block_until_ready(tell_c(state, fitness))
        clocks.append(c)
        return state, clocks

    k = 1
    state, first = split_round(state, keys[k])
    k += 1
    rounds = []
    n_split = samples_after(sum(c.wall for c in first), repeats, cap)
    for _ in range(n_split):
        state, clocks = split_round(state, keys[k])
        k += 1
        rounds.append(clocks)
    out["split_warmup_s"] = [c.wall for c in first]
    out["split_samples"] = n_split
    rounds = rounds or [first]
    for name, col in (("ask", 0), ("eval", 1), ("tell", 2)):
        out[f"{name}_seconds"] = [r[col].wall for r in rounds]
        out[f"{name}_s"] = statistics.median(out[f"{name}_seconds"])
        out[f"{name}_cpu_s"] = statistics.median(r[col].cpu for r in rounds)
    progress(
        spec,
        f"split: ask {out['ask_s']:.3f} s, eval {out['eval_s']:.3f} s, "
        f"tell {out['tell_s']:.3f} s ({len(rounds)} sample(s))",
    )

    # The fused generation.
    with Clock() as warm:
        state, fmean = jax.block_until_ready(gen_c(state, keys[k], inputs))
    k += 1
    out["fitness_mean_first"] = float(fmean)
    clocks = []
    for _ in range(samples_after(warm.wall, repeats, cap)):
        with Clock() as c:
            state, fmean = jax.block_until_ready(gen_c(state, keys[k], inputs))
        clocks.append(c)
        k += 1
    out["gen_warmup_s"] = warm.wall
    out["gen_samples"] = len(clocks)
    clocks = clocks or [warm]
    out["gen_seconds"] = [c.wall for c in clocks]
    out["gen_s"] = statistics.median(out["gen_seconds"])
    out["gen_cpu_s"] = statistics.median(c.cpu for c in clocks)
    out["fitness_mean_last"] = float(fmean)
    out["generations_run"] = k - 1
    out["peak_rss_mib"] = driver.peak_rss_mib()
    progress(spec, f"generation {out['gen_s']:.3f} s ({len(clocks)} sample(s))")
    return out


# --------------------------------------------------------------------------------------------
# Parent: spawn the children, tabulate, check the targets, write JSON.
# --------------------------------------------------------------------------------------------


REFERENCES = ("inference", "inference_split")


MEASURED = ("ok", "estimated")  # rows with numbers ("estimated": the lean row's estimate)


def find(results: list[dict], size: str, method: str, statuses=("ok",)) -> dict | None:
    for x in results:
        if x["size"] == size and x["method"] == method and x["status"] in statuses:
            return x
    return None


def add_ratios(results: list[dict]) -> None:
    """Throughputs, ratios against both inference references (`_vs_inference`,
    `_vs_inference_split`, and `_vs_best_inference` against the faster of them) and full-rank
    s/gen over this row's (`materialised_over_this`, `lean_over_this`) into each row."""
    for r in results:
        if r["status"] not in MEASURED:
            continue
        r["gen_members_per_s"] = r["P"] / r["gen_s"]
        r["eval_members_per_s"] = r["P"] / r["eval_s"]
        refs = [find(results, r["size"], m) for m in REFERENCES]
        for name, ref in zip(REFERENCES, refs, strict=True):
            if ref is not None:
                r[f"gen_vs_{name}"] = ref["gen_s"] / r["gen_s"]
                r[f"eval_vs_{name}"] = ref["gen_s"] / r["eval_s"]
        best = [ref["gen_s"] for ref in refs if ref is not None]
        if best:
            r["best_inference_s"] = min(best)
            r["gen_vs_best_inference"] = min(best) / r["gen_s"]
            r["eval_vs_best_inference"] = min(best) / r["eval_s"]
            # The same in CPU seconds of the processes (less disturbed by other load).
            best_cpu = min(ref["gen_cpu_s"] for ref in refs if ref is not None)
            r["gen_vs_best_inference_cpu"] = best_cpu / r["gen_cpu_s"]
            r["eval_vs_best_inference_cpu"] = best_cpu / r["eval_cpu_s"]
        for full in ("materialised", "lean"):
            f = find(results, r["size"], full, MEASURED)
            if f is not None and r["method"] not in (*REFERENCES, "materialised"):
                r[f"{full}_over_this"] = f["gen_s"] / r["gen_s"]


def fmt_gib(b) -> str:
    return f"{b / GIB:.2f}"


def fmt_s(s: float) -> str:
    return f"{s:.3g}" if s < 10 else f"{s:.1f}"


def pct(x) -> str:
    if x is None:
        return ""
    return f"{100 * x:.0f}%" if x >= 0.1 else f"{100 * x:.2g}%"


def times(x) -> str:
    return "" if x is None else f"{x:.1f}x"


COLUMNS = (
    "size | layers x width | P | batch | method | s/gen | n | eval s | tell s | CPU s/gen "
    "| CPU eval s | members/s gen | members/s eval | gen/inf | eval/inf | gen/inf-split "
    "| eval/inf-split | CPU gen/best-inf | CPU eval/best-inf | materialised s/gen / this "
    "| peak GiB | peak - alias GiB | eval peak GiB"
)


def format_table(results: list[dict]) -> str:
    return driver.markdown_table(COLUMNS, "llrrl" + "r" * 18, [table_row(r) for r in results])


def table_row(r: dict) -> list[str | None]:
    cells = [r["size"], f"{r['layers']} x {r['width']}", str(r["P"]), str(r["batch"]), label(r)]
    plan = r.get("plan")
    memory = [None] * 3
    if plan:
        peaks = (plan["peak_bytes"], plan["peak_minus_alias_bytes"], r["eval_plan"]["peak_bytes"])
        memory = [fmt_gib(x) for x in peaks]
    if r["status"] not in MEASURED:
        why = r.get("error", "").split("\n", 1)[0][:110]
        return cells + [f"{r['status']}: {why}"] + [None] * 14 + memory
    n = r["gen_samples"] or "1 (warm-up)"
    mark = ""
    if r["status"] == "estimated":
        n, mark = "estimated (2 members timed)", "~"
    ratios = ("inference", "inference_split", "best_inference_cpu")
    return (
        cells
        + [f"{mark}{fmt_s(r['gen_s'])}", str(n), f"{mark}{fmt_s(r['eval_s'])}"]
        + [fmt_s(r["tell_s"]) if "tell_s" in r else ""]
        + [f"{mark}{fmt_s(r['gen_cpu_s'])}", f"{mark}{fmt_s(r['eval_cpu_s'])}"]
        + [f"{r['gen_members_per_s']:.3g}", f"{r['eval_members_per_s']:.3g}"]
        + [pct(r.get(f"{part}_vs_{ref}")) for ref in ratios for part in ("gen", "eval")]
        + [times(r.get("materialised_over_this"))]
        + memory
    )


def target_lines(results: list[dict]) -> list[str]:
    """The two targets, judged against the faster inference reference (the stricter test)."""
    lines = []
    for r in results:
        if r["method"] != "lowrank" or r["rank"] != 1:
            continue
        if r["status"] != "ok" or "gen_vs_best_inference" not in r:
            lines.append(f"{r['size']} lowrank r=1 throughput / inference: n/a ({r['status']})")
            continue
        for what, key in (("whole generation", "gen"), ("evaluation only", "eval")):
            value = r[f"{key}_vs_best_inference"]
            verdict = "met" if value >= TARGET_LOWRANK_SHARE else "MISSED"
            others = ", ".join(
                f"vs {name}: {pct(r[f'{key}_vs_{name}'])}"
                for name in REFERENCES
                if f"{key}_vs_{name}" in r
            )
            cpu = pct(r[f"{key}_vs_best_inference_cpu"])
            lines.append(
                f"{r['size']} lowrank r=1 throughput / best inference ({what}): {pct(value)} "
                f"(target >= {pct(TARGET_LOWRANK_SHARE)}): {verdict} ({others}; "
                f"in CPU seconds: {cpu})"
            )
    for r in results:
        near = abs(r["params"] - TARGET_SIZE) <= 0.1 * TARGET_SIZE
        if not near or r["method"] != "lowrank":
            continue
        value = r.get("materialised_over_this")
        what = f"{r['size']} full-rank materialised s/gen / lowrank r={r['rank']} s/gen"
        if value is None:
            lines.append(f"{what}: n/a (target >= {TARGET_SPEEDUP:g}x)")
            continue
        verdict = "met" if value >= TARGET_SPEEDUP else "MISSED"
        lean = r.get("lean_over_this")
        extra = f" (lean full rank: {lean:.1f}x)" if lean is not None else ""
        if lean is not None and find(results, r["size"], "lean") is None:
            extra = f" (lean full rank, estimated: {lean:.1f}x)"
        lines.append(f"{what}: {value:.1f}x (target >= {TARGET_SPEEDUP:g}x): {verdict}{extra}")
    return lines


def parse_args(argv: list[str]):
    parser = driver.parser(
        __doc__, f"{QUICK_SIZES} parameters (< 1 min)", "lowrank-<backend>", 1800
    )
    parser.add_argument(
        "--sizes",
        type=driver.comma_list(parse_size),
        help=f"comma-separated sizes (default {DEFAULT_SIZES}; --quick: {QUICK_SIZES})",
    )
    parser.add_argument(
        "--ranks",
        type=driver.comma_list(int),
        help=f"low-rank ranks (default {DEFAULT_RANKS}; --quick: {QUICK_RANKS})",
    )
    parser.add_argument(
        "--population",
        type=int,
        help="P at every size (default 16, or 8 where 16 members exceed 7 GB; --quick: 8)",
    )
    parser.add_argument(
        "--batch", type=int, help=f"input rows per member (default {DEFAULT_BATCH}; --quick: 8)"
    )
    parser.add_argument(
        "--repeats", type=int, help="timed calls after the warm-up (default 5; --quick: 2)"
    )
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=20.0,
        help="fewer timed calls when a warm-up call took long (see the module doc; default 20)",
    )
    parser.add_argument(
        "--methods",
        nargs="+",
        choices=METHODS,
        help="only these (default all: " + " ".join(METHODS) + ")",
    )
    parser.add_argument(
        "--lean-budget",
        type=float,
        default=60.0,
        help="estimate the lean row from 2 timed members when all P would take longer than "
        "this many seconds (0: always run it; default 60)",
    )
    parser.add_argument("--force", action="store_true", help="run even when the plan won't fit")
    args = parser.parse_args(argv)
    if args.sizes is None:
        args.sizes = driver.comma_list(parse_size)(QUICK_SIZES if args.quick else DEFAULT_SIZES)
    if args.ranks is None:
        args.ranks = driver.comma_list(int)(QUICK_RANKS if args.quick else DEFAULT_RANKS)
    if args.batch is None:
        args.batch = 8 if args.quick else DEFAULT_BATCH
    if args.repeats is None:
        args.repeats = 2 if args.quick else 5
    for name in ("population", "batch", "repeats"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be >= 1")
    if args.population is not None and args.population % 2:
        parser.error("--population must be even (antithetic pairs)")
    return args


def plan_specs(args) -> list[dict]:
    """The children to run: every method at every size, smallest size first."""
    specs = []
    for size in sorted(args.sizes, key=lambda s: s["params"]):
        p = args.population or (8 if args.quick else default_population(size["params"]))
        for method in methods_for(args.ranks):
            if args.methods and method["method"] not in args.methods:
                continue
            specs.append(
                size
                | method
                | {
                    "P": p,
                    "batch": args.batch,
                    "repeats": args.repeats,
                    "max_seconds": args.max_seconds,
                    "lean_budget": args.lean_budget,
                    "force": args.force,
                }
            )
    return specs


def describe(spec: dict) -> str:
    return (
        f"{spec['size']} ({spec['layers']} x {spec['width']}) {label(spec)} P={spec['P']} "
        f"batch={spec['batch']}"
    )


def child_status(result: dict) -> str:
    if result["status"] in MEASURED:
        status = f"{result['gen_s']:.3f} s/gen, eval {result['eval_s']:.3f} s"
        return status + (" (estimated)" if result["status"] == "estimated" else "")
    error = (result.get("error") or "?").splitlines()[0]
    return f"{result['status']}: {error[:120]}"


def run_warnings(results: list[dict]) -> list[str]:
    """The header's warnings: a shared CPU, and the rows skipped, estimated or failed."""
    warnings = driver.shared_cpu_warnings(results)
    skipped = [f"{r['size']} {label(r)}" for r in results if r["status"] == "skipped"]
    if skipped:
        warnings.append("skipped (memory plan does not fit): " + ", ".join(skipped))
    estimated = [f"{r['size']} {label(r)}" for r in results if r["status"] == "estimated"]
    if estimated:
        warnings.append(
            "estimated from 2 timed members, not run (over --lean-budget): " + ", ".join(estimated)
        )
    failed = [f"{r['size']} {label(r)}" for r in results if r["status"] not in MEASURED]
    failed = [x for x in failed if x not in skipped]
    if failed:
        warnings.append("failed: " + ", ".join(failed))
    return warnings


def run(args, argv: list[str]) -> None:
    info = machine_info(argv, ("jax", "jaxlib", "optax"), jax_backend=False)
    start = time.perf_counter()
    results = spawn_all(__file__, plan_specs(args), args.timeout, describe, child_status)
    add_ratios(results)
    backend = next((r["backend"] for r in results if "backend" in r), "cpu")
    info["jax_backend"] = backend
    warnings = run_warnings(results)
    table = format_table(results)
    targets = target_lines(results)
    if args.out is None:
        args.out = driver.results_path(f"lowrank-{backend}", args.quick)
    settings = {
        "sigma": SIGMA,
        "strategy": f"jaxes.open_es(P, {SIGMA}, learning_rate={LEARNING_RATE}, "
        'noise="gaussian" | noise=jaxes.noise.lowrank(r), track_best=False)',
        "model": "square dense layers, no biases, h <- tanh(h @ W); fitness -mean(out**2)",
        "memory_headroom": MEMORY_HEADROOM,
        "repeats": args.repeats,
        "max_seconds": args.max_seconds,
        "warmup_calls": 1,
        "time_total_s": time.perf_counter() - start,
        "cpu_count": os.cpu_count(),
    }
    printed = [table, "\n".join(targets), *[f"warning: {w}" for w in warnings]]
    payload = {"settings": settings, "results": results, "table": table, "targets": targets}
    write_results(args.out, info, warnings, printed, payload)


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, run_child, run)
