"""ES against GRPO on Countdown from bases with latent skill (issue 61).

The successor of `countdown_seeds.py`, whose bases had no skill to draw out. Bases, problem
sets, the floor and the arms' runs are `jaxes_examples.lm_countdown.bases` and `.study`; GRPO
is `.grpo` (checked against google-tunix's loss and gradient, `tests/test_grpo.py`).

Arms, each from the same base, every reward Qiu et al.'s (0.1 format, 1.0 answer):

* **ES (Qiu et al.)**: P = 30 independent full-rank Gaussian members, σ = 1e-3, plain steps
  θ += α (1/P) Σ zᵢ εᵢ with α = 5e-4 on z-scored rewards, every member on the same fixed 200
  training prompts, greedy.
* **ES (EGGROLL)**: rank-1 members, P = 1,024 (512 antithetic pairs), σ = 1e-3, Adam 2e-4,
  8 prompts per member.
* **ES tuned** and **GRPO tuned**: the best of `CANDIDATES` (the same count each), chosen by
  greedy exact accuracy on the validation problems after the tuning budget, seed 0.

Budgets, both read from one run per arm and seed: **equal sampled tokens** (every answer token
decoded in training: ES P x prompts x 32 a generation, GRPO B x G x 32 an update) and **equal
wall clock** (training seconds, compiles and measurements excluded; each run trains
until both its token budget and the wall budget are spent, and is measured where each ends).
5 seeds per arm and base. The test set is the held-out problems (`study.problem_sets`).

Phases, in order; each appends its records to `--runs` (JSONL, committed beside the results):

  python benchmarks/es_vs_grpo.py bases                 # build the bases, measure their skill
  python benchmarks/es_vs_grpo.py tune --base seed0     # candidates on the validation set
  python benchmarks/es_vs_grpo.py run --base seed0 --seeds 1-5
  python benchmarks/es_vs_grpo.py report                # benchmarks/results/es_vs_grpo.json

Run out of order, a phase says which one to run first, in one line.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from pathlib import Path

import _driver as driver
from _common import RESULTS, append_run, cpu_model, git_revision, read_runs, utc_now, write_json

RUNS = RESULTS / "es_vs_grpo_runs.jsonl"
# Stated before any run: two arms within ±MARGIN of held-out accuracy are called equivalent
# when the 90 % Welch interval of their difference lies inside it (TOST at α = 0.05 each side).
MARGIN = 0.02
# The budgets: sampled answer tokens and training seconds, per run.
TOKENS, SECONDS = 163_840, 120.0
TUNE_TOKENS = 81_920


class PhaseError(Exception):
    """A phase run before the one it needs."""


def _arms():
    from jaxes_examples.lm_countdown.grpo import GRPOSetup
    from jaxes_examples.lm_countdown.study import ESArm

    fixed = {
        "ES (Qiu et al.)": ESArm(
            "ES (Qiu et al.)", population=30, rank=0, sigma=1e-3, learning_rate=5e-4,
            optimizer="sgd", batch=200, fixed_prompts=True, antithetic=False,
        ),
        "ES (EGGROLL)": ESArm(
            "ES (EGGROLL)", population=1024, rank=1, sigma=1e-3, learning_rate=2e-4, batch=8,
        ),
    }  # fmt: skip
    candidates = {
        "ES tuned": [
            ESArm("ES σ 0.01 Adam 1e-3", population=32, sigma=0.01, learning_rate=1e-3),
            ESArm("ES σ 0.01 Adam 3e-3", population=32, sigma=0.01, learning_rate=3e-3),
        ],
        "GRPO tuned": [GRPOSetup(learning_rate=1e-4), GRPOSetup(learning_rate=3e-4)],
    }
    return fixed, candidates


def _label(arm) -> str:
    if hasattr(arm, "name"):
        return arm.name
    return f"GRPO lr {arm.learning_rate:g} B {arm.batch} G {arm.group}"


def _tokens_per_update(arm) -> int:
    if hasattr(arm, "tokens_per_update"):
        return arm.tokens_per_update()
    return arm.batch * arm.group * arm.answer_tokens


def _command(phase: str, base: str | None = None) -> str:
    tail = f" --base {base}" if base else ""
    return f"python benchmarks/es_vs_grpo.py {phase}{tail}"


def need_base(runs: list[dict], base: str) -> dict:
    """The base's record, or ``PhaseError`` naming the command that builds it."""
    for r in runs:
        if r["phase"] == "bases" and r["base"] == base:
            return r
    raise PhaseError(f"base {base!r} is not built: run `{_command('bases')} --bases {base}` first")


