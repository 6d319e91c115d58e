"""How fast `jaxes.tasks.sequence.generate` decodes with `jaxes.tasks.transformer`'s KV cache,
and its compiled temp memory, for a few model sizes (bfloat16 params, 64 prompts of 16
tokens or `--batch` prompts, 32 new tokens, vocab 64). `--src` imports jaxes from another
checkout's `src`, so two commits' caches can be compared in the same sitting (a `git
worktree` of the older one).
`--weights float32` keeps the params float32 and builds the model with `dtype=bfloat16` (each
layer rounds its weight where it reads it); it computes in bfloat16 either way.
`--stream-weights` builds the model with `stream_weights=True` (each layer's weights
converted once its input exists, at every call).

Each size is compiled once, run once to warm up, then timed 5 times; the median ms is printed.

Run:
  .venv/bin/python benchmarks/generate_speed.py
  git worktree add /tmp/old cd7d5a2
  .venv/bin/python benchmarks/generate_speed.py --src /tmp/old/src
  .venv/bin/python benchmarks/generate_speed.py --weights float32
  .venv/bin/python benchmarks/generate_speed.py --weights float32 --stream-weights
  .venv/bin/python benchmarks/generate_speed.py --weights float32 --stream-weights --batch 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

SIZES = ((64, 4), (128, 8), (256, 12))  # (d_model, layers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", help="import jaxes from this src folder instead")
    parser.add_argument("--weights", choices=("bfloat16", "float32"), default="bfloat16")
    parser.add_argument("--stream-weights", action="store_true")
    parser.add_argument("--batch", type=int, default=64, help="prompts decoded at once")
    args = parser.parse_args()
    if args.batch < 1:
        parser.error(f"--batch: expected a count >= 1, got {args.batch}")
    if args.src:
        if not (Path(args.src) / "jaxes" / "__init__.py").is_file():
            parser.error(f"--src: expected a folder holding jaxes/__init__.py, got {args.src!r}")
        sys.path.insert(0, args.src)
    import jax
    import jax.numpy as jnp

    from jaxes.tasks.sequence import generate
    from jaxes.tasks.transformer import Transformer

    if args.stream_weights and "stream_weights" not in Transformer.__dataclass_fields__:
        parser.error("--stream-weights: this jaxes's Transformer has no stream_weights")
    print(f"jaxes from {sys.modules['jaxes'].__file__}")
    batch, prompt, steps = args.batch, 16, 32
    for d_model, layers in SIZES:
        model = Transformer(vocab=64, d_model=d_model, heads=4, layers=layers, max_len=48)
        if args.stream_weights:
            model = model.clone(stream_weights=True)
        params = model.init(jax.random.key(0), jnp.zeros((1, 1), jnp.int32))["params"]
        params = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
        if args.weights == "float32":
            model = model.clone(dtype=jnp.bfloat16)
            params = jax.tree.map(lambda x: x.astype(jnp.float32), params)
        prompts = jax.random.randint(jax.random.key(1), (batch, prompt), 0, 64)

        def run(p, tokens, model=model):
            def apply(t, cache, position):
                return model.apply({"params": p}, t, cache, position)

            return generate(apply, model.init_cache(batch, jnp.bfloat16), tokens, steps)

        compiled = jax.jit(run).lower(params, prompts).compile()
        jax.block_until_ready(compiled(params, prompts))
        times = []
        for _ in range(5):
            start = time.perf_counter()
            jax.block_until_ready(compiled(params, prompts))
            times.append(time.perf_counter() - start)
        temp = compiled.memory_analysis().temp_size_in_bytes / 1e6
        ms = 1e3 * statistics.median(times)
        print(f"d_model {d_model} x {layers}: {ms:.1f} ms, temp {temp:.1f} MB")


if __name__ == "__main__":
    main()
