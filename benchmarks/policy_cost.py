"""Control policies' cost per member: own weights, shared weights, and factored low-rank members.

Policy step (`--part step`): one policy decision of P members, each on its own observation
(a batch of P), jitted, median of `--repeats` timed calls after a warm-up:

  own        every member its own weights (`vmap` of the policy over stacked params): what a
             generation with dense noise does;
  shared     one set of weights for all P (`vmap` over observations only): batch inference,
             the ceiling;
  factored   the centre's weights shared plus each member's rank-r term inside every Dense and
             Conv (`jaxes.tasks.control.rollout.factored_members` / `factored_act`, what a
             control task runs with `noise="lowrank"`), r = 1 and 4.

Networks: MinAtar's conv net on Breakout's 10×10×4 grid (`gymnax_task("Breakout-MinAtar",
"conv")`: vbn_conv's weights without its statistics, 205,907 params) and Brax's (32, 32)
tanh MLP at hopper's sizes (11 observations, 3 actions). P = 256 and 768.

End to end (`--part e2e`): simulated env steps per second of whole generations (ask, rollout,
tell; `training.block_runner` without evals), full-rank against r = 1, for Breakout at the
MinAtar preset (P = 256, vbn_conv, gymnax's 1000-step episodes), r = 1 with a 32-observation
VBN reference (the MinAtar sweep's best of round 1), the same with the preset's network
without VBN (conv), and for hopper at its preset (Brax spring, linear policy). Each
setting is timed over `--generations` generations after a compile-and-warm-up block,
alternating settings within a round, median of rounds.

Run:
  .venv/bin/python benchmarks/policy_cost.py            # both parts (~4 min on 2 cores)
  .venv/bin/python benchmarks/policy_cost.py --quick    # P = 256, fewer repeats (~3 min)
Results: benchmarks/results/policy_cost.json (policy_cost_quick.json with --quick).
"""

from __future__ import annotations

import statistics
import sys
import time

import _driver as driver
from _common import machine_info, write_results

RANKS = (1, 4)


def timed(calls: list, repeats: int) -> list[list[float]]:
    """Seconds of each call, ``repeats`` rounds, the calls alternating within a round."""
    out = [[] for _ in calls]
    for _ in range(repeats):
        for call, seconds in zip(calls, out, strict=True):
            start = time.perf_counter()
            call()
            seconds.append(time.perf_counter() - start)
    return out


def networks():
    """(name, task-like setup, observation shape) of the two networks."""
    from jaxes.tasks.control import policies, rollout
    from jaxes.tasks.gymnax import gymnax_task

    breakout = gymnax_task("Breakout-MinAtar", "conv")
    conv_setup = rollout.Rollout(breakout.family, breakout.policy, False, 1, 1, 1, 1)
    mlp = policies.mlp(11, 3, (32, 32))
    mlp_setup = rollout.Rollout(None, mlp, False, 1, 1, 1, 1)
    return [("minatar_conv", conv_setup, (10, 10, 4)), ("brax_mlp_32x32", mlp_setup, (11,))]


def step_part(populations, repeats) -> list[dict]:
    import jax
    import jax.numpy as jnp

    import jaxes
    from jaxes.tasks.control import rollout

    rows = []
    for name, setup, obs_shape in networks():
        policy = setup.policy
        params = policy.init(jax.random.key(0))
        size = sum(x.size for x in jax.tree.leaves(params))
        for members in populations:
            obs = jax.random.uniform(jax.random.key(1), (members,) + obs_shape)
            stacked = jax.tree.map(
                lambda x, m=members: (
                    x[None] + 0.02 * jax.random.normal(jax.random.key(2), (m,) + x.shape)
                ),
                params,
            )
            own = jax.jit(jax.vmap(policy.apply))
            shared = jax.jit(jax.vmap(policy.apply, in_axes=(None, 0)))
            calls = {
                "own": lambda own=own, s=stacked, o=obs: own(s, o),
                "shared": lambda shared=shared, p=params, o=obs: shared(p, o),
            }
            for rank in RANKS:
                es = jaxes.open_es(members, 0.02, noise=jaxes.noise.lowrank(rank))
                state = es.init(jax.random.key(3), params)
                _, state = es.ask(jax.random.key(4), state)
                deltas = jax.vmap(lambda i, es=es, state=state: es.perturbation(state, i))(
                    jnp.arange(members)
                )
                ready = rollout.factored_members(setup, params, deltas, None, None)
                act = jax.jit(jax.vmap(rollout.factored_act(setup, params)))
                calls[f"factored_r{rank}"] = lambda act=act, m=ready, o=obs: act(m, o)
            fns = [lambda f=f: jax.block_until_ready(f()) for f in calls.values()]
            for fn in fns:  # compile and warm up
                fn()
                fn()
            seconds = dict(zip(calls, timed(fns, repeats), strict=True))
            median = {k: statistics.median(v) for k, v in seconds.items()}
            row = {"network": name, "params": size, "members": members}
            row |= {f"{k}_ms": v * 1e3 for k, v in median.items()}
            row |= {
                f"{k}_throughput_vs_shared": median["shared"] / v
                for k, v in median.items()
                if k != "shared"
            }
            rows.append(row)
            print(row, flush=True)
    return rows


