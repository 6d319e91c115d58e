"""The pieces of the ES-against-GRPO study (``benchmarks/es_vs_grpo.py``): its problem sets,
the fixed-answer floor, and one ES arm's run on a base with held-out accuracy along the way.

Problem sets, disjoint by construction (``problems.check_disjoint``):

* ``test``: ``problems.held_out(2000)`` less any problem a base's pre-training or supervision
  could have seen (the pre-training left out only the first 1,000 held-out problems);
* ``training``: the first ``TRAINING`` problems of the fine-tune's seed, none held out;
* ``validation``: the ``bases.validation_problems`` after them, where settings are chosen
  (never the sorted head of a set, never the test problems).

The floor is what a model that writes one answer shape whatever the numbers would score: for
each count of numbers, the arrangement (order and operations, evaluated as the corpus writes
them) that most often hits the target on the training problems, scored on the test problems.

Example:
  >>> p = [{"numbers": [2, 3, 1], "target": 7}, {"numbers": [2, 4, 5], "target": 13}]
  >>> shapes = fixed_answer_shapes(p)  # n1 * n2 + n3 (or n2 * n1 + n3) solves both
  >>> shapes[3], fixed_answer_rate(p, shapes)
  (((0, 1, 2), ('*', '+')), 1.0)
"""

from __future__ import annotations

import collections
import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxes
from jaxes.llm import countdown_prompt, countdown_reward, load, text_task
from jaxes.step import generation_step
from jaxes.training.programs import init_state

from . import bases, evaluate
from . import problems as countdown

TEST, TRAINING = 2000, 8192


def problem_sets() -> dict[str, list[dict]]:
    """``{"test", "training", "validation"}`` (module docstring), and ``"dropped"``: the
    held-out problems a base's pre-training drew (left out of ``test``)."""
    held = countdown.held_out(TEST)
    seen = set()
    for setup, _ in bases.BASES.values():  # as ``pretrain.corpus`` draws them
        reserved = countdown.unseen(numbers=setup.numbers)
        drawn = countdown.train(setup.problems, numbers=setup.numbers, exclude=reserved)
        seen |= {countdown.key(p) for p in drawn}
    test = [p for p in held if countdown.key(p) not in seen]
    training = countdown.train(TRAINING, countdown.FINETUNE_SEED, exclude=held)
    validation = bases.validation_problems(256)
    for a, b in ((training, test), (validation, test), (training, validation)):
        countdown.check_disjoint(a, b)
    return {
        "test": test,
        "training": training,
        "validation": validation,
        "dropped": [p for p in held if countdown.key(p) in seen],
    }


def _shapes(problem: dict) -> set:
    """The (order, operations) arrangements of ``problem``'s numbers that hit its target."""
    values = countdown._values(problem["numbers"])
    return {(order, ops) for order, ops, value in values if value == problem["target"]}


def fixed_answer_shapes(problems_: list[dict]) -> dict[int, tuple]:
    """Per count of numbers, the arrangement that hits the target most often."""
    counts: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for p in problems_:
        counts[len(p["numbers"])].update(_shapes(p))
    # Ties go to the first arrangement in sorted order, not to a set's (hash-seeded) order.
    return {n: min(c, key=lambda shape: (-c[shape], shape)) for n, c in counts.items() if c}


def fixed_answer_rate(problems_: list[dict], shapes: dict[int, tuple]) -> float:
    """The share of ``problems_`` that the fixed arrangement of their size solves."""
    hits = [shapes.get(len(p["numbers"])) in _shapes(p) for p in problems_]
    return float(np.mean(hits))


@dataclasses.dataclass(frozen=True)
class ESArm:
    """An ES arm: OpenAI-ES with ``population`` members (``rank`` > 0: low-rank noise of that
    rank; 0: full-rank Gaussian), each decoding ``batch`` training prompts greedily a
    generation (``fixed_prompts``: always the same first ``batch`` training problems, as Qiu
    et al.'s fixed set), scale ``sigma``; ``optimizer`` ``"sgd"``: Qiu et al.'s plain step
    ``θ += learning_rate (1/P) Σ zᵢ εᵢ`` (SGD at ``learning_rate * sigma`` on open_es's
    estimate) on z-scored rewards; ``"adam"``: Adam at ``learning_rate`` on centred ranks."""

    name: str
    population: int = 32
    rank: int = 1
    sigma: float = 0.01
    learning_rate: float = 0.001
    optimizer: str = "adam"
    batch: int = 16
    fixed_prompts: bool = False
    antithetic: bool = True

    def strategy(self):
        sgd = self.optimizer == "sgd"
        step = self.learning_rate * (self.sigma if sgd else 1.0)
        noise = jaxes.noise.lowrank(rank=self.rank) if self.rank else jaxes.noise.gaussian()
        return jaxes.open_es(
            self.population,
            self.sigma,
            optax.sgd(step) if sgd else optax.adam(step),
            fitness_shaping="z_score" if sgd else "centered_rank",
            noise=noise,
            antithetic=self.antithetic,
        )

    def tokens_per_update(self) -> int:
        """Answer tokens decoded in a generation (every member, every prompt)."""
        return self.population * self.batch * evaluate.ANSWER_TOKENS


def held_out_accuracy(pre, params, test: list[dict]) -> dict:
    """Greedy exact-answer rate and mean reward on ``test``, and the answers' shapes."""
    texts = evaluate.completions(pre, params, test)
    scores = evaluate.rewards(test, texts)
    return {
        "accuracy": float((scores == 1.0).mean()),
        "reward": float(scores.mean()),
        "correct": int((scores == 1.0).sum()),
        "format": float((scores > 0).mean()),
        "texts": [t[0] for t in texts],
    }


