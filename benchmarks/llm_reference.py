"""The logit error of `jaxes.llm` against transformers on the tiny checkpoints of tests/fixtures/hf.

Per family: the six tiny checkpoints (Qwen2, Qwen3, Llama 3; tied and untied heads; one
sharded; Llama 3.1 RoPE scaling) and the logits transformers 5.25 (PyTorch 2.13 CPU) computed
from them on a left-padded batch of 3 prompts (tests/fixtures/hf/make_fixtures.py).

Reported per model, at the real (unpadded) positions: the largest and the mean absolute logit
error in float32, the largest relative to the logits' spread, and whether 32 greedy tokens
equal transformers'. tests/test_llm_reference.py asserts the same at 1e-4.

Run:
  .venv/bin/python benchmarks/llm_reference.py
Writes benchmarks/results/llm_reference.json (or --out).
"""

from __future__ import annotations

import sys
from pathlib import Path

import _driver as driver
from _common import machine_info, write_results

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "hf"
STEPS = 32


def measure(name: str) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxes.llm import load
    from jaxes.tasks.sequence import generate

    pretrained = load(FIXTURES / name, cache_len=64)
    model, params = pretrained.model, pretrained.params
    ref = dict(np.load(FIXTURES / name / "reference.npz"))
    prompts = jnp.asarray(ref["input_ids"])
    start = jnp.asarray(np.argmax(ref["attention_mask"], axis=1), jnp.int32)
    logits, _ = jax.jit(lambda p, t, s: model.apply({"params": p}, t, start=s))(
        params, prompts, start
    )

    def greedy(params, prompts, start):
        def apply_fn(tokens, cache, position):
            return model.apply({"params": params}, tokens, cache, position)

        return generate(apply_fn, model.init_cache(len(prompts), start=start), prompts, STEPS)

    tokens = np.asarray(jax.jit(greedy)(params, prompts, start))
    real = ref["attention_mask"].astype(bool)
    error = np.abs(np.asarray(logits)[real] - ref["logits"][real])
    return {
        "model": name,
        "family": pretrained.config.family,
        "params": int(sum(x.size for x in jax.tree.leaves(params))),
        "positions": int(real.sum()),
        "max_abs_error": float(error.max()),
        "mean_abs_error": float(error.mean()),
        "max_error_over_logit_std": float(error.max() / ref["logits"][real].std()),
        "greedy_tokens_equal": bool((tokens == ref["greedy"]).all()),
    }


def parse_args(argv: list[str]):
    args = driver.parser(__doc__, None, "llm_reference", child=False).parse_args(argv)
    args.out = args.out or driver.results_path("llm_reference")
    return args


def run(args, argv: list[str]) -> None:
    info = machine_info(argv, ("jax", "jaxlib", "flax"), jax_backend=True)
    names = sorted(p.name for p in FIXTURES.iterdir() if (p / "config.json").is_file())
    rows = [measure(name) for name in names]
    lines = [
        f"{r['model']}: max |error| {r['max_abs_error']:.2e}, mean {r['mean_abs_error']:.2e}, "
        f"greedy tokens {'equal' if r['greedy_tokens_equal'] else 'DIFFER'}"
        for r in rows
    ]
    write_results(args.out, info, [], lines, {"rows": rows})


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, None, run)
