"""Brax: jaxes `open_es` against Brax's own ES trainer, and where jaxes' time goes.

What it measures (all on this machine, in one run):

1. Time to solve `inverted_pendulum` (spring backend, episodes of 200 steps): wall time from
   just before the environment is built until the noise-free evaluation return first reaches
   190, compilation included, for jaxes (`jaxes.training.run` with `target_return=190`, what
   `jaxes train` runs: one dispatch per `EVAL_EVERY` generations, the training block and the
   evaluation compiled side by side) and for `brax.training.agents.es.train` (whose `progress_fn`
   sees the evaluation every `EVAL_EVERY` full-length generations' worth of env steps).
   Every (library, seed) run is its own fresh subprocess, so nothing is compiled in advance;
   the persistent compilation cache is off (checked). Runs are interleaved (jaxes seed 0,
   Brax seed 0, jaxes seed 1, ...) so the noise of a shared CPU falls on both alike.
   jaxes compiles its programs with XLA options of its own on the CPU
   (`jaxes.training.compilation.CPU_OPTIONS`); Brax runs a second time per seed with the same
   options (as `XLA_FLAGS`), so the report also says what they would give Brax.
   Every run twice: on one CPU device (XLA's default) and on one CPU device per core (what
   `jaxes train` uses by default since issue 29: `--xla_force_host_platform_device_count=N` in
   the child's `XLA_FLAGS`, set the same way for both libraries; Brax ES 0.14 splits its
   rollouts over every local device, `jax.shard_map` on a mesh of `jax.local_device_count()`,
   and jaxes its population, `shard_map` too).
   Both use the same ES settings: 64 rollouts per generation (jaxes P=64 members in 32
   antithetic pairs; Brax `population_size=32`, which it doubles into +/- pairs), sigma 0.05,
   Adam(0.03), centered-rank fitness shaping, observation normalisation, a (32, 32) policy,
   8 evaluation episodes with the deterministic policy, and a budget of `--generations`.
   Brax's own defaults (lr 1e-3, std 0.1, raw fitness, no normalisation, (32,)*4) are not
   used: in one exploratory run (seed 0, not recorded in the results) they had not reached
   190 after 2.56 M env steps. Brax samples actions from its tanh-Gaussian head during
   training (its design); jaxes' policy is deterministic.
   Brax's generation count comes from a wrapper on its training env whose `reset` (once per
   generation) ticks a host counter through `jax.debug.callback`.

2. ES overhead of jaxes: seconds per generation over seconds of the rollout alone
   (`task.evaluate`, jitted) on the very populations that `ask` draws from the same states
   with the same keys, so both simulate the same env steps (the rollout stops early once
   every episode has ended). Measured two ways: `EVAL_EVERY` generations fused with
   `lax.scan` (what `jaxes train` runs) against the same `EVAL_EVERY` rollouts in one
   program (`lax.map`), and one jitted `generation_step` against one jitted rollout. Timed at a
   fresh state (short episodes) and after `--overhead-train` generations (long ones);
   median of `--reps` interleaved calls after warm-up. Also ask + tell alone. All of it
   twice, in two processes: with jaxes' XLA options (what training runs) and with XLA's
   defaults.

3. Env steps that the early exit saves on `hopper` (spring, 1000-step episodes, MLP, P=64)
   in generations 0-5 of `open_es`: `info.env_steps` of the chunked rollout against the
   full-length one (`chunk_length=1000`: one chunk, no early exit), with the wall time of
   both on the same population (median of max(3, `--reps` // 5) calls after warm-up).

Run:
  .venv/bin/python benchmarks/brax_vs_brax_es.py            # 3 seeds (about 15 minutes on 2 cores)
  .venv/bin/python benchmarks/brax_vs_brax_es.py --quick    # 1 seed, small budget (smoke test)
  .venv/bin/python benchmarks/brax_vs_brax_es.py --seeds 5
  .venv/bin/python benchmarks/brax_vs_brax_es.py --devices 1  # time to solve on one device only
  .venv/bin/python benchmarks/brax_vs_brax_es.py --parts solve   # part 1 only
Results are printed as tables and written as JSON to `--out` (default
benchmarks/results/brax_vs_brax_es.json, or brax_vs_brax_es_quick.json with `--quick`).
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
import time

import _driver as driver
from _children import quiet_import, spawn
from _common import REPO, machine_info, write_json

ENV = "inverted_pendulum"
BACKEND = "spring"
EPISODE = 200
SOLVED_AT = 190.0
ROLLOUTS = 64  # per generation: jaxes population_size, 2 x Brax population_size
SIGMA = 0.05
LEARNING_RATE = 0.03
HIDDEN = (32, 32)
EVAL_EVERY = 5  # generations between evaluations
EVAL_EPISODES = 8
HOPPER_EPISODE = 1000
HOPPER_P = 64


# --------------------------------------------------------------------------------------------
# Children: each runs in a fresh process and prints one line "RESULT {json}".
# --------------------------------------------------------------------------------------------


def quiet_imports():
    """Imports JAX, Brax and jaxes with their import chatter silenced; starts the backend."""
    jax = quiet_import(
        "brax.envs", "brax.training.agents.es.train", "jaxes.app.train", fresh_compiles=True
    )
    jax.devices()
    return jax


def record_compiles() -> dict:
    """Totals of XLA compilation and MLIR lowering seconds from now on, and each compile > 1 s."""
    import jax

    seen = {"compile_s": 0.0, "lower_s": 0.0, "compiles": 0, "big_compiles": []}

    def listen(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            seen["compile_s"] += duration
            seen["compiles"] += 1
            if duration > 1.0:
                seen["big_compiles"].append([kwargs.get("fun_name", "?"), round(duration, 2)])
        elif event == "/jax/core/compile/jaxpr_to_mlir_module_duration":
            seen["lower_s"] += duration

    jax.monitoring.register_event_duration_secs_listener(listen)
    return seen


def jaxes_config(seed: int, generations: int):
    from jaxes.app.config import TrainConfig

    return TrainConfig.make(
        env=ENV,
        backend=BACKEND,
        episode_length=EPISODE,
        population_size=ROLLOUTS,
        sigma=SIGMA,
        learning_rate=LEARNING_RATE,
        generations=generations,
        seed=seed,
        policy="mlp",
        hidden_sizes=HIDDEN,
        eval_every=EVAL_EVERY,
        eval_episodes=EVAL_EPISODES,
        checkpoint_every=EVAL_EVERY,
        normalize_observations=True,
    )


def solve_jaxes(seed: int, generations: int, devices: int = 1) -> dict:
    """What `jaxes train --target-return 190` runs (`jaxes.training.run`: the training block and
    the evaluation compiled side by side, blocks of EVAL_EVERY generations, metrics written),
    stopped at the first evaluation >= 190; one checkpoint, at the end."""
    jax = quiet_imports()
    import io
    import tempfile

    from jaxes import training
    from jaxes.app.build import build

    compiles = record_compiles()
    start = time.perf_counter()
    strategy, task = build(jaxes_config(seed, generations))
    build_s = time.perf_counter() - start
    evals = []

    def progress(generation, line):
        evals.append(eval_point(generation, start, line["eval_return"], line["total_env_steps"]))

    with tempfile.TemporaryDirectory() as out:
        summary = training.run(
            strategy, task, out, generations=generations, seed=seed, eval_every=EVAL_EVERY,
            checkpoint_every=generations, target_return=SOLVED_AT, progress_fn=progress,
            stream=io.StringIO(), plot=False,
        )  # fmt: skip
    phases = {"build_s": round(build_s, 2), "compile_s": summary["compile_seconds"]}
    seen = {"devices_seen": jax.device_count(), "devices_asked": devices}
    return solve_result(evals, generations) | {"phases": phases, "xla": compiles} | seen


def eval_point(generation: int, start: float, value: float, env_steps: int) -> dict:
    return {
        "generation": generation,
        "t_s": round(time.perf_counter() - start, 3),
        "return": value,
        "env_steps": env_steps,
    }


def solve_result(evals: list[dict], generations: int) -> dict:
    hit = next((e for e in evals if e["return"] >= SOLVED_AT), None)
    ok = hit is not None and hit["generation"] <= generations
    return {
        "solved": ok,
        "wall_s": hit["t_s"] if ok else None,
        "generations": hit["generation"] if ok else None,
        "env_steps": hit["env_steps"] if ok else None,
        "first_eval_s": evals[0]["t_s"] if evals else None,
        "evals": evals,
    }


class _Stop(Exception):
    """Raised from Brax's progress_fn to end training at the solve (or past the budget)."""


