"""ES against GRPO on the three-number Countdown game, decided with seeds (issue 42).

Four methods fine-tune the same pre-trained model (`jaxes_examples.countdown`), each under two
budgets, on seeds no setting was chosen on, and are judged on the 2,000 held-out problems:

* **ES Qiu**: Qiu et al. 2025's setting: P = 30 independent members, σ = 1e-3, full-rank
  Gaussian noise, bfloat16 params, z-scored rewards and plain steps θ += α (1/P) Σ zᵢ εᵢ with
  α = 5e-4 (`open_es`'s estimate is (1/(Pσ)) Σ zᵢ εᵢ, so its SGD rate is α σ).
* **ES EGGROLL**: EGGROLL's regime: a large population (P = 256) of rank-1 members, each on a
  small batch of prompts (8), so that a generation samples about as much as Qiu's.
* **ES best** and **GRPO tuned**: the best of four candidates each (`CANDIDATES`), chosen on
  seed 0 by greedy accuracy over 1,000 *training* problems, never on the held-out set.

Budgets (`--wall`, `--tokens`): *equal wall clock* is W seconds of training at each method's
own speed, measured once on an idle CPU (`time`, written to the runs file) and turned into a
count of updates; so the runs themselves do not depend on what else the machine does, and a
seed's run is the same whether it ran alone or beside another job. *Equal sampled tokens* is T
answer tokens decoded in all (ES: population × batch per generation; GRPO: batch × group per
update, at temperature 1). Both round down to whole blocks of `eval_every` updates.

Phases, each appending finished runs to `--runs` (JSONL), so an interrupted sitting resumes:

  python benchmarks/countdown_seeds.py time   --model small|large [--methods ...]
  python benchmarks/countdown_seeds.py tune   --model small --wall 60
  python benchmarks/countdown_seeds.py run    --model small --seeds 1-5 --wall 60 --tokens 3e6
  python benchmarks/countdown_seeds.py run    --model large --seeds 1-5 --wall 60 --budgets wall
  python benchmarks/countdown_seeds.py report [--out benchmarks/results/countdown_seeds.json]
  python benchmarks/countdown_seeds.py shapes --model large --seeds 1 --wall 60   # what they write

`report` writes `{"test_problems", "budget", "methods": {"<method> | <model> | <budget>":
{"seeds", "accuracy", ...}}}` and prints the markdown table of docs/results/learning.md: the mean
over seeds with its 95 % t-interval, the seeds' spread, and the 95 % Wilson interval of the
pooled answers.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import sys
from pathlib import Path

import _driver as driver
import numpy as np
from _common import append_run, cpu_model, git_revision, read_runs, utc_now, write_json

RUNS = Path.home() / ".cache" / "jaxes" / "countdown-seeds" / "runs.jsonl"
TRAIN_CHECK = 1000  # training problems the tuning selects on


def _methods():
    from jaxes_examples.countdown.finetune import Method

    qiu = Method(
        "ES Qiu", noise="gaussian", population=30, sigma=1e-3, antithetic=False,
        dtype="bfloat16", shaping="z_score", optimizer="sgd", learning_rate=5e-4 * 1e-3,
    )  # fmt: skip
    eggroll = Method("ES EGGROLL", rank=1, population=256, batch=8)
    candidates = {
        "ES best": [
            Method("ES r=4 lr 3e-3", rank=4),
            Method("ES r=4 lr 1e-3", rank=4, learning_rate=1e-3),
            Method("ES r=4 lr 1e-2 σ 0.01", rank=4, learning_rate=1e-2, sigma=0.01),
            Method("ES full-rank bf16", noise="gaussian", dtype="bfloat16"),
        ],
        "GRPO tuned": [
            Method("GRPO lr 3e-4", kind="grpo", learning_rate=3e-4, batch=16, eval_every=10),
            Method("GRPO lr 1e-3", kind="grpo", learning_rate=1e-3, batch=16, eval_every=10),
            Method("GRPO lr 3e-3", kind="grpo", learning_rate=3e-3, batch=16, eval_every=10),
            Method("GRPO lr 1e-3 group 16", kind="grpo", learning_rate=1e-3, group=16,
                   batch=8, eval_every=10),
        ],
    }  # fmt: skip
    return {"ES Qiu": qiu, "ES EGGROLL": eggroll}, candidates


def _setup(model: str):
    from jaxes_examples.countdown import pretrain

    return pretrain.LARGE if model == "large" else pretrain.Setup(numbers=3)


def tokens_per_update(method) -> int:
    """Answer tokens one update samples."""
    from jaxes_examples.countdown import problems

    per = method.group * method.batch if method.kind == "grpo" else method.population
    rows = per if method.kind == "grpo" else per * method.batch
    return rows * problems.answer_len(1, 3)


class Bench:
    """The model, its pre-trained params and the problems, loaded once per sitting."""

    def __init__(self, model: str):
        from jaxes_examples.countdown import finetune, pretrain

        self.name = model
        self.setup = _setup(model)
        self.model = self.setup.model()
        self.params = pretrain.pretrained(self.setup, verbose=True)["params"]
        self.train, self.test = finetune.problems(0, 3)

    def finetune(self, method, seed: int, updates: int | None = None, seconds=None) -> dict:
        from jaxes_examples.countdown import finetune

        return finetune.finetune(
            method, self.model, self.params, self.train, self.test,
            updates=updates, seconds=seconds, seed=seed, curve=False,
        )  # fmt: skip

    def train_accuracy(self, params, quantize: bool) -> float:
        import jax

        from jaxes_examples.countdown import pretrain

        prompts = self.train[:TRAIN_CHECK]
        measure = jax.jit(lambda p: pretrain.accuracy(self.model, p, prompts, 1, quantize))
        return float(measure(params))


def _row(bench: Bench, phase: str, method, seed: int, budget: str, out: dict) -> dict:
    return {
        "phase": phase, "model": bench.name, "method": method.name, "seed": seed,
        "budget": budget, "updates": out["updates"],
        "sampled_tokens": out["updates"] * tokens_per_update(method),
        "train_seconds": round(out["seconds"], 3),
        "compile_seconds": round(out["compile_seconds"], 1),
        "accuracy": out["accuracy"], "start_accuracy": out["history"]["accuracy"][0],
        "correct": round(out["accuracy"] * int(bench.test.shape[0])),
        "test_problems": int(bench.test.shape[0]), "moved": out["moved"],
        "settings": dataclasses.asdict(method), "cpu": cpu_model(),
        "commit": git_revision(), "utc": utc_now(),
    }  # fmt: skip


def seconds_per_update(runs: list[dict], model: str, name: str) -> float:
    rows = [r for r in runs if r["phase"] == "time" and r["model"] == model and r["method"] == name]
    if not rows:
        raise SystemExit(f"countdown_seeds: no timing of {name!r} on {model}: run `time` first")
    return rows[-1]["train_seconds"] / rows[-1]["updates"]


def budget_updates(method, runs, model: str, budget: str, amount: float) -> int:
    """Whole blocks of updates that ``amount`` buys: seconds at the timed speed, or tokens."""
    if budget == "wall":
        per = seconds_per_update(runs, model, method.name)
    else:
        per = tokens_per_update(method)
    blocks = max(1, int(amount / (per * method.eval_every)))
    return blocks * method.eval_every


def phase_time(args) -> None:
    """Each method's seconds per update on this machine: ``--time-seconds`` of training after
    the compile, measured while nothing else runs."""
    study, candidates = _methods()
    methods = _chosen(study, candidates, args)
    bench = Bench(args.model)
    for method in methods:
        out = bench.finetune(method, seed=0, seconds=args.time_seconds)
        row = _row(bench, "time", method, 0, "time", out)
        append_run(args.runs, row)
        per = row["train_seconds"] / row["updates"]
        print(f"{method.name}: {row['updates']} updates in {row['train_seconds']:.1f} s, "
              f"{per:.3f} s/update, {tokens_per_update(method)} tokens/update",
              flush=True)  # fmt: skip


def _chosen(study, candidates, args):
    every = [*study.values(), *(m for group in candidates.values() for m in group)]
    names = args.methods or [m.name for m in every]
    if names == ["study"]:  # the judged methods, the tuned ones under their candidates' names
        chosen = tuned(read_runs(args.runs), candidates)
        names = [*study, *(m.name for k, m in chosen.items() if k.endswith("(as)"))]
    unknown = set(names) - {m.name for m in every}
    if unknown:
        raise SystemExit(f"--methods: unknown {sorted(unknown)}; known: {[m.name for m in every]}")
    return [m for m in every if m.name in names]


def _done(runs, phase, model, name, seed, budget) -> bool:
    key = (phase, model, name, seed, budget)
    return any((r["phase"], r["model"], r["method"], r["seed"], r["budget"]) == key for r in runs)


def phase_tune(args) -> None:
    """Every candidate on seed 0 for the wall budget; the choice is made on training problems."""
    _, candidates = _methods()
    bench = Bench(args.model)
    for group in candidates.values():
        for method in group:
            runs = read_runs(args.runs)
            if _done(runs, "tune", args.model, method.name, 0, "wall"):
                continue
            updates = budget_updates(method, runs, args.model, "wall", args.wall)
            out = bench.finetune(method, seed=0, updates=updates)
            row = _row(bench, "tune", method, 0, "wall", out)
            row["train_accuracy"] = bench.train_accuracy(out["params"], method.quantize)
            append_run(args.runs, row)
            print(f"{method.name}: train accuracy {row['train_accuracy']:.3f} "
                  f"({updates} updates)", flush=True)  # fmt: skip


def tuned(runs: list[dict], candidates: dict, model: str = "small") -> dict:
    """The candidate of each family with the best training-problem accuracy on seed 0."""
    chosen = {}
    for family, group in candidates.items():
        scored = {r["method"]: r["train_accuracy"] for r in runs
                  if r["phase"] == "tune" and r["model"] == model}  # fmt: skip
        missing = [m.name for m in group if m.name not in scored]
        if missing:
            raise SystemExit(f"countdown_seeds: tune first; no tuning run of {missing}")
        best = max(group, key=lambda m: scored[m.name])
        chosen[family] = dataclasses.replace(best, name=family)
        chosen[family + " (as)"] = best
    return chosen


def study_methods(runs: list[dict]) -> dict:
    study, candidates = _methods()
    chosen = tuned(runs, candidates)
    return {**study, **{k: v for k, v in chosen.items() if not k.endswith("(as)")}}, chosen


def phase_run(args) -> None:
    """The judged seeds: every study method under the wall and the token budget."""
    runs = read_runs(args.runs)
    methods, chosen = study_methods(runs)
    bench = Bench(args.model)
    for seed in args.seeds:
        for family, method in methods.items():
            # The wall budget is timed under the candidate's own name for the tuned methods.
            timed = chosen.get(family + " (as)", method)
            amounts = {"wall": args.wall, "tokens": args.tokens}
            for budget, amount in ((b, amounts[b]) for b in args.budgets):
                runs = read_runs(args.runs)
                if _done(runs, "run", args.model, family, seed, budget):
                    continue
                updates = budget_updates(timed, runs, args.model, budget, amount)
                out = bench.finetune(method, seed=seed, updates=updates)
                row = _row(bench, "run", method, seed, budget, out)
                row["budget_amount"] = amount
                append_run(args.runs, row)
                print(f"seed {seed} {family} {budget}: {out['accuracy']:.3f} "
                      f"({updates} updates)", flush=True)  # fmt: skip


def answer_shapes(prompts, tokens) -> collections.Counter:
    """How many answers take each shape: the numbers named by their place in the prompt
    (``n1``-``n3``; ``?`` for a digit the prompt lacks), the ops as written.

    Example:
      >>> from jaxes_examples.countdown import problems as cd
      >>> prompts = np.stack([cd.encode_prompt(3, 5, 7, 15), cd.encode_prompt(2, 1, 4, 7)])
      >>> answers = [(7, "+", 3, "+", 5), (2, "+", 1, "+", 4)]
      >>> tokens = np.stack([cd.encode_answer(*a) for a in answers])
      >>> answer_shapes(prompts, tokens)
      Counter({'n3 + n1 + n2': 1, 'n1 + n2 + n3': 1})
    """
    from jaxes_examples.countdown import problems

    count = problems.numbers_of(prompts)
    out = collections.Counter()
    for prompt, answer in zip(np.asarray(prompts), np.asarray(tokens), strict=True):
        numbers = list(prompt[1 : 1 + count])
        words = [
            (f"n{numbers.index(t) + 1}" if t in numbers else "?") if t < problems.DIGITS
            else problems.NAMES[t]
            for t in answer[: 2 * count - 1]
        ]  # fmt: skip
        out[" ".join(words)] += 1
    return out


def phase_shapes(args) -> None:
    """What each study method writes on the held-out set after its wall budget, on the first
    of ``--seeds``: the commonest answer shapes, and how many answers add all the numbers."""
    from jaxes_examples.countdown import pretrain, problems

    runs = read_runs(args.runs)
    methods, chosen = study_methods(runs)
    bench = Bench(args.model)
    steps = problems.answer_len(1, 3)

    def show(name: str, params) -> None:
        shapes = answer_shapes(bench.test, pretrain.greedy(bench.model, params, bench.test, steps))
        sums = sum(n for shape, n in shapes.items() if shape.count("+") == 2 and "?" not in shape)
        print(f"{name}: sums of the three {sums} of {sum(shapes.values())}; "
              f"commonest {shapes.most_common(4)}", flush=True)  # fmt: skip

    show("pre-trained", bench.params)
    for family, method in methods.items():
        timed = chosen.get(family + " (as)", method)
        updates = budget_updates(timed, runs, args.model, "wall", args.wall)
        out = bench.finetune(method, seed=args.seeds[0], updates=updates)
        show(f"{family} ({updates} updates, accuracy {out['accuracy']:.3f})", out["params"])


# ------------------------------------------------------------------------------ the report

T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def wilson(correct: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % Wilson interval of ``correct`` answers out of ``n``.

    Example:
      >>> [round(x, 3) for x in wilson(98, 2000)]
      [0.04, 0.059]
    """
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def seed_summary(accuracy: list[float]) -> dict:
    """Mean, sample standard deviation and the 95 % t-interval of the mean over seeds.

    Example:
      >>> s = seed_summary([0.1, 0.2, 0.3])
      >>> round(s["mean"], 3), round(s["sd"], 3), [round(x, 3) for x in s["interval"]]
      (0.2, 0.1, [-0.048, 0.448])
    """
    n = len(accuracy)
    mean = sum(accuracy) / n
    sd = math.sqrt(sum((a - mean) ** 2 for a in accuracy) / (n - 1)) if n > 1 else 0.0
    half = T95.get(n - 1, 1.96) * sd / math.sqrt(n) if n > 1 else float("nan")
    return {"mean": mean, "sd": sd, "interval": [mean - half, mean + half]}


