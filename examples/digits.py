"""A digit classifier trained by evolution strategies: scikit-learn's 8x8 digits, no gradients.

The command line of ``jaxes_examples.digits.classifier`` (the settings, the three models and
the training loop) over ``jaxes_examples.digits.data`` (the data, the MLP and its fitness:
minus the mean cross-entropy on a minibatch shared by every member of a generation), both in
``jaxes_examples/`` beside this script. Needs scikit-learn (``pip install -e examples``
installs it with the package).

All use OpenAI-ES with P = 200 (antithetic pairs), Adam with a cosine-decayed learning rate
and minibatches of 256 images. With seed 0 on the project's 2-core CPU (shared with two other
jobs, commit 8150175) the full schedule (300 generations) ends at 0.961 test accuracy
(full-rank, 4 s of training), 0.975 (low-rank, 64 s) and 0.964 (big full-rank, 44 s), 2¼
minutes in all with compiles; ``--quick`` (100 generations) at 0.958 (full-rank) and 0.933
(low-rank).

Run:
  python examples/digits.py [--quick] [--model full-rank|low-rank|big full-rank|all]
                            [--weights float32|bfloat16|int8]
  (or JAXES_QUICK=1)

It ends with one line per model, e.g.
``test accuracy 0.961 (full-rank, 64-64-10, 300 generations, 3.8 s)``.
``notebooks/05_digits.ipynb`` trains the same models from the installed jaxes_examples.
"""

from __future__ import annotations

import argparse
import dataclasses
import os

import jax

from jaxes_examples.digits import classifier
from jaxes_examples.digits import data as classification

# Optional speed-up: reuse compiled programs across runs (the test suite and `make` set this).
if os.environ.get("JAXES_CACHE_DIR"):
    jax.config.update("jax_compilation_cache_dir", os.environ["JAXES_CACHE_DIR"])


def quick_from_env() -> bool:
    return os.environ.get("JAXES_QUICK", "0") not in ("", "0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few times fewer generations")
    parser.add_argument("--model", choices=[*classifier.CONFIGS, "all"], default="all")
    parser.add_argument(
        "--weights",
        choices=classifier.WEIGHTS,
        default="float32",
        help="the weights members are evaluated with (bfloat16 and int8: the low-rank model)",
    )
    args = parser.parse_args()
    chosen = classifier.configs(args.quick or quick_from_env())
    if args.weights != "float32":
        chosen = {
            name: dataclasses.replace(c, weights=args.weights)
            for name, c in chosen.items()
            if c.noise == "lowrank"
        }
    names = list(chosen) if args.model == "all" else [args.model]
    if args.model not in ("all", *chosen):
        parser.error(f"--weights {args.weights} needs the low-rank model, not {args.model!r}")
    data = classification.digits()
    print(
        f"digits: {data['x_train'].shape[0]} train / {data['x_test'].shape[0]} test images, "
        f"{data['x_train'].shape[1]} features"
    )
    results = {}
    for name in names:
        c = chosen[name]
        noise = f"lowrank r={c.rank}" if c.noise == "lowrank" else c.noise
        print(
            f"{name}: {c.layers} MLP, P={c.population}, σ={c.sigma}, Adam {c.learning_rate} "
            f"(cosine decay: {c.cosine}), batch {c.batch_size}, noise {noise}",
            flush=True,
        )
        results[name] = classifier.train(c, data, verbose=True)
        print(
            f"  {results[name]['num_params']} weights, compiled in "
            f"{results[name]['compile_seconds']:.1f} s",
            flush=True,
        )
    for name in names:
        print(classifier.summary(results[name]))


if __name__ == "__main__":
    main()