def solve_brax(seed: int, generations: int, devices: int = 1) -> dict:
    """`brax.training.agents.es.train` with the same ES settings, stopped at the solve."""
    import contextlib

    jax = quiet_imports()
    from brax import envs
    from brax.envs.base import Wrapper
    from brax.training.agents.es import networks as es_networks
    from brax.training.agents.es import train as brax_es

    counter = {"generations": 0}

    def tick():
        counter["generations"] += 1

    class CountGenerations(Wrapper):
        """Training env only: Brax resets it once per generation (one batched reset per
        device)."""

        def reset(self, rng):
            jax.debug.callback(tick)
            return self.env.reset(rng)

    wrapped = []

    def wrap_env(env, **kwargs):
        env = envs.training.wrap(env, **kwargs)
        env = env if wrapped else CountGenerations(env)  # the first call wraps the training env
        wrapped.append(env)
        return env

    evals = []

    def progress(num_steps, metrics):
        value = float(metrics["eval/episode_reward"])
        # Under shard_map the reset, and so the callback, runs once per local device.
        done = counter["generations"] // jax.local_device_count()
        evals.append(eval_point(done, start, value, int(num_steps)))
        if value >= SOLVED_AT or done >= generations:
            raise _Stop

    compiles = record_compiles()
    start = time.perf_counter()
    env = envs.get_environment(ENV, backend=BACKEND)
    with contextlib.suppress(_Stop):
        brax_es.train(
            environment=env,
            wrap_env_fn=wrap_env,
            num_timesteps=generations * ROLLOUTS * EPISODE,  # >= `generations` generations
            episode_length=EPISODE,
            population_size=ROLLOUTS // 2,  # Brax plays each perturbation as a +/- pair
            learning_rate=LEARNING_RATE,
            perturbation_std=SIGMA,
            fitness_shaping=brax_es.FitnessShaping.CENTERED_RANK,
            center_fitness=False,
            normalize_observations=True,
            num_evals=generations // EVAL_EVERY + 1,  # every EVAL_EVERY full generations' steps
            num_eval_envs=EVAL_EPISODES,
            deterministic_eval=True,
            network_factory=functools.partial(
                es_networks.make_es_networks, hidden_layer_sizes=HIDDEN
            ),
            seed=seed,
            progress_fn=progress,
        )
    before = [e["t_s"] for e in evals if e["generation"] == 0]  # Brax evaluates at step 0 too
    result = solve_result([e for e in evals if e["generation"] > 0], generations)
    seen = {"devices_seen": jax.local_device_count(), "devices_asked": devices}
    return (
        result | {"eval_before_training_s": before[0] if before else None, "xla": compiles} | seen
    )