def welch(a: list[float], b: list[float]) -> dict:
    """The difference of two methods' means over seeds, mean(a) - mean(b), with its 95 %
    Welch interval (unequal spreads; the seeds of two methods are not paired).

    Example:
      >>> d = welch([0.30, 0.32, 0.34], [0.10, 0.12, 0.14])
      >>> round(d["difference"], 3), [round(x, 3) for x in d["interval"]]
      (0.2, [0.155, 0.245])
    """
    va, vb = (seed_summary(x)["sd"] ** 2 / len(x) for x in (a, b))
    se = math.sqrt(va + vb)
    difference = sum(a) / len(a) - sum(b) / len(b)
    if se == 0:
        return {"difference": difference, "interval": [difference, difference]}
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    t = T95.get(max(1, min(9, math.floor(dof))), 1.96)
    return {"difference": difference, "interval": [difference - t * se, difference + t * se]}


def rankings(methods: dict) -> dict:
    """Per model and budget: the method with the best mean, and its difference from each other
    method with the Welch interval; an interval that holds 0 means the two are not told apart."""
    out: dict[str, dict] = {}
    cells: dict[str, dict] = {}
    for name, m in methods.items():
        method, model, budget = name.split(" | ")
        cells.setdefault(f"{model} | {budget}", {})[method] = m["accuracy"]
    for cell, by in sorted(cells.items()):
        best = max(by, key=lambda k: sum(by[k]) / len(by[k]))
        against = {k: welch(by[best], v) for k, v in by.items() if k != best}
        for d in against.values():
            d["told_apart"] = d["interval"][0] > 0
        out[cell] = {"best": best, "against": against}
    return out