def chosen(runs: list[dict], base: str) -> dict:
    """Per tuned family, the candidate with the best validation accuracy on ``base``, or
    ``PhaseError`` when a family has not been tuned."""
    _, candidates = _arms()
    out = {}
    for family, arms in candidates.items():
        labels = {_label(a): a for a in arms}
        tried = [
            r for r in runs if r["phase"] == "tune" and r["base"] == base and r["arm"] in labels
        ]
        if {r["arm"] for r in tried} != set(labels):
            raise PhaseError(f"{family} is not tuned on {base!r}: run `{_command('tune', base)}`")
        best = max(tried, key=lambda r: r["curve"][-1]["accuracy"])
        out[family] = labels[best["arm"]]
    return out


def _run_arm(arm, directory, training, problems, seed, budget):
    from jaxes_examples.lm_countdown import study

    if hasattr(arm, "tokens_per_update"):
        return study.run_es(directory, arm, training, problems, seed=seed, budget=budget)
    return study.run_grpo(directory, arm, training, problems, seed=seed, budget=budget)


def _record(phase, base, family, arm, seed, budget, out, base_params, test) -> dict:
    from jaxes_examples.lm_countdown import study

    settings = dataclasses.asdict(arm)
    return {
        "phase": phase, "base": base, "family": family, "arm": _label(arm), "seed": seed,
        "settings": settings, "tokens_per_update": _tokens_per_update(arm),
        "budget": dataclasses.asdict(budget), "curve": out["curve"],
        "train_seconds": round(out["seconds"], 2),
        "moved": round(study.moved(base_params, out["params"]), 6),
        "shapes": study.answer_shapes(test, out["texts"]) if out["texts"] else [],
        "load": [round(x, 2) for x in os.getloadavg()], "commit": git_revision(),
        "cpu": cpu_model(), "date": utc_now(),
    }  # fmt: skip


def phase_bases(args, runs) -> None:
    from jaxes_examples.lm_countdown import bases

    for name in args.bases:
        if any(r["phase"] == "bases" and r["base"] == name for r in runs):
            print(f"{name}: recorded already", flush=True)
            continue
        path = bases.base(name, verbose=True)
        skill = bases.held_out_skill(path)
        meta = json.loads((Path(path) / "lm_countdown.json").read_text())
        row = {"phase": "bases", "base": name, "directory_hash": Path(path).name, **skill,
               "supervision": meta.get("supervision"), "commit": git_revision(),
               "cpu": cpu_model(), "date": utc_now()}  # fmt: skip
        append_run(args.runs, row)
        print(json.dumps(row), flush=True)


def _problems():
    from jaxes_examples.lm_countdown import study

    return study.problem_sets()