def time_pair(f, g, reps: int, f_input=None) -> tuple[float, float]:
    """Median seconds of f() and of g(), called alternately `reps` times after 2 warm-ups.

    With `f_input`, each call is f(f_input()), the input made (and ready) before the clock
    starts: a fresh copy of a state that f donates, as the runner donates it.
    """
    import jax

    def call_f():
        if f_input is None:
            return lambda: f()
        arg = jax.block_until_ready(f_input())
        return lambda: f(arg)

    for _ in range(2):
        jax.block_until_ready(call_f()())
        jax.block_until_ready(g())
    tf, tg = [], []
    for _ in range(reps):
        for make, out in ((call_f, tf), (lambda: g, tg)):
            fn = make()
            t = time.perf_counter()
            jax.block_until_ready(fn())
            out.append(time.perf_counter() - t)
    return statistics.median(tf), statistics.median(tg)


def population_inputs(strategy, state):
    """The key, population and task state that `generation_step` would evaluate from `state`."""
    import jax

    _, ask_key, eval_key = jax.random.split(state.key, 3)
    population, _ = strategy.ask(ask_key, state.strategy_state)
    return eval_key, population, state.task_state


def overhead(train_generations: int, reps: int) -> dict:
    """jaxes seconds per generation over seconds of the rollouts alone, same populations."""
    jax = quiet_imports()
    import jax.numpy as jnp

    from jaxes import training
    from jaxes.app.build import build
    from jaxes.step import generation_step

    strategy, task = build(jaxes_config(0, max(train_generations, EVAL_EVERY)))
    state = training.init_state(strategy, task, 0)
    step_fn = generation_step(strategy, task)
    # The state is donated, as the runner donates it: without that, every call also copies
    # the state's 64 MiB noise table (about 10 ms here), which training never does.
    # Its process runs with jaxes' XLA options as XLA_FLAGS (`spawn_child`): every program here is
    # compiled as the runner compiles its own.
    step = jax.jit(step_fn, donate_argnums=0)
    evaluate = jax.jit(task.evaluate)

    @functools.partial(jax.jit, donate_argnums=0)
    def block(s):  # what `jaxes train` runs: EVAL_EVERY generations fused with lax.scan
        return jax.lax.scan(lambda c, _: step_fn(c), s, None, EVAL_EVERY)

    @jax.jit
    def rollouts(inputs):  # the same EVAL_EVERY rollouts, also in one program
        return jax.lax.map(lambda i: task.evaluate(*i), inputs)

    @functools.partial(jax.jit, donate_argnums=0)
    def ask_tell(s):
        population, ss = strategy.ask(s.key, s.strategy_state)
        fitness = jnp.zeros(strategy.population_size) + jax.tree.leaves(population)[0][:, 0]
        return strategy.tell(ss, fitness)

    def copy(s):
        return jax.tree.map(lambda x: x.copy(), s)

    def advance(s, generations):
        return jax.lax.scan(lambda c, _: step_fn(c), s, None, generations)[0]

    rows = []
    for trained in sorted({0, train_generations}):
        state_t = jax.block_until_ready(jax.jit(advance, static_argnums=1)(state, trained))
        states = [state_t]
        for _ in range(EVAL_EVERY - 1):
            states.append(step(copy(states[-1]))[0])
        inputs = [population_inputs(strategy, s) for s in states]
        stacked = jax.tree.map(lambda *x: jnp.stack(x), *inputs)
        _, metrics = block(copy(state_t))
        fitness, _, info = rollouts(stacked)
        assert (metrics["env_steps"] == info.env_steps).all(), "not the same rollouts"
        fresh = functools.partial(copy, state_t)
        t_block, t_rollouts = time_pair(block, lambda x=stacked: rollouts(x), reps, fresh)
        t_step, t_eval = time_pair(step, lambda i=inputs[0]: evaluate(*i), reps, fresh)
        t_asktell, _ = time_pair(ask_tell, lambda: None, reps, fresh)
        rows.append(
            {
                "generation": trained,
                "block_generations": EVAL_EVERY,
                "env_steps": int(jnp.sum(info.env_steps)),
                "alive_steps": int(jnp.sum(info.alive_steps)),
                "full_length_steps": EVAL_EVERY * ROLLOUTS * EPISODE,
                "mean_fitness": float(jnp.mean(fitness)),
                "block_s": t_block,
                "rollouts_s": t_rollouts,
                "ratio": t_block / t_rollouts,
                "single_generation_s": t_step,
                "single_rollout_s": t_eval,
                "single_ratio": t_step / t_eval,
                "ask_tell_s": t_asktell,
            }
        )
    return {"population": ROLLOUTS, "episode_length": EPISODE, "reps": reps, "rows": rows}


