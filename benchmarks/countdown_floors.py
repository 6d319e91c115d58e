"""The fixed-answer floors of Countdown problem distributions (issue 61).

A floor is what writing one answer shape per count of numbers, whatever the numbers, scores on
held-out problems.

A shape is a left-to-right arrangement of the numbers (order and operations, as
`jaxes_examples.lm_countdown.problems` evaluates them), chosen as the one that hits the target
most often on training problems (`study.fixed_answer_shapes`) and scored on held-out ones.
Three distributions, all 1..99 numbers and 1..999 targets:

  countdown_problems   `jaxes.llm.countdown_problems`: the target is the value of one random
                       arrangement, redrawn when out of range (`jaxes finetune --task
                       countdown`, the study's bases); the study's own sets
  without the sum      the same, less the problems whose numbers' sum is the target
  uniform targets      the target drawn uniformly over the distinct in-range values the
                       arrangements reach, for 3 and for 4 numbers

Pure Python, a few seconds: `.venv/bin/python benchmarks/countdown_floors.py` writes
benchmarks/results/countdown_floors.json (or `--out`).
"""

from __future__ import annotations

import sys

import _driver as driver
import numpy as np
from _common import cpu_model, git_revision, utc_now, write_json

SEED = 7


def uniform_targets(n: int, numbers: int, seed: int) -> list[dict]:
    """``n`` problems of ``numbers`` numbers whose target is uniform over the distinct values
    the arrangements reach in 1..999."""
    from jaxes_examples.lm_countdown import problems as countdown

    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        values = [int(v) for v in rng.integers(1, 100, size=numbers)]
        reached = sorted({v for _, _, v in countdown._values(values) if 1 <= v <= 999})
        if reached:
            out.append({"numbers": values, "target": int(rng.choice(reached))})
    return out


def floor(train: list[dict], test: list[dict]) -> dict:
    from jaxes_examples.lm_countdown import study

    shapes = study.fixed_answer_shapes(train)
    out = {"floor": study.fixed_answer_rate(test, shapes), "problems": len(test)}
    for size in sorted({len(p["numbers"]) for p in test}):
        part = [p for p in test if len(p["numbers"]) == size]
        out[f"floor_{size}"] = study.fixed_answer_rate(part, shapes)
    out["shapes"] = {str(k): v for k, v in shapes.items()}
    return out


def parse_args(argv: list[str]):
    args = driver.parser(__doc__, None, "countdown_floors", child=False).parse_args(argv)
    args.out = args.out or driver.results_path("countdown_floors")
    return args


def run(args, argv: list[str]) -> None:
    from jaxes_examples.lm_countdown import study

    sets = study.problem_sets()

    def summed(problems):
        return [p for p in problems if sum(p["numbers"]) != p["target"]]

    rows = {
        "countdown_problems": floor(sets["training"], sets["test"]),
        "without the sum": floor(summed(sets["training"]), summed(sets["test"])),
    }
    for numbers in (3, 4):
        train = uniform_targets(4000, numbers, SEED)
        test = uniform_targets(2000, numbers, SEED + 1)
        rows[f"uniform targets, {numbers} numbers"] = floor(train, test)
    for name, row in rows.items():
        print(f"{name}: floor {row['floor']:.4f} on {row['problems']} problems")
    write_json(
        args.out,
        {
            "floors": rows,
            "command": "python benchmarks/countdown_floors.py",
            "commit": git_revision(),
            "cpu": cpu_model(),
            "date": utc_now(),
        },
    )


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, None, run)