def phase_tune(args, runs) -> None:
    from jaxes.llm import load
    from jaxes_examples.lm_countdown import bases, study

    need_base(runs, args.base)
    sets = _problems()
    directory = bases.base(args.base)
    base_params = load(directory).params
    _, candidates = _arms()
    for family, arms in candidates.items():
        for arm in arms:
            done = any(
                r["phase"] == "tune" and r["base"] == args.base and r["arm"] == _label(arm)
                for r in runs
            )
            if done:
                continue
            budget = study.Budget(updates=max(1, TUNE_TOKENS // _tokens_per_update(arm)), points=1)
            out = _run_arm(arm, directory, sets["training"], sets["validation"], 0, budget)
            row = _record(
                "tune", args.base, family, arm, 0, budget, out, base_params, sets["validation"]
            )
            append_run(args.runs, row)
            print(f"tune {args.base} {_label(arm)}: validation {row['curve'][-1]['accuracy']:.4f}")


def phase_run(args, runs) -> None:
    from jaxes.llm import load
    from jaxes_examples.lm_countdown import bases, study

    need_base(runs, args.base)
    arms = {**_arms()[0], **chosen(runs, args.base)}
    if args.arms:
        arms = {k: v for k, v in arms.items() if k in args.arms}
    sets = _problems()
    directory = bases.base(args.base)
    base_params = load(directory).params
    for seed in args.seeds:
        for family, arm in arms.items():
            done = any(
                r["phase"] == "run" and r["base"] == args.base and r["family"] == family
                and r["seed"] == seed for r in runs
            )  # fmt: skip
            if done:
                continue
            updates = max(1, args.tokens // _tokens_per_update(arm))
            budget = study.Budget(updates=updates, seconds=args.seconds, points=2)
            out = _run_arm(arm, directory, sets["training"], sets["test"], seed, budget)
            row = _record(
                "run", args.base, family, arm, seed, budget, out, base_params, sets["test"]
            )
            append_run(args.runs, row)
            print(f"run {args.base} {family} seed {seed}: {json.dumps(row['curve'])}", flush=True)


# ------------------------------------------------------------------------------ statistics


def seed_summary(values: list[float]) -> dict:
    """Mean, sample sd and the 95 % t-interval of the mean over seeds.

    Example:
      >>> s = seed_summary([0.1, 0.2, 0.3])
      >>> round(s["mean"], 3), [round(float(x), 3) for x in s["interval"]]
      (0.2, [-0.048, 0.448])
    """
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n) if n > 1 else float("nan")
    return {"mean": mean, "sd": sd, "interval": [float(mean - half), float(mean + half)]}


def welch_tost(a: list[float], b: list[float], margin: float) -> dict:
    """mean(a) − mean(b) with its 95 % Welch interval (told apart when it excludes 0) and
    TOST at ``margin``: equivalent when the 90 % Welch interval lies inside ±margin.

    Example:
      >>> d = welch_tost([0.30, 0.31, 0.32], [0.30, 0.31, 0.32], 0.02)
      >>> round(d["difference"], 3), bool(d["told_apart"]), bool(d["equivalent"])
      (0.0, False, True)
      >>> bool(welch_tost([0.40, 0.41, 0.42], [0.30, 0.31, 0.32], 0.02)["told_apart"])
      True
    """
    from scipy import stats

    va, vb = (seed_summary(x)["sd"] ** 2 / len(x) for x in (a, b))
    diff = sum(a) / len(a) - sum(b) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        lo95 = hi95 = lo90 = hi90 = diff
    else:
        dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
        t95, t90 = stats.t.ppf(0.975, dof), stats.t.ppf(0.95, dof)
        lo95, hi95, lo90, hi90 = diff - t95 * se, diff + t95 * se, diff - t90 * se, diff + t90 * se
    return {
        "difference": diff, "interval": [float(lo95), float(hi95)],
        "interval90": [float(lo90), float(hi90)],
        "told_apart": bool(lo95 > 0 or hi95 < 0),
        "equivalent": bool(-margin < lo90 and hi90 < margin),
    }  # fmt: skip


def at_budget(row: dict, budget: str) -> dict:
    """The curve point a budget reads: ``"tokens"`` (the token budget's update) or ``"wall"``
    (the first update past the wall budget)."""
    for point in row["curve"]:
        if budget in point["marks"]:
            return point
    raise KeyError(f"{row['arm']} seed {row['seed']}: no {budget!r} point")


def report(runs: list[dict]) -> dict:
    from jaxes_examples.lm_countdown import study

    base_rows = [r for r in runs if r["phase"] == "bases"]
    if not base_rows:
        raise PhaseError(f"nothing to report: run `{_command('bases')}` first")
    done = [r for r in runs if r["phase"] == "run"]
    if not done:
        raise PhaseError(f"no runs to report: run `{_command('run', base_rows[0]['base'])}` first")
    sets = study.problem_sets()
    shapes = study.fixed_answer_shapes(sets["training"])
    floor = study.fixed_answer_rate(sets["test"], shapes)
    arms, verdicts = {}, []
    for budget in ("tokens", "wall"):
        cells: dict[str, dict[str, list]] = {}
        for r in sorted(done, key=lambda r: r["seed"]):
            cells.setdefault(r["base"], {}).setdefault(r["family"], []).append(r)
        for base, families in sorted(cells.items()):
            for family, rows in families.items():
                acc = [at_budget(r, budget)["accuracy"] for r in rows]
                arms[f"{family} | {base} | {budget}"] = {
                    "base": base, "budget": budget, "arm": rows[0]["arm"],
                    "seeds": [r["seed"] for r in rows], "accuracy": acc,
                    **seed_summary(acc), "above_floor": sum(acc) / len(acc) - floor,
                    "tokens": [at_budget(r, budget)["tokens"] for r in rows],
                    "train_seconds": [at_budget(r, budget)["train_seconds"] for r in rows],
                    "moved": [r["moved"] for r in rows], "shapes": rows[0]["shapes"],
                }  # fmt: skip
            grpo = families.get("GRPO tuned")
            for family, rows in families.items():
                if grpo is None or family == "GRPO tuned" or len(rows) < 2 or len(grpo) < 2:
                    continue
                es = [at_budget(r, budget)["accuracy"] for r in rows]
                gr = [at_budget(r, budget)["accuracy"] for r in grpo]
                verdicts.append({"base": base, "budget": budget, "es": family,
                                 **welch_tost(es, gr, MARGIN)})  # fmt: skip
    return {
        "bases": [
            {k: b[k] for k in ("base", "params", "heldout_pass1", "heldout_pass16",
                               "heldout_reward", "greedy_problems", "sampled_problems")}
            for b in base_rows
        ],  # fmt: skip
        "floor": floor, "floor_shapes": {str(k): v for k, v in shapes.items()},
        "margin": MARGIN, "test_problems": len(sets["test"]),
        "dropped_held_out": len(sets["dropped"]), "arms": arms, "verdicts": verdicts,
        "command": "python benchmarks/es_vs_grpo.py report", "cpu": cpu_model(),
        "commit": git_revision(), "date": utc_now(),
    }  # fmt: skip


def _seeds(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def parse_args(argv: list[str]):
    parser = driver.parser(__doc__, None, "es_vs_grpo", child=False)
    parser.add_argument("phase", choices=["bases", "tune", "run", "report"])
    parser.add_argument("--base", default="seed0")
    parser.add_argument("--bases", type=driver.comma_list(str), default=["seed0", "seed1"])
    parser.add_argument("--seeds", type=_seeds, default=_seeds("1-5"))
    parser.add_argument("--arms", type=driver.comma_list(str), default=None)
    parser.add_argument("--tokens", type=int, default=TOKENS)
    parser.add_argument("--seconds", type=float, default=SECONDS)
    parser.add_argument("--runs", type=Path, default=RUNS)
    args = parser.parse_args(argv)
    args.out = args.out or driver.results_path("es_vs_grpo")
    return args


def run(args, argv: list[str]) -> None:
    runs = read_runs(args.runs)
    try:
        if args.phase == "bases":
            phase_bases(args, runs)
        elif args.phase == "tune":
            phase_tune(args, runs)
        elif args.phase == "run":
            phase_run(args, runs)
        else:
            write_json(args.out, report(runs))
            print(f"wrote {args.out}")
    except PhaseError as error:
        print(f"es_vs_grpo: {error}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, None, run)