def hopper(generations: int, reps: int) -> dict:
    """Early-exit rollouts against one full-length chunk, generations 0..generations-1."""
    jax = quiet_imports()
    import numpy as np

    from jaxes import strategies, training
    from jaxes.step import generation_step
    from jaxes.tasks.brax import brax_task

    def task(chunk_length):
        return brax_task(
            "hopper", BACKEND, HOPPER_EPISODE, "mlp", HIDDEN, chunk_length=chunk_length
        )

    early, full = task(50), task(HOPPER_EPISODE)
    strategy = strategies.open_es(HOPPER_P, SIGMA, learning_rate=LEARNING_RATE)
    state = training.init_state(strategy, early, 0)
    step = jax.jit(generation_step(strategy, early))
    eval_early, eval_full = jax.jit(early.evaluate), jax.jit(full.evaluate)
    compile_s = {}
    for name, fn in (("early_exit", eval_early), ("full_length", eval_full)):
        t = time.perf_counter()
        jax.block_until_ready(fn(*population_inputs(strategy, state)))
        compile_s[name] = round(time.perf_counter() - t, 2)
    rows = []
    for generation in range(generations):
        inputs = population_inputs(strategy, state)
        f_early, _, info = eval_early(*inputs)
        f_full, _, info_full = eval_full(*inputs)
        t_early, t_full = time_pair(
            lambda a=inputs: eval_early(*a), lambda a=inputs: eval_full(*a), reps
        )
        rows.append(
            {
                "generation": generation,
                "env_steps": int(info.env_steps),
                "alive_steps": int(info.alive_steps),
                "full_length_steps": int(info_full.env_steps),
                "step_fraction": int(info.env_steps) / int(info_full.env_steps),
                "early_exit_s": t_early,
                "full_length_s": t_full,
                "time_fraction": t_early / t_full,
                "same_fitness": bool(np.allclose(f_early, f_full, rtol=1e-5, atol=1e-4)),
            }
        )
        state, _ = step(state)
    return {
        "env": "hopper",
        "backend": BACKEND,
        "episode_length": HOPPER_EPISODE,
        "population": HOPPER_P,
        "reps": reps,
        "first_call_s": compile_s,
        "rows": rows,
    }


CHILDREN = {
    "jaxes": solve_jaxes,
    "brax": solve_brax,
    "brax_jaxes_xla": solve_brax,  # the same run, its process given jaxes' XLA options
    "overhead": overhead,
    "overhead_xla_defaults": overhead,  # the same, its process left with XLA's defaults
    "hopper": hopper,
}


def run_child(spec: dict) -> dict:
    kind = spec.pop("kind")
    return CHILDREN[kind](**spec)


# --------------------------------------------------------------------------------------------
# Parent: spawn the children, tabulate, write JSON.
# --------------------------------------------------------------------------------------------


def jaxes_xla_flags() -> str:
    """jaxes' CPU compiler options (`training.compilation.CPU_OPTIONS`) as XLA_FLAGS, for Brax."""
    from jaxes.training import compilation

    return " ".join(f"--{k}={str(v).lower()}" for k, v in compilation.CPU_OPTIONS.items())


