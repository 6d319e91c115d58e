"""Rewards on what a language model writes, and the problems they score.

Three kinds, for ``jaxes.llm.text_task``:
  * ``countdown_reward``: Countdown as Qiu et al. (2025) and TinyZero score it: 1.0 for an
    equation that uses each given number once and equals the target, 0.1 for an answer in the
    right format that is wrong, 0 for no answer;
  * ``numeric_reward``: 1.0 where the answer's number equals the expected one (a user's
    ``{"question", "answer"}`` JSONL file, ``read_jsonl``);
  * any Python function ``reward(problem, completion) -> float`` of the problem's record and
    the decoded completion (both are what a ``TextReward`` receives), or a JAX function of the
    tokens (``reward_fn(prompts, generated) -> (n,)``), which runs inside the program.

A text reward runs on the host (``jax.pure_callback``), once per generation for every member
and prompt at a time; the decoded completion ends at the first end-of-answer token.

Example:
  >>> problem = {"numbers": [3, 7, 25], "target": 46}
  >>> countdown_reward(problem, " 25 + 21 </think> <answer>25 + 3 * 7</answer>")
  1.0
  >>> countdown_reward(problem, "</think> <answer>25 + 7</answer>")
  0.1
  >>> countdown_reward(problem, "no answer")
  0.0
  >>> numeric_reward({"answer": "12"}, "so it is <answer>12.0</answer>")
  1.0
"""

from __future__ import annotations

import ast
import json
import operator
import re

import numpy as np

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
FORMAT_REWARD, ANSWER_REWARD = 0.1, 1.0

# The prompt of TinyZero's Countdown (Qiu et al. use it for their base-model runs); the
# model continues after "<think>".
COUNTDOWN_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant "
    "solves it. The assistant first thinks about the reasoning process in the mind and then "
    "provides the user with the answer.\nUser: Using the numbers {numbers}, create an equation "
    "that equals {target}. You can use basic arithmetic operations (+, -, *, /) and each number "
    "can only be used once. Show your work in <think> </think> tags. And return the final "
    "answer in <answer> </answer> tags, for example <answer> (1 + 2) / 3 </answer>.\n"
    "Assistant: Let me solve this step by step.\n<think>"
)
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def countdown_prompt(problem: dict) -> str:
    """The Countdown prompt of ``problem`` (``{"numbers": [...], "target": int}``)."""
    return COUNTDOWN_PROMPT.format(numbers=list(problem["numbers"]), target=problem["target"])


def _evaluate(node):
    """An arithmetic expression's value and the numbers it uses; ``None`` for anything else
    (names, calls, powers: never ``eval``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value), [node.value]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult | ast.Div):
        left, right = _evaluate(node.left), _evaluate(node.right)
        if left is None or right is None:
            return None
        if isinstance(node.op, ast.Div):
            value = left[0] / right[0] if right[0] != 0 else None
        else:
            value = _OPS[type(node.op)](left[0], right[0])
        return None if value is None else (value, left[1] + right[1])
    return None


def _last_answer(completion: str) -> str | None:
    found = ANSWER.findall(completion)
    return found[-1].strip() if found else None


def countdown_reward(problem: dict, completion: str) -> float:
    """1.0 for a right equation, 0.1 for a wrong one in ``</think> <answer> </answer>``
    form, 0 otherwise (``problem``: ``{"numbers": [...], "target": ...}``)."""
    answer = _last_answer(completion)
    if answer is None or "</think>" not in completion.split("<answer>")[0]:
        return 0.0
    try:
        found = _evaluate(ast.parse(answer, mode="eval").body)
    except (SyntaxError, ValueError, RecursionError):
        found = None
    if found is None:
        return FORMAT_REWARD
    value, used = found
    if sorted(used) != sorted(problem["numbers"]) or abs(value - problem["target"]) > 1e-5:
        return FORMAT_REWARD
    return ANSWER_REWARD


def numeric_reward(problem: dict, completion: str) -> float:
    """1.0 where the completion's answer (inside ``<answer>...</answer>`` if there is one,
    else its last number) equals ``problem["answer"]`` as a number, else 0."""
    answer = _last_answer(completion)
    numbers = NUMBER.findall(completion if answer is None else answer)
    if not numbers:
        return 0.0
    expected = float(str(problem["answer"]).replace(",", ""))
    return ANSWER_REWARD if abs(float(numbers[-1]) - expected) <= 1e-6 else 0.0


def countdown_problems(n: int, seed: int = 0, numbers: tuple[int, ...] = (3, 4)) -> list[dict]:
    """``n`` Countdown problems: 3 or 4 numbers in 1..99 and a target in 1..999 that an
    equation of them reaches (made by one, so every problem has an answer).

    Example:
      >>> countdown_problems(2, seed=1)[0].keys()
      dict_keys(['numbers', 'target'])
    """
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        values = [int(v) for v in rng.integers(1, 100, size=int(rng.choice(numbers)))]
        order = [int(i) for i in rng.permutation(len(values))]
        total = values[order[0]]
        for i in order[1:]:
            op = int(rng.integers(3))
            total = (
                total + values[i]
                if op == 0
                else total - values[i]
                if op == 1
                else total * values[i]
            )
        if 1 <= total <= 999:
            out.append({"numbers": values, "target": int(total)})
    return out


def read_jsonl(path: str) -> list[dict]:
    """The problems of a JSONL file, one ``{"question": ..., "answer": ...}`` a line;
    ``ValueError`` naming the line that is not."""
    problems = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                raise ValueError(f"{path}: line {number} is not JSON") from None
            if not isinstance(record, dict) or not {"question", "answer"} <= set(record):
                raise ValueError(f'{path}: line {number} needs "question" and "answer"')
            problems.append(record)
    if not problems:
        raise ValueError(f"{path}: no problems in the file")
    return problems