@dataclasses.dataclass(frozen=True)
class Budget:
    """How long an arm trains, and when its centre is measured: until at least ``updates``
    updates (the equal-tokens budget, as a count of this arm's updates) *and* ``seconds`` of
    training (the equal-wall-clock budget; 0: none); measured at ``points`` evenly spaced
    updates up to ``updates``, at the first update whose clock passes ``seconds``, and at the
    end."""

    updates: int
    seconds: float = 0.0
    points: int = 4


class Tracker:
    """Measures a run's centre on ``problems_`` when its ``Budget`` says, off the clock."""

    def __init__(self, pre, budget: Budget, tokens_per_update: int, problems_: list[dict]):
        self.pre, self.budget, self.per, self.problems = pre, budget, tokens_per_update, problems_
        n = budget.updates
        self.marks = sorted(
            {max(1, round(n * (i + 1) / budget.points)) for i in range(budget.points)}
        )
        self.curve, self.texts, self.wall_seen = [], None, budget.seconds <= 0

    def done(self, updates: int, seconds: float) -> bool:
        return updates >= self.budget.updates and seconds >= self.budget.seconds

    def after(self, updates: int, seconds: float, params) -> None:
        """Called after each update (``params`` the whole tree, or a function giving it)."""
        labels = []
        if updates in self.marks:
            labels.append("tokens" if updates == self.budget.updates else "point")
        if not self.wall_seen and seconds >= self.budget.seconds:
            self.wall_seen = True
            labels.append("wall")
        if self.done(updates, seconds) and not labels:
            labels.append("end")
        if labels:
            params = params() if callable(params) else params
            out = held_out_accuracy(self.pre, params, self.problems)
            self.texts = out["texts"]
            self.curve.append(
                {
                    "updates": updates,
                    "tokens": updates * self.per,
                    "train_seconds": round(seconds, 2),
                    "accuracy": out["accuracy"],
                    "reward": round(out["reward"], 4),
                    "marks": labels,
                }
            )


def run_es(
    directory: str,
    arm: ESArm,
    training: list[dict],
    problems_: list[dict],
    *,
    seed: int,
    budget: Budget,
):
    """``arm`` on the base in ``directory``, trained on ``training`` within ``budget``, its
    centre's greedy exact rate on ``problems_`` measured as the budget says. Returns
    ``{"curve", "params", "texts", "seconds"}``; the clock counts generations only, not the
    compile (done first) or the measurements."""
    pre = load(directory)
    training = training[: arm.batch] if arm.fixed_prompts else training
    lm = text_task(
        pre,
        training,
        countdown_prompt,
        countdown_reward,
        answer_tokens=evaluate.ANSWER_TOKENS,
        batch_size=arm.batch,
        temperature=0.0,
    )
    es = arm.strategy()
    state = init_state(es, lm.task, seed)
    # Compiled before the clock starts, as grpo.train compiles its update: the wall budget
    # counts training alone for every arm.
    step = jax.jit(generation_step(es, lm.task), donate_argnums=0).lower(state).compile()
    tracker = Tracker(pre, budget, arm.tokens_per_update(), problems_)
    seconds, done = 0.0, 0
    while not tracker.done(done, seconds):
        started = time.perf_counter()
        state, _ = step(state)
        jax.block_until_ready(state)
        seconds += time.perf_counter() - started
        done += 1
        tracker.after(done, seconds, lambda s=state: lm.merge(jaxes.centre(s.strategy_state)))
    params = lm.merge(jaxes.centre(state.strategy_state))
    return {"curve": tracker.curve, "params": params, "texts": tracker.texts, "seconds": seconds}


def run_grpo(
    directory: str, setup, training: list[dict], problems_: list[dict], *, seed: int, budget: Budget
):
    """GRPO (``grpo.train``, ``setup`` a ``grpo.GRPOSetup``) on the base in ``directory``,
    as ``run_es`` runs an ES arm; its clock is ``grpo.train``'s (compiles before it)."""
    from . import grpo

    pre = load(directory)
    per = setup.batch * setup.group * setup.answer_tokens
    tracker = Tracker(pre, budget, per, problems_)

    def on_update(record, params):
        tracker.after(record["update"], record["seconds"], params)
        return tracker.done(record["update"], record["seconds"])

    out = grpo.train(
        directory, setup, seed=seed, problems=training, updates=10**9, on_update=on_update
    )
    return {
        "curve": tracker.curve,
        "params": out["params"],
        "texts": tracker.texts,
        "seconds": out["seconds"],
    }


def moved(before, after) -> float:
    """How far the fine-tune moved the weights: ‖after − before‖ / ‖before‖ over every
    parameter."""
    diff = sum(
        float(jnp.sum((a - b) ** 2))
        for a, b in zip(*map(jax.tree.leaves, (after, before)), strict=True)
    )
    norm = sum(float(jnp.sum(b**2)) for b in jax.tree.leaves(before))
    return float(np.sqrt(diff / norm))


def answer_shapes(test: list[dict], texts: list[str], top: int = 5) -> list[tuple[str, int]]:
    """The commonest answer shapes (numbers replaced by their position in the problem, ``?``
    for a number not in it), with their counts."""
    import re

    shapes = collections.Counter()
    for problem, text in zip(test, texts, strict=True):
        found = re.findall(r"<answer>(.*?)</answer>", text)
        if not found:
            shapes["(no answer)"] += 1
            continue
        numbers = [str(n) for n in problem["numbers"]]

        def name(match, numbers=numbers):
            value = match.group(0)
            return f"n{numbers.index(value) + 1}" if value in numbers else "?"

        shapes[re.sub(r"\d+", name, found[-1]).strip()] += 1
    return shapes.most_common(top)