def device_count_flag(devices: int) -> str:
    """The XLA flag `jaxes.parallel.use_cpu_cores` sets for `devices` CPU devices."""
    from jaxes.parallel import DEVICE_COUNT_FLAG

    return f"{DEVICE_COUNT_FLAG}={devices}"


def spawn_child(spec: dict, timeout: float) -> dict:
    """Runs one child in a fresh process; notes the CPU share other processes took meanwhile.
    The overhead and hopper children, which jit programs themselves, and Brax's second run get
    jaxes' XLA options as XLA_FLAGS (the jaxes run's runner adds them itself). A time-to-solve
    child with `devices` > 1 gets that many CPU devices (XLA_FLAGS' host device count, as
    `jaxes.parallel.use_cpu_cores` sets it for `jaxes train`), whichever library it runs."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    if spec["kind"] in ("brax_jaxes_xla", "overhead", "hopper"):
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {jaxes_xla_flags()}".strip()
    if spec.get("devices", 1) > 1:
        env["XLA_FLAGS"] = (
            f"{env.get('XLA_FLAGS', '')} {device_count_flag(spec['devices'])}".strip()
        )
    child = spawn(__file__, spec, timeout, env)
    if child.result is None:
        raise RuntimeError(f"child {spec} failed: {child.error}")
    return child.result | {"other_cpu_share": round(child.other_cpu_share, 3)}


def solve_runs(seeds: int, generations: int, timeout: float, device_counts) -> list[dict]:
    """Interleaved: per seed and device count, jaxes, Brax, Brax with jaxes' XLA options
    (seed 0 on 1 device, seed 0 on one per core, seed 1 on 1 device, ...)."""
    runs = []
    for seed in range(seeds):
        for devices in device_counts:
            for lib in ALL_LIBS:
                spec = {"kind": lib, "seed": seed, "generations": generations, "devices": devices}
                result = spawn_child(spec, timeout) | {"library": lib, "seed": seed}
                result["devices"] = devices
                print(f"  {lib:5} seed {seed} {devices} device(s): {fmt_solve(result)}", flush=True)
                runs.append(result)
    return runs


def solve_summary(runs: list[dict]) -> dict:
    per_seed, by_lib = [], {}
    for seed in sorted({r["seed"] for r in runs}):
        j, b = pair(runs, seed)
        ratio = j["wall_s"] / b["wall_s"] if j["solved"] and b["solved"] else None
        per_seed.append({"seed": seed, "jaxes_s": j["wall_s"], "brax_s": b["wall_s"]})
        per_seed[-1]["ratio"] = ratio
        bx = next(r for r in runs if r["seed"] == seed and r["library"] == "brax_jaxes_xla")
        per_seed[-1]["brax_jaxes_xla_s"] = bx["wall_s"]
        solved = j["solved"] and bx["solved"]
        per_seed[-1]["ratio_brax_jaxes_xla"] = j["wall_s"] / bx["wall_s"] if solved else None
    for lib in ALL_LIBS:
        times = [r["wall_s"] for r in runs if r["library"] == lib and r["solved"]]
        gens = [r["generations"] for r in runs if r["library"] == lib and r["solved"]]
        by_lib[lib] = {
            "solved": f"{len(times)}/{sum(r['library'] == lib for r in runs)}",
            "median_s": statistics.median(times) if times else None,
            "median_generations": statistics.median(gens) if gens else None,
        }
    ratios = [x["ratio"] for x in per_seed if x["ratio"] is not None]
    same_xla = [x["ratio_brax_jaxes_xla"] for x in per_seed if x["ratio_brax_jaxes_xla"]]
    medians = [by_lib[x]["median_s"] for x in LIBS]
    return {
        "per_seed": per_seed,
        "by_library": by_lib,
        "median_of_ratios": statistics.median(ratios) if ratios else None,
        "median_of_ratios_brax_jaxes_xla": statistics.median(same_xla) if same_xla else None,
        "ratio_of_medians": medians[0] / medians[1] if None not in medians else None,
        "target": "jaxes wall time <= 0.3 x Brax ES (issue 12)",
    }


LIBS = ("jaxes", "brax")
# Brax ES also run with jaxes' XLA options: how much of the gap is the compiler's settings.
ALL_LIBS = (*LIBS, "brax_jaxes_xla")


def pair(runs: list[dict], seed: int) -> tuple[dict, dict]:
    """The jaxes and the Brax run of one seed."""
    j, b = (next(r for r in runs if r["seed"] == seed and r["library"] == x) for x in LIBS)
    return j, b


def time_split_lines(runs: list[dict]) -> list[str]:
    """Where the time to solve went: compilation share, jaxes' setup, the big programs."""

    def med(values):
        return statistics.median(values) if values else float("nan")

    def programs(lib):
        names = [n for r in runs if r["library"] == lib for n, _ in r["xla"]["big_compiles"]]
        seeds = sum(r["library"] == lib for r in runs)
        return ", ".join(f"{n} x{names.count(n) / seeds:g}" for n in dict.fromkeys(names))

    solved = {lib: [r for r in runs if r["library"] == lib and r["solved"]] for lib in LIBS}
    share = {lib: med([r["xla"]["compile_s"] / r["wall_s"] for r in solved[lib]]) for lib in LIBS}
    jaxes = solved["jaxes"]
    return [
        f"XLA compilation, median share of the time to solve: jaxes {share['jaxes']:.0%}, "
        f"Brax {share['brax']:.0%}",
        f"jaxes median: build {med([r['phases']['build_s'] for r in jaxes]):.1f} s, block and "
        f"evaluation compiled in {med([r['phases']['compile_s'] for r in jaxes]):.1f} s "
        f"(side by side), first block returned at "
        f"{med([r['first_eval_s'] for r in jaxes]):.1f} s",
        f"Brax median: evaluation before training returned at "
        f"{med([r['eval_before_training_s'] for r in solved['brax']]):.1f} s",
        f"compiles > 1 s per run: jaxes {programs('jaxes')}; Brax {programs('brax')}",
    ]


