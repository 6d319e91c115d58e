"""A worked fine-tune, self-contained, nothing downloaded: a small transformer pre-trained by
backprop on arithmetic, then fine-tuned on a Countdown reward by ES and by a policy gradient,
every method for the same seconds of training.

The command line of ``jaxes_examples.countdown`` (beside this script: ``pretrain`` and
``finetune``) over its ``problems`` (two one-digit numbers and a target: write ``x op y`` that
reaches it; reward 1 for an exact answer over the given numbers, else 0, no gradient) and
``jaxes.tasks.sequence`` (greedy decoding with a KV cache in ``lax.scan``; low-rank members
run factored).

1. Pre-training (Adam, masked next-token cross-entropy) on equations ``x op y = c`` and on the
   answer format with targets drawn independently of the answers: the model learns to
   evaluate expressions and to write one over the given numbers, never which one is right.
2. Fine-tuning from the same pre-trained params, for ``--seconds`` of training each
   (compiles and the held-out evaluations excluded): OpenAI-ES with full-rank noise, low rank
   r = 1 and r = 4, r = 4 with independent members instead of antithetic pairs, r = 4 with
   bfloat16 params, r = 4 on an int8 base; and GRPO-style REINFORCE (8 samples per prompt,
   advantage = reward − group mean, ``jax.grad``).

The accuracy is exact answers, greedy, on held-out problems whose pair of numbers never
appears in training. With seed 0 on the project's 2-core CPU (shared with other jobs, commit
13653eb) the full run (1500 pre-training steps, 60 s per method; 8½ minutes in all with
compiles) pre-trains to 1.000 arithmetic accuracy and 0.348 held-out Countdown accuracy, then
ends at 0.470 (ES full-rank, 420 updates), 0.500 (r=1, 405), 0.424 (r=4, 350), 0.455 (r=4
independent, 345), 0.545 (r=4 bf16, 370), 0.485 (r=4 int8 base, 325) and 0.591 (GRPO, 2310):
the policy gradient wins at equal wall clock; the ES variants differ by less than their curves'
noise (66 held-out problems, one seed). ``--quick`` (600 steps, 3 s each; 75 s in all with a
warm compile cache, 6 minutes cold) is a smoke run: ES
barely moves in 3 s. ``notebooks/10_sequence_es.ipynb`` runs the same comparison with
figures, and the answer-length experiment.

Run:
  python examples/sequence_finetune.py [--quick] [--seconds S] [--methods NAME ...]
  (or JAXES_QUICK=1)
  python examples/sequence_finetune.py --numbers 3 [--large] [--pretrain-only] [--rebuild]
  (the three-number game, 2,000 held-out problems; ``--large``: the bigger model, pre-trained
  once and kept in ``~/.cache/jaxes/pretrained``, rebuilt with ``--rebuild``)

It ends with the table and one line naming the best method, e.g.
``best: GRPO 0.591 held-out accuracy (pre-trained 0.348)``.
"""

from __future__ import annotations

import argparse
import os

import jax

from jaxes_examples.countdown import finetune, pretrain

# Optional speed-up: reuse compiled programs across runs (the test suite and `make` set this).
if os.environ.get("JAXES_CACHE_DIR"):
    jax.config.update("jax_compilation_cache_dir", os.environ["JAXES_CACHE_DIR"])

FULL = {"pretrain_steps": 1500, "seconds": 60.0}
QUICK = {"pretrain_steps": 600, "seconds": 3.0}


def quick_from_env() -> bool:
    return os.environ.get("JAXES_QUICK", "0") not in ("", "0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short pre-training and budgets")
    parser.add_argument("--seconds", type=float, help="training seconds per method")
    parser.add_argument("--methods", nargs="+", choices=list(finetune.METHODS), default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--numbers", type=int, choices=(2, 3), default=2, help="numbers a problem gives"
    )
    parser.add_argument("--large", action="store_true", help="the bigger model (pretrain.LARGE)")
    parser.add_argument(
        "--pretrain-only", action="store_true", help="pre-train (or read), measure, stop"
    )
    parser.add_argument(
        "--rebuild", action="store_true", help="pre-train again, replacing the cache"
    )
    args = parser.parse_args()
    mode = QUICK if args.quick or quick_from_env() else FULL
    seconds = args.seconds if args.seconds is not None else mode["seconds"]
    methods = {n: finetune.METHODS[n] for n in (args.methods or finetune.METHODS)}

    if args.large and args.numbers != 3:
        parser.error("--large: the bigger model is for the three-number game; add --numbers 3")
    if args.large:
        setup = pretrain.LARGE
    else:
        setup = pretrain.Setup(
            pretrain_steps=mode["pretrain_steps"], seed=args.seed, numbers=args.numbers
        )
    model = setup.model()
    train_prompts, test_prompts = finetune.problems(args.seed, args.numbers)
    print(
        f"countdown: {train_prompts.shape[0]} train / {test_prompts.shape[0]} held-out "
        f"problems; transformer d={setup.d_model}, {setup.layers} layers, {setup.heads} heads",
        flush=True,
    )
    if args.large or args.pretrain_only or args.rebuild:
        pre = pretrain.pretrained(setup, rebuild=args.rebuild, verbose=True)
    else:
        pre = pretrain.pretrain(setup, verbose=True)
    params = pre["params"]
    arithmetic = float(jax.jit(lambda p: pretrain.arithmetic_accuracy(model, p))(params))
    print(f"pre-trained arithmetic accuracy: {arithmetic:.3f}")
    start = float(jax.jit(lambda p: pretrain.accuracy(model, p, test_prompts))(params))
    print(f"pre-trained held-out accuracy: {start:.3f}", flush=True)
    if args.pretrain_only:
        return

    print(f"fine-tuning, {seconds:g} s of training each:", flush=True)
    results = finetune.compare(
        methods, model, params, seconds, seed=args.seed, numbers=args.numbers, verbose=True
    )
    for name, r in results.items():
        print(f"  {name}: compiled in {r['compile_seconds']:.1f} s")
    print(finetune.table(results))
    best = max(results, key=lambda n: results[n]["accuracy"])
    print(
        f"best: {best} {results[best]['accuracy']:.3f} held-out accuracy (pre-trained {start:.3f})"
    )


if __name__ == "__main__":
    main()