def fixed_answer() -> dict:
    """The held-out accuracy of writing one answer shape whatever the target
    (``fixed_answer_accuracy``): the best such shape on the held-out set, and the one that is
    best on the training problems (the one a model could learn) scored on the held-out set."""
    from jaxes_examples.countdown import problems

    train, test = problems.split(0, numbers=3, test_size=problems.TEST_PROBLEMS)
    accuracy, shape = problems.fixed_answer_accuracy(test)
    _, train_shape = problems.fixed_answer_accuracy(train)
    return {"accuracy": accuracy, "answer": problems.shape_text(*shape),
            "train_answer": problems.shape_text(*train_shape),
            "train_answer_accuracy": problems.shape_accuracy(test, *train_shape)}  # fmt: skip


def report(runs: list[dict]) -> dict:
    """The judged runs grouped by method, model and budget."""
    groups: dict[str, list[dict]] = {}
    for r in runs:
        if r["phase"] == "run":
            groups.setdefault(f"{r['method']} | {r['model']} | {r['budget']}", []).append(r)
    methods = {}
    for name, rows in sorted(groups.items()):
        rows = sorted(rows, key=lambda r: r["seed"])
        acc = [r["accuracy"] for r in rows]
        pooled = sum(r["correct"] for r in rows), sum(r["test_problems"] for r in rows)
        methods[name] = {
            "seeds": [r["seed"] for r in rows], "accuracy": acc, **seed_summary(acc),
            "spread": [min(acc), max(acc)], "pooled_wilson": list(wilson(*pooled)),
            "updates": rows[0]["updates"], "sampled_tokens": rows[0]["sampled_tokens"],
            "train_seconds": [r["train_seconds"] for r in rows],
            "start_accuracy": rows[0]["start_accuracy"], "settings": rows[0]["settings"],
        }  # fmt: skip
    return methods