def fmt_solve(r: dict) -> str:
    if not r["solved"]:
        return f"not solved (last eval {r['evals'][-1]['return'] if r['evals'] else None})"
    return (
        f"{r['wall_s']:.1f} s, {r['generations']} generations, first eval at "
        f"{r['first_eval_s']:.1f} s, XLA compile {r['xla']['compile_s']:.1f} s in "
        f"{r['xla']['compiles']} programs (CPU share of others {r['other_cpu_share']:.0%})"
    )


def fmt(x, spec: str) -> str:
    width = "".join(c for c in spec.split(".")[0] if c.isdigit())
    return format("-", f">{width or 1}") if x is None else format(x, spec)


def solve_lines(runs: list[dict], solve: dict, devices: int) -> list[str]:
    """Section 1's table for the runs on `devices` CPU device(s)."""
    lines = [
        f"1. Time to solve {ENV} ({BACKEND}, episode {EPISODE}, return >= {SOLVED_AT:g}), "
        f"{ROLLOUTS} rollouts/generation, compile included, on {devices} CPU device(s)",
        "(s: wall seconds to the solve; xla: of which XLA compilation; gens: generations run;"
        " others: CPU share other processes took during the jaxes / Brax run)",
        f"{'seed':>4}  {'jaxes s':>8}  {'xla':>5}  {'gens':>4}  {'brax s':>8}  {'xla':>5}  "
        f"{'gens':>4}  {'jaxes/brax':>10}  {'others':>9}  {'brax, jaxes XLA s':>17}  "
        f"{'jaxes/that':>10}",
    ]
    for row in solve["per_seed"]:
        j, b = pair(runs, row["seed"])
        lines.append(
            f"{row['seed']:>4}  {fmt(j['wall_s'], '8.1f')}  {j['xla']['compile_s']:5.1f}  "
            f"{fmt(j['generations'], '>4')}  {fmt(b['wall_s'], '8.1f')}  "
            f"{b['xla']['compile_s']:5.1f}  {fmt(b['generations'], '>4')}  "
            f"{fmt(row['ratio'], '10.2f')}  "
            f"{j['other_cpu_share']:4.0%}/{b['other_cpu_share']:4.0%}  "
            f"{fmt(row['brax_jaxes_xla_s'], '17.1f')}  {fmt(row['ratio_brax_jaxes_xla'], '10.2f')}"
        )
    jl, bl = solve["by_library"]["jaxes"], solve["by_library"]["brax"]
    return lines + [
        f"{'med':>4}  {fmt(jl['median_s'], '8.1f')}  {'':5}  {fmt(jl['median_generations'], '>4')}"
        f"  {fmt(bl['median_s'], '8.1f')}  {'':5}  {fmt(bl['median_generations'], '>4')}  "
        f"{fmt(solve['ratio_of_medians'], '10.2f')}",
        f"solved: jaxes {jl['solved']}, brax {bl['solved']}; median of per-seed ratios "
        f"{fmt(solve['median_of_ratios'], '.2f')} (target <= 0.3); against Brax compiled with "
        f"jaxes' XLA options ({jaxes_xla_flags()}): "
        f"{fmt(solve['median_of_ratios_brax_jaxes_xla'], '.2f')}",
        *time_split_lines(runs),
        "",
    ]


