"""XLA's memory plan of one ES generation of a Qwen2.5 `jaxes.llm.CausalLM` (0.5B, 1.5B, 7B
shapes), compiled from a config with no weights and never run.

The model is `CausalLM(from_dict(config), cache_len=prompt + steps, dtype=bfloat16,
stream_weights=...)` (every projection an `nn.Dense`, so members run factored). Its params
are abstract (`jaxes.llm.abstract_params`): the searched ones (every projection, bias and
norm: `jaxes.llm.text_task`'s default) are the float32 master, which the model rounds to
bfloat16 where each layer reads it (`--weights float32`, the default; `--weights bfloat16`
hands the members a bfloat16 copy of the master instead); the embeddings (and an untied head)
are frozen, `--frozen-dtype` (bfloat16, as the checkpoints hold them; a bfloat16 embedding
table as its bits, as `jaxes.llm.text_task` holds it). One generation is
`jaxes.step.generation_step(es, task)` with `task = jaxes.tasks.sequence.sequence_task(model,
..., frozen=frozen, chunk_size=chunk)` (greedy, a token reward), the frozen params an argument
of the jitted step: `jax.jit(step, donate_argnums=0).lower(train_state, frozen)
.compile().memory_analysis()`, with `es = jaxes.open_es(P, 1e-3, optimizer=
jaxes.optim.clipup(0.01), noise=jaxes.noise.lowrank(r), track_best=False)` (the state holds
the float32 master, 4 bytes per searched param, and ClipUp's velocity, 4 more).

Each member decodes `--prompts` prompts of `--prompt` tokens then `--steps` tokens (bfloat16
KV cache of `prompt + steps` slots); members run `--chunk` at a time (`lax.map` over chunks,
`vmap` inside). The default chunk is the largest divisor of P whose members' KV caches fit in
`--kv-budget` bytes (the KV cache of one member: layers x 2 x kv_heads x head_dim x 2 bytes x
prompts x (prompt + steps)).

Reported (N = every parameter, searched and frozen):
  live          argument + output + temp - alias (the donated state counted once)
  beyond        live - master - optimizer state: what a generation needs besides the two
                float32 copies of the searched params, per parameter (as
                benchmarks/sequence.py's `bytes_per_param_beyond_master`)
  per token     (live at chunk c) - (live at chunk `--fit-chunk`, 2), over the tokens the
                extra members hold in flight (members x prompts x (prompt + steps) slots):
                the KV cache and activations, what grows with tokens
  per param     (beyond - per token x tokens in flight at chunk c) / N: the overhead that
                does not grow with tokens (target <= 3)

XLA flags are the defaults (none set) unless XLA_FLAGS is given; it is recorded either way.

Run (each size compiles 2 programs per setting; ~1-3 min each on 2 cores):
  .venv/bin/python benchmarks/llm_plan.py --sizes 0.5B
  .venv/bin/python benchmarks/llm_plan.py --sizes 0.5B,1.5B,7B --stream both
Writes benchmarks/results/llm_plan.json (or --out; `--append` adds the run to its "runs")
and prints a table of all its runs.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import _buffers
import _driver as driver
from _common import PREFILL, machine_info, write_results

GIB = 2**30
TARGET_BYTES_PER_PARAM = 3.0
SIGMA = 1e-3
_QWEN25 = {
    "model_type": "qwen2",
    "hidden_act": "silu",
    "rope_theta": 1e6,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "bfloat16",
}
CONFIGS = {
    "0.5B": _QWEN25
    | {
        "hidden_size": 896,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "intermediate_size": 4864,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "head_dim": 64,
    },
    "1.5B": _QWEN25
    | {
        "hidden_size": 1536,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "intermediate_size": 8960,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
    "7B": _QWEN25
    | {
        "hidden_size": 3584,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "intermediate_size": 18944,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
    },
    "tiny": _QWEN25
    | {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "vocab_size": 456,
        "tie_word_embeddings": True,
    },
}


def log(message: str) -> None:
    print(f"  [llm_plan] {message}", file=sys.stderr, flush=True)


def nbytes(tree) -> int:
    import jax

    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))


def kv_bytes_per_slot(config) -> int:
    """bfloat16 keys and values of one token position, every layer."""
    return config.layers * 2 * config.kv_heads * config.head_dim * 2


def build(size: str, args, stream: bool):
    """The jitted generation and its abstract arguments for `size`."""
    import jax
    import jax.numpy as jnp

    import jaxes
    from jaxes.llm import CausalLM, abstract_params, from_dict
    from jaxes.llm.text_task import split_params
    from jaxes.step import TrainState, generation_step
    from jaxes.tasks.layers import embedding_bits
    from jaxes.tasks.sequence import sequence_task

    config = from_dict(CONFIGS[size])
    model = CausalLM(config, args.prompt + args.steps, jnp.bfloat16, stream)
    params = abstract_params(model, jnp.float32)
    searched, frozen = split_params(params, False)
    frozen_dtype = jnp.dtype(args.frozen_dtype)
    frozen = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, frozen_dtype), frozen)
    frozen = jax.eval_shape(embedding_bits, frozen)  # as jaxes.llm.text_task holds them
    if args.weights == "bfloat16":
        searched = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, jnp.bfloat16), searched)
    es = jaxes.open_es(
        args.population,
        SIGMA,
        optimizer=jaxes.optim.clipup(0.01),
        noise=jaxes.noise.lowrank(args.rank),
        track_best=False,
    )
    state = jax.eval_shape(lambda p: es.init(jax.random.key(0), p), searched)
    key = jax.eval_shape(lambda: jax.random.key(1))
    train_state = TrainState(state, None, key, jax.ShapeDtypeStruct((), jnp.int32))
    prompts = jnp.zeros((args.prompts, args.prompt), jnp.int32)

    def reward(prompts, generated):
        del prompts
        return jnp.mean((generated == 1).astype(jnp.float32), axis=1)

    def generation_at(chunk: int):
        def generation(ts, frozen):
            task = sequence_task(
                model,
                lambda key: None,
                prompts,
                reward,
                args.steps,
                chunk_size=chunk,
                frozen=frozen,
            )
            return generation_step(es, task)(ts)

        return generation

    n_params = sum(x.size for x in jax.tree.leaves(params))
    n_searched = sum(x.size for x in jax.tree.leaves(searched))
    return config, generation_at, train_state, frozen, n_params, n_searched


def compile_plan(generation, train_state, frozen) -> tuple[dict, float]:
    import jax

    start = time.perf_counter()
    compiled = jax.jit(generation, donate_argnums=0).lower(train_state, frozen).compile()
    return driver.memory_plan(compiled), time.perf_counter() - start


def plan_rows(size: str, stream: bool, args) -> dict:
    from jaxes.noise import budget

    config, generation_at, train_state, frozen, n, searched = build(size, args, stream)
    P = args.population
    slots = args.prompt + args.steps
    member_kv = kv_bytes_per_slot(config) * args.prompts * slots
    chunk = args.chunk or budget.largest_divisor_at_most(P, args.kv_budget // member_kv)
    state = train_state.strategy_state
    master, optimizer = nbytes(state.params), nbytes(state.opt_state)
    label = f"{size} stream={'on' if stream else 'off'}"
    log(f"{label}: {n:,} params ({searched:,} searched), chunk {chunk}, compiling ...")
    plans = {}
    small = args.fit_chunk
    if args.fit and (small >= chunk or P % small):
        raise SystemExit(f"--fit-chunk {small}: expected a divisor of {P} below the chunk {chunk}")
    for c in (chunk, small) if args.fit else (chunk,):
        if args.dump:  # only this program's dump, so that largest_temps reads it
            for old in Path(args.dump).iterdir():
                if old.is_dir():
                    shutil.rmtree(old)
                else:
                    old.unlink()
        plan, seconds = compile_plan(generation_at(c), train_state, frozen)
        live = plan["peak_minus_alias_bytes"]
        plans[c] = plan | {"compile_s": seconds, "live_bytes": live}
        log(
            f"{label} chunk {c}: compiled in {seconds:.0f} s; live {live / GIB:.2f} GiB, "
            f"beyond {(live - master - optimizer) / n:.2f} bytes/param"
        )
        if args.plan_buffers and c == chunk:
            plans[c]["largest_temps"] = _buffers.largest_temps(
                args.dump, "generation", args.plan_buffers
            )
            for value in plans[c]["largest_temps"]:
                log(
                    f"  {value['bytes'] / n:6.3f} bytes/param  {value['shape']:28s} "
                    f"{value['op_name'] or value['instruction']}"
                )
    live = plans[chunk]["live_bytes"]
    beyond = live - master - optimizer
    tokens = chunk * args.prompts * slots
    row = {
        "size": size,
        "config": CONFIGS[size],
        "params": n,
        "searched_params": searched,
        "frozen_params": n - searched,
        "frozen_bytes": nbytes(frozen),
        "P": P,
        "rank": args.rank,
        "prompts_per_member": args.prompts,
        "prompt_tokens": args.prompt,
        "answer_tokens": args.steps,
        "cache_slots": slots,
        "chunk": chunk,
        "kv_budget_bytes": args.kv_budget,
        "kv_cache_bytes_per_member": member_kv,
        "kv_cache_bytes_per_chunk": member_kv * chunk,
        "kv_cache_bytes_per_token": kv_bytes_per_slot(config),
        "weights": args.weights,
        "frozen_dtype": args.frozen_dtype,
        "compute_dtype": "bfloat16",
        "stream_weights": stream,
        "last_logits_only": True,
        "master_bytes": master,
        "optimizer_bytes": optimizer,
        "live_bytes": live,
        "live_gib": live / GIB,
        "beyond_bytes": beyond,
        "bytes_per_param_beyond_master": beyond / n,
        "tokens_in_flight": tokens,
        "plans": {str(c): p for c, p in plans.items()},
    }
    if args.fit:
        fewer = plans[small]["live_bytes"]
        per_token = (live - fewer) / (tokens - small * args.prompts * slots)
        row["bytes_per_token_in_flight"] = per_token
        row["token_term_bytes"] = per_token * tokens
        row["bytes_per_param_excluding_tokens"] = (beyond - per_token * tokens) / n
    return row


def table(rows: list[dict]) -> str:
    body = [
        [
            r["size"],
            f"{r['params'] / 1e9:.2f}B",
            "on" if r["stream_weights"] else "off",
            r["weights"],
            "last" if r.get("last_logits_only") else "all",
            str(r["chunk"]),
            f"{r['kv_cache_bytes_per_chunk'] / GIB:.2f}",
            f"{r['live_gib']:.2f}",
            f"{r['bytes_per_param_beyond_master']:.2f}",
            f"{r['bytes_per_token_in_flight'] / 1e3:.1f}"
            if "bytes_per_token_in_flight" in r
            else "",
            f"{r['kv_cache_bytes_per_token'] / 1e3:.1f}",
            f"{r['bytes_per_param_excluding_tokens']:.2f}"
            if "bytes_per_param_excluding_tokens" in r
            else "",
            "/".join(f"{p['compile_s']:.0f}" for p in r["plans"].values()),
        ]
        for r in rows
    ]
    return driver.markdown_table(
        "size | params | stream | weights | prefill logits | chunk | KV of a chunk GiB | "
        "live GiB | beyond master+opt bytes/param | in-flight kB/token | of which KV kB/token | "
        "bytes/param excluding tokens | compile s",
        "lrlllrrrrrrrr",
        body,
    )


def parse_args(argv: list[str]):
    parser = driver.parser(__doc__, "the tiny shape only", "llm_plan", timeout=None, child=False)
    parser.add_argument("--sizes", type=driver.comma_list(str), help="default 0.5B,1.5B,7B")
    parser.add_argument("--stream", choices=("on", "off", "both"), default="on")
    parser.add_argument("--weights", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--frozen-dtype", choices=("bfloat16", "float32"), default="bfloat16")
    parser.add_argument("--population", type=int, default=256)
    parser.add_argument("--rank", type=int, default=1)
    parser.add_argument("--prompts", type=int, default=1, help="prompts per member")
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens")
    parser.add_argument("--steps", type=int, default=256, help="answer tokens")
    parser.add_argument("--chunk", type=int, help="members at once (default: --kv-budget's)")
    parser.add_argument("--kv-budget", type=int, default=256 * 2**20, help="bytes (256 MiB)")
    parser.add_argument("--fit-chunk", type=int, default=2, help="the fit's second chunk")
    parser.add_argument("--no-fit", dest="fit", action="store_false", help="one chunk only")
    parser.add_argument("--plan-buffers", type=int, default=0, metavar="N")
    parser.add_argument("--append", action="store_true", help="add to --out's runs")
    args = parser.parse_args(argv)
    args.sizes = args.sizes or (["tiny"] if args.quick else ["0.5B", "1.5B", "7B"])
    unknown = [s for s in args.sizes if s not in CONFIGS]
    if unknown:
        parser.error(f"--sizes: unknown {unknown}; choose from {list(CONFIGS)}")
    args.streams = {"on": [True], "off": [False], "both": [True, False]}[args.stream]
    args.dump = None
    if args.plan_buffers:
        import tempfile

        args.dump = tempfile.mkdtemp(prefix="jaxes-llm-plan-")
        _buffers.enable(args.dump)
    args.out = args.out or driver.results_path("llm_plan", args.quick)
    return args


def run(args, argv: list[str]) -> None:
    info = machine_info(argv, ("jax", "jaxlib", "flax", "optax"), jax_backend=True)
    rows = [plan_rows(size, stream, args) for size in args.sizes for stream in args.streams]
    lines = []
    for r in rows:
        if "bytes_per_param_excluding_tokens" not in r:
            continue
        value = r["bytes_per_param_excluding_tokens"]
        verdict = "met" if value <= TARGET_BYTES_PER_PARAM else "MISSED"
        lines.append(
            f"{r['size']} stream={'on' if r['stream_weights'] else 'off'}: {value:.2f} "
            f"bytes/param beyond master + optimizer, excluding the token term (target <= "
            f"{TARGET_BYTES_PER_PARAM:g}): {verdict}; with chunk {r['chunk']}'s tokens "
            f"{r['bytes_per_param_beyond_master']:.2f}"
        )
    settings = {
        "strategy": f"jaxes.open_es({args.population}, {SIGMA}, optimizer=jaxes.optim.clipup("
        f"0.01), noise=jaxes.noise.lowrank({args.rank}), track_best=False)",
        "step": "jaxes.step.generation_step(es, sequence_task(..., frozen=frozen)), donated",
        "searched": "every projection, bias and norm (embeddings and head frozen)",
        "weights": args.weights,
        "frozen_dtype": args.frozen_dtype,
        "compute_dtype": "bfloat16",
        "kv_cache_dtype": "bfloat16",
        "prefill": PREFILL,
        "beyond_formula": "(argument + output + temp - alias - master - optimizer) / params",
        "per_token_formula": "(live(chunk) - live(fit_chunk)) / ((chunk - fit_chunk) x prompts x "
        "slots)",
        "fit_chunk": args.fit_chunk if args.fit else None,
    }
    runs = []
    if args.append and args.out.exists():
        runs = json.loads(args.out.read_text()).get("runs", [])
    runs.append({"machine": info, "settings": settings, "plans": rows, "targets": lines})
    every = [row for r in runs for row in r["plans"]]
    every_line = [line for r in runs for line in r["targets"]]
    printed = [table(every), "\n".join(every_line)]
    write_results(
        args.out,
        info,
        [],
        printed,
        {"runs": runs, "plans": every, "targets": every_line},
        show_machine=False,
    )
    if args.dump:
        shutil.rmtree(args.dump, ignore_errors=True)


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, None, run)