def markdown(methods: dict) -> str:
    head = "| method | model | budget | updates | tokens | mean [95 % t] | sd | min-max | seeds |"
    lines = [head, "|" + "---|" * 9]
    for name, m in methods.items():
        method, model, budget = name.split(" | ")
        lo, hi = m["interval"]
        lines.append(
            f"| {method} | {model} | {budget} | {m['updates']} | {m['sampled_tokens']:.2g} | "
            f"{m['mean']:.3f} [{lo:.3f}, {hi:.3f}] | {m['sd']:.3f} | "
            f"{m['spread'][0]:.3f}-{m['spread'][1]:.3f} | {len(m['seeds'])} |"
        )
    return "\n".join(lines)


def phase_report(args) -> None:
    runs = read_runs(args.runs)
    methods = report(runs)
    timing = {f"{r['method']} | {r['model']}": r["train_seconds"] / r["updates"]
              for r in runs if r["phase"] == "time"}  # fmt: skip
    tuning = {r["method"]: r["train_accuracy"] for r in runs if r["phase"] == "tune"}
    budgets = sorted({(r["model"], r["budget"], r["budget_amount"]) for r in runs
                      if r["phase"] == "run"})  # fmt: skip
    payload = {
        "test_problems": next((r["test_problems"] for r in runs), None),
        "budget": {f"{m} | {b}": a for m, b, a in budgets},
        "methods": methods, "seconds_per_update": timing, "tuning_train_accuracy": tuning,
        "cpu": sorted({r["cpu"] for r in runs}), "commits": sorted({r["commit"] for r in runs}),
    }  # fmt: skip
    payload["rankings"] = rankings(methods)
    payload["fixed_answer"] = fixed_answer()
    write_json(args.out, payload)
    print(markdown(methods))
    floor = payload["fixed_answer"]
    print(
        f"fixed-answer floor: {floor['accuracy']:.4f} ({floor['answer']}, best on the "
        f"held-out set); {floor['train_answer']} scores {floor['train_answer_accuracy']:.4f}"
    )
    for cell, r in payload["rankings"].items():
        for other, d in r["against"].items():
            lo, hi = d["interval"]
            verdict = "ahead" if d["told_apart"] else "not told apart"
            print(f"{cell}: {r['best']} - {other} = {d['difference']:+.3f} "
                  f"[{lo:+.3f}, {hi:+.3f}]: {verdict}")  # fmt: skip