def devices_summary(runs: list[dict], device_counts: list[int]) -> dict:
    """Per library, the median time to solve on each device count and the speedup of the most
    devices over one; and jaxes on the most devices against Brax ES on one (as each runs by
    default on a CPU: `jaxes train` one device per core, Brax ES the one device XLA gives)."""
    lo, hi = min(device_counts), max(device_counts)
    out = {"fewest": lo, "most": hi, "by_library": {}}
    for lib in ALL_LIBS:
        med = {}
        for n in (lo, hi):
            times = [r["wall_s"] for r in runs if r["library"] == lib and r["devices"] == n
                     and r["solved"]]  # fmt: skip
            med[n] = statistics.median(times) if times else None
        speedup = med[lo] / med[hi] if None not in med.values() else None
        out["by_library"][lib] = {"median_s": {str(k): v for k, v in med.items()},
                                  "speedup": speedup}  # fmt: skip
    ratios = []
    for seed in sorted({r["seed"] for r in runs}):
        j = next(r for r in runs if (r["seed"], r["devices"], r["library"]) == (seed, hi, "jaxes"))
        b = next(r for r in runs if (r["seed"], r["devices"], r["library"]) == (seed, lo, "brax"))
        if j["solved"] and b["solved"]:
            ratios.append(j["wall_s"] / b["wall_s"])
    out["jaxes_most_over_brax_fewest"] = statistics.median(ratios) if ratios else None
    return out


def format_report(result: dict) -> str:
    solve = result.get("solve") or {"device_counts": []}
    lines = [] if solve["device_counts"] else ["1.: not run (--parts)", ""]
    for n in solve["device_counts"]:
        subset = [r for r in solve["runs"] if r["devices"] == n]
        lines += solve_lines(subset, solve["by_devices"][str(n)], n)
    if len(solve["device_counts"]) > 1:
        d = solve["devices"]
        lo, hi = d["fewest"], d["most"]
        lines.append(
            f"{hi} devices over {lo}: median time to solve "
            + ", ".join(
                f"{lib} {fmt(v['median_s'][str(lo)], '.1f')} -> "
                f"{fmt(v['median_s'][str(hi)], '.1f')} s ({fmt(v['speedup'], '.2f')}x)"
                for lib, v in d["by_library"].items()
            )
            + f"; jaxes on {hi} against Brax on {lo} (each library's CPU default), median of "
            f"per-seed ratios {fmt(d['jaxes_most_over_brax_fewest'], '.2f')}"
        )
        lines.append("")
    if "overhead" not in result:
        return "\n".join(lines + ["2. and 3.: not run (--parts)"])
    lines += [
        f"2. jaxes ES overhead, P={ROLLOUTS}, episode {EPISODE} (target <= 1.05): "
        f"{EVAL_EVERY} generations fused with lax.scan (as `jaxes train` runs them) vs the "
        f"same {EVAL_EVERY} rollouts in one program; and one jitted generation vs one rollout",
        f"{'gen':>4}  {'env steps':>9}  {'alive':>6}  {'block ms':>8}  {'rollouts ms':>11}  "
        f"{'ratio':>6}  {'1 gen ms':>8}  {'1 rollout ms':>12}  {'ratio':>6}  "
        f"{'ask+tell ms':>11}  XLA options",
    ]
    for kind, label in (("overhead", "jaxes'"), ("overhead_xla_defaults", "defaults")):
        for r in result[kind]["rows"]:
            lines.append(
                f"{r['generation']:>4}  {r['env_steps']:>9}  {r['alive_steps']:>6}  "
                f"{r['block_s'] * 1e3:8.2f}  {r['rollouts_s'] * 1e3:11.2f}  {r['ratio']:6.3f}  "
                f"{r['single_generation_s'] * 1e3:8.2f}  {r['single_rollout_s'] * 1e3:12.2f}  "
                f"{r['single_ratio']:6.3f}  {r['ask_tell_s'] * 1e3:11.3f}  {label}"
            )
    if "hopper" not in result:
        return "\n".join(lines + ["3.: not run (--parts)"])
    hop = result["hopper"]
    lines += [
        "",
        f"3. hopper ({BACKEND}, episode {HOPPER_EPISODE}, P={HOPPER_P}): early exit vs one "
        f"full-length chunk; first calls (compile) {hop['first_call_s']}",
        f"{'gen':>4}  {'env steps':>9}  {'full':>7}  {'steps %':>7}  {'early s':>8}  "
        f"{'full s':>7}  {'time %':>6}  same fitness",
    ]
    for r in hop["rows"]:
        lines.append(
            f"{r['generation']:>4}  {r['env_steps']:>9}  {r['full_length_steps']:>7}  "
            f"{r['step_fraction']:7.1%}  {r['early_exit_s']:8.3f}  {r['full_length_s']:7.3f}  "
            f"{r['time_fraction']:6.1%}  {r['same_fitness']}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str]):
    parser = driver.parser(__doc__, "1 seed, small budgets (smoke run)", "brax_vs_brax_es", 1800)
    parser.add_argument("--seeds", type=int, default=None, help="seeds per library (default 3)")
    parser.add_argument("--generations", type=int, default=None, help="budget (default 100)")
    parser.add_argument("--overhead-train", type=int, default=None, help="default 20")
    parser.add_argument("--hopper-generations", type=int, default=None, help="default 6")
    parser.add_argument("--reps", type=int, default=None, help="timed calls (default 30)")
    parser.add_argument(
        "--parts",
        type=driver.comma_list(str),
        default=["solve", "overhead", "hopper"],
        help="which of solve,overhead,hopper to run (default: all three)",
    )
    parser.add_argument(
        "--devices",
        type=driver.comma_list(int),
        default=None,
        help="CPU device counts for the time to solve (default: 1 and one per core)",
    )
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "seeds": 1 if quick else 3,
        "generations": 60 if quick else 100,
        "overhead_train": 10 if quick else 20,
        "hopper_generations": 2 if quick else 6,
        "reps": 5 if quick else 30,
    }
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.devices is None:
        args.devices = sorted({1, os.cpu_count() or 1})
    if args.generations % EVAL_EVERY:
        parser.error(f"--generations must be a multiple of {EVAL_EVERY}")
    args.out = args.out or driver.results_path("brax_vs_brax_es", quick)
    return args


