"""``python -m jaxes_examples.lm_countdown [DIR] [--full] [--measure] [--finetune OUT]``:
pre-train the tiny Countdown model into ``DIR`` (without ``DIR``: the cache,
``pretrain.pretrained``), then, if asked, measure it on the held-out problems and fine-tune it
by ES into the run directory ``OUT``.
"""

from __future__ import annotations

import argparse
import json
import time

from . import evaluate, finetune, problems
from .pretrain import FULL, QUICK, build, pretrained


def measure(directory: str, params=None, held_out: int = 256) -> dict:
    """The held-out numbers of the model in ``directory`` (with ``params``: those weights):
    greedy reward and exact answers, 16 samples at temperature 1 (pass@16), and the greedy
    answers of the careful style (each completion made to begin with ``problems.CAREFUL``):
    what the model can do."""
    from jaxes.llm import load

    pre = load(directory)
    params = pre.params if params is None else params
    held = problems.held_out(held_out)
    out = evaluate.measure(pre, params, held, samples=16, temperature=1.0)
    careful = evaluate.completions(pre, params, held, prefix=problems.CAREFUL)
    out["careful"] = evaluate.summarise(evaluate.rewards(held, careful), held)
    return out


def show(numbers: dict) -> None:
    examples = numbers.pop("examples")
    print(json.dumps(numbers, indent=2))
    for problem, text in examples:
        print(f"  {problem} -> {text!r}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m jaxes_examples.lm_countdown")
    parser.add_argument("directory", nargs="?", help="where to write the model (default: cache)")
    parser.add_argument("--full", action="store_true", help="the longer pre-training (FULL)")
    parser.add_argument("--rebuild", action="store_true", help="pre-train even if cached")
    parser.add_argument("--measure", action="store_true", help="held-out reward and pass@16")
    parser.add_argument("--finetune", metavar="OUT", help="then ES into the run directory OUT")
    args = parser.parse_args(argv)
    setup = FULL if args.full else QUICK
    print(f"setup: {setup}")
    started = time.perf_counter()
    if args.directory:
        path = build(args.directory, quick=not args.full, verbose=True)
    else:
        path = pretrained(quick=not args.full, rebuild=args.rebuild, verbose=True)
    print(f"model directory: {path} ({time.perf_counter() - started:.1f} s)")
    if args.measure:
        started = time.perf_counter()
        show(measure(path))
        print(f"measured in {time.perf_counter() - started:.1f} s")
    if args.finetune:
        summary = finetune.finetune(path, args.finetune)
        print(
            f"held-out greedy reward {summary['before']:.4f} -> {summary['after']:.4f} "
            f"({summary['seconds']:.1f} s; run directory {summary['run_dir']})"
        )
        if args.measure:
            print("the fine-tuned model:")
            show(measure(path, summary["params"]))


if __name__ == "__main__":
    main()
