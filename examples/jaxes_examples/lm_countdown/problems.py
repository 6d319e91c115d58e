"""The problems and the pre-training text: which problems train, which are held out, the
correct and the plausible wrong answers, and each problem's prompt and completion as text.

Problems are ``jaxes.llm.countdown_problems``, three or four numbers, the distribution
``jaxes finetune --task countdown`` fine-tunes on. (Trained on three numbers alone, the quick
model answers a few more three-number problems, 0.31-0.33 against 0.25-0.30 in the careful
style, but none of the four-number ones the command also asks.) The held-out problems come
from another seed, and every training problem equal to a held-out one or to one of the
command's (the same numbers and target) is dropped: the sets are disjoint by construction
(``check_disjoint``).

A completion is a short thought, ``</think> <answer>EQ</answer>`` and the end-of-text token,
in one of two styles. For a ``correct_fraction`` of the training problems it is careful:
``" Let me check."`` and the problem's canonical solution (the first in a fixed order, so the
text is a function of the problem). For the rest it is hasty: ``" ..."`` and a plausible
wrong equation (``wrong="random"``: another arrangement of the numbers and operations, which
misses the target; ``wrong="sum"``: the numbers added in order, right when the target is
their sum). The mix is what leaves the skill latent: the model learns to solve in the careful
style, but which style it takes is a coin toss at the first token, so its greedy answers are
mostly guesses and a fine-tune on the reward has one switch to find.

Example:
  >>> problem = {"numbers": [3, 7, 25], "target": 46}
  >>> solutions(problem)[0]
  '3 * 7 + 25'
  >>> completion("3 * 7 + 25")
  ' Let me check. </think> <answer>3 * 7 + 25</answer>'
"""

from __future__ import annotations

import itertools

import numpy as np

from jaxes.llm import countdown_problems, countdown_prompt

# Seeds of the problems: pre-training, held-out evaluation and the fine-tune's own training
# problems. Far from 0, 1, 2 so that a user's ``countdown_problems(n, seed=0)`` is not what
# pre-trained the model.
TRAIN_SEED, HELD_OUT_SEED, FINETUNE_SEED = 41_017, 52_021, 63_029
# The seeds ``jaxes finetune --task countdown`` draws its training (0) and held-out (1)
# problems from, with 3 or 4 numbers: the pre-training leaves out their first
# ``COMMAND_PROBLEMS`` too, so the command's held-out problems are unseen as well.
COMMAND_SEEDS, COMMAND_PROBLEMS = (0, 1), 5000
OPS = ("+", "-", "*")
END = "<|endoftext|>"
# The two styles of the corpus's completions: a careful one before a solution, a hasty one
# before a guess. Their first tokens differ, so which style a completion takes is decided at
# its first token, for every problem alike.
CAREFUL, HASTY = " Let me check.", " ..."


def key(problem: dict) -> tuple:
    """What makes two problems the same: the numbers (as a multiset) and the target."""
    return tuple(sorted(problem["numbers"])), int(problem["target"])


def _text(numbers, order, ops) -> str:
    text = str(numbers[order[0]])
    for op, i in zip(ops, order[1:], strict=True):
        # Left-to-right order: a product after a sum needs the sum in brackets.
        if op == "*" and ("+" in text or "-" in text):
            text = f"({text})"
        text = f"{text} {op} {numbers[i]}"
    return text


def _values(numbers) -> list[tuple[tuple, tuple, int]]:
    """``(order, ops, value)`` of every left-to-right arrangement, in ``expressions``' order."""
    out = []
    for order in itertools.permutations(range(len(numbers))):
        for ops in itertools.product(OPS, repeat=len(numbers) - 1):
            value = numbers[order[0]]
            for op, i in zip(ops, order[1:], strict=True):
                x = numbers[i]
                value = value + x if op == "+" else value - x if op == "-" else value * x
            out.append((order, ops, value))
    return out