def parse_seeds(text: str) -> list[int]:
    """``"1-5"`` or ``"1,3"``.

    Example:
      >>> parse_seeds("1-3"), parse_seeds("4,6")
      ([1, 2, 3], [4, 6])
    """
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def parse_args(argv: list[str]):
    parser = driver.parser(__doc__, None, "countdown_seeds", child=False)
    parser.add_argument("phase", choices=("time", "tune", "run", "shapes", "report"))
    parser.add_argument("--model", choices=("small", "large"), default="small")
    parser.add_argument("--methods", nargs="+", help="time: only these names, or 'study'")
    parser.add_argument("--time-seconds", type=float, default=15.0)
    parser.add_argument("--wall", type=float, default=60.0, help="training seconds")
    parser.add_argument("--tokens", type=float, default=2e6, help="sampled answer tokens")
    parser.add_argument("--seeds", type=parse_seeds, default=[1, 2, 3, 4, 5])
    parser.add_argument("--budgets", nargs="+", choices=("wall", "tokens"),
                        default=["wall", "tokens"], help="run: which budgets")  # fmt: skip
    parser.add_argument("--runs", type=Path, default=RUNS)
    args = parser.parse_args(argv)
    args.out = args.out or driver.results_path("countdown_seeds")
    return args


def run(args, argv: list[str]) -> None:
    import jax

    jax.config.update("jax_compilation_cache_dir", os.environ.get(
        "JAXES_CACHE_DIR", str(Path.home() / ".cache" / "jaxes" / "xla")))  # fmt: skip
    phases = {"time": phase_time, "tune": phase_tune, "run": phase_run, "shapes": phase_shapes,
              "report": phase_report}  # fmt: skip
    phases[args.phase](args)


if __name__ == "__main__":
    driver.main(sys.argv, parse_args, None, run)
