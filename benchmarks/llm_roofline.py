"""The least time one ES generation of a Qwen2.5 model can take on a GPU: a roofline from the
shapes the memory plan (`benchmarks/llm_plan.py`) compiles, at the GPU's spec-sheet peaks.

Nothing is compiled or run; no GPU measured it. For each chunk of members (the largest divisor
of P whose members' KV caches fit the KV budget: the plan's rule, at the plan's 256 MiB and at
16 GiB, a GPU's share), the prefill
and each of the `--steps` decode steps cost at least

    max(flops / peak bf16 FLOP/s, bytes / peak memory bandwidth)

flops: 2 per weight per row for every projection and the output head (rows = members of the
chunk x prompts), the rank-r members' factors (2 r (in + out) per projection per row), and
attention over every cache slot (the decoder attends to the whole cache, masked);
bytes: every weight read once per step (the searched ones as the float32 master the members
round, the frozen embeddings as bfloat16: the plan's default) plus the chunk's KV cache.
A generation is P / chunk chunks, one after another. Real runs are slower (kernels below
peak, sampling, the tell); this is a floor, not a forecast.

Run:
  .venv/bin/python benchmarks/llm_roofline.py
Writes benchmarks/results/llm_roofline.json (or --out) and prints the table.
"""

from __future__ import annotations

import sys

import _driver as driver
from _common import machine_info, write_results
from llm_plan import CONFIGS

# Spec-sheet peaks (dense bfloat16 tensor-core FLOP/s; HBM bytes/s), NVIDIA's data sheets.
GPUS = {
    "H100 SXM": (989.4e12, 3.35e12),
    "H200 SXM": (989.4e12, 4.8e12),
}
# (name, size, population, rank, prompts per member): the GPU recipe of docs/llm.md.
SETTINGS = (
    ("Qiu et al.", "0.5B", 30, 4, 16),
    ("EGGROLL", "0.5B", 1024, 1, 16),
    ("plan", "0.5B", 256, 1, 1),
    ("plan", "1.5B", 256, 1, 1),
    ("plan", "7B", 256, 1, 1),
)


def shapes(size: str) -> dict:
    """Widths of a Qwen2.5 config: the projections' (in, out) and the per-slot KV bytes."""
    c = CONFIGS[size]
    d, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    heads, kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
    head_dim = c.get("head_dim") or d // heads
    mlp = c["intermediate_size"]
    layer = [
        (d, heads * head_dim),
        (d, kv_heads * head_dim),
        (d, kv_heads * head_dim),
        (heads * head_dim, d),
        (d, mlp),
        (d, mlp),
        (mlp, d),
    ]
    projections = layer * layers
    biases = layers * (heads + 2 * kv_heads) * head_dim  # q, k and v have biases in Qwen2
    searched = sum(i * o for i, o in projections) + biases + d * (2 * layers + 1)  # + norms
    frozen = vocab * d * (1 if c["tie_word_embeddings"] else 2)
    return {
        "projections": projections,
        "head": (d, vocab),
        "searched": searched,
        "frozen": frozen,
        "attention": layers * heads * head_dim,
        "kv_per_slot": layers * 2 * kv_heads * head_dim * 2,
    }


def step_cost(s: dict, rows: int, tokens: int, slots: int, rank: int, head: bool):
    """(flops, bytes) of one forward pass of `rows` sequences over `tokens` new positions."""
    matmul = sum(i * o for i, o in s["projections"]) + (s["head"][0] * s["head"][1] if head else 0)
    factors = sum(i + o for i, o in s["projections"])
    flops = rows * tokens * (2 * matmul + 2 * rank * factors + 4 * s["attention"] * slots)
    weights = 4 * s["searched"] + 2 * s["frozen"]
    return flops, weights + rows * slots * s["kv_per_slot"]


def generation_seconds(size, population, rank, prompts, chunk, prompt, steps, gpu) -> float:
    flops_peak, bandwidth = GPUS[gpu]
    s, slots = shapes(size), prompt + steps
    rows = chunk * prompts

    def floor(cost):
        return max(cost[0] / flops_peak, cost[1] / bandwidth)

    prefill = floor(step_cost(s, rows, prompt - 1, slots, rank, head=False))
    decode = floor(step_cost(s, rows, 1, slots, rank, head=True))
    return -(-population // chunk) * (prefill + steps * decode)


def row(name, size, population, rank, prompts, budget, args) -> dict:
    from jaxes.noise.budget import largest_divisor_at_most

    member_kv = shapes(size)["kv_per_slot"] * prompts * (args.prompt + args.steps)
    chunk = largest_divisor_at_most(population, budget // member_kv)
    out = {
        "kv_budget_bytes": budget,
        "setting": name,
        "size": size,
        "population": population,
        "rank": rank,
        "prompts_per_member": prompts,
        "chunk": chunk,
        "tokens": population * prompts * args.steps,
    }
    for gpu in GPUS:
        seconds = generation_seconds(
            size, population, rank, prompts, chunk, args.prompt, args.steps, gpu
        )
        out[f"seconds_{gpu}"] = seconds
    return out


def table(rows: list[dict]) -> str:
    keys = ("setting", "size", "population", "rank", "prompts_per_member")
    body = [
        [*(str(r[k]) for k in keys), f"{r['kv_budget_bytes'] / 2**30:g}", str(r["chunk"]),
         f"{r['tokens']:,}", *(f"{r[f'seconds_{g}']:.2f}" for g in GPUS)]
        for r in rows
    ]  # fmt: skip
    header = "setting | model | P | rank | prompts | KV budget GiB | chunk | answer tokens | "
    header += " | ".join(f"{g} s (floor)" for g in GPUS)
    return driver.markdown_table(header, "llrrrrrr" + "r" * len(GPUS), body)


def parse_args(argv: list[str]):
    parser = driver.parser(__doc__, None, "llm_roofline", timeout=None, child=False)
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens")
    parser.add_argument("--steps", type=int, default=256, help="answer tokens")
    parser.add_argument(
        "--kv-budgets", type=driver.comma_list(int), default=[2**28, 2**34], help="bytes"
    )
    args = parser.parse_args(argv)
    args.out = args.out or driver.results_path("llm_roofline", False)
    return args


def run(args, argv: list[str]) -> None:
    info = machine_info(argv, ())
    rows = [row(*s, budget, args) for budget in args.kv_budgets for s in SETTINGS]
    settings = {
        "gpus": {g: {"bf16_flops": f, "bytes_per_s": b} for g, (f, b) in GPUS.items()},
        "prompt_tokens": args.prompt,
        "answer_tokens": args.steps,
        "kv_budgets_bytes": args.kv_budgets,
        "model": "max(flops / peak, bytes / bandwidth) per prefill and decode step, per chunk",
    }
    write_results(args.out, info, [], [table(rows)], {"settings": settings, "rows": rows})


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, None, run)