def expressions(numbers) -> list[tuple[str, int]]:
    """Every left-to-right arrangement ``(x o y) o z`` of the numbers with ``+ - *``, as text
    Python (and ``countdown_reward``) reads the same way, and its value, in a fixed order:
    the numbers' permutations in ``itertools`` order, each with the operations in ``OPS``
    order. The same family ``countdown_problems`` draws its targets from."""
    return [(_text(numbers, order, ops), value) for order, ops, value in _values(numbers)]


def solutions(problem: dict) -> list[str]:
    """The problem's solutions among ``expressions``, in their order (the first is the
    canonical one the corpus writes)."""
    return [text for text, value in expressions(problem["numbers"]) if value == problem["target"]]


def wrong_answer(problem: dict, rng: np.random.Generator, wrong: str) -> str:
    """A plausible wrong equation: every number once, the answer format, the wrong value
    (``"sum"``: the numbers added in order, which is right when the target is their sum;
    ``"random"``: a random arrangement that misses the target)."""
    if wrong == "sum":
        return " + ".join(str(x) for x in problem["numbers"])
    if wrong != "random":
        raise ValueError(f"wrong: expected 'sum' or 'random', got {wrong!r}")
    return _guess(problem, _values(problem["numbers"]), rng)


def _guess(problem: dict, values, rng: np.random.Generator) -> str:
    misses = [(order, ops) for order, ops, value in values if value != problem["target"]]
    return _text(problem["numbers"], *misses[int(rng.integers(len(misses)))])


def completion(equation: str, careful: bool = True) -> str:
    """What the model writes after the prompt's ``<think>``: a short thought (``CAREFUL``
    before a solution, ``HASTY`` before a guess), the end of thinking and the answer
    (``countdown_reward``'s format); the end-of-text token follows."""
    return f"{CAREFUL if careful else HASTY} </think> <answer>{equation}</answer>"


def held_out(n: int, numbers: tuple[int, ...] = (3, 4)) -> list[dict]:
    """``n`` held-out problems (``HELD_OUT_SEED``)."""
    return countdown_problems(n, HELD_OUT_SEED, numbers)


def unseen(n_held_out: int = 1000, numbers: tuple[int, ...] = (3, 4)) -> list[dict]:
    """The problems pre-training never sees: ``held_out(n_held_out)`` and the first
    ``COMMAND_PROBLEMS`` of each of ``COMMAND_SEEDS``."""
    reserved = [p for s in COMMAND_SEEDS for p in countdown_problems(COMMAND_PROBLEMS, s)]
    return held_out(n_held_out, numbers) + reserved


def train(n: int, seed: int = TRAIN_SEED, numbers=(3, 4), exclude=()) -> list[dict]:
    """The first ``n`` problems of ``seed`` that equal (``key``) no problem of ``exclude``
    (the held-out problems)."""
    banned = {key(p) for p in exclude}
    # countdown_problems draws a seed's problems in order, so n + len(banned) always suffice.
    drawn = countdown_problems(n + len(banned), seed, numbers)
    return [p for p in drawn if key(p) not in banned][:n]


def check_disjoint(a: list[dict], b: list[dict]) -> None:
    """``ValueError`` if a problem of ``a`` equals one of ``b``."""
    shared = {key(p) for p in a} & {key(p) for p in b}
    if shared:
        raise ValueError(f"{len(shared)} problems are both training and held-out, e.g. {shared}")


def texts(
    problems: list[dict], correct_fraction: float, wrong: str, seed: int
) -> list[tuple[str, str]]:
    """``(prompt, completion + END)`` of each problem: the canonical solution in the careful
    style for a ``correct_fraction`` of them (drawn with ``seed``), a guess (``wrong_answer``)
    in the hasty style for the rest."""
    rng = np.random.default_rng(seed)
    out = []
    for problem in problems:
        numbers, values = problem["numbers"], _values(problem["numbers"])
        right = [(order, ops) for order, ops, value in values if value == problem["target"]]
        if right and rng.random() < correct_fraction:
            text = completion(_text(numbers, *right[0]), careful=True)
        elif wrong == "random":
            text = completion(_guess(problem, values, rng), careful=False)
        else:
            text = completion(wrong_answer(problem, rng, wrong), careful=False)
        out.append((countdown_prompt(problem), text + END))
    return out