def e2e_settings(quick: bool):
    """(label, env, overrides) for the end-to-end rows."""
    return [
        ("breakout_full", "Breakout-MinAtar", {"noise": "table"}),
        ("breakout_lowrank_r1", "Breakout-MinAtar", {"noise": "lowrank", "noise_rank": 1}),
        # The best of the MinAtar sweep's round 1: a quarter of VBN's reference batch.
        (
            "breakout_lowrank_r1_reference32",
            "Breakout-MinAtar",
            {"noise": "lowrank", "noise_rank": 1, "vbn_reference_size": 32},
        ),
        # The preset's network without virtual batch normalisation: the reference pass
        # (128 forwards per member per generation) costs the same in both forms.
        ("breakout_conv_full", "Breakout-MinAtar", {"noise": "table", "policy": "conv"}),
        (
            "breakout_conv_lowrank_r1",
            "Breakout-MinAtar",
            {"noise": "lowrank", "noise_rank": 1, "policy": "conv"},
        ),
        ("hopper_full", "hopper", {"noise": "table"}),
        ("hopper_lowrank_r1", "hopper", {"noise": "lowrank", "noise_rank": 1}),
    ]


def e2e_part(generations: int, rounds: int, quick: bool) -> list[dict]:
    import jax

    from jaxes.app import presets
    from jaxes.app.build import build
    from jaxes.app.config import FIELDS, TrainConfig
    from jaxes.training.programs import block_runner, init_state

    rows, runners = [], []
    for label, env, overrides in e2e_settings(quick):
        settings = {**presets.preset(env), **overrides}
        fields = set(FIELDS)
        config = TrainConfig.make(env=env, **{k: v for k, v in settings.items() if k in fields})
        strategy, task = build(config)
        runner = block_runner(strategy, task, generations, evaluate=False)
        state = init_state(strategy, task, seed=0)
        box = {"state": state}

        def call(runner=runner, box=box):
            box["state"], metrics = runner(box["state"])
            return int(jax.block_until_ready(metrics["env_steps"]).sum())

        call()  # compile and warm up
        runners.append((label, env, config, call))
    seconds = [[] for _ in runners]
    steps = [[] for _ in runners]
    for _ in range(rounds):
        for (_, _, _, call), s, n in zip(runners, seconds, steps, strict=True):
            start = time.perf_counter()
            n.append(call())
            s.append(time.perf_counter() - start)
    for (label, env, config, _), s, n in zip(runners, seconds, steps, strict=True):
        rates = [k / t for k, t in zip(n, s, strict=True)]
        row = {
            "setting": label,
            "env": env,
            "population": config.strategy.population_size,
            "policy": config.env.policy,
            "noise": config.strategy.noise,
            "generations_per_round": generations,
            "env_steps_per_s": statistics.median(rates),
            "rates": rates,
        }
        rows.append(row)
        print(row, flush=True)
    return rows


def parse_args(argv: list[str]):
    parser = driver.parser(__doc__, "P = 256 and fewer repeats", "policy_cost", child=False)
    parser.add_argument("--part", choices=("step", "e2e", "both"), default="both")
    parser.add_argument("--repeats", type=int, default=30, help="timed policy steps per setting")
    parser.add_argument("--generations", type=int, default=5, help="generations per timed block")
    parser.add_argument("--rounds", type=int, default=3, help="timed blocks per setting")
    args = parser.parse_args(argv)
    args.out = args.out or driver.results_path("policy_cost", args.quick)
    return args


def run(args, argv: list[str]) -> None:
    info = machine_info(argv, packages=("jax", "jaxlib", "gymnax", "brax"), jax_backend=True)
    populations = (256,) if args.quick else (256, 768)
    repeats = 10 if args.quick else args.repeats
    results, lines = {}, []
    if args.part in ("step", "both"):
        results["policy_step"] = step_part(populations, repeats)
        for r in results["policy_step"]:
            lines.append(
                f"{r['network']} ({r['params']} params), P = {r['members']}: shared "
                f"{r['shared_ms']:.2f} ms, own {r['own_ms']:.2f} ms "
                f"({r['own_throughput_vs_shared']:.0%} of shared), factored r=1 "
                f"{r['factored_r1_ms']:.2f} ms ({r['factored_r1_throughput_vs_shared']:.0%}), "
                f"r=4 {r['factored_r4_ms']:.2f} ms ({r['factored_r4_throughput_vs_shared']:.0%})"
            )
    if args.part in ("e2e", "both"):
        generations = 2 if args.quick else args.generations
        results["end_to_end"] = e2e_part(generations, 2 if args.quick else args.rounds, args.quick)
        for r in results["end_to_end"]:
            lines.append(
                f"{r['setting']} (P = {r['population']}, {r['policy']}): "
                f"{r['env_steps_per_s']:,.0f} env steps/s"
            )
    write_results(args.out, info, [], lines, results, show_machine=False)


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, None, run)