def time_to_solve(args) -> dict:
    """Section 1: every seed on each of `args.devices` CPU device counts, all libraries."""
    counts = args.devices
    print(
        f"1. time to solve, {args.seeds} seed(s), budget {args.generations} generations, "
        f"on {' and '.join(map(str, counts))} CPU device(s)"
    )
    runs = solve_runs(args.seeds, args.generations, args.timeout, counts)
    by_devices = {str(n): solve_summary([r for r in runs if r["devices"] == n]) for n in counts}
    return {
        "runs": runs,
        "device_counts": counts,
        "by_devices": by_devices,
        "summary": by_devices[str(max(counts))],  # what jaxes train now uses on a CPU
        "devices": devices_summary(runs, counts),
    }


def run(args, argv: list[str]) -> None:
    result = {"machine": machine_info(argv, ("jax", "jaxlib", "brax"))}
    result["settings"] = {
        "env": ENV,
        "backend": BACKEND,
        "episode_length": EPISODE,
        "solved_at": SOLVED_AT,
        "rollouts_per_generation": ROLLOUTS,
        "generation_budget": args.generations,
        "seeds": args.seeds,
        "eval_every_generations": EVAL_EVERY,
        "eval_episodes": EVAL_EPISODES,
        "jaxes": f"open_es P={ROLLOUTS} antithetic, sigma={SIGMA}, adam({LEARNING_RATE}), "
        f"centered_rank, normalize_observations, mlp {HIDDEN} tanh (deterministic)",
        "brax": f"es.train population_size={ROLLOUTS // 2} (x2 +/-), perturbation_std={SIGMA}, "
        f"adam({LEARNING_RATE}), CENTERED_RANK, center_fitness=False, normalize_observations, "
        f"MLP {HIDDEN} + tanh-Gaussian head (sampled actions in training), "
        f"deterministic_eval, num_eval_envs={EVAL_EPISODES}, "
        f"num_evals={args.generations // EVAL_EVERY + 1}, "
        f"num_timesteps={args.generations * ROLLOUTS * EPISODE}",
        "jaxes_xla_options": jaxes_xla_flags(),
        "brax_jaxes_xla": "the brax run again, its process started with "
        f"XLA_FLAGS={jaxes_xla_flags()}",
        "persistent_compilation_cache": "off (checked in every child)",
        "devices": f"time to solve on {args.devices} CPU device(s): XLA_FLAGS="
        f"{device_count_flag(max(args.devices))} for more than one, in every library's child",
    }
    if "solve" in args.parts:
        result["solve"] = time_to_solve(args)
    if "overhead" in args.parts:
        print("2. ES overhead")
        for kind in ("overhead", "overhead_xla_defaults"):  # what training runs, then XLA's
            spec = {"kind": kind, "train_generations": args.overhead_train, "reps": args.reps}
            result[kind] = spawn_child(spec, args.timeout)
    if "hopper" in args.parts:
        print("3. hopper early exit")
        reps = max(3, args.reps // 5)
        spec = {"kind": "hopper", "generations": args.hopper_generations, "reps": reps}
        result["hopper"] = spawn_child(spec, args.timeout)
    result["machine"]["load_average_at_end"] = os.getloadavg()
    report = format_report(result)
    print("\n" + report)
    write_json(args.out, result)
    print(f"\nwritten to {os.path.relpath(args.out, REPO)}")


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, run_child, run)
