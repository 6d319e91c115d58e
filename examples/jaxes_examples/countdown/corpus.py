"""The pre-training corpus of the miniature Countdown (``problems``): how expressions evaluate
and the answer format, never which expression reaches a target.

* Equations ``BOS x op y = c₁ c₀ EOS`` over the digits 0-9 (``all_equations`` lists the 255 of
  them; ``equations_of`` makes them prompts for measuring arithmetic).
* The answer format: a prompt followed by an expression over its numbers, the target drawn
  independently of the expression, so the model learns to write an expression over the given
  numbers and cannot learn from the corpus which one is right.
* With three numbers, also equations ``BOS x op y op z = c₁ c₀ EOS`` over the training sets of
  numbers only, and format rows whose numbers come from those sets: no held-out set of numbers
  appears in pre-training.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .problems import (
    BOS,
    EOS,
    EQUALS,
    EQUATION_LEN,
    MINUS,
    PAD,
    PLUS,
    PROMPT_LEN,
    SEP,
    TEST_PROBLEMS,
    TIMES,
    answer_len,
    apply_op,
    equation_len,
    evaluate,
    problems,
    prompt_len,
    split,
)


def _equations(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` equations ``BOS x op y = c₁ c₀ EOS`` (x, y in 0-9; no negative results)."""
    x = rng.integers(0, 10, n)
    y = rng.integers(0, 10, n)
    op = rng.choice([PLUS, MINUS, TIMES], n)
    swap = (op == MINUS) & (x < y)
    x, y = np.where(swap, y, x), np.where(swap, x, y)
    c = apply_op(x, op, y)
    cols = [np.full(n, BOS), x, op, y, np.full(n, EQUALS), c // 10, c % 10, np.full(n, EOS)]
    return np.stack(cols, 1).astype(np.int32)


def _formats(rng: np.random.Generator, n: int, stretch: int) -> np.ndarray:
    """``n`` prompts followed by an expression over their numbers, the target drawn
    independently of the expression (from another random problem)."""
    rows = problems()
    numbers = rows[rng.integers(0, len(rows), n), :2]
    target = rows[rng.integers(0, len(rows), n), 2]
    a, b = numbers[:, 0], numbers[:, 1]
    swap = rng.integers(0, 2, n).astype(bool)
    x, y = np.where(swap, b, a), np.where(swap, a, b)
    op = rng.choice([PLUS, MINUS, TIMES], n)
    # No negative results: a subtraction is written larger first.
    flip = (op == MINUS) & (x < y)
    x, y = np.where(flip, y, x), np.where(flip, x, y)
    prompt = [np.full(n, BOS), a, b, np.full(n, SEP), target // 10, target % 10, np.full(n, SEP)]
    answer = np.repeat(np.stack([x, op, y, np.full(n, EOS)], 1), stretch, axis=1)
    return np.concatenate([np.stack(prompt, 1), answer], 1).astype(np.int32)


def _long_equations(rng: np.random.Generator, n: int, rows: np.ndarray) -> np.ndarray:
    """``n`` equations ``BOS x op y op z = c₁ c₀ EOS`` over the numbers of problem ``rows`` (in
    a random order, random ops), drawn until the value is 0-99."""
    out = []
    while len(out) < n:
        m = 2 * (n - len(out))
        terms = rng.permuted(rows[rng.integers(0, len(rows), m), :3], axis=1)
        ops = rng.choice([PLUS, MINUS, TIMES], (m, 2))
        c = evaluate(terms.T, ops.T)
        keep = (c >= 0) & (c <= 99)
        cols = [np.full(m, BOS), terms[:, 0], ops[:, 0], terms[:, 1], ops[:, 1], terms[:, 2]]
        cols += [np.full(m, EQUALS), c // 10, c % 10, np.full(m, EOS)]
        out += list(np.stack(cols, 1)[keep])
    return np.array(out[:n], np.int32)


def _long_formats(rng: np.random.Generator, n: int, stretch: int, rows: np.ndarray):
    """``n`` three-number prompts from problem ``rows``, each with a target from another row
    and an expression over its numbers in a random order with random ops."""
    numbers = rows[rng.integers(0, len(rows), n), :3]
    target = rows[rng.integers(0, len(rows), n), 3]
    terms = rng.permuted(numbers, axis=1)
    ops = rng.choice([PLUS, MINUS, TIMES], (n, 2))
    prompt = np.concatenate(
        [np.full((n, 1), BOS), numbers, np.full((n, 1), SEP)]
        + [np.stack([target // 10, target % 10, np.full(n, SEP)], 1)],
        1,
    )
    answer = np.stack([terms[:, 0], ops[:, 0], terms[:, 1], ops[:, 1], terms[:, 2]], 1)
    answer = np.repeat(np.concatenate([answer, np.full((n, 1), EOS)], 1), stretch, axis=1)
    return np.concatenate([prompt, answer], 1).astype(np.int32)


def _padded(rows: np.ndarray, length: int, predicted: slice) -> tuple[np.ndarray, np.ndarray]:
    """Rows padded with ``PAD`` to ``length``, and their mask: 1 at the ``predicted`` tokens."""
    rows = np.concatenate([rows, np.full((len(rows), length - rows.shape[1]), PAD, np.int32)], 1)
    mask = np.zeros_like(rows, np.float32)
    mask[:, predicted] = 1.0
    return rows, mask


def corpus(
    seed: int, n: int, stretch: int = 1, numbers: int = 2, rows=None
) -> tuple[jax.Array, jax.Array]:
    """The pre-training corpus: ``(tokens, mask)``, both ``(n, prompt_len + answer_len)``;
    half equations (padded with ``PAD``), half prompts with an answer over their numbers whose
    target was drawn independently. ``mask`` is 1 where a token is a prediction target (every
    token after ``BOS`` of an equation; only the answer of a format row).

    With three numbers, a third each: two-number equations, three-number equations over the
    numbers of ``rows`` (default: the training problems of ``split(0, numbers=3,
    test_size=TEST_PROBLEMS)``), and format rows whose numbers and targets come from ``rows``.

    Example:
      >>> from jaxes_examples.countdown.problems import decode
      >>> tokens, mask = corpus(0, 4)
      >>> tokens.shape, mask.shape
      ((4, 11), (4, 11))
      >>> decode(tokens[0])
      'BOS 8 + 5 = 1 3 EOS PAD PAD PAD'
      >>> corpus(0, 6, numbers=3)[0].shape
      (6, 14)
    """
    rng = np.random.default_rng(seed)
    length = prompt_len(numbers) + answer_len(stretch, numbers)
    if numbers == 2:
        half = n // 2
        eq, eq_mask = _padded(_equations(rng, half), length, slice(1, EQUATION_LEN))
        fmt, fmt_mask = _padded(_formats(rng, n - half, stretch), length, slice(PROMPT_LEN, None))
        parts = [(eq, eq_mask), (fmt, fmt_mask)]
    else:
        rows = split(0, numbers=3, test_size=TEST_PROBLEMS)[0] if rows is None else rows
        rows = np.asarray(rows)
        third = n // 3
        parts = [
            _padded(_equations(rng, third), length, slice(1, EQUATION_LEN)),
            _padded(_long_equations(rng, third, rows), length, slice(1, equation_len(3))),
            _padded(
                _long_formats(rng, n - 2 * third, stretch, rows), length, slice(prompt_len(3), None)
            ),
        ]
    return (
        jnp.asarray(np.concatenate([t for t, _ in parts])),
        jnp.asarray(np.concatenate([m for _, m in parts])),
    )


def equations_of(rows) -> tuple[jax.Array, jax.Array]:
    """Equation prompts ``BOS x op y =`` ``(N, 5)`` and their two-digit answers ``(N, 2)``
    for rows ``(x, op token, y)``: for measuring whether a model evaluates expressions.

    Example:
      >>> from jaxes_examples.countdown.problems import decode
      >>> p, c = equations_of([(7, TIMES, 8)])
      >>> decode(p), decode(c)
      ('BOS 7 * 8 =', '5 6')
    """
    rows = np.asarray(rows, np.int32).reshape(-1, 3)
    x, op, y = rows.T
    c = apply_op(x, op, y)
    prompts = np.stack([np.full(len(rows), BOS), x, op, y, np.full(len(rows), EQUALS)], 1)
    return jnp.asarray(prompts, jnp.int32), jnp.asarray(np.stack([c // 10, c % 10], 1), jnp.int32)


def all_equations() -> np.ndarray:
    """Every equation of the corpus as rows ``(x, op token, y)``: 100 sums, 100 products and
    the 55 subtractions with a non-negative result.

    Example:
      >>> all_equations().shape
      (255, 3)
    """
    rows = [
        (x, op, y)
        for op in (PLUS, MINUS, TIMES)
        for x in range(10)
        for y in range(10)
        if not (op == MINUS and x < y)
    ]
    return np.array(rows, np.int32)
